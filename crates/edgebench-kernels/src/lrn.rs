//! Caffe `LRNLayer` with `norm_region: ACROSS_CHANNELS` as a differentiable candle op (candle 0.11
//! has no LRN). AlexNet and GoogLeNet use size 5, alpha 1e-4, beta 0.75, k 1.

use crate::tuning::LRN_BLOCK;
#[cfg(target_arch = "aarch64")]
use crate::util::{as_f32, as_f32_out};
use crate::util::{native_or_host, nchw_slice, vec_written_by, with_avx512_vectors, Float};
#[cfg(feature = "cuda")]
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor};
use std::mem::MaybeUninit;

/// Caffe LRN ACROSS_CHANNELS: scale_c = k + (alpha / size) * sum_{c' in [c - (size-1)/2, c + size/2] ∩ [0, C)} x_{c'}^2 ; y = x * scale^(-beta)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lrn {
    pub size: usize,
    pub alpha: f64,
    pub beta: f64,
    pub k: f64,
}

/// x: (N, C, H, W) -> same shape, differentiable.
pub fn lrn(x: &Tensor, p: Lrn) -> Result<Tensor> {
    x.dims4()?;
    p.check()?;
    // Contiguous copy is differentiable, so strided inputs still get their gradient.
    native_or_host(x, |x| x.contiguous()?.apply_op1(p))
}

impl Lrn {
    fn check(&self) -> Result<()> {
        if self.size == 0 {
            bail!("lrn: size must be > 0, got {self:?}");
        }
        Ok(())
    }

    /// Channels before/after c in its window: [c - pre, c + post].
    fn pre_post(&self) -> (usize, usize) {
        let pre = (self.size - 1) / 2;
        (pre, self.size - 1 - pre)
    }

    /// scale = k + alpha / size · (window sum of squares); a slid sum can come out a rounding
    /// error below zero.
    #[inline(always)]
    fn scale<T: Float>(&self, sum: T) -> T {
        let (k, ratio) = self.scale_terms::<T>();
        k + ratio * if sum > T::ZERO { sum } else { T::ZERO }
    }

    /// k and alpha / size: [`Lrn::scale`] is `k + ratio · max(sum, 0)`.
    fn scale_terms<T: Float>(&self) -> (T, T) {
        (
            T::from_f64(self.k),
            T::from_f64(self.alpha / self.size as f64),
        )
    }

    /// y = x · scale^(-beta) for a plane, from its window sums of squares, written straight into
    /// the output. beta = 0.75 (every Caffe model) divides by scale^(3/4) from two square roots
    /// instead of powf, which dominates otherwise; the branch sits outside the loops so they
    /// vectorise. In f32 on aarch64 that case runs `neon::normalize_three_quarters`.
    #[inline(always)]
    fn normalize<T: Float>(&self, sum: &[T], x: &[T], y: &mut [MaybeUninit<T>]) {
        let (sum, x) = (&sum[..y.len()], &x[..y.len()]);
        #[cfg(target_arch = "aarch64")]
        if self.beta == 0.75 && std::arch::is_aarch64_feature_detected!("neon") {
            if let (Some(sum), Some(x), Some(y)) = (as_f32(sum), as_f32(x), as_f32_out(&mut *y)) {
                let (k, ratio) = self.scale_terms::<f32>();
                // SAFETY: the CPU has NEON.
                return unsafe { neon::normalize_three_quarters(k, ratio, sum, x, y) };
            }
        }
        if self.beta == 0.75 {
            for ((o, &s), &x) in y.iter_mut().zip(sum).zip(x) {
                let r = self.scale(s).sqrt();
                o.write(x / (r * r.sqrt()));
            }
        } else {
            let e = T::from_f64(-self.beta);
            for ((o, &s), &x) in y.iter_mut().zip(sum).zip(x) {
                o.write(x * self.scale(s).powf(e));
            }
        }
    }

    /// For the backward, per element of a plane: `spow` = scale^(-beta) and `t` = dy·y / scale.
    /// For beta = 0.75 both come from q = scale^(-1/4) (two square roots and one division):
    /// scale^(-3/4) = q³, 1/scale = q⁴.
    #[inline(always)]
    fn bwd_terms<T: Float>(&self, sum: &[T], (y, dy): (&[T], &[T]), spow: &mut [T], t: &mut [T]) {
        let n = spow.len();
        let (sum, y, dy, t) = (&sum[..n], &y[..n], &dy[..n], &mut t[..n]);
        let inputs = sum.iter().zip(y).zip(dy);
        if self.beta == 0.75 {
            for ((sp, tv), ((&s, &y), &g)) in spow.iter_mut().zip(t).zip(inputs) {
                let q = T::ONE / self.scale(s).sqrt().sqrt();
                let q2 = q * q;
                *sp = q2 * q;
                *tv = g * y * (q2 * q2);
            }
        } else {
            let e = T::from_f64(-self.beta);
            for ((sp, tv), ((&s, &y), &g)) in spow.iter_mut().zip(t).zip(inputs) {
                let s = self.scale(s);
                *sp = s.powf(e);
                *tv = g * y / s;
            }
        }
    }

    /// `acc` = the sum of squares over channel `ch`'s window, one plane of a sample.
    #[inline(always)]
    fn sum_squares<T: Float>(&self, sample: &[T], ch: usize, c: usize, acc: &mut [T]) {
        let (pre, post, hw) = (self.pre_post().0, self.pre_post().1, acc.len());
        acc.fill(T::ZERO);
        for cc in ch.saturating_sub(pre)..=(ch + post).min(c - 1) {
            for (a, &v) in acc.iter_mut().zip(&sample[cc * hw..(cc + 1) * hw]) {
                *a += v * v;
            }
        }
    }

    #[cfg(feature = "cuda")]
    fn geom(&self, (n, c, h, w): (usize, usize, usize, usize)) -> gpu::LrnGeom {
        let (pre, post) = self.pre_post();
        gpu::LrnGeom {
            len: n * c * h * w,
            c,
            hw: h * w,
            pre,
            post,
            k: self.k as f32,
            ratio: (self.alpha / self.size as f64) as f32,
            beta: self.beta as f32,
            cache_ratio: (2.0 * self.alpha * self.beta / self.size as f64) as f32,
        }
    }

    /// x, y and dy of the input gradient must have one shape.
    fn check_bwd(x: &Shape, y: &Shape, dy: &Shape) -> Result<(usize, usize, usize, usize)> {
        if y != x || dy != x {
            bail!("lrn-bwd: shapes differ: x {x:?}, y {y:?}, dy {dy:?}");
        }
        x.dims4()
    }

    /// Per sample, in blocks of `LRN_BLOCK` channels (one task each): the window's sum of
    /// squares slides from channel to channel (add the plane entering, subtract the one leaving;
    /// Caffe's CPU order too) instead of summing `size` planes per channel.
    fn fwd<T: Float>(&self, x: &[T], dims: (usize, usize, usize, usize)) -> Vec<T> {
        let len = dims.0 * dims.1 * dims.2 * dims.3;
        // SAFETY: `fwd_into` initialises every element of its output.
        unsafe { vec_written_by(len, |y| self.fwd_into(x, dims, y)) }
    }

    /// `fwd` into `y` (N·C·H·W elements), initialising it.
    pub(crate) fn fwd_into<T: Float>(
        &self,
        x: &[T],
        (_, c, h, w): (usize, usize, usize, usize),
        y: &mut [MaybeUninit<T>],
    ) {
        use rayon::prelude::*;
        let hw = h * w;
        if y.is_empty() {
            return;
        }
        y.par_chunks_mut(c * hw)
            .zip(x.par_chunks(c * hw))
            .for_each(|(ys, xs)| {
                ys.par_chunks_mut(LRN_BLOCK * hw).enumerate().for_each_init(
                    || vec![T::ZERO; hw],
                    |sum, (bi, yb)| {
                        with_avx512_vectors(
                            #[inline(always)]
                            || self.fwd_block(xs, c, bi * LRN_BLOCK, yb, sum),
                        )
                    },
                );
            });
    }

    /// One task of `fwd_into`: the planes of channels `c0..` of one sample (`xs`, C planes)
    /// into `yb`. Inlined into `with_avx512_vectors`' copy: its square roots and divisions
    /// took 8 lanes at a time instead of 4.
    #[inline(always)]
    fn fwd_block<T: Float>(
        &self,
        xs: &[T],
        c: usize,
        c0: usize,
        yb: &mut [MaybeUninit<T>],
        sum: &mut [T],
    ) {
        let (pre, post) = self.pre_post();
        let hw = sum.len();
        let plane = move |cc: usize| cc * hw..(cc + 1) * hw;
        for (ch, yp) in (c0..).zip(yb.chunks_exact_mut(hw)) {
            if ch == c0 {
                self.sum_squares(xs, ch, c, sum);
            } else {
                let enter = (ch + post < c).then(|| &xs[plane(ch + post)]);
                let leave = ch.checked_sub(pre + 1).map(|cc| &xs[plane(cc)]);
                slide(sum, enter, leave, |v| v * v);
            }
            self.normalize(sum, &xs[plane(ch)], yp);
        }
    }

    /// Per sample, in blocks of `LRN_BLOCK` channels (one task each), as the forward: channel by
    /// channel, dx_c = dy_c·scale_c^(-beta) - cache_ratio·x_c·Σ t_c' over the channels c' whose
    /// window holds c (c' in [c - post, c + pre]), t = dy·y/scale. Each channel's scale, t and
    /// scale^(-beta) are computed `pre` channels ahead into rings of `size + 1` planes; the sums of
    /// squares and of t slide from channel to channel (Caffe's CPU order).
    fn bwd_cpu<T: Float>(
        &self,
        x: &[T],
        y: &[T],
        dy: &[T],
        dims: (usize, usize, usize, usize),
    ) -> Vec<T> {
        let len = dims.0 * dims.1 * dims.2 * dims.3;
        // SAFETY: `bwd_into` initialises every element of its output.
        unsafe { vec_written_by(len, |dx| self.bwd_into(x, y, dy, dims, dx)) }
    }

    /// `bwd_cpu` into `dx` (N·C·H·W elements), initialising it.
    pub(crate) fn bwd_into<T: Float>(
        &self,
        x: &[T],
        y: &[T],
        dy: &[T],
        (_, c, h, w): (usize, usize, usize, usize),
        dx: &mut [MaybeUninit<T>],
    ) {
        use rayon::prelude::*;
        let (hw, chw) = (h * w, c * h * w);
        if dx.is_empty() {
            return;
        }
        let ring = self.size + 1;
        let scratch = || LrnBwdScratch {
            sum: vec![T::ZERO; hw],
            acc: vec![T::ZERO; hw],
            t: vec![T::ZERO; ring * hw],
            spow: vec![T::ZERO; ring * hw],
        };
        dx.par_chunks_mut(chw).enumerate().for_each(|(ni, dxs)| {
            let sample = ni * chw..(ni + 1) * chw;
            let (xs, ys, dys) = (&x[sample.clone()], &y[sample.clone()], &dy[sample]);
            dxs.par_chunks_mut(LRN_BLOCK * hw)
                .enumerate()
                .for_each_init(scratch, |sc, (bi, dxb)| {
                    with_avx512_vectors(
                        #[inline(always)]
                        || self.bwd_block((xs, ys, dys), c, bi * LRN_BLOCK, dxb, sc),
                    )
                });
        });
    }

    /// One task of `bwd_into`: dx of channels `c0..` of one sample (`xs`, `ys`, `dys`: its C
    /// planes each) into `dxb`. Inlined into `with_avx512_vectors`' copy, as `fwd_block`.
    #[inline(always)]
    fn bwd_block<T: Float>(
        &self,
        (xs, ys, dys): (&[T], &[T], &[T]),
        c: usize,
        c0: usize,
        dxb: &mut [MaybeUninit<T>],
        sc: &mut LrnBwdScratch<T>,
    ) {
        let (pre, post) = self.pre_post();
        let cache_ratio = T::from_f64(2.0 * self.alpha * self.beta / self.size as f64);
        let (hw, ring) = (sc.sum.len(), self.size + 1);
        let plane = move |cc: usize| cc * hw..(cc + 1) * hw;
        let slot = move |cc: usize| plane(cc % ring);
        let c1 = c0 + dxb.len() / hw;
        let first = c0.saturating_sub(post);
        let mut next = c0;
        for a in first..(c1 - 1 + pre).min(c - 1) + 1 {
            // Channel a's sum of squares, scale, t and scale^(-beta).
            if a == first {
                self.sum_squares(xs, a, c, &mut sc.sum);
            } else {
                let enter = (a + post < c).then(|| &xs[plane(a + post)]);
                let leave = a.checked_sub(pre + 1).map(|cc| &xs[plane(cc)]);
                slide(&mut sc.sum, enter, leave, |v| v * v);
            }
            let (sp, tp) = (&mut sc.spow[slot(a)], &mut sc.t[slot(a)]);
            self.bwd_terms(&sc.sum, (&ys[plane(a)], &dys[plane(a)]), sp, tp);
            // Channels whose window's last t is now known.
            while next < c1 && (next + pre <= a || a == c - 1) {
                let ch = next;
                if ch == c0 {
                    sc.acc.fill(T::ZERO);
                    for cc in ch.saturating_sub(post)..=(ch + pre).min(c - 1) {
                        for (s, &tv) in sc.acc.iter_mut().zip(&sc.t[slot(cc)]) {
                            *s += tv;
                        }
                    }
                } else {
                    let enter = (ch + pre < c).then(|| &sc.t[slot(ch + pre)]);
                    let leave = ch.checked_sub(post + 1).map(|cc| &sc.t[slot(cc)]);
                    slide(&mut sc.acc, enter, leave, |v| v);
                }
                let dxp = &mut dxb[plane(ch - c0)];
                let terms = sc.spow[slot(ch)].iter().zip(sc.acc.iter());
                let inputs = xs[plane(ch)].iter().zip(&dys[plane(ch)]);
                for (d, ((&s, &acc), (&xv, &g))) in dxp.iter_mut().zip(terms.zip(inputs)) {
                    d.write(g * s - cache_ratio * xv * acc);
                }
                next += 1;
            }
        }
    }
}

/// Per-task scratch of `Lrn::bwd_cpu`: the sliding sums and the rings of t and scale^(-beta).
struct LrnBwdScratch<T> {
    sum: Vec<T>,
    acc: Vec<T>,
    t: Vec<T>,
    spow: Vec<T>,
}

/// `acc += f(enter) - f(leave)` over a plane, for the planes given: a window sum sliding by one
/// channel (`f` squares for the sum of squares).
#[inline(always)]
fn slide<T: Float>(acc: &mut [T], enter: Option<&[T]>, leave: Option<&[T]>, f: impl Fn(T) -> T) {
    match (enter, leave) {
        (Some(e), Some(l)) => {
            for ((s, &a), &b) in acc.iter_mut().zip(e).zip(l) {
                *s += f(a) - f(b);
            }
        }
        (Some(e), None) => {
            for (s, &a) in acc.iter_mut().zip(e) {
                *s += f(a);
            }
        }
        (None, Some(l)) => {
            for (s, &b) in acc.iter_mut().zip(l) {
                *s = *s - f(b);
            }
        }
        (None, None) => {}
    }
}

impl CustomOp1 for Lrn {
    fn name(&self) -> &'static str {
        "lrn"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.check()?;
        let dims = l.shape().dims4()?;
        let out = float_kernel!("lrn", |v in s| self.fwd(nchw_slice(v, l, "lrn")?, dims));
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::cuda::{input, storage};
        self.check()?;
        let dims = l.shape().dims4()?;
        let dev = s.device();
        let y = gpu::lrn_fwd(dev, &input(s, l, "lrn")?, self.geom(dims))?;
        Ok((storage(y, dev), l.shape().clone()))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let dx = arg.contiguous()?.apply_op3_no_bwd(
            &res.contiguous()?,
            &grad_res.contiguous()?,
            &LrnBwd(*self),
        )?;
        Ok(Some(dx))
    }
}

/// Input gradient of `Lrn`: (x, y, dy) -> dx, Caffe's CPU formula.
struct LrnBwd(Lrn);

impl CustomOp3 for LrnBwd {
    fn name(&self) -> &'static str {
        "lrn-bwd"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let dims = Lrn::check_bwd(l1.shape(), l2.shape(), l3.shape())?;
        let p = &self.0;
        let n = "lrn-bwd";
        let dx = float_kernel!(n, |x in s1, y in s2, g in s3| p.bwd_cpu(
            nchw_slice(x, l1, n)?,
            nchw_slice(y, l2, n)?,
            nchw_slice(g, l3, n)?,
            dims,
        ));
        Ok((dx, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::cuda::{input, storage};
        let dims = Lrn::check_bwd(l1.shape(), l2.shape(), l3.shape())?;
        let n = "lrn-bwd";
        let dev = s1.device();
        let (x, y, dy) = (input(s1, l1, n)?, input(s2, l2, n)?, input(s3, l3, n)?);
        let dx = gpu::lrn_bwd(dev, &x, &y, &dy, self.0.geom(dims))?;
        Ok((storage(dx, dev), l1.shape().clone()))
    }
}

/// The CUDA kernels (`cuda/lrn.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use crate::cuda::{config, i32_of, Module};
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaDevice, Result};

    static KERNELS: Module = Module::new("edgebench_lrn", include_str!("cuda/lrn.cu"));

    /// LRN parameters in the kernels' terms.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct LrnGeom {
        pub(super) len: usize,
        pub(super) c: usize,
        pub(super) hw: usize,
        pub(super) pre: usize,
        pub(super) post: usize,
        pub(super) k: f32,
        pub(super) ratio: f32,
        pub(super) beta: f32,
        pub(super) cache_ratio: f32,
    }

    pub(super) fn lrn_fwd(
        dev: &CudaDevice,
        x: &CudaView<'_, f32>,
        g: LrnGeom,
    ) -> Result<CudaSlice<f32>> {
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<f32>(g.len)? };
        let (n, c, hw) = (g.len as i64, i32_of(g.c, "channels")?, g.hw as i64);
        let (pre, post) = (g.pre as i32, g.post as i32);
        let func = KERNELS.kernel(dev, "eb_lrn_fwd")?;
        let stream = dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        b.arg(x)
            .arg(&y)
            .arg(&n)
            .arg(&c)
            .arg(&hw)
            .arg(&pre)
            .arg(&post);
        b.arg(&g.k).arg(&g.ratio).arg(&g.beta);
        // SAFETY: the arguments match eb_lrn_fwd's signature; x and y hold len elements.
        unsafe { b.launch(config(g.len)) }.w()?;
        Ok(y)
    }

    pub(super) fn lrn_bwd(
        dev: &CudaDevice,
        x: &CudaView<'_, f32>,
        y: &CudaView<'_, f32>,
        dy: &CudaView<'_, f32>,
        g: LrnGeom,
    ) -> Result<CudaSlice<f32>> {
        // SAFETY: every element is written by the kernel.
        let dx = unsafe { dev.alloc::<f32>(g.len)? };
        let (n, c, hw) = (g.len as i64, i32_of(g.c, "channels")?, g.hw as i64);
        let (pre, post) = (g.pre as i32, g.post as i32);
        let func = KERNELS.kernel(dev, "eb_lrn_bwd")?;
        let stream = dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        b.arg(x)
            .arg(y)
            .arg(dy)
            .arg(&dx)
            .arg(&n)
            .arg(&c)
            .arg(&hw)
            .arg(&pre)
            .arg(&post);
        b.arg(&g.k).arg(&g.ratio).arg(&g.beta).arg(&g.cache_ratio);
        // SAFETY: the arguments match eb_lrn_bwd's signature; every buffer holds len elements.
        unsafe { b.launch(config(g.len)) }.w()?;
        Ok(dx)
    }
}

/// LRN's forward for beta = 3/4 in f32 NEON: the compiler's vectorisation of `normalize` runs
/// two `fsqrt` and one `fdiv` per 4 elements, 34 cycles each on the one Cortex-A57 pipe that
/// divides: ~102 cycles per 4 elements (llvm-mca, bench/arm/mca-elementwise.sh). Here
/// scale^(-3/4) = a² · rsqrt(a) with a = rsqrt(scale), each reciprocal square root an
/// estimate (`frsqrte`, 8 bits) refined by two Newton steps (`frsqrts`), all pipelined: ~24
/// cycles per 4 elements. Not bit for bit the scalar loop: two steps stay within the f32
/// tests' 1e-6 against f64, one step does not (8.6e-6 off).
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;
    use std::mem::MaybeUninit;

    /// Vectors in flight per iteration: each element is a chain of ~16 dependent operations;
    /// with one vector per iteration llvm-mca's Cortex-A57 model waits on that chain (32
    /// cycles per 4 elements), with 4 interleaved step by step it is bound by the two FP pipes.
    const UNROLL: usize = 4;
    const BLOCK: usize = 4 * UNROLL;

    type V = [float32x4_t; UNROLL];

    /// 1 / sqrt(v) to a few ulp: an estimate, then two Newton steps e' = e (3 - v e²) / 2,
    /// each doubling the bits.
    #[inline]
    #[target_feature(enable = "neon")]
    fn rsqrt(v: V) -> V {
        let mut e = v;
        for (e, v) in e.iter_mut().zip(v) {
            *e = vrsqrteq_f32(v);
        }
        for _ in 0..2 {
            for (e, v) in e.iter_mut().zip(v) {
                *e = vmulq_f32(*e, vrsqrtsq_f32(vmulq_f32(v, *e), *e));
            }
        }
        e
    }

    /// `y = x · (k + ratio · max(sum, 0))^(-3/4)` in blocks of [`BLOCK`]; the tail through one
    /// zero-padded block.
    ///
    /// # Safety
    /// The CPU has NEON.
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn normalize_three_quarters(
        k: f32,
        ratio: f32,
        sum: &[f32],
        x: &[f32],
        y: &mut [MaybeUninit<f32>],
    ) {
        let n = y.len();
        let (sum, x) = (&sum[..n], &x[..n]);
        let block = |s: V, x: V| {
            let mut scale = s;
            for v in &mut scale {
                let s = vmaxq_f32(*v, vdupq_n_f32(0.0));
                *v = vaddq_f32(vdupq_n_f32(k), vmulq_f32(vdupq_n_f32(ratio), s));
            }
            let a = rsqrt(scale);
            let c = rsqrt(a);
            let mut y = x;
            for i in 0..UNROLL {
                y[i] = vmulq_f32(x[i], vmulq_f32(vmulq_f32(a[i], a[i]), c[i]));
            }
            y
        };
        let load = |a: &[f32; BLOCK]| {
            let mut v = [vdupq_n_f32(0.0); UNROLL];
            for (i, v) in v.iter_mut().enumerate() {
                // SAFETY: a holds BLOCK floats, 4i..4i + 4 among them.
                *v = unsafe { vld1q_f32(a.as_ptr().add(4 * i)) };
            }
            v
        };
        let store = |y: &mut [MaybeUninit<f32>; BLOCK], v: V| {
            for (i, v) in v.into_iter().enumerate() {
                // SAFETY: y holds BLOCK floats, 4i..4i + 4 among them.
                unsafe { vst1q_f32(y.as_mut_ptr().add(4 * i).cast::<f32>(), v) };
            }
        };
        let mut y_blocks = y.chunks_exact_mut(BLOCK);
        let (mut s_blocks, mut x_blocks) = (sum.chunks_exact(BLOCK), x.chunks_exact(BLOCK));
        for (y, (s, x)) in (&mut y_blocks).zip((&mut s_blocks).zip(&mut x_blocks)) {
            let v = block(load(s.try_into().unwrap()), load(x.try_into().unwrap()));
            store(y.try_into().unwrap(), v);
        }
        let y = y_blocks.into_remainder();
        if !y.is_empty() {
            let (mut s, mut xs) = ([0f32; BLOCK], [0f32; BLOCK]);
            s[..y.len()].copy_from_slice(s_blocks.remainder());
            xs[..y.len()].copy_from_slice(x_blocks.remainder());
            let mut out = [MaybeUninit::uninit(); BLOCK];
            store(&mut out, block(load(&s), load(&xs)));
            y.copy_from_slice(&out[..y.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{grad_check, tensor, to_vec, Rng};
    use candle_core::{DType, Var};

    const NET: Lrn = Lrn {
        size: 5,
        alpha: 1e-4,
        beta: 0.75,
        k: 1.0,
    };
    // Large alpha so the cross-channel term is not drowned by the k term in the checks.
    const STRONG: Lrn = Lrn {
        size: 5,
        alpha: 2.0,
        beta: 0.75,
        k: 1.0,
    };
    const EVEN: Lrn = Lrn {
        size: 4,
        alpha: 1.5,
        beta: 0.6,
        k: 2.0,
    };

    /// Caffe's definition, computed point by point.
    fn reference(x: &[f64], (n, c, h, w): (usize, usize, usize, usize), p: Lrn) -> Vec<f64> {
        let idx = |ni: usize, ci: usize, j: usize| (ni * c + ci) * h * w + j;
        let mut out = vec![0.0; x.len()];
        for ni in 0..n {
            for ci in 0..c {
                for j in 0..h * w {
                    let lo = ci as i64 - (p.size as i64 - 1) / 2;
                    let hi = ci as i64 + p.size as i64 / 2;
                    let mut sum = 0.0;
                    for cc in lo.max(0)..=hi.min(c as i64 - 1) {
                        sum += x[idx(ni, cc as usize, j)].powi(2);
                    }
                    let scale = p.k + p.alpha / p.size as f64 * sum;
                    out[idx(ni, ci, j)] = x[idx(ni, ci, j)] * scale.powf(-p.beta);
                }
            }
        }
        out
    }

    fn assert_close(a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len(), "lengths differ");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "at {i}: {x} vs {y}");
        }
    }

    #[test]
    fn forward_matches_reference() {
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(11);
            for p in [
                NET,
                STRONG,
                EVEN,
                Lrn {
                    size: 3,
                    alpha: 1.0,
                    beta: 1.3,
                    k: 0.5,
                },
            ] {
                // 40 channels: three forward blocks (LRN_BLOCK), the last one short.
                for c in [1, 3, 5, 8, 40] {
                    let dims = (2, c, 3, 4);
                    let x: Vec<f64> = rng.vec(2 * c * 12).iter().map(|v| v * 3.0).collect();
                    let y = lrn(&tensor(&x, dims), p).unwrap();
                    assert_eq!(y.dims(), &[2, c, 3, 4]);
                    assert_close(&to_vec(&y), &reference(&x, dims, p), 1e-13);
                }
            }
        });
    }

    #[test]
    fn gradient_matches_finite_differences() {
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(12);
            for p in [NET, STRONG, EVEN] {
                // C < size, C == size and C > size windows; 37 channels: three blocks (LRN_BLOCK).
                for c in [1, 2, 5, 7, 37] {
                    let dims = (2, c, 3, 3);
                    let x: Vec<f64> = rng.vec(2 * c * 9).iter().map(|v| v * 2.0).collect();
                    let err = grad_check(&x, dims, 50 + c as u64, |t| lrn(t, p));
                    assert!(err < 1e-6, "{p:?} C={c}: relative error {err}");
                }
            }
        });
    }

    #[test]
    fn f32_forward_and_backward_match_f64() {
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(13);
            for p in [NET, STRONG, EVEN] {
                let x64 = tensor(&rng.vec(2 * 37 * 5 * 6), (2, 37, 5, 6));
                let (v64, v32) = (
                    Var::from_tensor(&x64).unwrap(),
                    Var::from_tensor(&x64.to_dtype(DType::F32).unwrap()).unwrap(),
                );
                let (y64, y32) = (lrn(&v64, p).unwrap(), lrn(&v32, p).unwrap());
                assert_eq!(y32.dtype(), DType::F32);
                assert_close(&to_vec(&y32), &to_vec(&y64), 1e-6);
                let g64 = y64.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                let g32 = y32.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                assert_close(
                    &to_vec(g32.get(&v32).unwrap()),
                    &to_vec(g64.get(&v64).unwrap()),
                    1e-5,
                );
            }
        });
    }

    #[test]
    fn non_contiguous_input_matches_contiguous_copy() {
        let mut rng = Rng::new(14);
        let base = tensor(&rng.vec(3 * 4 * 6 * 5), (3, 4, 6, 5))
            .transpose(1, 2)
            .unwrap();
        for x in [
            base.clone(),
            base.narrow(1, 1, 4).unwrap(),
            base.narrow(3, 1, 3).unwrap(),
        ] {
            assert!(!x.is_contiguous());
            let a = lrn(&x, STRONG).unwrap();
            let b = lrn(&x.contiguous().unwrap(), STRONG).unwrap();
            assert_close(&to_vec(&a), &to_vec(&b), 0.0);
        }
        // Gradient through a transposed view equals the transposed gradient of the copy.
        let v = Var::from_tensor(&base.contiguous().unwrap()).unwrap();
        let w = tensor(&rng.vec(3 * 6 * 4 * 5), (3, 6, 4, 5));
        let g = (lrn(&v, STRONG).unwrap() * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let v2 = Var::from_tensor(
            &base
                .contiguous()
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap(),
        )
        .unwrap();
        let y2 = lrn(&v2.transpose(1, 2).unwrap(), STRONG).unwrap();
        let g2 = (y2 * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let g2 = g2.get(&v2).unwrap().transpose(1, 2).unwrap();
        assert_close(&to_vec(g.get(&v).unwrap()), &to_vec(&g2), 1e-14);
    }

    #[test]
    fn invalid_inputs_error() {
        let x = tensor(&[1.0; 8], (1, 2, 2, 2));
        assert!(lrn(&x, Lrn { size: 0, ..NET }).is_err());
        assert!(lrn(&x.flatten_all().unwrap(), NET).is_err());
        assert!(lrn(&x.to_dtype(DType::U8).unwrap(), NET).is_err());
    }
}
