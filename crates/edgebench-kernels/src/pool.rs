//! Caffe `PoolingLayer` (MAX and AVE) as a differentiable candle op. candle's own pooling only
//! back-propagates when kernel == stride with no padding; GoogLeNet and AlexNet need overlapping,
//! padded and ceil-mode windows.

#[cfg(target_arch = "aarch64")]
use crate::util::{as_f32, as_f32_mut};
use crate::util::{
    deinterleave, init_slice, native_or_host, nchw_slice, par_chunks_zeroed, vec_written_by, zeros,
    Float,
};
#[cfg(feature = "cuda")]
use candle_core::backend::BackendStorage;
use candle_core::{bail, CpuStorage, CustomOp1, CustomOp3, Layout, Result, Shape, Tensor};
use std::mem::MaybeUninit;

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
    native_or_host(x, |x| {
        let x = x.contiguous()?;
        // An output that needs no gradient (inference) takes the maxima alone (`Pool2d`'s op).
        if p.kind == PoolKind::Max && x.device().is_cpu() && x.track_op() {
            let arg = std::sync::Mutex::new(Vec::new());
            return x.apply_op1(MaxPoolCpu { pool: p, arg });
        }
        x.apply_op1(p)
    })
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
            return self.max_only_fwd(x, (n, c, h, w));
        }
        // A window's sum is the sum of its columns' sums over its rows: the rows are added
        // whole, in a loop that vectorises, and each output sums only its few column sums.
        par_chunks_zeroed(
            len,
            plane_out,
            || vec![T::ZERO; w],
            |col_sums, i, o| {
                let xp = &x[i * plane..(i + 1) * plane];
                for (hy, o) in hw.iter().zip(o.chunks_exact_mut(ww.len())) {
                    sum_rows(&xp[hy.start * w..hy.end * w], col_sums);
                    for (wx, o) in ww.iter().zip(o) {
                        let size = hy.avg_len * wx.avg_len;
                        let sum = col_sums[wx.start..wx.end]
                            .iter()
                            .fold(T::ZERO, |s, &v| s + v);
                        *o = if size == 0 {
                            T::ZERO
                        } else {
                            sum / T::from_f64(size as f64)
                        };
                    }
                }
            },
        )
    }

    /// The input gradient on the CPU (max pooling finds the argmax again from `x`).
    fn bwd_cpu<T: Float>(
        &self,
        x: &[T],
        dy: &[T],
        (n, c, h, w): (usize, usize, usize, usize),
    ) -> Vec<T> {
        let (hw, ww) = (self.windows(h), self.windows(w));
        let plane_out = hw.len() * ww.len();
        let (len, plane) = (n * c * h * w, h * w);
        if plane_out == 0 {
            return zeros(len);
        }
        let outs = |i: usize| i * plane_out..(i + 1) * plane_out;
        if self.kind == PoolKind::Max {
            // No argmax recorded (the op was not `MaxPoolCpu`): find it again.
            return max_scatter(plane, &self.max_fwd(x, (n, c, h, w)).1, dy, n * c);
        }
        // Per output row, its windows' shares summed into one input row's worth of gradient,
        // which is then added whole to each row the windows cover (a loop that vectorises).
        par_chunks_zeroed(
            len,
            plane,
            || vec![T::ZERO; w],
            |row_grad, i, dxp| {
                for (hy, gy) in hw.iter().zip(dy[outs(i)].chunks_exact(ww.len())) {
                    row_grad.fill(T::ZERO);
                    for (wx, &g) in ww.iter().zip(gy) {
                        let size = hy.avg_len * wx.avg_len;
                        if size == 0 {
                            continue;
                        }
                        let g = g / T::from_f64(size as f64);
                        for e in &mut row_grad[wx.start..wx.end] {
                            *e += g;
                        }
                    }
                    for row in dxp[hy.start * w..hy.end * w].chunks_exact_mut(w) {
                        for (e, &g) in row.iter_mut().zip(row_grad.iter()) {
                            *e += g;
                        }
                    }
                }
            },
        )
    }

    #[cfg(feature = "cuda")]
    fn geom(&self, (n, c, h, w): (usize, usize, usize, usize)) -> gpu::PoolGeom {
        gpu::PoolGeom {
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

/// Index of a max-pool output's argmax in its input plane: none for a window with no element
/// above -FLT_MAX (empty, or all NaN / -FLT_MAX), which Caffe's backward leaves without a
/// gradient.
const NO_ARG: u32 = u32::MAX;

/// What the max-pool forward keeps of each maximum's position: its index in the plane (`u32`,
/// for the backward), or nothing (`()`: a forward whose output needs no gradient; the index
/// arithmetic then compiles away).
pub(crate) trait ArgSlot: Copy + Send + Sync + 'static {
    /// No position: an empty window's, or one where nothing beat -FLT_MAX.
    const NONE: Self;
    fn at(index: u32) -> Self;
    /// The slots as plane indices, where they are (the NEON pass writes index lanes).
    #[cfg(target_arch = "aarch64")]
    fn as_indices(slots: &mut [Self]) -> Option<&mut [u32]>;
}

impl ArgSlot for u32 {
    const NONE: u32 = NO_ARG;
    fn at(index: u32) -> u32 {
        index
    }
    #[cfg(target_arch = "aarch64")]
    fn as_indices(slots: &mut [u32]) -> Option<&mut [u32]> {
        Some(slots)
    }
}

impl ArgSlot for () {
    const NONE: () = ();
    fn at(_: u32) {}
    #[cfg(target_arch = "aarch64")]
    fn as_indices(_: &mut [()]) -> Option<&mut [u32]> {
        None
    }
}

/// A max-pool's geometry on one plane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxGeom {
    h: usize,
    w: usize,
    k: usize,
    s: usize,
    pad: usize,
    oh: usize,
    ow: usize,
}

impl MaxGeom {
    pub(crate) fn new(p: &Pool2d, h: usize, w: usize) -> MaxGeom {
        let (k, s, pad) = (p.kernel, p.stride, p.pad);
        MaxGeom {
            h,
            w,
            k,
            s,
            pad,
            oh: pool_output_size(h, k, s, pad),
            ow: pool_output_size(w, k, s, pad),
        }
    }

    /// Stride 1 with the output as wide as the input (GoogLeNet's 3x3/s1/pad 1): the column
    /// pass runs over the whole plane as one loop, then fixes the columns whose windows cross a
    /// row end.
    fn same_width(&self) -> bool {
        self.s == 1 && self.ow == self.w
    }

    /// A 3-wide window at stride 2 without padding on an even width (GoogLeNet's pool1 to
    /// pool4): Caffe's ceil mode makes the output half as wide, each row's last window reaching
    /// one column past the row, so output column o of row r starts at plane element 2j for
    /// j = r·ow + o and the column pass runs over the whole plane as one loop.
    fn whole_plane_stride_2(&self) -> bool {
        self.k == 3 && self.s == 2 && self.pad == 0 && 2 * self.ow == self.w
    }

    /// Length of a padded input row: every window of the row lies inside.
    fn row_len(&self) -> usize {
        ((self.ow - 1) * self.s + self.k)
            .max(self.pad + self.w)
            .next_multiple_of(self.s)
    }
}

/// Per-worker scratch of the max-pool forward: a padded input row, and per input row each
/// output column's max over its window's columns with that element's index in the plane.
struct MaxScratch<T, A> {
    row: Vec<T>,
    /// For stride 2: `row`'s even columns, then its odd ones.
    halves: Vec<T>,
    col_max: Vec<T>,
    col_arg: Vec<A>,
}

/// Per element of a plane, -inf where its left (`left`) or right (`right`) neighbour lies in
/// another row, else -0.0 (which leaves every value, -0.0 too, as it is): added to those taps,
/// a window that crosses a row end loses them to every value, so the column pass of a 3-wide
/// window is one branch-free loop over the whole plane, without a scalar pass over the edge
/// columns afterwards (on 14x14 and 28x28 maps that pass cost more than the loop).
struct RowEnds<T> {
    left: Vec<T>,
    right: Vec<T>,
}

impl<T: Float> RowEnds<T> {
    fn new(h: usize, w: usize) -> RowEnds<T> {
        RowEnds {
            left: column_terms(h, w, 0),
            right: column_terms(h, w, w - 1),
        }
    }
}

/// Per element of an h x w plane, -inf in column `col`, else -0.0: the terms of `RowEnds`.
fn column_terms<T: Float>(h: usize, w: usize, col: usize) -> Vec<T> {
    let (inf, keep) = (T::from_f64(f64::NEG_INFINITY), T::from_f64(-0.0));
    (0..h * w)
        .map(|o| if o % w == col { inf } else { keep })
        .collect()
}

impl Pool2d {
    /// Max pooling that also returns each output's argmax (Caffe's `mask`, as an index into the
    /// input plane): the first strict maximum from -FLT_MAX in row-major order, so the backward
    /// is one scatter instead of a second search of every window. Per plane, two passes of
    /// branch-free compare-and-select over whole rows: each input row's max over every window's
    /// columns (taps left to right, strict `>`: the leftmost wins), then each window's max over
    /// its rows (top to bottom, strict `>`: the first row holding the max and the leftmost column
    /// in it, which is the row-major first). Padding takes part in neither: it never wins.
    pub(crate) fn max_fwd<T: Float>(
        &self,
        x: &[T],
        (n, c, h, w): (usize, usize, usize, usize),
    ) -> (Vec<T>, Vec<u32>) {
        let g = MaxGeom::new(self, h, w);
        assert!(
            h * w < NO_ARG as usize,
            "pool2d: plane of {h}x{w} too large"
        );
        let len = n * c * g.oh * g.ow;
        let (mut y, mut arg) = (Vec::with_capacity(len), Vec::with_capacity(len));
        self.max_fwd_into(x, g, y.spare_capacity_mut(), arg.spare_capacity_mut());
        // SAFETY: `max_fwd_into` initialised every element of both vectors' first `len`.
        unsafe {
            y.set_len(len);
            arg.set_len(len);
        }
        (y, arg)
    }

    /// `max_fwd`'s maxima without their argmax, bit for bit the same.
    pub(crate) fn max_only_fwd<T: Float>(
        &self,
        x: &[T],
        (n, c, h, w): (usize, usize, usize, usize),
    ) -> Vec<T> {
        let g = MaxGeom::new(self, h, w);
        let len = n * c * g.oh * g.ow;
        let mut y = Vec::with_capacity(len);
        // Zero-sized: no allocation, and no index is computed.
        let mut none = vec![MaybeUninit::new(()); len];
        self.max_fwd_into(x, g, y.spare_capacity_mut(), &mut none);
        // SAFETY: `max_fwd_into` initialised every element of y's first `len`.
        unsafe { y.set_len(len) };
        y
    }

    /// `max_fwd` into the first N·C·OH·OW elements of `y` and `arg`, initialising them.
    pub(crate) fn max_fwd_into<T: Float, A: ArgSlot>(
        &self,
        x: &[T],
        g: MaxGeom,
        y: &mut [MaybeUninit<T>],
        arg: &mut [MaybeUninit<A>],
    ) {
        use rayon::prelude::*;
        let (plane, plane_out) = (g.h * g.w, g.oh * g.ow);
        let len = x.len() / plane * plane_out;
        let scratch = || MaxScratch {
            row: vec![T::LOWEST; g.row_len()],
            halves: vec![
                T::LOWEST;
                if g.whole_plane_stride_2() {
                    plane + 1
                } else if g.s == 2 {
                    g.row_len()
                } else {
                    0
                }
            ],
            col_max: vec![T::LOWEST; g.h * g.ow],
            col_arg: vec![A::NONE; g.h * g.ow],
        };
        // One table for every plane, shared by the tasks.
        let row_ends = (g.same_width() && g.k == 3).then(|| RowEnds::new(g.h, g.w));
        // Per column-pass output, whether its window's third tap lies in the next row.
        let last_columns = g
            .whole_plane_stride_2()
            .then(|| column_terms(g.h, g.ow, g.ow - 1));
        y[..len]
            .par_chunks_mut(plane_out)
            .zip(arg[..len].par_chunks_mut(plane_out))
            .enumerate()
            .for_each_init(scratch, |sc, (i, (yo, ao))| {
                let xp = &x[i * plane..(i + 1) * plane];
                if let Some(ends) = &row_ends {
                    max_cols_3(xp, ends, &mut sc.col_max, &mut sc.col_arg);
                } else if let Some(ends) = &last_columns {
                    let (m, a) = (&mut sc.col_max, &mut sc.col_arg);
                    max_cols_3_stride_2_plane(xp, ends, &mut sc.halves, m, a);
                } else if g.same_width() {
                    max_cols_same_width(&g, xp, &mut sc.col_max, &mut sc.col_arg);
                } else {
                    max_cols(&g, xp, sc);
                }
                max_rows(&g, &sc.col_max, &sc.col_arg, yo, ao);
            });
    }
}

/// The column pass for `MaxGeom::same_width` with a 3-wide window (so pad 1, GoogLeNet's
/// inception pools): output o takes x[o - 1], x[o] and x[o + 1], the outer two plus
/// `row_ends`' terms, so that a neighbour in another row never wins.
fn max_cols_3<T: Float, A: ArgSlot>(x: &[T], ends: &RowEnds<T>, m: &mut [T], a: &mut [A]) {
    let n = x.len();
    let (m, a) = (&mut m[..n], &mut a[..n]);
    if n == 0 {
        return;
    }
    let (left, right) = (&ends.left[..n], &ends.right[..n]);
    // The plane's first and last outputs, one of whose outer taps lies outside the plane.
    let edge = |o: usize| {
        let (mut best, mut at) = (T::LOWEST, A::NONE);
        let first = o.saturating_sub(1);
        for (t, &v) in (first..).zip(&x[first..(o + 2).min(n)]) {
            let v = match t.cmp(&o) {
                std::cmp::Ordering::Less => v + left[o],
                std::cmp::Ordering::Equal => v,
                std::cmp::Ordering::Greater => v + right[o],
            };
            max_step::<T, A, false>(v, &mut best, &mut at, A::at(t as u32));
        }
        (best, at)
    };
    (m[0], a[0]) = edge(0);
    if n == 1 {
        return;
    }
    (m[n - 1], a[n - 1]) = edge(n - 1);
    let inner = n - 2;
    let (xl, xc, xr) = (&x[..inner], &x[1..inner + 1], &x[2..inner + 2]);
    let (left, right) = (&left[1..inner + 1], &right[1..inner + 1]);
    let (m, a) = (&mut m[1..inner + 1], &mut a[1..inner + 1]);
    for o in 0..inner {
        let (mut best, mut at) = (T::LOWEST, A::NONE);
        let at0 = o as u32;
        max_step::<T, A, false>(xl[o] + left[o], &mut best, &mut at, A::at(at0));
        max_step::<T, A, false>(xc[o], &mut best, &mut at, A::at(at0 + 1));
        max_step::<T, A, false>(xr[o] + right[o], &mut best, &mut at, A::at(at0 + 2));
        (m[o], a[o]) = (best, at);
    }
}

/// The column pass for `MaxGeom::same_width` with windows other than 3 wide: tap `kj` is the
/// whole plane shifted by `kj - pad` (one pass per tap); columns whose window reaches past a
/// row's start or end took taps from the neighbouring row there, and are computed again with
/// clipping.
fn max_cols_same_width<T: Float, A: ArgSlot>(g: &MaxGeom, x: &[T], m: &mut [T], a: &mut [A]) {
    max_cols_tap_by_tap(g, x, m, a);
    // The edge columns: c < pad, or c + k > w + pad.
    let right = (g.w + g.pad + 1).saturating_sub(g.k).max(g.pad.min(g.w));
    let edges = (0..g.pad.min(g.w)).chain(right..g.w);
    for (r, (mr, ar)) in m
        .chunks_exact_mut(g.w)
        .zip(a.chunks_exact_mut(g.w))
        .enumerate()
    {
        for c in edges.clone() {
            let (mut best, mut at) = (T::LOWEST, A::NONE);
            let cols = c.saturating_sub(g.pad)..(c + g.k - g.pad).min(g.w);
            for cc in cols {
                let at_cc = A::at((r * g.w + cc) as u32);
                max_step::<T, A, false>(x[r * g.w + cc], &mut best, &mut at, at_cc);
            }
            (mr[c], ar[c]) = (best, at);
        }
    }
}

/// The same-width column pass one tap at a time (windows other than 3 wide): tap `kj` is the
/// whole plane shifted by `kj - pad`, each a pass over the plane.
fn max_cols_tap_by_tap<T: Float, A: ArgSlot>(g: &MaxGeom, x: &[T], m: &mut [T], a: &mut [A]) {
    let n = x.len();
    // Tap 0 initialises every output it reaches (all but the first `pad`, which are edge
    // columns, recomputed below), so nothing is filled with -FLT_MAX first.
    let d0 = g.pad.min(n);
    m[..d0].fill(T::LOWEST);
    a[..d0].fill(A::NONE);
    for kj in 0..g.k {
        let (m, a, e, at0) = if kj < g.pad {
            let d = (g.pad - kj).min(n);
            (&mut m[d..], &mut a[d..], &x[..n - d], 0)
        } else {
            let d = (kj - g.pad).min(n);
            (&mut m[..n - d], &mut a[..n - d], &x[d..], d as u32)
        };
        if kj == 0 {
            max_into::<T, A, true>(e, at0, m, a);
        } else {
            max_into::<T, A, false>(e, at0, m, a);
        }
    }
}

/// The column pass for `MaxGeom::whole_plane_stride_2`: output j (row r, column o) takes
/// plane elements 2j, 2j + 1 and 2j + 2, from the plane's even and odd elements, in one loop
/// over the plane instead of a copy, a split and a loop per row (GoogLeNet's pool4 rows are
/// 14 wide). A row's last window has its third tap in the next row (or past the plane); `ends`
/// adds -inf to it there (and -0.0 elsewhere, which changes no value), so it never wins.
fn max_cols_3_stride_2_plane<T: Float, A: ArgSlot>(
    x: &[T],
    ends: &[T],
    halves: &mut [T],
    m: &mut [T],
    a: &mut [A],
) {
    let half = x.len() / 2;
    // `even` has one element past the plane, read only as a masked third tap.
    let (even, odd) = halves.split_at_mut(half + 1);
    deinterleave(x, [&mut even[..half], &mut odd[..half]]);
    let taps = even[..half].iter().zip(&odd[..half]).zip(&even[1..]);
    let outs = m[..half].iter_mut().zip(&mut a[..half]).zip(&ends[..half]);
    for (j, (((m, a), &end), ((&e0, &e1), &e2))) in outs.zip(taps).enumerate() {
        let at0 = 2 * j as u32;
        let (mut best, mut at) = (T::LOWEST, A::NONE);
        max_step::<T, A, false>(e0, &mut best, &mut at, A::at(at0));
        max_step::<T, A, false>(e1, &mut best, &mut at, A::at(at0 + 1));
        max_step::<T, A, false>(e2 + end, &mut best, &mut at, A::at(at0 + 2));
        (*m, *a) = (best, at);
    }
}

/// The column pass for any geometry, row by row through a padded copy of the row.
fn max_cols<T: Float, A: ArgSlot>(g: &MaxGeom, x: &[T], sc: &mut MaxScratch<T, A>) {
    let rows = x.chunks_exact(g.w);
    let outs = sc.col_max.chunks_exact_mut(g.ow);
    for (r, ((xr, m), a)) in rows
        .zip(outs)
        .zip(sc.col_arg.chunks_exact_mut(g.ow))
        .enumerate()
    {
        // The borders stay -FLT_MAX from the allocation; only the interior is rewritten. Every
        // window's tap 0 lies in the padded row, so tap 0 initialises m and a.
        crate::util::copy_short(&mut sc.row[g.pad..g.pad + g.w], xr);
        // Tap kj of window o is padded column o·s + kj: input index r·w + o·s + kj - pad
        // (wrapping for padding, which never wins).
        let at0 = (r * g.w) as u32;
        let at = |kj: usize| at0.wrapping_add(kj as u32).wrapping_sub(g.pad as u32);
        #[cfg(target_arch = "aarch64")]
        if g.k == 3 && g.s == 2 {
            if let (Some(row), Some(m), Some(a)) =
                (as_f32(&sc.row), as_f32_mut(m), A::as_indices(a))
            {
                neon::max_cols_3_stride_2(row, at(0), m, a);
                continue;
            }
        }
        if g.k == 3 && g.s <= 2 {
            // All three taps in one loop: from the row itself, or (stride 2) from its even
            // and odd columns, where tap kj of window o is `halves[kj % 2][o + kj / 2]`.
            let taps: [&[T]; 3] = if g.s == 1 {
                std::array::from_fn(|kj| &sc.row[kj..])
            } else {
                let (even, odd) = sc.halves.split_at_mut(sc.row.len() / 2);
                deinterleave(&sc.row, [even, odd]);
                [&even[..], &odd[..], &even[1..]]
            };
            max_of_taps::<T, A, 3>(taps, [at(0), at(1), at(2)], g.s as u32, m, a);
        } else if g.s == 2 {
            let (even, odd) = sc.halves.split_at_mut(sc.row.len() / 2);
            deinterleave(&sc.row, [even, odd]);
            max_taps_2::<T, A, true>([even, odd], 0, m, a, at(0));
            for kj in 1..g.k {
                max_taps_2::<T, A, false>([even, odd], kj, m, a, at(kj));
            }
        } else {
            max_taps::<T, A, true>(&sc.row, m, a, at(0), g.s);
            for kj in 1..g.k {
                max_taps::<T, A, false>(&sc.row[kj..], m, a, at(kj), g.s);
            }
        }
    }
}

/// One kernel column's pass over a padded row: `m[o]`, `a[o]` take `src[o * s]` and its index
/// `at0 + o * s` where it is strictly larger. A strided read does not vectorise: stride 2 goes
/// through `max_taps_2` instead.
fn max_taps<T: Float, A: ArgSlot, const INIT: bool>(
    src: &[T],
    m: &mut [T],
    a: &mut [A],
    at0: u32,
    s: usize,
) {
    if s == 1 {
        return max_into::<T, A, INIT>(&src[..m.len()], at0, m, a);
    }
    for (o, ((m, a), &e)) in m.iter_mut().zip(a).zip(src.iter().step_by(s)).enumerate() {
        max_step::<T, A, INIT>(e, m, a, A::at(at0.wrapping_add((o * s) as u32)));
    }
}

/// Stride-2 taps from the row split into its even and odd columns: tap `kj` of window `o` is
/// `halves[kj % 2][o + kj / 2]`.
fn max_taps_2<T: Float, A: ArgSlot, const INIT: bool>(
    halves: [&[T]; 2],
    kj: usize,
    m: &mut [T],
    a: &mut [A],
    at0: u32,
) {
    let e = &halves[kj % 2][kj / 2..kj / 2 + m.len()];
    for (o, ((m, a), &e)) in m.iter_mut().zip(a).zip(e).enumerate() {
        max_step::<T, A, INIT>(e, m, a, A::at(at0.wrapping_add(2 * o as u32)));
    }
}

/// `m[o]`, `a[o]` = the first strict maximum over the `K` taps `taps[kj][o]` (from
/// -FLT_MAX), with its index `at0[kj] + o * step`: a window's whole row of taps in one pass,
/// instead of one pass over `m` and `a` per tap.
#[inline(always)]
fn max_of_taps<T: Float, A: ArgSlot, const K: usize>(
    taps: [&[T]; K],
    at0: [u32; K],
    step: u32,
    m: &mut [T],
    a: &mut [A],
) {
    let len = m.len();
    let (taps, a) = (taps.map(|t| &t[..len]), &mut a[..len]);
    for (o, (m, a)) in m.iter_mut().zip(a.iter_mut()).enumerate() {
        let (mut best, mut at) = (T::LOWEST, A::NONE);
        for kj in 0..K {
            let at_kj = A::at(at0[kj].wrapping_add((o as u32).wrapping_mul(step)));
            max_step::<T, A, false>(taps[kj][o], &mut best, &mut at, at_kj);
        }
        (*m, *a) = (best, at);
    }
}

/// `m[o]`, `a[o]` = `e[o]`, `at0 + o` where `e[o]` is strictly larger.
fn max_into<T: Float, A: ArgSlot, const INIT: bool>(e: &[T], at0: u32, m: &mut [T], a: &mut [A]) {
    let (e, a) = (&e[..m.len()], &mut a[..m.len()]);
    for (o, ((m, a), &e)) in m.iter_mut().zip(a).zip(e).enumerate() {
        max_step::<T, A, INIT>(e, m, a, A::at(at0.wrapping_add(o as u32)));
    }
}

/// The row pass: each output row's max over its window's rows of the column pass, top to
/// bottom, into `y` and `ya` (initialising them). Rows whose 3-high window lies inside the
/// plane take all three rows in one loop (for stride 1, a run of such rows is one stretch of
/// the plane: one loop); the others start from their first row inside and add the rest.
fn max_rows<T: Float, A: ArgSlot>(
    g: &MaxGeom,
    cm: &[T],
    ca: &[A],
    y: &mut [MaybeUninit<T>],
    ya: &mut [MaybeUninit<A>],
) {
    let ow = g.ow;
    // Kernel rows ki in `inside(oy)` read input row oy·s + ki - pad, inside the plane.
    let inside = |oy: usize| {
        let first = g.pad.saturating_sub(oy * g.s);
        let end = (g.h + g.pad).saturating_sub(oy * g.s).min(g.k);
        first..end.max(first)
    };
    let row = |r: usize| (&cm[r * ow..(r + 1) * ow], &ca[r * ow..(r + 1) * ow]);
    let mut oy = 0;
    while oy < g.oh {
        let kis = inside(oy);
        if g.k == 3 && kis.len() == 3 {
            let mut end = oy + 1;
            if g.s == 1 {
                while end < g.oh && inside(end).len() == 3 {
                    end += 1;
                }
            }
            let (r0, len) = (oy * g.s - g.pad, (end - oy) * ow);
            max_of_rows::<T, A, 3>(
                std::array::from_fn(|ki| &cm[(r0 + ki) * ow..][..len]),
                std::array::from_fn(|ki| &ca[(r0 + ki) * ow..][..len]),
                &mut y[oy * ow..end * ow],
                &mut ya[oy * ow..end * ow],
            );
            oy = end;
            continue;
        }
        let (yr, yar) = (
            &mut y[oy * ow..(oy + 1) * ow],
            &mut ya[oy * ow..(oy + 1) * ow],
        );
        if kis.is_empty() {
            init_slice(yr, T::LOWEST);
            init_slice(yar, A::NONE);
        } else {
            // The column pass's maxima are -FLT_MAX exactly where their argmax is NO_ARG, so
            // starting from the first row inside is the same as a strict `>` from
            // (-FLT_MAX, NO_ARG).
            let (e, ea) = row(oy * g.s + kis.start - g.pad);
            let (yr, yar) = (init_from(yr, e), init_from(yar, ea));
            for ki in kis.start + 1..kis.end {
                let (e, ea) = row(oy * g.s + ki - g.pad);
                select_max(e, ea, yr, yar);
            }
        }
        oy += 1;
    }
}

/// `sums[c]` = the sum of column c over the whole rows of `rows` (`sums.len()` wide), zero when
/// there are none.
fn sum_rows<T: Float>(rows: &[T], sums: &mut [T]) {
    let mut rows = rows.chunks_exact(sums.len());
    match rows.next() {
        Some(first) => sums.copy_from_slice(first),
        None => sums.fill(T::ZERO),
    }
    for row in rows {
        for (s, &v) in sums.iter_mut().zip(row) {
            *s += v;
        }
    }
}

/// `dst` = `src` (as long), initialised.
fn init_from<'a, T: Copy>(dst: &'a mut [MaybeUninit<T>], src: &[T]) -> &'a mut [T] {
    for (d, &v) in dst.iter_mut().zip(src) {
        d.write(v);
    }
    assert_eq!(dst.len(), src.len());
    // SAFETY: every element of `dst` was just written; MaybeUninit<T> has T's layout.
    unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// `y[o]`, `ya[o]` = the first strict maximum over the `K` rows `e[ki][o]`, with its index
/// `ea[ki][o]`, starting from row 0 (initialising `y` and `ya`).
#[inline(always)]
fn max_of_rows<T: Float, A: ArgSlot, const K: usize>(
    e: [&[T]; K],
    ea: [&[A]; K],
    y: &mut [MaybeUninit<T>],
    ya: &mut [MaybeUninit<A>],
) {
    let len = y.len();
    let (e, ea, ya) = (e.map(|r| &r[..len]), ea.map(|r| &r[..len]), &mut ya[..len]);
    for (o, (y, ya)) in y.iter_mut().zip(ya.iter_mut()).enumerate() {
        let (mut best, mut at) = (e[0][o], ea[0][o]);
        for ki in 1..K {
            max_step::<T, A, false>(e[ki][o], &mut best, &mut at, ea[ki][o]);
        }
        y.write(best);
        ya.write(at);
    }
}

/// `m[o]`, `a[o]` = `e[o]`, `ea[o]` where `e[o]` is strictly larger.
fn select_max<T: Float, A: ArgSlot>(e: &[T], ea: &[A], m: &mut [T], a: &mut [A]) {
    let (e, ea, a) = (&e[..m.len()], &ea[..m.len()], &mut a[..m.len()]);
    for (((m, a), &e), &ea) in m.iter_mut().zip(a).zip(e).zip(ea) {
        max_step::<T, A, false>(e, m, a, ea);
    }
}

/// `m`, `a` = `e`, `at` where `e > m` (NaN never wins), without a branch: real data makes it
/// unpredictable, and a branch keeps the loops from vectorising. With INIT, `m` and `a` are not
/// read: the step starts from (-FLT_MAX, NO_ARG), as for a window's first tap.
#[inline(always)]
fn max_step<T: Float, A: ArgSlot, const INIT: bool>(e: T, m: &mut T, a: &mut A, at: A) {
    let (pm, pa) = if INIT { (T::LOWEST, A::NONE) } else { (*m, *a) };
    let win = e > pm;
    *m = std::hint::select_unpredictable(win, e, pm);
    *a = std::hint::select_unpredictable(win, at, pa);
}

/// The max-pool input gradient from the forward's argmax: each output's gradient added to the
/// input element that won its window, straight into the (zeroed, cache-warm) plane of dx.
fn max_scatter<T: Float>(plane: usize, arg: &[u32], dy: &[T], planes: usize) -> Vec<T> {
    // SAFETY: `max_scatter_into` initialises every element of its output.
    unsafe { vec_written_by(planes * plane, |dx| max_scatter_into(plane, arg, dy, dx)) }
}

/// `max_scatter` into `dx` (one input plane per `arg` plane), initialising it.
pub(crate) fn max_scatter_into<T: Float>(
    plane: usize,
    arg: &[u32],
    dy: &[T],
    dx: &mut [MaybeUninit<T>],
) {
    use rayon::prelude::*;
    let planes = dx.len() / plane.max(1);
    let plane_out = arg.len() / planes.max(1);
    dx.par_chunks_mut(plane.max(1))
        .enumerate()
        .for_each(|(i, dxp)| {
            // Zeroed here, while it is in the cache, instead of in a pass over memory first.
            let dxp = init_slice(dxp, T::ZERO);
            let outs = i * plane_out..(i + 1) * plane_out;
            let (arg, dy) = (&arg[outs.clone()], &dy[outs]);
            let mut add = |a: u32, d: T| {
                // NO_ARG lies past every plane (`max_fwd` asserts it): one compare skips it
                // and checks the index.
                if let Some(e) = dxp.get_mut(a as usize) {
                    *e += d;
                }
            };
            // Four at a time: the loop's own count and branch were a third of its instructions.
            let ((args, arg_rest), (dys, dy_rest)) = (arg.as_chunks::<4>(), dy.as_chunks::<4>());
            for (a, d) in args.iter().zip(dys) {
                for k in 0..4 {
                    add(a[k], d[k]);
                }
            }
            for (&a, &d) in arg_rest.iter().zip(dy_rest) {
                add(a, d);
            }
        });
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{max_step, NO_ARG};
    use std::arch::aarch64::*;

    /// `max_cols`' pass for a 3-wide window at stride 2 on one padded row, in f32: `m[o]`,
    /// `a[o]` = the first strict maximum from -FLT_MAX of `row[2o]`, `row[2o + 1]` and
    /// `row[2o + 2]`, with its index `at0 + 2o + kj` (wrapping, as the padding's are). Four
    /// outputs per step, their taps from two structure loads (`ld2`: the even and odd columns)
    /// instead of splitting the row into halves first and reading them again: GoogLeNet's
    /// stride-2 pools run this pass on every input row.
    pub(super) fn max_cols_3_stride_2(row: &[f32], at0: u32, m: &mut [f32], a: &mut [u32]) {
        let n = m.len();
        let a = &mut a[..n];
        assert!(row.len() > 2 * n, "max_cols_3_stride_2: row too short");
        // Step i reads row[8i..8i + 10] and writes outputs 4i..4i + 4.
        let steps = if row.len() >= 10 {
            ((row.len() - 10) / 8 + 1).min(n / 4)
        } else {
            0
        };
        // SAFETY: every step's loads and stores lie inside `row`, `m` and `a` (above); NEON
        // is part of the aarch64 baseline.
        unsafe {
            let (lowest, none) = (vdupq_n_f32(f32::MIN), vdupq_n_u32(NO_ARG));
            let (one, two, eight) = (vdupq_n_u32(1), vdupq_n_u32(2), vdupq_n_u32(8));
            let mut at = vaddq_u32(vdupq_n_u32(at0), vld1q_u32([0, 2, 4, 6].as_ptr()));
            for i in 0..steps {
                let p = row.as_ptr().add(8 * i);
                let pair = vld2q_f32(p);
                let (even, odd) = (pair.0, pair.1);
                let next_even = vld2q_f32(p.add(2)).0;
                let win = vcgtq_f32(even, lowest);
                let (mut best, mut arg) = (vbslq_f32(win, even, lowest), vbslq_u32(win, at, none));
                let win = vcgtq_f32(odd, best);
                best = vbslq_f32(win, odd, best);
                arg = vbslq_u32(win, vaddq_u32(at, one), arg);
                let win = vcgtq_f32(next_even, best);
                best = vbslq_f32(win, next_even, best);
                arg = vbslq_u32(win, vaddq_u32(at, two), arg);
                vst1q_f32(m.as_mut_ptr().add(4 * i), best);
                vst1q_u32(a.as_mut_ptr().add(4 * i), arg);
                at = vaddq_u32(at, eight);
            }
        }
        for o in 4 * steps..n {
            let (mut best, mut arg) = (f32::MIN, NO_ARG);
            for kj in 0..3 {
                let at = at0.wrapping_add((2 * o + kj) as u32);
                max_step::<f32, u32, false>(row[2 * o + kj], &mut best, &mut arg, at);
            }
            (m[o], a[o]) = (best, arg);
        }
    }
}

/// Max pooling on the CPU that keeps the forward's argmax for its backward (see
/// `Pool2d::max_fwd`); it lives as long as the graph that holds the op.
struct MaxPoolCpu {
    pool: Pool2d,
    arg: std::sync::Mutex<Vec<u32>>,
}

impl CustomOp1 for MaxPoolCpu {
    fn name(&self) -> &'static str {
        "max-pool2d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let p = &self.pool;
        let dims = l.shape().dims4()?;
        p.check(dims.2, dims.3)?;
        let arg;
        let y = float_kernel!("pool2d", |v in s| {
            let (y, a) = p.max_fwd(nchw_slice(v, l, "max-pool2d")?, dims);
            arg = a;
            y
        });
        *self.arg.lock().unwrap_or_else(|e| e.into_inner()) = arg;
        Ok((y, p.out_shape(dims)))
    }

    fn bwd(&self, x: &Tensor, y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let arg = self.arg.lock().unwrap_or_else(|e| e.into_inner());
        if !dy.device().is_cpu() || arg.len() != dy.elem_count() {
            return self.pool.bwd(x, y, dy);
        }
        let op = MaxScatter {
            arg: &arg,
            dims: x.dims4()?,
        };
        Ok(Some(dy.contiguous()?.apply_op1_no_bwd(&op)?))
    }
}

/// `max_scatter` as an op on the output gradient: dy -> dx of the input's `dims`.
struct MaxScatter<'a> {
    arg: &'a [u32],
    dims: (usize, usize, usize, usize),
}

impl CustomOp1 for MaxScatter<'_> {
    fn name(&self) -> &'static str {
        "max-pool2d-bwd"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = self.dims;
        let (plane, arg, name) = (h * w, self.arg, "max-pool2d-bwd");
        let dx = float_kernel!(name, |v in s| max_scatter(
            plane,
            arg,
            nchw_slice(v, l, name)?,
            n * c
        ));
        Ok((dx, Shape::from(self.dims)))
    }
}

impl CustomOp1 for Pool2d {
    fn name(&self) -> &'static str {
        "pool2d"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let dims = l.shape().dims4()?;
        self.check(dims.2, dims.3)?;
        let out = float_kernel!("pool2d", |v in s| self.fwd(nchw_slice(v, l, "pool2d")?, dims));
        Ok((out, self.out_shape(dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::cuda::{input, storage};
        let dims = l.shape().dims4()?;
        self.check(dims.2, dims.3)?;
        let dev = s.device();
        let y = gpu::pool_fwd(dev, &input(s, l, "pool2d")?, self.geom(dims))?;
        Ok((storage(y, dev), self.out_shape(dims)))
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
        // y (s2) only fixes the dtype: the backward searches each window of x again.
        let dx = float_kernel!(n, |x in s1, _y in s2, g in s3| p.bwd_cpu(
            nchw_slice(x, l1, n)?,
            nchw_slice(g, l3, n)?,
            dims
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
        let p = &self.0;
        let dims = p.check_bwd(l1.shape(), l2.shape(), l3.shape())?;
        let n = "pool2d-bwd";
        let dev = s1.device();
        let (x, y, dy) = (input(s1, l1, n)?, input(s2, l2, n)?, input(s3, l3, n)?);
        let dx = gpu::pool_bwd(dev, &x, &y, &dy, p.geom(dims))?;
        Ok((storage(dx, dev), l1.shape().clone()))
    }
}

/// The CUDA kernels (`cuda/pool.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use crate::cuda::{config, i32_of, Module};
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaDevice, Result};

    static KERNELS: Module = Module::new("edgebench_pool", include_str!("cuda/pool.cu"));

    /// Pooling geometry, as `Pool2d` computes it on the CPU.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct PoolGeom {
        pub(super) planes: usize,
        pub(super) h: usize,
        pub(super) w: usize,
        pub(super) oh: usize,
        pub(super) ow: usize,
        pub(super) kernel: usize,
        pub(super) stride: usize,
        pub(super) pad: usize,
        pub(super) is_max: bool,
    }

    impl PoolGeom {
        fn out_len(&self) -> usize {
            self.planes * self.oh * self.ow
        }

        /// The pooling kernels' arguments after the element count, in order.
        fn args(&self) -> Result<[i32; 8]> {
            let v = [
                self.h,
                self.w,
                self.oh,
                self.ow,
                self.kernel,
                self.stride,
                self.pad,
                usize::from(self.is_max),
            ];
            let mut out = [0i32; 8];
            for (o, &v) in out.iter_mut().zip(&v) {
                *o = i32_of(v, "pooling size")?;
            }
            Ok(out)
        }
    }

    /// Runs `name` (eb_pool_fwd or eb_pool_bwd) over the pooling output: the buffers first, then
    /// the output element count and the geometry.
    fn pool_kernel(
        dev: &CudaDevice,
        name: &str,
        buffers: &[&CudaView<'_, f32>],
        out: &CudaSlice<f32>,
        g: PoolGeom,
    ) -> Result<()> {
        let total = g.out_len();
        let (n, a) = (total as i64, g.args()?);
        let func = KERNELS.kernel(dev, name)?;
        let stream = dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        for buffer in buffers {
            b.arg(*buffer);
        }
        b.arg(out).arg(&n);
        for v in &a {
            b.arg(v);
        }
        // SAFETY: the arguments match the kernels' signatures in cuda/pool.cu; x (and dx) hold
        // planes*h*w elements, y (and dy) planes*oh*ow (the callers' checked shapes).
        unsafe { b.launch(config(total)) }.w()?;
        Ok(())
    }

    pub(super) fn pool_fwd(
        dev: &CudaDevice,
        x: &CudaView<'_, f32>,
        g: PoolGeom,
    ) -> Result<CudaSlice<f32>> {
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<f32>(g.out_len())? };
        pool_kernel(dev, "eb_pool_fwd", &[x], &y, g)?;
        Ok(y)
    }

    /// The kernel adds into dx, so it starts zeroed.
    pub(super) fn pool_bwd(
        dev: &CudaDevice,
        x: &CudaView<'_, f32>,
        y: &CudaView<'_, f32>,
        dy: &CudaView<'_, f32>,
        g: PoolGeom,
    ) -> Result<CudaSlice<f32>> {
        let dx = dev.alloc_zeros::<f32>(g.planes * g.h * g.w)?;
        pool_kernel(dev, "eb_pool_bwd", &[x, y, dy], &dx, g)?;
        Ok(dx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{grad_check, tensor, to_vec, Rng};
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
        crate::test_util::on_thread_counts(|| {
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
        });
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
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(3);
            for &(kind, kernel, stride, pad, h, w) in
                CONFIGS.iter().filter(|c| c.0 == PoolKind::Max)
            {
                let p = Pool2d::new(kind, kernel, stride, pad);
                let dims = (2, 2, h, w);
                let x = rng.distinct(2 * 2 * h * w);
                let err = grad_check(&x, dims, 30, |t| pool2d(t, p));
                assert!(err < 1e-6, "{p:?}: relative error {err}");
            }
        });
    }

    #[test]
    fn avg_pool_gradient_matches_finite_differences() {
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(4);
            for &(kind, kernel, stride, pad, h, w) in
                CONFIGS.iter().filter(|c| c.0 == PoolKind::Avg)
            {
                let p = Pool2d::new(kind, kernel, stride, pad);
                let dims = (2, 2, h, w);
                let x = rng.vec(2 * 2 * h * w);
                let err = grad_check(&x, dims, 40, |t| pool2d(t, p));
                assert!(err < 1e-6, "{p:?}: relative error {err}");
            }
        });
    }

    /// Caffe's max pooling window by window: per output, the index in `x` of its window's
    /// first strict maximum from -FLT_MAX in row-major order (none when no element exceeds it).
    fn reference_argmax<T: Float>(
        x: &[T],
        (h, w): (usize, usize),
        p: Pool2d,
    ) -> Vec<Option<usize>> {
        let (oh, ow) = (
            pool_output_size(h, p.kernel, p.stride, p.pad),
            pool_output_size(w, p.kernel, p.stride, p.pad),
        );
        let mut args = Vec::new();
        for plane in 0..x.len() / (h * w) {
            for ph in 0..oh {
                for pw in 0..ow {
                    let (hs, ws) = (ph * p.stride, pw * p.stride);
                    let (he, we) = (
                        (hs + p.kernel).min(h + p.pad),
                        (ws + p.kernel).min(w + p.pad),
                    );
                    let (mut m, mut arg) = (T::LOWEST, None);
                    for yy in hs.max(p.pad)..he {
                        for xx in ws.max(p.pad)..we {
                            let at = plane * h * w + (yy - p.pad) * w + xx - p.pad;
                            if x[at] > m {
                                (m, arg) = (x[at], Some(at));
                            }
                        }
                    }
                    args.push(arg);
                }
            }
        }
        args
    }

    /// Caffe's max-pool backward as written there: each window's gradient to its argmax.
    fn reference_max_bwd(
        x: &[f64],
        dy: &[f64],
        (_, _, h, w): (usize, usize, usize, usize),
        p: Pool2d,
    ) -> Vec<f64> {
        let mut dx = vec![0.0; x.len()];
        for (arg, &d) in reference_argmax(x, (h, w), p).into_iter().zip(dy) {
            if let Some(at) = arg {
                dx[at] += d;
            }
        }
        dx
    }

    #[test]
    fn max_pool_backward_matches_caffe_with_ties_nan_inf_and_lowest() {
        crate::test_util::on_thread_counts(|| {
            let mut rng = Rng::new(11);
            let mut configs: Vec<_> = CONFIGS.iter().filter(|c| c.0 == PoolKind::Max).collect();
            let more = [
                (PoolKind::Max, 3, 2, 0, 13, 13), // AlexNet
                (PoolKind::Max, 3, 1, 1, 28, 33), // inception pool, rows longer than a vector
                (PoolKind::Max, 3, 2, 0, 9, 12),  // ceil mode, even width
                (PoolKind::Max, 2, 3, 0, 8, 8),   // stride > kernel: skipped inputs
                (PoolKind::Max, 1, 1, 0, 4, 5),
                (PoolKind::Max, 3, 1, 1, 2, 1), // every column crosses a row end
                (PoolKind::Max, 5, 1, 2, 6, 7), // whole-plane column pass, two columns per edge
                (PoolKind::Max, 2, 1, 1, 4, 5), // stride 1, output wider than the input
                (PoolKind::Max, 3, 3, 1, 7, 8), // stride 3 with padding
                (PoolKind::Max, 2, 2, 0, 5, 8), // stride 2, no window crossing a row end
                (PoolKind::Max, 4, 2, 1, 6, 8), // stride 2 with padding
                (PoolKind::Max, 2, 2, 0, 3, 2), // a single output column
                (PoolKind::Max, 3, 1, 0, 6, 9), // stride 1 narrower than the input: padded rows
                (PoolKind::Max, 3, 2, 1, 2, 2), // no window has all three rows inside
            ];
            configs.extend(more.iter());
            for &(kind, kernel, stride, pad, h, w) in configs {
                let p = Pool2d::new(kind, kernel, stride, pad);
                let dims = (2, 3, h, w);
                // Few distinct values, so windows tie often; some NaN, +inf and -FLT_MAX inputs.
                let x: Vec<f64> = (0..2 * 3 * h * w)
                    .map(|_| match rng.next_u64() % 16 {
                        0 => f64::NAN,
                        1 | 2 => f64::MIN,
                        3 => f64::INFINITY,
                        v => (v % 3) as f64,
                    })
                    .collect();
                let y = p.fwd(&x, dims);
                // Integer gradients: sums over overlapping windows are exact in any order.
                let dy: Vec<f64> = (0..y.len())
                    .map(|_| (rng.next_u64() % 7) as f64 - 3.0)
                    .collect();
                let want = reference_max_bwd(&x, &dy, dims, p);
                // Argmax found again from x (the fallback), and kept by the forward (autograd).
                assert_eq!(p.bwd_cpu(&x, &dy, dims), want, "{p:?} on {h}x{w}");
                let v = candle_core::Var::from_tensor(&tensor(&x, dims)).unwrap();
                let out = pool2d(v.as_tensor(), p).unwrap();
                assert_eq!(to_vec(&out), y, "{p:?} on {h}x{w}: forward");
                let dy = tensor(&dy, out.dims4().unwrap());
                let g = (out * dy).unwrap();
                let g = g.sum_all().unwrap().backward().unwrap();
                assert_eq!(
                    to_vec(g.get(&v).unwrap()),
                    want,
                    "{p:?} on {h}x{w}: autograd"
                );
            }
        });
    }

    /// Caffe's max-pool forward in f32 with its argmax (`NO_ARG` where no element of the
    /// window exceeds -FLT_MAX), window by window.
    fn reference_max_arg_f32(x: &[f32], (h, w): (usize, usize), p: Pool2d) -> (Vec<f32>, Vec<u32>) {
        reference_argmax(x, (h, w), p)
            .into_iter()
            .map(|arg| match arg {
                Some(at) => (x[at], (at % (h * w)) as u32),
                None => (f32::MIN, NO_ARG),
            })
            .unzip()
    }

    #[test]
    fn f32_max_pool_argmax_matches_caffe_on_every_row_width() {
        // f32 has paths of its own (NEON on aarch64): rows of every width from 1 to 40, so
        // that each takes whole vectors, a tail or both, with ties, NaN, +inf, -FLT_MAX and
        // both zeros.
        let mut rng = Rng::new(12);
        for (kernel, stride, pad) in [(3, 2, 0), (3, 2, 1), (3, 1, 1), (2, 2, 0)] {
            let p = max(kernel, stride, pad);
            for w in 1..=40 {
                for h in [1, 2, 5, 6] {
                    if p.check(h, w).is_err() {
                        continue;
                    }
                    let x: Vec<f32> = (0..2 * h * w)
                        .map(|_| match rng.next_u64() % 16 {
                            0 => f32::NAN,
                            1 | 2 => f32::MIN,
                            3 => f32::INFINITY,
                            4 => -0.0,
                            v => (v % 3) as f32,
                        })
                        .collect();
                    let (y, arg) = p.max_fwd(&x, (1, 2, h, w));
                    // Without the argmax the same maxima, to the bit (the sign of a zero too).
                    let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
                    let alone = p.max_only_fwd(&x, (1, 2, h, w));
                    assert_eq!(bits(&alone), bits(&y), "{p:?} on {h}x{w}: maxima alone");
                    let (want_y, want_arg) = reference_max_arg_f32(&x, (h, w), p);
                    assert_eq!(arg, want_arg, "{p:?} on {h}x{w}: argmax");
                    let same = |a: f32, b: f32| a == b || (a.is_nan() && b.is_nan());
                    assert!(
                        y.iter().zip(&want_y).all(|(&a, &b)| same(a, b)),
                        "{p:?} on {h}x{w}: {y:?} against {want_y:?}"
                    );
                }
            }
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
