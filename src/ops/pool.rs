//! Caffe `PoolingLayer` (MAX and AVE) as a differentiable candle op. candle's own pooling only
//! back-propagates when kernel == stride with no padding; GoogLeNet and AlexNet need overlapping,
//! padded and ceil-mode windows.

use super::{nchw_slice, Float};
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    pub kind: PoolKind,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

/// Caffe's output size: ceil((input + 2*pad - kernel) / stride) + 1, then if pad > 0 and the last
/// window would start at or past input + pad, subtract 1. Expects `stride > 0`; `pool2d` checks the
/// remaining preconditions.
pub fn pool_output_size(input: usize, kernel: usize, stride: usize, pad: usize) -> usize {
    let span = (input + 2 * pad).saturating_sub(kernel);
    let mut out = span.div_ceil(stride) + 1;
    // Caffe: make sure the last pooling window starts strictly inside the image (plus padding).
    if pad > 0 && (out - 1) * stride >= input + pad {
        out -= 1;
    }
    out
}

/// x: (N, C, H, W) -> (N, C, OH, OW), differentiable (candle backprop works through it).
pub fn pool2d(x: &Tensor, p: Pool2d) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    p.check(h, w)?;
    // The kernels index planes directly; a copy here is differentiable, so strided inputs still
    // get their gradient.
    super::native_or_host(x, |x| x.contiguous()?.apply_op1(p))
}

/// One axis of a pooling window: clipped [start, end) and, for AVE, Caffe's divisor length
/// (measured before clipping to the image, but after clipping to image + pad).
#[derive(Debug, Clone, Copy)]
struct Win {
    start: usize,
    end: usize,
    avg_len: usize,
}

impl Pool2d {
    fn check(&self, h: usize, w: usize) -> Result<()> {
        if self.kernel == 0 || self.stride == 0 {
            bail!("pool2d: kernel and stride must be > 0, got {self:?}");
        }
        // Caffe CHECK_LT(pad, kernel): otherwise whole windows could lie in the padding.
        if self.pad >= self.kernel {
            bail!("pool2d: pad must be < kernel, got {self:?}");
        }
        if h == 0 || w == 0 || h + 2 * self.pad < self.kernel || w + 2 * self.pad < self.kernel {
            bail!("pool2d: input {h}x{w} too small for {self:?}");
        }
        Ok(())
    }

    fn windows(&self, len: usize) -> Vec<Win> {
        let (k, s, pad) = (
            self.kernel as isize,
            self.stride as isize,
            self.pad as isize,
        );
        let n = len as isize;
        (0..pool_output_size(len, self.kernel, self.stride, self.pad) as isize)
            .map(|o| {
                let start = o * s - pad;
                let (end, avg_end) = ((start + k).min(n), (start + k).min(n + pad));
                let start_c = start.max(0);
                Win {
                    start: start_c as usize,
                    // An empty window (only possible when stride > kernel) pools nothing.
                    end: end.max(start_c) as usize,
                    avg_len: (avg_end - start).max(0) as usize,
                }
            })
            .collect()
    }

    fn fwd<T: Float>(&self, x: &[T], (n, c, h, w): (usize, usize, usize, usize)) -> Vec<T> {
        let (hw, ww) = (self.windows(h), self.windows(w));
        let plane_out = hw.len() * ww.len();
        if plane_out == 0 {
            return Vec::new();
        }
        let (len, plane) = (n * c * plane_out, h * w);
        if self.kind == PoolKind::Max {
            return super::par_chunks_zeroed(
                len,
                plane_out,
                || vec![T::LOWEST; w],
                |tmp, i, o| max_fwd_plane(&x[i * plane..(i + 1) * plane], o, &hw, &ww, w, tmp),
            );
        }
        super::par_chunks_zeroed(
            len,
            plane_out,
            || (),
            |_, i, o| {
                let xp = &x[i * plane..(i + 1) * plane];
                let mut o = o.iter_mut();
                for hy in &hw {
                    for wx in &ww {
                        let mut sum = T::ZERO;
                        for row in xp[hy.start * w..hy.end * w].chunks_exact(w) {
                            for &e in &row[wx.start..wx.end] {
                                sum += e;
                            }
                        }
                        let size = hy.avg_len * wx.avg_len;
                        *o.next().expect("output plane sized from windows") = if size == 0 {
                            T::ZERO
                        } else {
                            sum / T::from_f64(size as f64)
                        };
                    }
                }
            },
        )
    }

    fn bwd_cpu<T: Float>(
        &self,
        x: &[T],
        y: &[T],
        dy: &[T],
        (n, c, h, w): (usize, usize, usize, usize),
    ) -> Vec<T> {
        let (hw, ww) = (self.windows(h), self.windows(w));
        let plane_out = hw.len() * ww.len();
        let (len, plane) = (n * c * h * w, h * w);
        if plane_out == 0 {
            return super::zeros(len);
        }
        let outs = |i: usize| i * plane_out..(i + 1) * plane_out;
        if self.kind == PoolKind::Max && self.stride == 1 && (hw.len(), ww.len()) == (h, w) {
            return super::par_chunks_zeroed(len, plane, SameMaxScratch::default, |sc, i, dxp| {
                let xp = &x[i * plane..(i + 1) * plane];
                self.max_bwd_plane_same(xp, &y[outs(i)], &dy[outs(i)], dxp, (h, w), sc)
            });
        }
        if self.kind == PoolKind::Max {
            return super::par_chunks_zeroed(
                len,
                plane,
                || (),
                |_, i, dxp| {
                    let xp = &x[i * plane..(i + 1) * plane];
                    max_bwd_plane(xp, &y[outs(i)], &dy[outs(i)], dxp, &hw, &ww, w)
                },
            );
        }
        super::par_chunks_zeroed(
            len,
            plane,
            || (),
            |_, i, dxp| {
                let mut g = dy[outs(i)].iter();
                for hy in &hw {
                    for wx in &ww {
                        let g = *g.next().expect("grad plane sized from windows");
                        let size = hy.avg_len * wx.avg_len;
                        if size == 0 {
                            continue;
                        }
                        let g = g / T::from_f64(size as f64);
                        for row in dxp[hy.start * w..hy.end * w].chunks_exact_mut(w) {
                            for e in &mut row[wx.start..wx.end] {
                                *e += g;
                            }
                        }
                    }
                }
            },
        )
    }

    /// The max-pool input gradient of one plane (`dxp` zero) for a stride-1 pool whose output
    /// is the input's size (GoogLeNet's inception pools: 3x3, pad 1). Every kernel tap is then a
    /// constant shift of the plane, so the argmax search and the scatter run as whole-plane loops
    /// per tap, which vectorise, instead of a scan per window. Taps go last to first, each
    /// marking the outputs whose window max it holds, so each window ends with Caffe's argmax:
    /// the first tap in row-major order equal to the max (see `max_bwd_plane`).
    fn max_bwd_plane_same<T: Float>(
        &self,
        xp: &[T],
        yp: &[T],
        dyp: &[T],
        dxp: &mut [T],
        (h, w): (usize, usize),
        sc: &mut SameMaxScratch<T>,
    ) {
        let (k, pad, hw) = (self.kernel, self.pad, h * w);
        let none = T::from_f64(-1.0);
        sc.arg.clear();
        sc.arg.resize(hw, none);
        // Per tap: the outputs p whose tap p + shift is inside the plane, and the columns whose
        // tap falls in the left/right padding (a flat loop wraps those into the next row).
        let taps = |r: usize, kj: usize| {
            let shift = (r as isize - pad as isize) * w as isize + kj as isize - pad as isize;
            let (a, b) = (pad.saturating_sub(r), (h + pad).saturating_sub(r).min(h));
            let p0 = ((a * w) as isize).max(-shift) as usize;
            let p1 = ((b * w) as isize).min(hw as isize - shift).max(p0 as isize) as usize;
            let bad_cols =
                (0..pad.saturating_sub(kj)).chain((w + pad).saturating_sub(kj).min(w)..w);
            (shift, p0..p1, bad_cols)
        };
        for r in (0..k).rev() {
            for kj in (0..k).rev() {
                let tap = T::from_f64((r * k + kj) as f64);
                let (shift, ps, bad_cols) = taps(r, kj);
                let arg = &mut sc.arg;
                sc.keep.clear();
                for c in bad_cols.clone() {
                    sc.keep.extend((c..hw).step_by(w).map(|p| arg[p]));
                }
                let from = (ps.start as isize + shift) as usize;
                let xs = &xp[from..from + ps.len()];
                for ((a, &m), &e) in arg[ps.clone()].iter_mut().zip(&yp[ps]).zip(xs) {
                    *a = if e == m { tap } else { *a };
                }
                let mut kept = sc.keep.iter();
                for c in bad_cols {
                    for p in (c..hw).step_by(w) {
                        arg[p] = *kept.next().expect("saved above");
                    }
                }
            }
        }
        // The forward never outputs NaN (NaN never wins), so this is `m <= LOWEST`.
        for (a, &m) in sc.arg.iter_mut().zip(yp) {
            *a = if m > T::LOWEST { *a } else { none };
        }
        for r in 0..k {
            for kj in 0..k {
                let tap = T::from_f64((r * k + kj) as f64);
                let (shift, ps, _) = taps(r, kj);
                let from = (ps.start as isize + shift) as usize;
                let won = sc.arg[ps.clone()].iter().zip(&dyp[ps.clone()]);
                for (d, (&a, &g)) in dxp[from..from + ps.len()].iter_mut().zip(won) {
                    *d += if a == tap { g } else { T::ZERO };
                }
            }
        }
    }

    #[cfg(feature = "cuda")]
    fn geom(&self, (n, c, h, w): (usize, usize, usize, usize)) -> super::cuda::PoolGeom {
        super::cuda::PoolGeom {
            planes: n * c,
            h,
            w,
            oh: pool_output_size(h, self.kernel, self.stride, self.pad),
            ow: pool_output_size(w, self.kernel, self.stride, self.pad),
            kernel: self.kernel,
            stride: self.stride,
            pad: self.pad,
            is_max: self.kind == PoolKind::Max,
        }
    }

    /// The (x, y, dy) shapes the input gradient needs.
    fn check_bwd(&self, x: &Shape, y: &Shape, dy: &Shape) -> Result<(usize, usize, usize, usize)> {
        let dims = x.dims4()?;
        let want = self.out_shape(dims);
        if y != &want || dy != &want {
            bail!("pool2d-bwd: output {y:?} / grad {dy:?} do not match output shape {want:?}");
        }
        Ok(dims)
    }

    fn out_shape(&self, (n, c, h, w): (usize, usize, usize, usize)) -> Shape {
        let oh = pool_output_size(h, self.kernel, self.stride, self.pad);
        let ow = pool_output_size(w, self.kernel, self.stride, self.pad);
        Shape::from((n, c, oh, ow))
    }
}

/// Per-worker scratch of `Pool2d::max_bwd_plane_same`: each output's winning tap (as a float,
/// so the selects stay in one lane type; taps are small integers, exact), and the values kept
/// aside while a tap's loop runs over its padding columns.
struct SameMaxScratch<T> {
    arg: Vec<T>,
    keep: Vec<T>,
}

impl<T> Default for SameMaxScratch<T> {
    fn default() -> Self {
        SameMaxScratch {
            arg: Vec::new(),
            keep: Vec::new(),
        }
    }
}

/// One plane of max pooling: the max of each window's column (all window rows at once, which
/// vectorises) into `tmp`, then the max along each window's row. The value is the same as a
/// row-major scan with strict `>` from -FLT_MAX (NaN never wins; an empty window gives LOWEST).
fn max_fwd_plane<T: Float>(xp: &[T], o: &mut [T], hw: &[Win], ww: &[Win], w: usize, tmp: &mut [T]) {
    for (orow, hy) in o.chunks_exact_mut(ww.len()).zip(hw) {
        tmp.fill(T::LOWEST);
        for row in xp[hy.start * w..hy.end * w].chunks_exact(w) {
            for (t, &e) in tmp.iter_mut().zip(row) {
                *t = if e > *t { e } else { *t };
            }
        }
        for (v, wx) in orow.iter_mut().zip(ww) {
            let mut m = T::LOWEST;
            if wx.end - wx.start == 3 {
                let t: &[T; 3] = tmp[wx.start..wx.start + 3].try_into().expect("3 elements");
                for &e in t {
                    m = if e > m { e } else { m };
                }
                *v = m;
                continue;
            }
            for &e in &tmp[wx.start..wx.end] {
                m = if e > m { e } else { m };
            }
            *v = m;
        }
    }
}

/// One plane of the max-pool input gradient: each window's gradient goes to Caffe's argmax, the
/// first strict maximum in row-major order, which is the first element equal to the window's
/// output `y` (when `y` > -FLT_MAX; otherwise no element ever beat the initial value). Scanned
/// backwards with selects, so there is no data-dependent branch and no dependency chain.
fn max_bwd_plane<T: Float>(
    xp: &[T],
    yp: &[T],
    dyp: &[T],
    dxp: &mut [T],
    hw: &[Win],
    ww: &[Win],
    w: usize,
) {
    // dxp is zero (and written, so the `+=` below takes no copy-on-write faults: see `zeros`).
    let ow = ww.len();
    for ((yrow, grow), hy) in yp.chunks_exact(ow).zip(dyp.chunks_exact(ow)).zip(hw) {
        for ((&m, &g), wx) in yrow.iter().zip(grow).zip(ww) {
            // The forward never outputs NaN (NaN never wins), so this is `!(m > LOWEST)`.
            if m <= T::LOWEST {
                continue;
            }
            let mut arg = usize::MAX;
            if hy.end - hy.start == 3 && wx.end - wx.start == 3 {
                // Every BVLC max pool is 3x3: a fixed window the compiler unrolls.
                let at = hy.start * w + wx.start;
                for r in (0..3).rev() {
                    let row: &[T; 3] = xp[at + r * w..at + r * w + 3]
                        .try_into()
                        .expect("3 elements");
                    for k in (0..3).rev() {
                        arg = if row[k] == m { at + r * w + k } else { arg };
                    }
                }
                if arg != usize::MAX {
                    dxp[arg] += g;
                }
                continue;
            }
            for yy in (hy.start..hy.end).rev() {
                let at = yy * w + wx.start;
                for (k, &e) in xp[at..yy * w + wx.end].iter().enumerate().rev() {
                    arg = if e == m { at + k } else { arg };
                }
            }
            if arg != usize::MAX {
                dxp[arg] += g;
            }
        }
    }
}

impl CustomOp1 for Pool2d {
    fn name(&self) -> &'static str {
        "pool2d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let dims = l.shape().dims4()?;
        self.check(dims.2, dims.3)?;
        let out = match s {
            CpuStorage::F32(v) => CpuStorage::F32(self.fwd(nchw_slice(v, l, "pool2d")?, dims)),
            CpuStorage::F64(v) => CpuStorage::F64(self.fwd(nchw_slice(v, l, "pool2d")?, dims)),
            _ => bail!("pool2d: only f32/f64 are supported, got {:?}", s.dtype()),
        };
        Ok((out, self.out_shape(dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use super::cuda;
        let dims = l.shape().dims4()?;
        self.check(dims.2, dims.3)?;
        let dev = s.device();
        let y = cuda::pool_fwd(dev, &cuda::input(s, l, "pool2d")?, self.geom(dims))?;
        Ok((cuda::storage(y, dev), self.out_shape(dims)))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let dx = arg.contiguous()?.apply_op3_no_bwd(
            &res.contiguous()?,
            &grad_res.contiguous()?,
            &PoolBwd(*self),
        )?;
        Ok(Some(dx))
    }
}

/// Input gradient of `Pool2d`: (x, y, dy) -> dx (y, the forward output, locates max-pool's
/// argmax; average pooling ignores it).
struct PoolBwd(Pool2d);

impl CustomOp3 for PoolBwd {
    fn name(&self) -> &'static str {
        "pool2d-bwd"
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
        let p = &self.0;
        let dims = p.check_bwd(l1.shape(), l2.shape(), l3.shape())?;
        let n = "pool2d-bwd";
        let dx = match (s1, s2, s3) {
            (CpuStorage::F32(x), CpuStorage::F32(y), CpuStorage::F32(g)) => {
                CpuStorage::F32(p.bwd_cpu(
                    nchw_slice(x, l1, n)?,
                    nchw_slice(y, l2, n)?,
                    nchw_slice(g, l3, n)?,
                    dims,
                ))
            }
            (CpuStorage::F64(x), CpuStorage::F64(y), CpuStorage::F64(g)) => {
                CpuStorage::F64(p.bwd_cpu(
                    nchw_slice(x, l1, n)?,
                    nchw_slice(y, l2, n)?,
                    nchw_slice(g, l3, n)?,
                    dims,
                ))
            }
            _ => bail!(
                "pool2d-bwd: need matching f32/f64 inputs, got {:?}, {:?} and {:?}",
                s1.dtype(),
                s2.dtype(),
                s3.dtype()
            ),
        };
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
        use super::cuda;
        let p = &self.0;
        let dims = p.check_bwd(l1.shape(), l2.shape(), l3.shape())?;
        let n = "pool2d-bwd";
        let dev = s1.device();
        let (x, y, dy) = (
            cuda::input(s1, l1, n)?,
            cuda::input(s2, l2, n)?,
            cuda::input(s3, l3, n)?,
        );
        let dx = cuda::pool_bwd(dev, &x, &y, &dy, p.geom(dims))?;
        Ok((cuda::storage(dx, dev), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{grad_check, tensor, to_vec, Rng};
    use candle_core::{DType, Device};

    impl Pool2d {
        fn new(kind: PoolKind, kernel: usize, stride: usize, pad: usize) -> Pool2d {
            Pool2d {
                kind,
                kernel,
                stride,
                pad,
            }
        }
    }

    fn max(kernel: usize, stride: usize, pad: usize) -> Pool2d {
        Pool2d::new(PoolKind::Max, kernel, stride, pad)
    }

    fn avg(kernel: usize, stride: usize, pad: usize) -> Pool2d {
        Pool2d::new(PoolKind::Avg, kernel, stride, pad)
    }

    /// Caffe's PoolingLayer::Forward_cpu, written out loop by loop.
    fn reference(x: &[f64], (n, c, h, w): (usize, usize, usize, usize), p: Pool2d) -> Vec<f64> {
        let size = |len: usize| {
            let mut o = ((len + 2 * p.pad - p.kernel) as f64 / p.stride as f64).ceil() as i64 + 1;
            if p.pad > 0 && (o - 1) * p.stride as i64 >= (len + p.pad) as i64 {
                o -= 1;
            }
            o
        };
        let (oh, ow) = (size(h), size(w));
        let (k, s, pad) = (p.kernel as i64, p.stride as i64, p.pad as i64);
        let (h, w) = (h as i64, w as i64);
        let mut out = Vec::new();
        for plane in 0..(n * c) as i64 {
            let at = |y: i64, xx: i64| x[(plane * h * w + y * w + xx) as usize];
            for ph in 0..oh {
                for pw in 0..ow {
                    let (mut hs, mut ws) = (ph * s - pad, pw * s - pad);
                    match p.kind {
                        PoolKind::Max => {
                            let (he, we) = ((hs + k).min(h), (ws + k).min(w));
                            hs = hs.max(0);
                            ws = ws.max(0);
                            let mut m = f64::MIN;
                            for y in hs..he {
                                for xx in ws..we {
                                    if at(y, xx) > m {
                                        m = at(y, xx);
                                    }
                                }
                            }
                            out.push(m);
                        }
                        PoolKind::Avg => {
                            let (mut he, mut we) = ((hs + k).min(h + pad), (ws + k).min(w + pad));
                            let pool_size = ((he - hs) * (we - ws)) as f64;
                            hs = hs.max(0);
                            ws = ws.max(0);
                            he = he.min(h);
                            we = we.min(w);
                            let mut sum = 0.0;
                            for y in hs..he {
                                for xx in ws..we {
                                    sum += at(y, xx);
                                }
                            }
                            out.push(sum / pool_size);
                        }
                    }
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
    fn output_size_matches_caffe() {
        // The networks' 3x3/s2 max pools (ceil mode).
        assert_eq!(pool_output_size(112, 3, 2, 0), 56);
        assert_eq!(pool_output_size(55, 3, 2, 0), 27);
        assert_eq!(pool_output_size(28, 3, 2, 0), 14);
        assert_eq!(pool_output_size(14, 3, 2, 0), 7);
        assert_eq!(pool_output_size(13, 3, 2, 0), 6);
        // 3x3/s1/pad1 keeps the size; global 7x7 average; 5x5/s3 aux average.
        assert_eq!(pool_output_size(28, 3, 1, 1), 28);
        assert_eq!(pool_output_size(7, 7, 1, 0), 1);
        assert_eq!(pool_output_size(14, 5, 3, 0), 4);
        // Ceil mode differs from floor here: floor would give 2.
        assert_eq!(pool_output_size(6, 3, 2, 0), 3);
        // Clip rule: ceil((5 + 2 - 2) / 2) + 1 = 4, but window 3 would start at 6 >= 5 + 1.
        assert_eq!(pool_output_size(5, 2, 2, 1), 3);
        // Pad without the clip firing: ceil((6 + 2 - 3) / 2) + 1 = 4, last start 6 < 7.
        assert_eq!(pool_output_size(6, 3, 2, 1), 4);
    }

    const CONFIGS: &[(PoolKind, usize, usize, usize, usize, usize)] = &[
        // (kind, kernel, stride, pad, h, w)
        (PoolKind::Max, 3, 2, 0, 6, 7),   // ceil-mode partial windows
        (PoolKind::Max, 3, 1, 1, 5, 6),   // GoogLeNet inception branch
        (PoolKind::Max, 2, 2, 1, 5, 5),   // pad + clip rule
        (PoolKind::Max, 3, 2, 1, 8, 7),   // kernel != stride with pad
        (PoolKind::Avg, 3, 2, 0, 6, 7),   // ceil-mode partial windows
        (PoolKind::Avg, 3, 1, 1, 5, 6),   // pad: divisor counts padding
        (PoolKind::Avg, 2, 2, 1, 5, 5),   // pad + clip rule
        (PoolKind::Avg, 5, 3, 0, 14, 14), // GoogLeNet aux head
        (PoolKind::Avg, 7, 1, 0, 7, 7),   // global average
        (PoolKind::Avg, 3, 2, 2, 7, 6),   // windows reaching into padding on both sides
    ];

    #[test]
    fn forward_matches_reference() {
        let mut rng = Rng::new(1);
        for &(kind, kernel, stride, pad, h, w) in CONFIGS {
            let p = Pool2d::new(kind, kernel, stride, pad);
            let dims = (2, 3, h, w);
            let x = rng.vec(2 * 3 * h * w);
            let y = pool2d(&tensor(&x, dims), p).unwrap();
            let (oh, ow) = (
                pool_output_size(h, kernel, stride, pad),
                pool_output_size(w, kernel, stride, pad),
            );
            assert_eq!(y.dims(), &[2, 3, oh, ow], "{p:?}");
            assert_close(&to_vec(&y), &reference(&x, dims, p), 1e-12);
        }
    }

    #[test]
    fn forward_matches_candle_when_kernel_equals_stride() {
        let mut rng = Rng::new(2);
        for (k, h, w) in [(2, 8, 6), (3, 9, 12), (7, 7, 7)] {
            let x = tensor(&rng.vec(2 * 4 * h * w), (2, 4, h, w))
                .to_dtype(DType::F32)
                .unwrap();
            let ours = pool2d(&x, max(k, k, 0)).unwrap();
            assert_close(&to_vec(&ours), &to_vec(&x.max_pool2d(k).unwrap()), 0.0);
            let ours = pool2d(&x, avg(k, k, 0)).unwrap();
            assert_close(&to_vec(&ours), &to_vec(&x.avg_pool2d(k).unwrap()), 1e-6);
        }
        // candle's forward also handles kernel != stride when floor and ceil agree.
        let x = tensor(&rng.vec(2 * 3 * 7 * 9), (2, 3, 7, 9));
        let ours = pool2d(&x, max(3, 2, 0)).unwrap();
        assert_close(
            &to_vec(&ours),
            &to_vec(&x.max_pool2d_with_stride(3, 2).unwrap()),
            0.0,
        );
    }

    #[test]
    fn max_pool_gradient_matches_finite_differences() {
        let mut rng = Rng::new(3);
        for &(kind, kernel, stride, pad, h, w) in CONFIGS.iter().filter(|c| c.0 == PoolKind::Max) {
            let p = Pool2d::new(kind, kernel, stride, pad);
            let dims = (2, 2, h, w);
            let x = rng.distinct(2 * 2 * h * w);
            let err = grad_check(&x, dims, 30, |t| pool2d(t, p));
            assert!(err < 1e-6, "{p:?}: relative error {err}");
        }
    }

    #[test]
    fn avg_pool_gradient_matches_finite_differences() {
        let mut rng = Rng::new(4);
        for &(kind, kernel, stride, pad, h, w) in CONFIGS.iter().filter(|c| c.0 == PoolKind::Avg) {
            let p = Pool2d::new(kind, kernel, stride, pad);
            let dims = (2, 2, h, w);
            let x = rng.vec(2 * 2 * h * w);
            let err = grad_check(&x, dims, 40, |t| pool2d(t, p));
            assert!(err < 1e-6, "{p:?}: relative error {err}");
        }
    }

    /// Caffe's max-pool backward as written there: per window the first strict maximum from
    /// -FLT_MAX in row-major order takes the window's gradient.
    fn reference_max_bwd(
        x: &[f64],
        dy: &[f64],
        (n, c, h, w): (usize, usize, usize, usize),
        p: Pool2d,
    ) -> Vec<f64> {
        let (oh, ow) = (
            pool_output_size(h, p.kernel, p.stride, p.pad),
            pool_output_size(w, p.kernel, p.stride, p.pad),
        );
        let mut dx = vec![0.0; x.len()];
        for plane in 0..n * c {
            for ph in 0..oh {
                for pw in 0..ow {
                    let (hs, ws) = (ph * p.stride, pw * p.stride);
                    let (he, we) = (
                        (hs + p.kernel).min(h + p.pad),
                        (ws + p.kernel).min(w + p.pad),
                    );
                    let (mut m, mut arg) = (f64::MIN, None);
                    for yy in hs.max(p.pad)..he {
                        for xx in ws.max(p.pad)..we {
                            let at = plane * h * w + (yy - p.pad) * w + xx - p.pad;
                            if x[at] > m {
                                (m, arg) = (x[at], Some(at));
                            }
                        }
                    }
                    if let Some(at) = arg {
                        dx[at] += dy[(plane * oh + ph) * ow + pw];
                    }
                }
            }
        }
        dx
    }

    #[test]
    fn max_pool_backward_matches_caffe_with_ties_nan_and_lowest() {
        let mut rng = Rng::new(11);
        let mut configs: Vec<_> = CONFIGS.iter().filter(|c| c.0 == PoolKind::Max).collect();
        let more = [
            (PoolKind::Max, 3, 2, 0, 13, 13), // AlexNet
            (PoolKind::Max, 3, 1, 1, 28, 33), // inception pool, rows longer than a vector
            (PoolKind::Max, 3, 2, 0, 9, 12),  // ceil mode, even width
            (PoolKind::Max, 2, 3, 0, 8, 8),   // stride > kernel: skipped inputs
            (PoolKind::Max, 1, 1, 0, 4, 5),
        ];
        configs.extend(more.iter());
        for &(kind, kernel, stride, pad, h, w) in configs {
            let p = Pool2d::new(kind, kernel, stride, pad);
            let dims = (2, 3, h, w);
            // Few distinct values, so windows tie often; some NaN and -FLT_MAX inputs.
            let x: Vec<f64> = (0..2 * 3 * h * w)
                .map(|_| match rng.next_u64() % 16 {
                    0 => f64::NAN,
                    1 | 2 => f64::MIN,
                    v => (v % 3) as f64,
                })
                .collect();
            let y = p.fwd(&x, dims);
            // Integer gradients: sums over overlapping windows are exact in any order.
            let dy: Vec<f64> = (0..y.len())
                .map(|_| (rng.next_u64() % 7) as f64 - 3.0)
                .collect();
            let dx = p.bwd_cpu(&x, &y, &dy, dims);
            assert_eq!(dx, reference_max_bwd(&x, &dy, dims, p), "{p:?} on {h}x{w}");
        }
    }

    #[test]
    fn max_pool_gradient_goes_to_first_max_and_sums_overlaps() {
        // All equal: Caffe's strict `>` picks the first element of each window.
        let x = Tensor::ones((1, 1, 3, 3), DType::F64, &Device::Cpu).unwrap();
        let var = candle_core::Var::from_tensor(&x).unwrap();
        let y = pool2d(var.as_tensor(), max(2, 1, 0)).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let g = to_vec(g.get(var.as_tensor()).unwrap());
        assert_eq!(g, vec![1., 1., 0., 1., 1., 0., 0., 0., 0.]);
        // One peak shared by all four overlapping windows collects all four gradients.
        let x = tensor(&[0., 0., 0., 0., 5., 0., 0., 0., 0.], (1, 1, 3, 3));
        let var = candle_core::Var::from_tensor(&x).unwrap();
        let y = pool2d(var.as_tensor(), max(2, 1, 0)).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let g = to_vec(g.get(var.as_tensor()).unwrap());
        assert_eq!(g, vec![0., 0., 0., 0., 4., 0., 0., 0., 0.]);
    }

    #[test]
    fn f32_forward_and_backward_match_f64() {
        let mut rng = Rng::new(5);
        for p in [max(3, 2, 0), max(3, 1, 1), avg(5, 3, 0), avg(3, 2, 1)] {
            let x64 = tensor(&rng.distinct(2 * 3 * 14 * 13), (2, 3, 14, 13));
            let x32 = x64.to_dtype(DType::F32).unwrap();
            let (v64, v32) = (
                candle_core::Var::from_tensor(&x64).unwrap(),
                candle_core::Var::from_tensor(&x32).unwrap(),
            );
            let (y64, y32) = (pool2d(&v64, p).unwrap(), pool2d(&v32, p).unwrap());
            assert_eq!(y32.dtype(), DType::F32);
            assert_close(&to_vec(&y32), &to_vec(&y64), 1e-6);
            let g64 = (y64.sqr().unwrap()).sum_all().unwrap().backward().unwrap();
            let g32 = (y32.sqr().unwrap()).sum_all().unwrap().backward().unwrap();
            let g32 = g32.get(&v32).unwrap();
            assert_eq!(g32.dtype(), DType::F32);
            assert_close(&to_vec(g32), &to_vec(g64.get(&v64).unwrap()), 1e-5);
        }
    }

    #[test]
    fn non_contiguous_input_matches_contiguous_copy() {
        let mut rng = Rng::new(6);
        // (N, H, C, W) transposed to (N, C, H, W), then narrowed on channels and on batch.
        let base = tensor(&rng.distinct(3 * 9 * 4 * 8), (3, 9, 4, 8))
            .transpose(1, 2)
            .unwrap();
        let views = [
            base.clone(),
            base.narrow(1, 1, 2).unwrap(),
            base.contiguous().unwrap().narrow(0, 1, 2).unwrap(), // contiguous with an offset
        ];
        for x in &views {
            for p in [max(3, 2, 1), avg(3, 2, 0)] {
                let a = pool2d(x, p).unwrap();
                let b = pool2d(&x.contiguous().unwrap(), p).unwrap();
                assert_close(&to_vec(&a), &to_vec(&b), 0.0);
            }
        }
        // Gradients flow back through the strided view.
        let v = candle_core::Var::from_tensor(&tensor(&rng.distinct(2 * 6 * 3 * 7), (2, 6, 3, 7)))
            .unwrap();
        let y = pool2d(&v.transpose(1, 2).unwrap(), max(3, 2, 0)).unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        let g = g.get(&v).unwrap();
        assert_eq!(g.dims(), &[2, 6, 3, 7]);
        let total: f64 = to_vec(g).iter().sum();
        assert_eq!(total, y.elem_count() as f64);
    }

    #[test]
    fn strided_storage_is_rejected_by_the_raw_op() {
        let x = tensor(&[0.0; 2 * 3 * 4 * 4], (2, 4, 3, 4))
            .transpose(1, 2)
            .unwrap();
        let err = x.apply_op1(max(2, 2, 0)).unwrap_err().to_string();
        assert!(err.contains("contiguous"), "{err}");
    }

    #[test]
    fn invalid_configs_error() {
        let x = tensor(&[0.0; 16], (1, 1, 4, 4));
        assert!(pool2d(&x, max(3, 0, 0)).is_err());
        assert!(pool2d(&x, max(2, 2, 2)).is_err()); // pad >= kernel
        assert!(pool2d(&x, max(7, 1, 1)).is_err()); // window larger than padded input
        assert!(pool2d(&x.to_dtype(DType::U32).unwrap(), max(2, 2, 0)).is_err());
    }
}
