//! Winograd F(2x2, 3x3) for the 3x3, stride 1, pad 1 convolutions (GoogLeNet's conv2/3x3 and
//! every inception 3x3: ~60 % of the net's multiply-adds; AlexNet's conv3-5, two of them in two
//! groups, whose GEMMs run group by group). Each 2x2 output tile is `Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d
//! B)] A` of the 4x4 input tile `d` around it (Lavin & Gray 2016), so a layer is 16 GEMMs, one
//! per tile position ξ, of (O x C)·(C x tiles): 16 multiplies per 4 outputs and input channel
//! instead of 36, 2.25x fewer than im2col's GEMM. The backward is the exact adjoint of the same
//! linear maps:
//! - input gradient: dM = A dy Aᵀ per tile, dV_ξ = U_ξᵀ · dM_ξ, dx = Σ_tiles B dV Bᵀ;
//! - weight gradient: dU_ξ = Σ_tiles dM_ξ · V_ξᵀ, dW = Gᵀ dU G.
//!
//! The transforms' coefficients are 0, ±1 and ½, so the results differ from im2col's only by
//! rounding (the tests compare both). Work is split as in `conv`: one contiguous run of images
//! per rayon thread; the GEMMs take blocks of tiles (whole images side by side for small maps,
//! bands of tile rows for large ones) of about `Tuning::winograd_tiles` columns. With fewer
//! images than threads each image is split over the threads by channels (`fwd_few`).
//!
//! Maps of at least `WINOGRAD_F4_MIN_SIDE` (GoogLeNet's 56x56 and 28x28), and every map when a
//! task has at least `WINOGRAD_F4_MIN_IMAGES_PER_TASK` images, take
//! F(4x4, 3x3) instead: 6x6 input tiles at stride 4, 36 GEMMs, 36 multiplies per 16 outputs (4x
//! fewer than im2col) and tiles expanded 2.25x instead of 4x, for transforms with coefficients
//! up to 8 (f32 error ~10x im2col's; the tests bound it).
//!
//! The 5x5, stride 1, pad 2 convolutions (AlexNet's conv2, GoogLeNet's inception 5x5s) take
//! F(4x4, 5x5): 8x8 input tiles at stride 4, 64 GEMMs, 64 multiplies per 16 outputs (6.25x
//! fewer than im2col), with the points 0, ±1, ±2, ±½, ∞. F(2x2, 5x5) (6x6 input tiles at
//! stride 2, 36 multiplies per 4 outputs, 2.8x fewer; F(4x4, 3x3)'s input transform, its own G
//! and Aᵀ) stays for comparison (`bench_api::ConvPath::Winograd2`): on a Zen 4 VM AlexNet's
//! batch-32 step took 4 % less time with F(4x4, 5x5), GoogLeNet's batch-1 step 1 % less and its
//! batch-32 step the same (performance.md).

use crate::geom::Geom;
use crate::matmul::{gemm, SERIAL};
use crate::tuning::{
    tuning, WINOGRAD_5X5_MIN_IMAGES_PER_THREAD, WINOGRAD_BATCHED_MIN_SIDE,
    WINOGRAD_F4_MIN_IMAGES_PER_TASK, WINOGRAD_F4_MIN_SIDE, WINOGRAD_FEW_MIN_SIDE,
    WINOGRAD_MIN_SIDE, WINOGRAD_TILE_MAJOR_BLOCK,
};
#[cfg(target_arch = "aarch64")]
use crate::util::as_f32_out;
#[cfg(any(target_arch = "aarch64", target_arch = "x86_64"))]
use crate::util::{as_f32, as_f32_mut};
use crate::util::{
    copy_short_raw, deinterleave, interleave, interleave_add, relu_f, sum, sum_partials,
    vec_written_by, zeros, Float, Scratch, SharedPtr,
};
use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::ops::Range;

/// Whether a convolution takes this path: 3x3 or 5x5 "same", stride 1 (`fits`), maps of at
/// least `WINOGRAD_MIN_SIDE` (or `WINOGRAD_BATCHED_MIN_SIDE` with enough images per task,
/// `batched_f4`), and not turned off with EDGEBENCH_WINOGRAD=0 (`Tuning::winograd`;
/// the im2col path, for comparison). With fewer images than threads each image of a 3x3 layer
/// is split over the threads by channels (`fwd_few`), for one group on maps of at least
/// `WINOGRAD_FEW_MIN_SIDE`; a grouped 5x5 layer needs `WINOGRAD_5X5_MIN_IMAGES_PER_THREAD`
/// images per thread, a one-group 5x5 layer takes it at any batch.
pub(crate) fn applies(g: &Geom) -> bool {
    let side = g.h.min(g.w);
    let threads = rayon::current_num_threads();
    let enough_images = if g.kh == 5 {
        g.n >= WINOGRAD_5X5_MIN_IMAGES_PER_THREAD * threads || g.groups == 1
    } else {
        g.n >= threads || splits_images(g)
    };
    let large_enough =
        side >= WINOGRAD_MIN_SIDE || (side >= WINOGRAD_BATCHED_MIN_SIDE && batched_f4(g));
    tuning().winograd && fits(g) && large_enough && enough_images
}

/// Whether a task has enough images for F(4x4, 3x3) on maps of any side and for the Winograd
/// path on maps from `WINOGRAD_BATCHED_MIN_SIDE`.
fn batched_f4(g: &Geom) -> bool {
    g.images_per_task() >= WINOGRAD_F4_MIN_IMAGES_PER_TASK
}

/// Whether the Winograd kernels compute a convolution of this shape at all: 3x3 with pad 1 or
/// 5x5 with pad 2, stride 1, any groups (AlexNet's conv2, conv4 and conv5 have two).
pub(crate) fn fits(g: &Geom) -> bool {
    g.kh == g.kw && (g.kh == 3 || g.kh == 5) && g.pad == g.kh / 2 && g.stride == 1
}

/// Whether output tiles of `m` x `m` (2 or 4) compute this shape.
pub(crate) fn tile_fits(g: &Geom, m: usize) -> bool {
    fits(g) && (m == 2 || m == 4)
}

/// Whether fewer images than threads take `fwd_few`'s split of each image by channels: one
/// group (its runs of output channels read all of V) on maps of at least
/// `WINOGRAD_FEW_MIN_SIDE`.
fn splits_images(g: &Geom) -> bool {
    g.groups == 1 && g.h.min(g.w) >= WINOGRAD_FEW_MIN_SIDE
}

/// Whether `fwd_filtered` and `bwd_both_with` split each image over the threads by channels
/// (`fwd_few`, `bwd_both_few`): fewer images than threads, one group. Any map size: `applies`
/// keeps small maps off the path, the per-layer benches and tests call it directly.
fn few_images(g: &Geom) -> bool {
    g.n < rayon::current_num_threads() && g.groups == 1
}

/// Output tile side for a layer: 4 (F(4x4, 3x3)) on maps of at least `WINOGRAD_F4_MIN_SIDE`
/// or with enough images per task (`batched_f4`), else 2; EDGEBENCH_WINOGRAD_TILE=2 or 4
/// (`Tuning::winograd_tile`) sets it for every 3x3 layer. 5x5 layers take F(4x4, 5x5).
pub(crate) fn tile_size(g: &Geom) -> usize {
    if g.kh == 5 {
        return 4;
    }
    let forced = tuning().winograd_tile;
    let side = g.h.min(g.w);
    forced.unwrap_or(if side >= WINOGRAD_F4_MIN_SIDE || batched_f4(g) {
        4
    } else {
        2
    })
}

fn tiles_target() -> usize {
    tuning().winograd_tiles
}

/// The tiling of one image and how a task's images are cut into GEMM blocks.
#[derive(Clone, Copy)]
struct Tiles {
    /// Output tile side: 2 for F(2x2, 3x3) and F(2x2, 5x5), 4 for F(4x4, 3x3) and F(4x4, 5x5).
    m: usize,
    /// Filter side: 3 or 5.
    r: usize,
    h: usize,
    w: usize,
    /// Tile rows and columns (m x m outputs each).
    th: usize,
    tw: usize,
    /// Images per block and tile rows per block (all rows when a block has several images).
    nb: usize,
    rb: usize,
}

impl Tiles {
    fn new(g: &Geom, per: usize, m: usize) -> Tiles {
        Tiles::with_target(g, per, m, tiles_target())
    }
    /// Blocks of about `target` tiles.
    fn with_target(g: &Geom, per: usize, m: usize, target: usize) -> Tiles {
        let (th, tw) = (g.h.div_ceil(m), g.w.div_ceil(m));
        let per_image = th * tw;
        let (nb, rb) = if per_image >= target {
            (1, (target / tw.max(1)).clamp(1, th.max(1)))
        } else {
            (target.div_ceil(per_image.max(1)).clamp(1, per.max(1)), th)
        };
        Tiles {
            m,
            r: g.kh,
            h: g.h,
            w: g.w,
            th,
            tw,
            nb,
            rb,
        }
    }
    /// Input tile side: m + r - 1.
    fn a(&self) -> usize {
        self.m + self.r - 1
    }
    /// Tile positions: the GEMMs per block.
    fn xi(&self) -> usize {
        self.a() * self.a()
    }
    /// Zero border of the input: r / 2.
    fn pad(&self) -> usize {
        self.r / 2
    }
    /// Groups of m input rows (or columns) past a tile's own that its input tile reaches into:
    /// 1 for F(2x2, 3x3), F(4x4, 3x3) and F(4x4, 5x5), 2 for F(2x2, 5x5).
    fn ext(&self) -> usize {
        (self.a() - 1) / self.m
    }
    /// Most tile columns of a block.
    fn max_cols(&self) -> usize {
        self.nb * self.rb * self.tw
    }
    /// Padded plane of the input gradient: a border of r / 2, rounded up to whole tiles.
    fn padded(&self) -> (usize, usize) {
        (self.m * self.th + self.r - 1, self.m * self.tw + self.r - 1)
    }
    /// The blocks of a task of `nimg` images: (first image, images, tile rows).
    fn blocks(&self, nimg: usize) -> impl Iterator<Item = (usize, usize, Range<usize>)> + '_ {
        (0..nimg).step_by(self.nb).flat_map(move |n0| {
            let nb = self.nb.min(nimg - n0);
            (0..self.th)
                .step_by(self.rb)
                .map(move |r| (n0, nb, r..(r + self.rb).min(self.th)))
        })
    }
}

/// The 1-D transforms of Winograd F(M x M, R x R), whose input tiles are `A` = M + R - 1 wide:
/// Bᵀ (A x A), G (A x R), Aᵀ (M x A) and their adjoints, each applied element by element to whole
/// vectors (one element per tile of a band). The transforms below apply them along the rows and
/// then down the columns of every tile, so a tile size states only its matrices, written out to
/// use their structure (zeros, ±1, shared sums).
trait Tile<const M: usize, const A: usize, const R: usize> {
    /// `out[k] = Σ_l Bᵀ[k][l] d[l]`.
    fn bt<T: Float>(d: [&[T]; A], out: [&mut [T]; A]);
    /// `out[r] = Σ_k Bᵀ[k][r] d[k]` (the adjoint of `bt`).
    fn b<T: Float>(d: [&[T]; A], out: [&mut [T]; A]);
    /// `out[a] = Σ_i Aᵀ[a][i] m[i]`.
    fn at<T: Float>(m: [&[T]; A], out: [&mut [T]; M]);
    /// `out[i] = Σ_a A[i][a] p[a]` (the adjoint of `at`).
    fn a<T: Float>(p: [&[T]; M], out: [&mut [T]; A]);
    /// Row `j` of `a`: `out = Σ_b A[j][b] p[b]`.
    fn a_row<T: Float>(p: [&[T]; M], j: usize, out: &mut [T]);
    /// `G v` of one row or column of an R x R filter.
    fn g<T: Float>(v: [T; R]) -> [T; A];
    /// `Gᵀ v` (the adjoint of `g`).
    fn gt<T: Float>(v: [T; A]) -> [T; R];
}

/// `[f(0), .., f(K - 1)]`, always inlined: `std::array::from_fn` stayed an outlined call in
/// several transforms (12 call sites each in the input and output transforms on aarch64).
#[inline(always)]
fn array_of<T, const K: usize>(mut f: impl FnMut(usize) -> T) -> [T; K] {
    let mut out = [const { MaybeUninit::<T>::uninit() }; K];
    for (i, e) in out.iter_mut().enumerate() {
        e.write(f(i));
    }
    // SAFETY: all K elements were written just above, and `[MaybeUninit<T>; K]` has the
    // layout of `[T; K]`; `out` itself drops nothing.
    unsafe { std::mem::transmute_copy(&out) }
}

/// `K` disjoint `len`-long windows of `s` at increasing offsets `at`.
#[inline(always)]
fn windows_at<T, const K: usize>(s: &mut [T], at: [usize; K], len: usize) -> [&mut [T]; K] {
    let mut rest = &mut s[at[0]..];
    let mut from = at[0];
    array_of(|i| {
        let next = if i + 1 < K { at[i + 1] } else { from + len };
        let (w, r) = std::mem::take(&mut rest).split_at_mut(next - from);
        rest = r;
        from = next;
        &mut w[..len]
    })
}

/// `K` consecutive `len`-long windows of `s` from its start.
#[inline(always)]
fn windows_mut<T, const K: usize>(s: &mut [T], len: usize) -> [&mut [T]; K] {
    let mut rest = s;
    array_of(|_| {
        let (w, r) = std::mem::take(&mut rest).split_at_mut(len);
        rest = r;
        w
    })
}

/// `out[M·j + q] = runs[q][j]`, the inverse of `deinterleave`: one output row from its phases;
/// a last, partial tile takes its columns from the runs' elements after the full tiles.
#[inline(always)]
fn interleave_row<T: Float, const M: usize>(runs: [&[T]; M], out: &mut [MaybeUninit<T>]) {
    let full = interleave::<T, M>(runs, out);
    for (q, e) in out[M * full..].iter_mut().enumerate() {
        e.write(runs[q][full]);
    }
}

/// Elements per block of `map_lanes`: two NEON or SSE vectors of f32.
const LANES: usize = 8;

/// An element that `map_lanes` writes: a float, or uninitialised room for one.
trait Slot<T>: Sized {
    fn hold(v: T) -> Self;
}

impl<T: Float> Slot<T> for T {
    #[inline(always)]
    fn hold(v: T) -> T {
        v
    }
}

impl<T: Float> Slot<T> for MaybeUninit<T> {
    #[inline(always)]
    fn hold(v: T) -> MaybeUninit<T> {
        MaybeUninit::new(v)
    }
}

/// `out[o][k] = f([ins[0][k], .., ins[I - 1][k]])[o]` for every k below `out[0].len()`, in
/// blocks of `LANES` elements whose loads all come before their stores. The compiler cannot
/// tell that the slices of an array do not overlap: the plain loop over k ran one element at
/// a time on aarch64 (F(2x2)'s Bᵀ: 18 instructions per element), where a block's lanes become
/// vector operations without run-time overlap checks. The last, partial block is a whole one
/// ending at the last element (recomputing a few), and runs of 5 to 7 (a row pass over 7
/// tiles) two blocks of 4, runs of 4 (F(4x4) on a 14x14 map) one: most rows here are short.
#[inline(always)]
fn map_lanes<T: Float, S: Slot<T>, const I: usize, const O: usize>(
    ins: [&[T]; I],
    out: [&mut [S]; O],
    f: impl Fn([T; I]) -> [T; O],
) {
    let n = out[0].len();
    // Cut in place: `array::map` here stayed an outlined call (`try_map`) per transform row,
    // 53 M instructions of GoogLeNet's batch-8 step on aarch64.
    let (mut ins, mut out) = (ins, out);
    for s in &mut ins {
        *s = &s[..n];
    }
    for s in &mut out {
        *s = &mut std::mem::take(s)[..n];
    }
    if n < 4 {
        for k in 0..n {
            let r = f(array_of(|i| ins[i][k]));
            for o in 0..O {
                out[o][k] = S::hold(r[o]);
            }
        }
    } else if n < LANES {
        lanes_at::<T, S, 4, I, O>(&ins, &mut out, 0, &f);
        if n > 4 {
            lanes_at::<T, S, 4, I, O>(&ins, &mut out, n - 4, &f);
        }
    } else {
        {
            let chunks = ins.map(|s| s.as_chunks::<LANES>().0);
            let out = out.each_mut().map(|s| s.as_chunks_mut::<LANES>().0);
            for c in 0..n / LANES {
                let y = lanes(array_of(|i| chunks[i][c]), &f);
                for o in 0..O {
                    out[o][c] = array_of(|l| S::hold(y[o][l]));
                }
            }
        }
        if !n.is_multiple_of(LANES) {
            lanes_at::<T, S, LANES, I, O>(&ins, &mut out, n - LANES, &f);
        }
    }
}

/// `f` on each of `L` lanes.
#[inline(always)]
fn lanes<T: Float, const L: usize, const I: usize, const O: usize>(
    x: [[T; L]; I],
    f: &impl Fn([T; I]) -> [T; O],
) -> [[T; L]; O] {
    let mut y = [[T::ZERO; L]; O];
    for l in 0..L {
        let r = f(array_of(|i| x[i][l]));
        for o in 0..O {
            y[o][l] = r[o];
        }
    }
    y
}

/// `map_lanes`' block of `L` elements from element `at`.
#[inline(always)]
fn lanes_at<T: Float, S: Slot<T>, const L: usize, const I: usize, const O: usize>(
    ins: &[&[T]; I],
    out: &mut [&mut [S]; O],
    at: usize,
    f: &impl Fn([T; I]) -> [T; O],
) {
    let x = array_of(|i| {
        let block: &[T; L] = ins[i][at..at + L].try_into().expect("L elements");
        *block
    });
    let y = lanes(x, f);
    for o in 0..O {
        let block: &mut [S; L] = (&mut out[o][at..at + L]).try_into().expect("L elements");
        *block = array_of(|l| S::hold(y[o][l]));
    }
}

/// The filters of a block (`K` taps each, filter-major) tap by tap: `rows[k][f]` = tap k of
/// filter f. Four filters at a time, so each row takes four taps per store.
fn filters_to_taps<T: Float, const K: usize>(filters: &[T], taps: &mut [T]) {
    let nf = filters.len() / K;
    #[cfg(target_arch = "aarch64")]
    let quads_done = match (as_f32(filters), as_f32_mut(&mut *taps)) {
        (Some(f), Some(t)) => {
            neon::filters_to_taps::<K>(&f[..nf / 4 * 4 * K], &mut t[..K * nf], nf);
            true
        }
        _ => false,
    };
    #[cfg(not(target_arch = "aarch64"))]
    let quads_done = false;
    let rows = windows_mut::<T, K>(taps, nf);
    let (filters, _) = filters.as_chunks::<K>();
    let (quads, rest) = filters.as_chunks::<4>();
    let rows = rows.map(|r| r.as_chunks_mut::<4>());
    if !quads_done {
        for (c, q) in quads.iter().enumerate() {
            for k in 0..K {
                rows[k].0[c] = [q[0][k], q[1][k], q[2][k], q[3][k]];
            }
        }
    }
    for (f, g) in rest.iter().enumerate() {
        for k in 0..K {
            rows[k].1[f] = g[k];
        }
    }
}

/// The inverse of `filters_to_taps`: `out[f·K + k]` = `taps[k·nf + f]`, initialising `out`.
fn taps_to_filters<T: Float, const K: usize>(taps: &[T], out: &mut [MaybeUninit<T>]) {
    let nf = out.len() / K;
    #[cfg(target_arch = "aarch64")]
    let quads_done = match (as_f32(taps), as_f32_out(&mut *out)) {
        (Some(t), Some(o)) => {
            neon::taps_to_filters::<K>(&t[..K * nf], &mut o[..nf / 4 * 4 * K], nf);
            true
        }
        _ => false,
    };
    #[cfg(not(target_arch = "aarch64"))]
    let quads_done = false;
    let rows: [&[T]; K] = array_of(|k| &taps[k * nf..(k + 1) * nf]);
    let rows = rows.map(|r| r.as_chunks::<4>());
    let (filters, _) = out.as_chunks_mut::<K>();
    let (quads, rest) = filters.as_chunks_mut::<4>();
    if !quads_done {
        for (c, q) in quads.iter_mut().enumerate() {
            for k in 0..K {
                let v = rows[k].0[c];
                for l in 0..4 {
                    q[l][k].write(v[l]);
                }
            }
        }
    }
    for (f, g) in rest.iter_mut().enumerate() {
        for k in 0..K {
            g[k].write(rows[k].1[f]);
        }
    }
}

/// U[ξ][o][c] = (G g Gᵀ)[ξ] for each filter g = w[o][c] (R x R), ξ = A·row + column, laid out
/// ξ-major as the GEMMs take them: u[ξ·oc + filter]. Each task transforms a block of filters,
/// the last product writing straight into the block's stretch of every row of U, which is never
/// zeroed: every element is written once. (A gather of U from per-filter tiles would take a
/// strided load per element; a zeroed block per task, copied into a zeroed U, would move about
/// 40 MB of memset and 20 MB of memcpy per batch-1 GoogLeNet step on aarch64.)
fn filter_transform<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    w: &[T],
    oc: usize,
) -> Vec<T> {
    const FILTERS_PER_BLOCK: usize = 256;
    let rr = R * R;
    let write = |u: &mut [MaybeUninit<T>]| {
        let u = SharedPtr(u.as_mut_ptr());
        w[..rr * oc]
            .par_chunks(rr * FILTERS_PER_BLOCK)
            .enumerate()
            // Each worker's scratch (the taps and G g of a block).
            .for_each_init(
                || (Vec::new(), Vec::new()),
                |(taps, gg): &mut (Vec<T>, Vec<T>), (b, gs)| {
                    let nf = gs.len() / rr;
                    // In f32 on aarch64, whole quads of filters in NEON registers.
                    #[cfg(target_arch = "aarch64")]
                    let in_registers = neon::has_transforms(M, R);
                    #[cfg(target_arch = "aarch64")]
                    if let (Some(gs), true) = (as_f32(gs), in_registers && nf.is_multiple_of(4)) {
                        // SAFETY: T is f32 (`gs` is), and the block's stretch of every row of U
                        // is this task's (as below).
                        let first = unsafe { u.at(b * FILTERS_PER_BLOCK) }.cast::<f32>();
                        // SAFETY: nf floats from first + ξ·oc lie in row ξ of U, this block's.
                        unsafe {
                            match (M, R) {
                                (2, 3) => {
                                    neon::filter_transform::<3, 9, 4>(gs, first, oc, neon::g_f2)
                                }
                                (4, 3) => {
                                    neon::filter_transform::<3, 9, 6>(gs, first, oc, neon::g_f4)
                                }
                                (4, 5) => {
                                    neon::filter_transform::<5, 25, 8>(gs, first, oc, neon::g_f4r5)
                                }
                                _ => unreachable!("no NEON transforms for F({M}, {R})"),
                            }
                        }
                        return;
                    }
                    // The block's filters tap by tap (taps[k·nf + f]: tap k of filter f), so that
                    // both products with G run along the block's filters as vectors.
                    taps.resize(rr * nf, T::ZERO);
                    match R {
                        3 => filters_to_taps::<T, 9>(gs, taps),
                        5 => filters_to_taps::<T, 25>(gs, taps),
                        _ => unreachable!("Winograd filters are 3x3 or 5x5"),
                    }
                    // G g (A x R), column by column: gg[(i·R + j)·nf + f].
                    gg.resize(A * R * nf, T::ZERO);
                    for j in 0..R {
                        let col = array_of(|l| &taps[(l * R + j) * nf..][..nf]);
                        let at_i = array_of(|i| (i * R + j) * nf);
                        map_lanes(col, windows_at(gg, at_i, nf), W::g);
                    }
                    // Each row of G g times Gᵀ: u[(i·A + l)·oc + filter].
                    for i in 0..A {
                        let row = array_of(|j| &gg[(i * R + j) * nf..][..nf]);
                        // SAFETY: this block's filters in row ξ = i·A + l of U: inside U (oc
                        // filters per row), and written by this task only.
                        let out = array_of(|l| unsafe {
                            let first = (i * A + l) * oc + b * FILTERS_PER_BLOCK;
                            std::slice::from_raw_parts_mut(u.at(first), nf)
                        });
                        map_lanes(row, out, W::g);
                    }
                },
            );
    };
    // SAFETY: the blocks cover all oc filters, and each writes its filters' elements of every
    // row of U (above).
    unsafe { vec_written_by(A * A * oc, write) }
}

/// dW[o][c] = Gᵀ dU[o][c] G (the adjoint of `filter_transform`), written into `dw` (R·R
/// floats per filter). dU holds each tile position's filters contiguous (ξ-major), so both
/// products run along a block of filters as vectors; only the last step, a filter's R·R values
/// into its row of dW, goes filter by filter (filter by filter throughout, each of dU's 16 or
/// 36 elements would be a strided load).
fn filter_adjoint<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    du: &[T],
    oc: usize,
    dw: &mut [MaybeUninit<T>],
) {
    const FILTERS_PER_BLOCK: usize = 128;
    let rr = R * R;
    dw[..rr * oc]
        .par_chunks_mut(rr * FILTERS_PER_BLOCK)
        .enumerate()
        // Each worker's scratch (Gᵀ dU and Gᵀ dU G of a block), reused from block to block.
        .for_each_init(
            || (Vec::new(), Vec::new()),
            |(t, e): &mut (Vec<T>, Vec<T>), (blk, out)| {
                let nf = out.len() / rr;
                let f0 = blk * FILTERS_PER_BLOCK;
                // In f32 on aarch64, whole quads of filters in NEON registers.
                #[cfg(target_arch = "aarch64")]
                let in_registers = neon::has_transforms(M, R);
                #[cfg(target_arch = "aarch64")]
                if let (Some(du), Some(out), true) = (
                    as_f32(du),
                    as_f32_out(&mut *out),
                    in_registers && nf.is_multiple_of(4),
                ) {
                    let first = du[f0..].as_ptr();
                    // SAFETY: nf floats from first + ξ·oc lie in row ξ of dU (ξ < A·A).
                    unsafe {
                        match (M, R) {
                            (2, 3) => neon::filter_adjoint::<3, 9, 4>(first, oc, out, neon::gt_f2),
                            (4, 3) => neon::filter_adjoint::<3, 9, 6>(first, oc, out, neon::gt_f4),
                            (4, 5) => {
                                neon::filter_adjoint::<5, 25, 8>(first, oc, out, neon::gt_f4r5)
                            }
                            _ => unreachable!("no NEON transforms for F({M}, {R})"),
                        }
                    }
                    return;
                }
                // Gᵀ dU (R x A), column by column: t[(k·A + l)·nf + f] for every filter of the block.
                t.resize(R * A * nf, T::ZERO);
                for l in 0..A {
                    let col = array_of(|i| &du[(i * A + l) * oc + f0..][..nf]);
                    let at_k = array_of(|k| (k * A + l) * nf);
                    map_lanes(col, windows_at(t, at_k, nf), W::gt);
                }
                // (Gᵀ dU) G (R x R), row by row: e[(k·R + j)·nf + f].
                e.resize(rr * nf, T::ZERO);
                for k in 0..R {
                    let row = array_of(|l| &t[(k * A + l) * nf..][..nf]);
                    let at_j = array_of(|j| (k * R + j) * nf);
                    map_lanes(row, windows_at(e, at_j, nf), W::gt);
                }
                match R {
                    3 => taps_to_filters::<T, 9>(e, out),
                    5 => taps_to_filters::<T, 25>(e, out),
                    _ => unreachable!("Winograd filters are 3x3 or 5x5"),
                }
            },
        );
}

/// Per-task scratch of the transforms. The tile arithmetic runs over whole bands (all tiles of
/// an image's tile rows in a block, `n` = rows·tw of them) as long vectors: GoogLeNet's 14x14
/// and 7x7 maps have only 7 and 4 tiles per row, too few for one AVX-512 vector. Only the
/// (de)interleaving of image rows goes row by row.
struct Rows<T> {
    /// Zero-bordered copy of one input row.
    line: Vec<T>,
    /// A row's M phases (or, off aarch64, M runs being interleaved), `tw + ext` each.
    ph: Vec<T>,
    /// Band-long vectors: the row pass of the input transform (M·A runs of (rows + ext)·tw),
    /// or up to A·(A + 1) of n for the other transforms.
    v: Vec<T>,
    /// One element per tile row of a band (the input adjoint's first tiles, kept aside).
    #[cfg(target_arch = "aarch64")]
    firsts: Vec<T>,
}

impl<T: Float> Rows<T> {
    fn new(t: &Tiles) -> Rows<T> {
        let n = (t.rb + t.ext()) * t.tw;
        // The input adjoint's A·A + A runs are the most (F(2x2, 3x3): 20, 6x6 tiles: 42, 8x8: 72).
        let a = t.a();
        let phases = t.m * (t.tw + t.ext());
        Rows {
            line: vec![T::ZERO; phases],
            ph: vec![T::ZERO; phases],
            v: vec![T::ZERO; a * (a + 1) * n],
            #[cfg(target_arch = "aarch64")]
            firsts: vec![T::ZERO; t.rb],
        }
    }
}

/// Where a transform's tiles lie in a buffer: tile j of channel c at tile position ξ is element
/// `ξ·xi + c·ch + at + j`. The GEMMs of a task take ξ-major blocks (`ch` = the band's tile
/// count, `xi` = channels · that); an image split over the threads by channels takes
/// channel-major ones (`xi` = the tile count, `ch` = ξ · that), so each run of channels is one
/// contiguous slice.
#[derive(Clone, Copy)]
struct Strides {
    xi: usize,
    ch: usize,
    at: usize,
}

impl Strides {
    /// ξ-major: `channels` rows of `ld` tiles per tile position, starting at tile `at`.
    fn xi_major(channels: usize, ld: usize, at: usize) -> Strides {
        Strides {
            xi: channels * ld,
            ch: ld,
            at,
        }
    }
}

/// V[ξ][c][(th - rows.start)·tw + tw'] = (Bᵀ d B)[ξ] of one image's channels `x` (C, h, w), for
/// tile rows `rows`, placed in `v` by `to`.
fn input_transform<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    x: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    v: &mut [T],
    to: Strides,
    s: &mut Rows<T>,
) {
    debug_assert_eq!((t.m, t.r), (M, R));
    let (h, w, tw) = (t.h, t.w, t.tw);
    #[cfg(target_arch = "aarch64")]
    if neon::has_transforms(M, R) && tw >= 4 && s.v.len() >= (M * rows.len() + A - M) * (M * tw + M)
    {
        if let (Some(x), Some(v), Some(band)) =
            (as_f32(x), as_f32_mut(&mut *v), as_f32_mut(&mut s.v))
        {
            let c = neon::lanes([4.0, 5.0, 2.0, 0.0]);
            let shape = (h, w, tw);
            return match (M, R) {
                (4, 3) => neon::input_transform::<4, 6>(x, shape, rows, v, to, band, |d| {
                    neon::bt_f4(d, c)
                }),
                (4, 5) => neon::input_transform::<4, 8>(x, shape, rows, v, to, band, neon::bt_f4r5),
                (2, 3) => neon::input_transform::<2, 4>(x, shape, rows, v, to, band, neon::bt_f2),
                _ => unreachable!("no NEON transforms for F({M}, {R})"),
            };
        }
    }
    let (pad, ext) = (t.pad(), t.ext());
    let n = rows.len() * tw;
    // Padded rows M·start .. M·end + A - M by phase (p mod M): tile row i takes the M rows of
    // group i and the first A - M of the next `ext` groups, so each phase is read at offsets
    // 0, tw, .. ext·tw.
    let groups = rows.len() + ext;
    let run = groups * tw;
    let slot = |q: usize, k: usize| (q * A + k) * run;
    for (c, plane) in x.chunks_exact(h * w).enumerate() {
        // Bᵀ along each padded row p (input row p - pad), A values per tile.
        for pr in 0..M * groups {
            let p = M * rows.start + pr;
            let base = (pr / M) * tw;
            let at_k = |k: usize| slot(pr % M, k) + base;
            if p < pad || p >= h + pad {
                for k in 0..A {
                    s.v[at_k(k)..at_k(k) + tw].fill(T::ZERO);
                }
                continue;
            }
            // line[..pad] and line[w + pad..] are the zero border, never written.
            let row = p - pad;
            s.line[pad..pad + w].copy_from_slice(&plane[row * w..(row + 1) * w]);
            deinterleave(&s.line, windows_mut::<T, M>(&mut s.ph, tw + ext));
            let d = array_of(|l| &s.ph[(l % M) * (tw + ext) + l / M..][..tw]);
            W::bt(d, windows_at(&mut s.v, array_of(at_k), tw));
        }
        // Bᵀ down the columns, for every tile of the band at once.
        let off = c * to.ch + to.at;
        for k in 0..A {
            let d = array_of(|l| &s.v[slot(l % M, k) + (l / M) * tw..][..n]);
            let at_i = array_of(|i| (i * A + k) * to.xi + off);
            W::bt(d, windows_at(v, at_i, n));
        }
    }
}

/// One image's output (O, h, w) from M[ξ][o][at + ...] (tile rows `rows`): Aᵀ M A, plus the
/// bias, ReLU'd when `relu`.
#[allow(clippy::too_many_arguments)]
fn output_transform<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    m: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    y: &mut [MaybeUninit<T>],
    bias: &[T],
    relu: bool,
    s: &mut Rows<T>,
) {
    debug_assert_eq!(t.m, M);
    let (h, w, tw) = (t.h, t.w, t.tw);
    #[cfg(target_arch = "aarch64")]
    if neon::has_transforms(M, R) && tw >= 4 {
        if let (Some(m), Some(y), Some(bias)) = (as_f32(m), as_f32_out(&mut *y), as_f32(bias)) {
            let (shape, ld_at) = ((h, w, tw), (ld, at));
            let c = neon::lanes([2.0, 4.0, 8.0, 0.0]);
            return match (M, R) {
                (4, 3) => {
                    neon::output_transform::<4, 6>(m, shape, rows, ld_at, y, bias, relu, |d| {
                        neon::at_f4(d, c)
                    })
                }
                (4, 5) => neon::output_transform::<4, 8>(
                    m,
                    shape,
                    rows,
                    ld_at,
                    y,
                    bias,
                    relu,
                    neon::at_f4r5,
                ),
                (2, 3) => neon::output_transform::<2, 4>(
                    m,
                    shape,
                    rows,
                    ld_at,
                    y,
                    bias,
                    relu,
                    neon::at_f2,
                ),
                _ => unreachable!("no NEON transforms for F({M}, {R})"),
            };
        }
    }
    let n = rows.len() * tw;
    let xi_stride = bias.len() * ld;
    for (o, (plane, &b)) in y.chunks_exact_mut(h * w).zip(bias).enumerate() {
        let mv = |xi: usize| &m[xi * xi_stride + o * ld + at..][..n];
        // sa[a][j] = (Aᵀ M)[a][j] (M·A vectors, a-major; each M vector read once), then each
        // row a of Y = sa A.
        let (sa, ys) = s.v[..(M * A + M) * n].split_at_mut(M * A * n);
        for j in 0..A {
            let mj = array_of(|i| mv(i * A + j));
            let at_a = array_of(|a| (a * A + j) * n);
            W::at(mj, windows_at(sa, at_a, n));
        }
        for a in 0..M {
            let row = &sa[a * A * n..(a + 1) * A * n];
            let sj = array_of(|j| &row[j * n..(j + 1) * n]);
            let mut yb = windows_mut::<T, M>(ys, n);
            W::at(sj, yb.each_mut().map(|v| &mut **v));
            // One loop per run and per activation, so that each is a plain vector loop.
            for v in yb.iter_mut() {
                if relu {
                    v.iter_mut().for_each(|e| *e = relu_f(*e + b));
                } else {
                    v.iter_mut().for_each(|e| *e += b);
                }
            }
            for (i, th) in rows.clone().enumerate() {
                let r = M * th + a;
                if r >= h {
                    continue;
                }
                let tiles = array_of(|q| &yb[q][i * tw..(i + 1) * tw]);
                interleave_row::<T, M>(tiles, &mut plane[r * w..(r + 1) * w]);
            }
        }
    }
}

/// dM[ξ][o][...] = (A dy Aᵀ)[ξ] per tile of one image's output gradient `dy` (O, h, w), tile
/// rows `rows` (outputs past the edge count as zero), placed in `dm` by `to`.
fn output_adjoint<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    dy: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    dm: &mut [T],
    to: Strides,
    s: &mut Rows<T>,
) {
    debug_assert_eq!(t.m, M);
    let (h, w, tw) = (t.h, t.w, t.tw);
    #[cfg(target_arch = "aarch64")]
    if neon::has_transforms(M, R) && tw >= 4 {
        if let (Some(dy), Some(dm)) = (as_f32(dy), as_f32_mut(&mut *dm)) {
            let c = neon::lanes([2.0, 4.0, 8.0, 0.0]);
            return match (M, R) {
                (4, 3) => {
                    neon::output_adjoint::<4, 6>(dy, (h, w, tw), rows, dm, to, |p| neon::a_f4(p, c))
                }
                (4, 5) => neon::output_adjoint::<4, 8>(dy, (h, w, tw), rows, dm, to, neon::a_f4r5),
                (2, 3) => neon::output_adjoint::<2, 4>(dy, (h, w, tw), rows, dm, to, neon::a_f2),
                _ => unreachable!("no NEON transforms for F({M}, {R})"),
            };
        }
    }
    let n = rows.len() * tw;
    let full = w / M;
    for (o, plane) in dy.chunks_exact(h * w).enumerate() {
        // p[a][b]: element b of each tile's row a (M·M vectors, a-major), then r[a] per column j.
        let (p, r) = s.v[..(M * M + M) * n].split_at_mut(M * M * n);
        for (i, th) in rows.clone().enumerate() {
            for a in 0..M {
                let row = M * th + a;
                let at_b = array_of(|b| (a * M + b) * n + i * tw);
                let mut q = windows_at::<T, M>(p, at_b, tw);
                if row >= h {
                    for q in q {
                        q.fill(T::ZERO);
                    }
                    continue;
                }
                let src = &plane[row * w..(row + 1) * w];
                deinterleave(src, q.each_mut().map(|q| &mut **q));
                if full < tw {
                    for (b, q) in q.iter_mut().enumerate() {
                        q[full] = src.get(M * full + b).copied().unwrap_or(T::ZERO);
                    }
                }
            }
        }
        let off = o * to.ch + to.at;
        for j in 0..A {
            // r[a] = (dy Aᵀ)[a][j] for the M rows a.
            for a in 0..M {
                let pa = array_of(|b| &p[(a * M + b) * n..][..n]);
                W::a_row(pa, j, &mut r[a * n..(a + 1) * n]);
            }
            let ra = array_of(|a| &r[a * n..(a + 1) * n]);
            let at_i = array_of(|i| (i * A + j) * to.xi + off);
            W::a(ra, windows_at(dm, at_i, n));
        }
    }
}

/// acc (C padded planes of one image's input gradient) += Σ_tiles B dV Bᵀ, from
/// dV[ξ][c][at + ...] for tile rows `rows`.
fn input_adjoint<T: Float, const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>(
    dv: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    acc: &mut [T],
    s: &mut Rows<T>,
) {
    debug_assert_eq!((t.m, t.r), (M, R));
    let tw = t.tw;
    #[cfg(target_arch = "aarch64")]
    if neon::has_transforms(M, R) && tw >= 4 {
        if let (Some(dv), Some(acc)) = (as_f32(dv), as_f32_mut(&mut *acc)) {
            let (hp, wp) = t.padded();
            let shape = (hp, wp, tw);
            return match (M, R) {
                (4, 3) => {
                    let c = neon::lanes([4.0, 5.0, 2.0, 0.0]);
                    neon::input_adjoint::<4, 6>(dv, shape, rows, (ld, at), acc, |d| {
                        neon::b_f4(d, c)
                    })
                }
                (4, 5) => neon::input_adjoint::<4, 8>(dv, shape, rows, (ld, at), acc, neon::b_f4r5),
                (2, 3) => neon::input_adjoint::<2, 4>(dv, shape, rows, (ld, at), acc, neon::b_f2),
                _ => unreachable!("no NEON transforms for F({M}, {R})"),
            };
        }
    }
    #[cfg(not(target_arch = "aarch64"))]
    let ext = t.ext();
    let n = rows.len() * tw;
    let (hp, wp) = t.padded();
    let channels = acc.len() / (hp * wp);
    let xi_stride = channels * ld;
    for (c, plane) in acc.chunks_exact_mut(hp * wp).enumerate() {
        let dv = |xi: usize| &dv[xi * xi_stride + c * ld + at..][..n];
        // u[r][l] = (B dV)[r][l] over the band (r-major), then c[r][j] = (u Bᵀ)[r][j].
        let (u, cs) = s.v[..(A * A + A) * n].split_at_mut(A * A * n);
        for l in 0..A {
            let d = array_of(|k| dv(k * A + l));
            let at_r = array_of(|r| (r * A + l) * n);
            W::b(d, windows_at(u, at_r, n));
        }
        for r in 0..A {
            let ur = array_of(|l| &u[(r * A + l) * n..][..n]);
            W::b(ur, windows_mut::<T, A>(cs, n));
            // Column j >= M of tile tw' is column j - M of tile tw' + 1 (when A - M <= M, every
            // tile but F(2x2, 5x5)'s): added there first, over the whole band as one loop that
            // vectorises (the first tile of each tile row, which took the previous row's last
            // tile, put back after), where adding each into the row took a strided scalar add
            // per element.
            #[cfg(target_arch = "aarch64")]
            let overlap_in_next_tile = A - M <= M;
            #[cfg(target_arch = "aarch64")]
            if overlap_in_next_tile {
                for j in M..A {
                    let (head, tail) = cs.split_at_mut(j * n);
                    let (dst, src) = (&mut head[(j - M) * n..][..n], &tail[..n]);
                    let firsts = &mut s.firsts[..rows.len()];
                    for (i, f) in firsts.iter_mut().enumerate() {
                        *f = dst[i * tw];
                    }
                    for (d, &s) in dst[1..].iter_mut().zip(&src[..n - 1]) {
                        *d += s;
                    }
                    for (i, &f) in firsts.iter().enumerate() {
                        dst[i * tw] = f;
                    }
                }
            }
            let cr: [&[T]; A] = array_of(|j| &cs[j * n..(j + 1) * n]);
            // Tile tw' covers padded columns M·tw' .. M·tw' + A: its column j goes to element
            // M·tw' + j of the row (the first M to its own group, the other A - M to the next
            // `ext` groups).
            #[cfg(not(target_arch = "aarch64"))]
            let full = wp / M;
            for (i, th) in rows.clone().enumerate() {
                let tile = |j: usize| &cr[j][i * tw..(i + 1) * tw];
                let row = &mut plane[(M * th + r) * wp..(M * th + r + 1) * wp];
                // On aarch64 the first M columns are added phase by phase straight from the
                // tiles and the others one by one: through phase runs (below) each run took a
                // memcpy call per tile row, 35 M instructions of GoogLeNet's batch-8 step in
                // libc.
                #[cfg(target_arch = "aarch64")]
                {
                    interleave_add::<T, M>(array_of(tile), &mut row[..M * tw]);
                    for j in M..A {
                        if overlap_in_next_tile {
                            // The last tile's, which no next tile took.
                            row[M * tw + j - M] += tile(j)[tw - 1];
                        } else {
                            for (e, &v) in row[j..].iter_mut().step_by(M).zip(tile(j)) {
                                *e += v;
                            }
                        }
                    }
                }
                // Elsewhere the columns are copied and added into M phase runs, which are then
                // interleaved into the row: on x86-64 the direct adds made GoogLeNet's batch-32
                // step about 1 % slower (2-core EPYC VM, five of six alternating rounds).
                #[cfg(not(target_arch = "aarch64"))]
                {
                    let mut ph = windows_mut::<T, M>(&mut s.ph, tw + ext);
                    for (q, run) in ph.iter_mut().enumerate() {
                        run[..tw].copy_from_slice(tile(q));
                        run[tw..].fill(T::ZERO);
                    }
                    for j in M..A {
                        let run = &mut ph[j % M][j / M..];
                        for (e, &v) in run.iter_mut().zip(tile(j)) {
                            *e += v;
                        }
                    }
                    interleave_add::<T, M>(ph.each_ref().map(|run| &run[..full]), row);
                    for (e, run) in row[M * full..].iter_mut().zip(&ph) {
                        *e += run[full];
                    }
                }
            }
        }
    }
}

/// Per-task buffers: the transformed input or gradient and the GEMM's output.
struct Task<T: Float> {
    a: Scratch<T>,
    b: Scratch<T>,
    rows: Rows<T>,
}

impl<T: Float> Task<T> {
    fn new(t: &Tiles, a_channels: usize, b_channels: usize) -> Task<T> {
        Task {
            a: Scratch::new(t.xi() * a_channels * t.max_cols()),
            b: Scratch::new(t.xi() * b_channels * t.max_cols()),
            rows: Rows::new(t),
        }
    }
}

/// The `count` GEMMs dst_ξ (m, n) [+]= lhs_ξ (m, k) · rhs_ξ (k, n), each operand ξ-major.
#[allow(clippy::too_many_arguments)]
#[track_caller]
fn gemms<T: Float>(
    count: usize,
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    (lhs_xi, rhs_xi, dst_xi): (usize, usize, usize),
) {
    for xi in 0..count {
        gemm(
            (m, n, k),
            &mut dst[xi * dst_xi..],
            accumulate,
            &lhs[xi * lhs_xi..],
            lhs_s,
            &rhs[xi * rhs_xi..],
            rhs_s,
            SERIAL,
        );
    }
}

/// Output channels per GEMM chunk of the forward: `xi` x chunk x `ld` outputs in about
/// `Tuning::winograd_chunk_kb` KiB (`WINOGRAD_CHUNK_KB` by default, half of a 2 MB L2).
fn out_chunk(ld: usize, o: usize, xi: usize) -> usize {
    let kb = tuning().winograd_chunk_kb;
    let per_channel = xi * ld * 4;
    (kb * 1024 / per_channel.max(1))
        .next_multiple_of(8)
        .clamp(8, o.max(8))
}

/// dx of whole images (C planes each) <- the interiors of their padded planes in `acc`.
fn copy_interiors<T: Float>(
    acc: &[T],
    dx: &mut [MaybeUninit<T>],
    g: &Geom,
    (hp, wp): (usize, usize),
) {
    let pad = g.pad;
    for (dst, src) in dx
        .chunks_exact_mut(g.h * g.w)
        .zip(acc.chunks_exact(hp * wp))
    {
        for (r, row) in dst.chunks_exact_mut(g.w).enumerate() {
            let from = &src[(r + pad) * wp + pad..][..g.w];
            // SAFETY: row and from are g.w long, and do not overlap; writing through
            // MaybeUninit<T>'s pointer initialises the row.
            unsafe { copy_short_raw(from.as_ptr(), row.as_mut_ptr().cast::<T>(), g.w) };
        }
    }
}

/// db[o] += the sum of output-gradient plane o, over a run of images.
fn sum_planes<T: Float>(dys: &[T], hw: usize, db: &mut [T]) {
    let o = db.len();
    for (i, plane) in dys.chunks_exact(hw).enumerate() {
        db[i % o] += sum(plane);
    }
}

/// Forward: y = conv(x, w) + b (ReLU'd when `relu`); x's images are `x_img` elements apart.
/// Also returns the transformed filters, which the backward of the same step can take
/// (`bwd_both`) instead of transforming w again.
pub(crate) fn fwd<T: Float>(
    x: (&[T], usize),
    w: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
) -> (Vec<T>, Vec<T>) {
    fwd_with(x, w, bias, g, relu, tile_size(g))
}

/// The filter transform of `oc` filters of `r` x `r` for output tiles of `m` x `m` (the benches').
pub(crate) fn transform_filters<T: Float>(w: &[T], oc: usize, m: usize, r: usize) -> Vec<T> {
    (Transforms::of(m, r).filter)(w, oc)
}

/// Its adjoint into `dw` (the benches').
pub(crate) fn filter_grads<T: Float>(
    du: &[T],
    oc: usize,
    m: usize,
    r: usize,
    dw: &mut [MaybeUninit<T>],
) {
    (Transforms::of(m, r).filter_adjoint)(du, oc, dw)
}

/// The filter transform: (filters, O·C) -> transformed filters.
type FilterFn<T> = fn(&[T], usize) -> Vec<T>;
/// Its adjoint: (transformed filter gradients, O·C, dW to write).
type FilterAdjointFn<T> = fn(&[T], usize, &mut [MaybeUninit<T>]);
/// `input_transform` / `output_adjoint`: one image's planes -> a tile-major band.
type ToTilesFn<T> = fn(&[T], &Tiles, &Range<usize>, &mut [T], Strides, &mut Rows<T>);
/// `input_adjoint`: a tile-major band -> added into one image's padded planes.
type FromTilesFn<T> = fn(&[T], &Tiles, &Range<usize>, (usize, usize), &mut [T], &mut Rows<T>);
/// `output_transform`: a tile-major band -> one image's output, with the bias and ReLU.
type OutputFn<T> = fn(
    &[T],
    &Tiles,
    &Range<usize>,
    (usize, usize),
    &mut [MaybeUninit<T>],
    &[T],
    bool,
    &mut Rows<T>,
);

/// The six transforms of one tile size.
struct Transforms<T> {
    filter: FilterFn<T>,
    filter_adjoint: FilterAdjointFn<T>,
    input: ToTilesFn<T>,
    output: OutputFn<T>,
    output_adjoint: ToTilesFn<T>,
    input_adjoint: FromTilesFn<T>,
}

impl<T: Float> Transforms<T> {
    /// The transforms of output tiles of `m` x `m` for `r` x `r` filters (`tile_fits`).
    fn of(m: usize, r: usize) -> Transforms<T> {
        match (m, r) {
            (4, 3) => Transforms::tile::<4, 6, 3, F4>(),
            (2, 3) => Transforms::tile::<2, 4, 3, F2>(),
            (2, 5) => Transforms::tile::<2, 6, 5, F2R5>(),
            (4, 5) => Transforms::tile::<4, 8, 5, F4R5>(),
            _ => unreachable!("no Winograd tile F({m}x{m}, {r}x{r})"),
        }
    }

    fn tile<const M: usize, const A: usize, const R: usize, W: Tile<M, A, R>>() -> Transforms<T> {
        Transforms {
            filter: filter_transform::<T, M, A, R, W>,
            filter_adjoint: filter_adjoint::<T, M, A, R, W>,
            input: input_transform::<T, M, A, R, W>,
            output: output_transform::<T, M, A, R, W>,
            output_adjoint: output_adjoint::<T, M, A, R, W>,
            input_adjoint: input_adjoint::<T, M, A, R, W>,
        }
    }
}

/// `fwd` with output tiles of `m` x `m` (2 or 4).
pub(crate) fn fwd_with<T: Float>(
    (x, x_img): (&[T], usize),
    w: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
    m: usize,
) -> (Vec<T>, Vec<T>) {
    let u = filters(w, g, m);
    (fwd_filtered((x, x_img), &u, bias, g, relu, m), u)
}

/// Layer `g`'s weights `w` transformed for output tiles of `m` x `m`, as `fwd_filtered` takes
/// them.
pub(crate) fn filters<T: Float>(w: &[T], g: &Geom, m: usize) -> Vec<T> {
    (Transforms::of(m, g.kh).filter)(w, g.o * g.cg())
}

/// The forward from transformed filters `u` (`filters`, for tiles of `m` x `m`).
pub(crate) fn fwd_filtered<T: Float>(
    (x, x_img): (&[T], usize),
    u: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
    m: usize,
) -> Vec<T> {
    let tile_major = tile_major(g)
        && g.c >= TILE_MAJOR_FWD_MIN_CHANNELS
        && g.h.min(g.w) >= TILE_MAJOR_FWD_MIN_SIDE;
    fwd_in_layout((x, x_img), u, bias, g, relu, m, tile_major)
}

/// `fwd_filtered` with the batched layers' products tile-major or ξ-major (`tile_major`).
fn fwd_in_layout<T: Float>(
    (x, x_img): (&[T], usize),
    u: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
    m: usize,
    tile_major: bool,
) -> Vec<T> {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let (cg, og) = (g.cg(), g.og());
    let f = Transforms::of(m, g.kh);
    let len = g.n * o * hw;
    let mut y = Vec::with_capacity(len);
    if len == 0 {
        return y;
    }
    if few_images(g) || tile_major {
        let out = &mut y.spare_capacity_mut()[..len];
        if few_images(g) {
            fwd_few((x, x_img), u, bias, g, relu, m, out);
        } else {
            fwd_tile_major((x, x_img), u, bias, g, relu, m, out);
        }
        // SAFETY: `fwd_few` and `fwd_tile_major` write every image's output rows.
        unsafe { y.set_len(len) };
        return y;
    }
    let per = g.images_per_task();
    let t = Tiles::new(g, per, m);
    y.spare_capacity_mut()
        .par_chunks_mut(per * o * hw)
        .zip(x.par_chunks(per * x_img))
        .for_each(|(ys, xs)| {
            let mut s = Task::new(&t, c, o);
            let nimg = ys.len() / (o * hw);
            for (n0, nb, rows) in t.blocks(nimg) {
                let ld = nb * rows.len() * t.tw;
                for j in 0..nb {
                    let xj = &xs[(n0 + j) * x_img..][..c * hw];
                    let at = j * rows.len() * t.tw;
                    (f.input)(
                        xj,
                        &t,
                        &rows,
                        &mut s.a,
                        Strides::xi_major(c, ld, at),
                        &mut s.rows,
                    );
                }
                // Output channels in chunks whose GEMM outputs stay in L2 for the transform,
                // each chunk within one group (its filters read only its group's rows of V).
                let step = out_chunk(ld, og, t.xi());
                let chunks = (0..g.groups).flat_map(|gi| {
                    (0..og)
                        .step_by(step)
                        .map(move |o0| (gi, gi * og + o0, step.min(og - o0)))
                });
                for (gi, o0, oc) in chunks {
                    let xi = (o * cg, c * ld, oc * ld);
                    let (lhs, rhs) = (&u[o0 * cg..], &s.a[gi * cg * ld..]);
                    gemms(
                        t.xi(),
                        (oc, ld, cg),
                        &mut s.b,
                        false,
                        lhs,
                        (cg, 1),
                        rhs,
                        (ld, 1),
                        xi,
                    );
                    for j in 0..nb {
                        let yj = &mut ys[(n0 + j) * o * hw + o0 * hw..][..oc * hw];
                        let at = j * rows.len() * t.tw;
                        let b = &bias[o0..o0 + oc];
                        (f.output)(&s.b, &t, &rows, (ld, at), yj, b, relu, &mut s.rows);
                    }
                }
            }
        });
    // SAFETY: every image's output rows are written by `output_transform` (all tile rows).
    unsafe { y.set_len(len) };
    y
}

/// Channels per group that the tile-major path moves between the transforms' layout (a run of
/// tiles per channel) and its own (a run of channels per tile): 16 f32, one cache line per tile.
const GROUP: usize = 16;

/// Whether a batched layer's products take the tile-major layout (`Tuning::winograd_tile_major`,
/// one group): vectors along the channels of blocks of `WINOGRAD_TILE_MAJOR_BLOCK` tiles, whose
/// operands the products read where they lie, instead of along the tiles of blocks of about
/// `WINOGRAD_TILES`, which the gemm crate packs and reads from L3.
fn tile_major(g: &Geom) -> bool {
    g.groups == 1 && tuning().winograd_tile_major
}

/// Input channels from which the forward takes the tile-major products too: with fewer, its
/// products are short (depth C) next to the transposes of M (O per tile), and the ξ-major
/// forward was faster (GoogLeNet's conv2/3x3, 64 -> 192 channels, 19 %; its 5x5 layers, 16 to
/// 48 channels in, 4 %). The backward is faster tile-major on every layer.
const TILE_MAJOR_FWD_MIN_CHANNELS: usize = 96;

/// Smallest map side on which the forward takes the tile-major products: a 7x7 map has four
/// F(4x4) tiles, and the transforms, called per image and group of 16 channels, cost more than
/// the products gain (GoogLeNet's 5b/3x3 forward 9 % slower tile-major). AlexNet's 13x13 conv3
/// (F(4x4) at batch 32) stays ξ-major too: tile-major its step was level (paired ratio 1.012,
/// faster in 1 of 6 alternating rounds, 2-core Zen 4 VM).
const TILE_MAJOR_FWD_MIN_SIDE: usize = 14;

/// dst[j·dst_rs + i] = src[i·src_rs + j] for i < rows, j < cols: a `rows` x `cols` block
/// transposed, both with unit column stride.
fn transpose<T: Float>(
    src: &[T],
    src_rs: usize,
    (rows, cols): (usize, usize),
    dst: &mut [T],
    dst_rs: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    let (src, dst) = (
        &src[..(rows - 1) * src_rs + cols],
        &mut dst[..(cols - 1) * dst_rs + rows],
    );
    #[cfg(target_arch = "x86_64")]
    if let (Some(s), Some(d)) = (as_f32(src), as_f32_mut(&mut *dst)) {
        if avx512::transpose_f32(s, src_rs, (rows, cols), d, dst_rs) {
            return;
        }
    }
    for j in 0..cols {
        let out = &mut dst[j * dst_rs..][..rows];
        for (i, d) in out.iter_mut().enumerate() {
            *d = src[i * src_rs + j];
        }
    }
}

/// The tile-major path's transposes in AVX-512 registers, 16 x 16 floats at a time (the
/// compiler's loop moves one float per load and store).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `transpose` in f32 with AVX-512 F, in blocks of up to 16 x 16 floats in registers (those
    /// at the edges through masked loads and stores). False (nothing written) when the CPU
    /// lacks AVX-512 F.
    pub(super) fn transpose_f32(
        src: &[f32],
        src_rs: usize,
        (rows, cols): (usize, usize),
        dst: &mut [f32],
        dst_rs: usize,
    ) -> bool {
        if !std::is_x86_feature_detected!("avx512f") {
            return false;
        }
        assert!(src.len() > (rows - 1) * src_rs + cols - 1);
        assert!(dst.len() > (cols - 1) * dst_rs + rows - 1);
        for i0 in (0..rows).step_by(16) {
            for j0 in (0..cols).step_by(16) {
                let shape = ((rows - i0).min(16), (cols - j0).min(16));
                // SAFETY: the CPU has AVX-512 F (checked above); the block's rows of src
                // (i0.., columns j0..) and of dst (j0.., columns i0..) lie inside the slices
                // (asserted above).
                unsafe {
                    block(
                        src.as_ptr().add(i0 * src_rs + j0),
                        src_rs,
                        shape,
                        dst.as_mut_ptr().add(j0 * dst_rs + i0),
                        dst_rs,
                    )
                };
            }
        }
        true
    }

    /// One block of `rows` x `cols` (each at most 16) at `src` (row stride `src_rs`) to its
    /// transpose at `dst` (row stride `dst_rs`).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `rows` rows of `cols` floats from `src` are readable and `cols`
    /// rows of `rows` floats from `dst` writable.
    #[target_feature(enable = "avx512f")]
    unsafe fn block(
        src: *const f32,
        src_rs: usize,
        (rows, cols): (usize, usize),
        dst: *mut f32,
        dst_rs: usize,
    ) {
        let (col_mask, row_mask) = (((1u32 << cols) - 1) as u16, ((1u32 << rows) - 1) as u16);
        let mut r = [_mm512_setzero_ps(); 16];
        // Whole blocks without masks: masked stores to memory are slow on Zen 4.
        let whole = rows == 16 && cols == 16;
        for (i, row) in r.iter_mut().take(rows).enumerate() {
            // SAFETY: the caller's: `cols` floats from src + i·src_rs are readable.
            *row = unsafe {
                let at = src.add(i * src_rs);
                if whole {
                    _mm512_loadu_ps(at)
                } else {
                    _mm512_maskz_loadu_ps(col_mask, at)
                }
            };
        }
        let mut t = [_mm512_setzero_ps(); 16];
        // Pairs of rows interleaved within 128-bit lanes, then pairs of those, then the lanes.
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        for k in 0..4 {
            let b = 4 * k;
            r[b] = _mm512_shuffle_ps::<0x44>(t[b], t[b + 2]);
            r[b + 1] = _mm512_shuffle_ps::<0xEE>(t[b], t[b + 2]);
            r[b + 2] = _mm512_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
            r[b + 3] = _mm512_shuffle_ps::<0xEE>(t[b + 1], t[b + 3]);
        }
        for h in 0..2 {
            let b = 8 * h;
            for q in 0..4 {
                t[b + q] = _mm512_shuffle_f32x4::<0x88>(r[b + q], r[b + 4 + q]);
                t[b + 4 + q] = _mm512_shuffle_f32x4::<0xDD>(r[b + q], r[b + 4 + q]);
            }
        }
        for q in 0..8 {
            r[q] = _mm512_shuffle_f32x4::<0x88>(t[q], t[8 + q]);
            r[8 + q] = _mm512_shuffle_f32x4::<0xDD>(t[q], t[8 + q]);
        }
        for (j, row) in r.iter().take(cols).enumerate() {
            // SAFETY: the caller's: `rows` floats from dst + j·dst_rs are writable.
            unsafe {
                let at = dst.add(j * dst_rs);
                if whole {
                    _mm512_storeu_ps(at, *row)
                } else {
                    _mm512_mask_storeu_ps(at, row_mask, *row)
                }
            };
        }
    }
}

/// Uᵀ per tile position: `u` (ξ, O, C) -> (ξ, C, O).
fn filters_by_input<T: Float>(u: &[T], xis: usize, (o, c): (usize, usize)) -> Vec<T> {
    let mut ut = vec![T::ZERO; xis * o * c];
    ut.par_chunks_mut(o * c)
        .zip(u.par_chunks(o * c))
        .for_each(|(ut, u)| transpose(u, c, (o, c), ut, o));
    ut
}

/// `fwd_filtered` of a batched layer in the tile-major layout (`tile_major`): per block of
/// tiles, the input transform writes each group of `GROUP` channels as runs of tiles, which are
/// transposed into V[ξ][tile][c]; M_ξ = V_ξ · U_ξᵀ (tile x O); each group of output channels of
/// M is transposed back into runs for the output transform.
fn fwd_tile_major<T: Float>(
    (x, x_img): (&[T], usize),
    u: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
    m: usize,
    y: &mut [MaybeUninit<T>],
) {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let f = Transforms::of(m, g.kh);
    let per = g.images_per_task();
    let t = Tiles::with_target(g, per, m, WINOGRAD_TILE_MAJOR_BLOCK);
    let xis = t.xi();
    let ut = filters_by_input(u, xis, (o, c));
    y.par_chunks_mut(per * o * hw)
        .zip(x.par_chunks(per * x_img))
        .for_each(|(ys, xs)| {
            let cols = t.max_cols();
            let mut v = Scratch::new(xis * cols * c);
            let mut mm = Scratch::new(xis * cols * o);
            let mut runs = Scratch::new(xis * GROUP * cols);
            let mut rows_scratch = Rows::new(&t);
            let nimg = ys.len() / (o * hw);
            for (n0, nb, rows) in t.blocks(nimg) {
                let ld = nb * rows.len() * t.tw;
                for c0 in (0..c).step_by(GROUP) {
                    let cn = GROUP.min(c - c0);
                    for j in 0..nb {
                        let xj = &xs[(n0 + j) * x_img + c0 * hw..][..cn * hw];
                        let at = j * rows.len() * t.tw;
                        let to = Strides::xi_major(cn, ld, at);
                        (f.input)(xj, &t, &rows, &mut runs, to, &mut rows_scratch);
                    }
                    for xi in 0..xis {
                        let from = &runs[xi * cn * ld..];
                        transpose(from, ld, (cn, ld), &mut v[xi * ld * c + c0..], c);
                    }
                }
                for xi in 0..xis {
                    let (lhs, rhs) = (&v[xi * ld * c..], &ut[xi * c * o..]);
                    let dst = &mut mm[xi * ld * o..];
                    gemm((ld, o, c), dst, false, lhs, (c, 1), rhs, (o, 1), SERIAL);
                }
                for o0 in (0..o).step_by(GROUP) {
                    let on = GROUP.min(o - o0);
                    for xi in 0..xis {
                        let from = &mm[xi * ld * o + o0..];
                        transpose(from, o, (ld, on), &mut runs[xi * on * ld..], ld);
                    }
                    for j in 0..nb {
                        let yj = &mut ys[(n0 + j) * o * hw + o0 * hw..][..on * hw];
                        let at = j * rows.len() * t.tw;
                        let b = &bias[o0..o0 + on];
                        (f.output)(&runs, &t, &rows, (ld, at), yj, b, relu, &mut rows_scratch);
                    }
                }
            }
        });
}

/// One task of `bwd_both_with` in the tile-major layout (`tile_major`): its images' dx, and its
/// partial [dU (ξ·O·C) | db (O)]. Per block of tiles, dM[ξ][tile][o] and V[ξ][tile][c] from the
/// transforms' runs (`GROUP` channels at a time, transposed); dV_ξ = dM_ξ · U_ξ and
/// dU_ξ += dM_ξᵀ · V_ξ; dV's groups transposed back into runs for the input adjoint.
#[allow(clippy::too_many_arguments)]
fn bwd_task_tile_major<T: Float>(
    (xs, x_img): (&[T], usize),
    dys: &[T],
    u: &[T],
    g: &Geom,
    t: &Tiles,
    f: &Transforms<T>,
    dxs: &mut [MaybeUninit<T>],
) -> Vec<T> {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let (xis, oc) = (t.xi(), o * c);
    let (hp, wp) = t.padded();
    let cols = t.max_cols();
    let mut dm = Scratch::new(xis * cols * o);
    let mut v = Scratch::new(xis * cols * c);
    let mut dv = Scratch::new(xis * cols * c);
    let mut runs = Scratch::new(xis * GROUP * cols);
    let mut rs = Rows::new(t);
    // Zeroed below as each image's first band starts.
    let mut acc = Scratch::new(t.nb * c * hp * wp);
    let mut grads = vec![T::ZERO; xis * oc + o];
    let (du, db) = grads.split_at_mut(xis * oc);
    let nimg = dxs.len() / (c * hw);
    for (n0, nb, rows) in t.blocks(nimg) {
        let ld = nb * rows.len() * t.tw;
        if rows.start == 0 {
            acc.fill(T::ZERO);
        }
        let at = |j: usize| j * rows.len() * t.tw;
        for o0 in (0..o).step_by(GROUP) {
            let on = GROUP.min(o - o0);
            for j in 0..nb {
                let dyj = &dys[(n0 + j) * o * hw + o0 * hw..][..on * hw];
                let to = Strides::xi_major(on, ld, at(j));
                (f.output_adjoint)(dyj, t, &rows, &mut runs, to, &mut rs);
            }
            for xi in 0..xis {
                transpose(
                    &runs[xi * on * ld..],
                    ld,
                    (on, ld),
                    &mut dm[xi * ld * o + o0..],
                    o,
                );
            }
        }
        for c0 in (0..c).step_by(GROUP) {
            let cn = GROUP.min(c - c0);
            for j in 0..nb {
                let xj = &xs[(n0 + j) * x_img + c0 * hw..][..cn * hw];
                let to = Strides::xi_major(cn, ld, at(j));
                (f.input)(xj, t, &rows, &mut runs, to, &mut rs);
            }
            for xi in 0..xis {
                transpose(
                    &runs[xi * cn * ld..],
                    ld,
                    (cn, ld),
                    &mut v[xi * ld * c + c0..],
                    c,
                );
            }
        }
        // The task's first block writes dU, the others add to it.
        let add = n0 > 0 || rows.start > 0;
        for xi in 0..xis {
            let (dmx, vx) = (&dm[xi * ld * o..], &v[xi * ld * c..]);
            let (dvx, ux) = (&mut dv[xi * ld * c..], &u[xi * oc..]);
            gemm((ld, c, o), dvx, false, dmx, (o, 1), ux, (c, 1), SERIAL);
            let dux = &mut du[xi * oc..];
            gemm((o, c, ld), dux, add, dmx, (1, o), vx, (c, 1), SERIAL);
        }
        for c0 in (0..c).step_by(GROUP) {
            let cn = GROUP.min(c - c0);
            for xi in 0..xis {
                transpose(
                    &dv[xi * ld * c + c0..],
                    c,
                    (ld, cn),
                    &mut runs[xi * cn * ld..],
                    ld,
                );
            }
            for j in 0..nb {
                let accj = &mut acc[j * c * hp * wp + c0 * hp * wp..][..cn * hp * wp];
                (f.input_adjoint)(&runs, t, &rows, (ld, at(j)), accj, &mut rs);
            }
        }
        if rows.end == t.th {
            copy_interiors(&acc, &mut dxs[n0 * c * hw..(n0 + nb) * c * hw], g, (hp, wp));
        }
    }
    sum_planes(dys, hw, db);
    grads
}

/// (dx (N·C·H·W), [dW (O·C·R·R) | db (O)]) in one pass over the tiles: each block's output
/// gradient transform dM serves both the input gradient (dV = Uᵀ·dM) and the weight gradient
/// (dU += dM·Vᵀ). Two vectors, so that the small weight gradients need not be copied out of
/// dx's buffer (a serial copy per layer while the other threads wait) nor keep it alive. (A
/// layer whose input needs no gradient takes im2col's weight gradient.)
/// `filters`: the forward's transformed filters (`fwd`), if it kept them; else w's are
/// transformed here.
pub(crate) fn bwd_both<T: Float>(
    x: (&[T], usize),
    dy: &[T],
    w: &[T],
    filters: Option<&[T]>,
    g: &Geom,
) -> (Vec<T>, Vec<T>) {
    bwd_both_with(x, dy, w, filters, g, tile_size(g))
}

/// `bwd_both` with output tiles of `m` x `m` (2 or 4).
pub(crate) fn bwd_both_with<T: Float>(
    x: (&[T], usize),
    dy: &[T],
    w: &[T],
    filters: Option<&[T]>,
    g: &Geom,
    m: usize,
) -> (Vec<T>, Vec<T>) {
    bwd_both_in_layout(x, dy, w, filters, g, m, tile_major(g))
}

/// `bwd_both_with` with the batched layers' products tile-major or ξ-major (`tile_major`).
fn bwd_both_in_layout<T: Float>(
    (x, x_img): (&[T], usize),
    dy: &[T],
    w: &[T],
    filters: Option<&[T]>,
    g: &Geom,
    m: usize,
    tm: bool,
) -> (Vec<T>, Vec<T>) {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let (cg, og) = (g.cg(), g.og());
    // Filters: O of C/groups channels.
    let (ndx, oc) = (g.n * c * hw, o * cg);
    let rr = g.kh * g.kw;
    let grads_len = rr * oc + o;
    if g.n == 0 || hw == 0 {
        return (vec![T::ZERO; ndx], vec![T::ZERO; grads_len]);
    }
    let (mut dx_out, mut grads_out) = (Vec::with_capacity(ndx), Vec::with_capacity(grads_len));
    let per = g.images_per_task();
    let t = Tiles::new(g, per, m);
    let xis = t.xi();
    let f = Transforms::of(m, g.kh);
    let transformed;
    let u = match filters {
        Some(u) if u.len() == xis * oc => u,
        _ => {
            transformed = (f.filter)(w, oc);
            &transformed[..]
        }
    };
    if few_images(g) {
        let dx = &mut dx_out.spare_capacity_mut()[..ndx];
        bwd_both_few(
            (x, x_img),
            dy,
            u,
            g,
            m,
            dx,
            &mut grads_out.spare_capacity_mut()[..grads_len],
        );
        // SAFETY: `bwd_both_few` writes dx, dW and db.
        unsafe {
            dx_out.set_len(ndx);
            grads_out.set_len(grads_len);
        }
        return (dx_out, grads_out);
    }
    let t = if tm {
        Tiles::with_target(g, per, m, WINOGRAD_TILE_MAJOR_BLOCK)
    } else {
        t
    };
    let (hp, wp) = t.padded();
    let dx = &mut dx_out.spare_capacity_mut()[..ndx];
    let partials: Vec<Vec<T>> = dx
        .par_chunks_mut(per * c * hw)
        .zip(x.par_chunks(per * x_img))
        .zip(dy.par_chunks(per * o * hw))
        .map(|((dxs, xs), dys)| {
            if tm {
                return bwd_task_tile_major((xs, x_img), dys, u, g, &t, &f, dxs);
            }
            // s.a: dM, s.b: dV; v: V.
            let mut s = Task::new(&t, o, c);
            let mut v = Scratch::new(xis * c * t.max_cols());
            // Zeroed below as each image's first band starts.
            let mut acc = Scratch::new(t.nb * c * hp * wp);
            // [dU (ξ·O·C) | db (O)]
            let mut grads = vec![T::ZERO; xis * oc + o];
            let (du, db) = grads.split_at_mut(xis * oc);
            let nimg = dxs.len() / (c * hw);
            for (n0, nb, rows) in t.blocks(nimg) {
                let ld = nb * rows.len() * t.tw;
                if rows.start == 0 {
                    acc.fill(T::ZERO);
                }
                for j in 0..nb {
                    let at = j * rows.len() * t.tw;
                    let dyj = &dys[(n0 + j) * o * hw..][..o * hw];
                    let xj = &xs[(n0 + j) * x_img..][..c * hw];
                    let to = Strides::xi_major(o, ld, at);
                    (f.output_adjoint)(dyj, &t, &rows, &mut s.a, to, &mut s.rows);
                    let to = Strides::xi_major(c, ld, at);
                    (f.input)(xj, &t, &rows, &mut v, to, &mut s.rows);
                }
                // Group by group: dV_ξ = U_ξᵀ · dM_ξ and dU_ξ += dM_ξ · V_ξᵀ over the group's
                // rows of dM (its filters) and of V and dV (its input channels).
                for gi in 0..g.groups {
                    let (dm, gv) = (&s.a[gi * og * ld..], &v[gi * cg * ld..]);
                    let xi = (oc, o * ld, c * ld);
                    let (dv, lhs) = (&mut s.b[gi * cg * ld..], &u[gi * og * cg..]);
                    gemms(xis, (cg, ld, og), dv, false, lhs, (1, cg), dm, (ld, 1), xi);
                    let xi = (o * ld, c * ld, oc);
                    let dug = &mut du[gi * og * cg..];
                    // The task's first block writes dU, the others add to it.
                    let add = n0 > 0 || rows.start > 0;
                    gemms(xis, (og, cg, ld), dug, add, dm, (ld, 1), gv, (1, ld), xi);
                }
                for j in 0..nb {
                    let accj = &mut acc[j * c * hp * wp..][..c * hp * wp];
                    let at = j * rows.len() * t.tw;
                    (f.input_adjoint)(&s.b, &t, &rows, (ld, at), accj, &mut s.rows);
                }
                if rows.end == t.th {
                    copy_interiors(&acc, &mut dxs[n0 * c * hw..(n0 + nb) * c * hw], g, (hp, wp));
                }
            }
            sum_planes(dys, hw, db);
            grads
        })
        .collect();
    let total = sum_partials(partials);
    let (tail_dw, tail_db) = grads_out.spare_capacity_mut()[..grads_len].split_at_mut(rr * oc);
    (f.filter_adjoint)(&total[..xis * oc], oc, tail_dw);
    // A plain loop (a chained iterator does not vectorise).
    for (d, &v) in tail_db.iter_mut().zip(&total[xis * oc..]) {
        d.write(v);
    }
    // SAFETY: every image's dx is copied out once its last band is done, and dW and db were
    // written just above.
    unsafe {
        dx_out.set_len(ndx);
        grads_out.set_len(grads_len);
    }
    (dx_out, grads_out)
}

/// Channels per run when fewer images than threads split each image over the threads by
/// channels: one run per thread.
fn channel_runs(channels: usize) -> usize {
    channels
        .div_ceil(rayon::current_num_threads().max(1))
        .max(1)
}

/// `planes` (C planes of `hw`) -> f's tiles of the band `rows` in `out`, channel-major (each
/// channel's ξ rows of `ld` together), by runs of `step` channels on all threads: each run
/// writes its own contiguous part of `out`.
fn tiles_by_channels<T: Float>(
    f: ToTilesFn<T>,
    (planes, hw): (&[T], usize),
    step: usize,
    t: &Tiles,
    rows: &Range<usize>,
    out: &mut [T],
) {
    let ld = rows.len() * t.tw;
    let to = Strides {
        xi: ld,
        ch: t.xi() * ld,
        at: 0,
    };
    planes
        .par_chunks(step * hw)
        .zip(out.par_chunks_mut(step * to.ch))
        .for_each(|(p, run)| f(p, t, rows, run, to, &mut Rows::new(t)));
}

/// `fwd_filtered` for fewer images than threads (batch 1 on a multi-core CPU), writing every
/// element of `y` (N·O·H·W): a task per image would leave threads idle, so each image is split
/// over the threads by channels. The input transform runs by runs of input channels, into a
/// channel-major V that each run writes as one slice; then each thread computes its run of
/// output channels (their GEMMs over all of V, and the output transform into their planes).
fn fwd_few<T: Float>(
    (x, x_img): (&[T], usize),
    u: &[T],
    bias: &[T],
    g: &Geom,
    relu: bool,
    m: usize,
    y: &mut [MaybeUninit<T>],
) {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let f = Transforms::of(m, g.kh);
    let t = Tiles::new(g, 1, m);
    let xis = t.xi();
    let (c_step, o_step) = (channel_runs(c), channel_runs(o));
    // Zeroed on all threads: at batch 1 a serial fill of V kept the other cores waiting.
    let mut v = zeros(xis * c * t.max_cols());
    for (xn, yn) in x.chunks(x_img).zip(y.chunks_exact_mut(o * hw)) {
        for (_, _, rows) in t.blocks(1) {
            let ld = rows.len() * t.tw;
            tiles_by_channels(f.input, (&xn[..c * hw], hw), c_step, &t, &rows, &mut v);
            let v = &v;
            yn.par_chunks_mut(o_step * hw)
                .enumerate()
                .for_each(|(k, yk)| {
                    let outs = yk.len() / hw;
                    let mut s = Rows::new(&t);
                    // Output channels in chunks whose GEMM outputs stay in L2, as in `fwd_filtered`.
                    let step = out_chunk(ld, outs, xis);
                    let mut b = Scratch::new(xis * step.min(outs) * ld);
                    for o0 in (0..outs).step_by(step) {
                        let (oc, first) = (step.min(outs - o0), k * o_step + o0);
                        let xi = (o * c, ld, oc * ld);
                        let lhs = &u[first * c..];
                        gemms(
                            xis,
                            (oc, ld, c),
                            &mut b,
                            false,
                            lhs,
                            (c, 1),
                            v,
                            (xis * ld, 1),
                            xi,
                        );
                        let (yc, bc) = (&mut yk[o0 * hw..][..oc * hw], &bias[first..][..oc]);
                        (f.output)(&b, &t, &rows, (ld, 0), yc, bc, relu, &mut s);
                    }
                });
        }
    }
}

/// `bwd_both_with` for fewer images than threads, writing every element of `dx` and of
/// `grads` ([dW | db]), split by channels as `fwd_few`: V and dM are made by runs of channels
/// (channel-major), the input gradient is taken by runs of input channels (each run's padded
/// planes its own), the weight gradient by runs of filters (each run's rows of dU summed over
/// the images by that run), so no two tasks write one element.
fn bwd_both_few<T: Float>(
    (x, x_img): (&[T], usize),
    dy: &[T],
    u: &[T],
    g: &Geom,
    m: usize,
    dx: &mut [MaybeUninit<T>],
    grads: &mut [MaybeUninit<T>],
) {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let oc = o * c;
    let t = Tiles::new(g, 1, m);
    let (xis, cols) = (t.xi(), t.max_cols());
    let f = Transforms::<T>::of(m, g.kh);
    let (hp, wp) = t.padded();
    let (c_step, o_step) = (channel_runs(c), channel_runs(o));
    // The buffers are zeroed on all threads, as in `fwd_few`.
    let (mut v, mut dm) = (zeros(xis * c * cols), zeros(xis * o * cols));
    // Each run of input channels' padded planes of dx.
    let mut accs = zeros(c * hp * wp);
    // dU by runs of filters, each run's block ξ-major ([ξ][filters][C]), and db.
    let (mut du, mut db) = (zeros(xis * oc), vec![T::ZERO; o]);
    let images = x.chunks(x_img).zip(dy.chunks_exact(o * hw));
    for ((xn, dyn_), dxn) in images.zip(dx.chunks_exact_mut(c * hw)) {
        for (_, _, rows) in t.blocks(1) {
            let ld = rows.len() * t.tw;
            tiles_by_channels(f.input, (&xn[..c * hw], hw), c_step, &t, &rows, &mut v);
            tiles_by_channels(f.output_adjoint, (dyn_, hw), o_step, &t, &rows, &mut dm);
            let (v, dm) = (&v, &dm);
            // V and dM are channel-major: a channel's ξ rows of ld tiles together.
            let ch = xis * ld;
            rayon::join(
                || {
                    dxn.par_chunks_mut(c_step * hw)
                        .zip(accs.par_chunks_mut(c_step * hp * wp))
                        .enumerate()
                        .for_each(|(k, (dxk, acc))| {
                            let cc = dxk.len() / hw;
                            if rows.start == 0 {
                                acc.fill(T::ZERO);
                            }
                            // dV_ξ = U_ξᵀ · dM_ξ for this run's channels, ξ-major as
                            // `input_adjoint` takes it.
                            let mut dv = Scratch::new(xis * cc * ld);
                            let xi = (o * c, ld, cc * ld);
                            let lhs = &u[k * c_step..];
                            gemms(
                                xis,
                                (cc, ld, o),
                                &mut dv,
                                false,
                                lhs,
                                (1, c),
                                dm,
                                (ch, 1),
                                xi,
                            );
                            (f.input_adjoint)(&dv, &t, &rows, (ld, 0), acc, &mut Rows::new(&t));
                            if rows.end == t.th {
                                copy_interiors(acc, dxk, g, (hp, wp));
                            }
                        })
                },
                || {
                    du.par_chunks_mut(o_step * xis * c)
                        .zip(db.par_chunks_mut(o_step))
                        .enumerate()
                        .for_each(|(k, (duk, dbk))| {
                            // dU_ξ += dM_ξ · V_ξᵀ for this run's filters (ξ-major within the run).
                            let filters = dbk.len();
                            let lhs = &dm[k * o_step * ch..];
                            let xi = (ld, ld, filters * c);
                            let (lhs_s, rhs_s) = ((ch, 1), (1, ch));
                            gemms(xis, (filters, c, ld), duk, true, lhs, lhs_s, v, rhs_s, xi);
                            if rows.start == 0 {
                                sum_planes(&dyn_[k * o_step * hw..][..filters * hw], hw, dbk);
                            }
                        })
                },
            );
        }
    }
    // Each run's dU block is ξ-major over its filters, as `filter_adjoint` takes it, and its
    // filters' rows of dW are one slice.
    let rr = g.kh * g.kw;
    let (tail_dw, tail_db) = grads.split_at_mut(rr * oc);
    du.par_chunks(o_step * xis * c)
        .zip(tail_dw.par_chunks_mut(o_step * rr * c))
        .for_each(|(run, dw)| (f.filter_adjoint)(run, dw.len() / rr, dw));
    // Every image's dx was copied out once its last band was done (each run of input channels
    // its own planes); dW just above.
    for (d, &v) in tail_db.iter_mut().zip(&db) {
        d.write(v);
    }
}

/// F(2x2, 3x3): 4x4 input tiles at stride 2, 16 tile positions.
struct F2;

impl Tile<2, 4, 3> for F2 {
    #[inline(always)]
    fn bt<T: Float>(d: [&[T]; 4], out: [&mut [T]; 4]) {
        map_lanes(d, out, |[d0, d1, d2, d3]| {
            [d0 - d2, d1 + d2, d2 - d1, d1 - d3]
        });
    }

    #[inline(always)]
    fn b<T: Float>(d: [&[T]; 4], out: [&mut [T]; 4]) {
        map_lanes(d, out, |[d0, d1, d2, d3]| {
            [d0, d1 - d2 + d3, d1 + d2 - d0, T::ZERO - d3]
        });
    }

    #[inline(always)]
    fn at<T: Float>(m: [&[T]; 4], out: [&mut [T]; 2]) {
        map_lanes(m, out, |[m0, m1, m2, m3]| [m0 + m1 + m2, m1 - m2 - m3]);
    }

    #[inline(always)]
    fn a<T: Float>(p: [&[T]; 2], out: [&mut [T]; 4]) {
        map_lanes(p, out, |[p0, p1]| [p0, p0 + p1, p0 - p1, T::ZERO - p1]);
    }

    #[inline(always)]
    fn a_row<T: Float>(p: [&[T]; 2], j: usize, out: &mut [T]) {
        let n = out.len();
        let [p0, p1] = p.map(|p| &p[..n]);
        match j {
            0 => out.copy_from_slice(p0),
            1 => (0..n).for_each(|k| out[k] = p0[k] + p1[k]),
            2 => (0..n).for_each(|k| out[k] = p0[k] - p1[k]),
            _ => (0..n).for_each(|k| out[k] = T::ZERO - p1[k]),
        }
    }

    #[inline(always)]
    fn g<T: Float>([a, b, c]: [T; 3]) -> [T; 4] {
        let half = T::from_f64(0.5);
        [a, (a + b + c) * half, (a - b + c) * half, c]
    }

    #[inline(always)]
    fn gt<T: Float>([d0, d1, d2, d3]: [T; 4]) -> [T; 3] {
        let half = T::from_f64(0.5);
        [
            d0 + (d1 + d2) * half,
            (d1 - d2) * half,
            (d1 + d2) * half + d3,
        ]
    }
}

// ---- F(4x4, 3x3): 6x6 input tiles at stride 4, 36 tile positions ----
//
// Bᵀ (6x6), G (6x3) and Aᵀ (4x6) of Lavin & Gray for the points 0, ±1, ±2, ∞: the same three
// linear maps and adjoints as F(2x2), with coefficients up to 8 instead of 1.

/// F(4x4, 3x3).
struct F4;

/// G of F(4x4, 3x3), the table `F4::g` and `F4::gt` are tested against.
#[cfg(test)]
const G4: [[f64; 3]; 6] = [
    [0.25, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// Column `j` of an `A`-point, four-output Aᵀ applied to the rows `p`: p0 + c p1 + c² p2 +
/// c³ p3 at the tile's j-th point c (0, 1, -1, 2, -2, with `A` = 8 also ½ and -½), p3 at the
/// last (∞). Columns 0, ±1 and ∞ are copies, sums and differences (the same values as the
/// products, without the multiplications).
#[inline(always)]
fn a_row_m4<T: Float, const A: usize>(p: [&[T]; 4], j: usize, out: &mut [T]) {
    let n = out.len();
    let [p0, p1, p2, p3] = p.map(|p| &p[..n]);
    match j {
        0 => out.copy_from_slice(p0),
        1 => (0..n).for_each(|k| out[k] = p0[k] + p1[k] + p2[k] + p3[k]),
        2 => (0..n).for_each(|k| out[k] = p0[k] - p1[k] + p2[k] - p3[k]),
        _ if j + 1 == A => out.copy_from_slice(p3),
        _ => {
            let c = [2.0, -2.0, 0.5, -0.5][j - 3];
            let (c1, c2, c3) = (T::from_f64(c), T::from_f64(c * c), T::from_f64(c * c * c));
            for k in 0..n {
                out[k] = p0[k] + c1 * p1[k] + c2 * p2[k] + c3 * p3[k];
            }
        }
    }
}

impl Tile<4, 6, 3> for F4 {
    #[inline(always)]
    fn bt<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
        let (four, five, two) = (T::from_f64(4.0), T::from_f64(5.0), T::from_f64(2.0));
        map_lanes(d, out, |[a0, a1, a2, a3, a4, a5]| {
            [
                four * a0 - five * a2 + a4,
                a3 + a4 - four * (a1 + a2),
                four * (a1 - a2) - a3 + a4,
                two * (a3 - a1) - a2 + a4,
                two * (a1 - a3) - a2 + a4,
                four * a1 - five * a3 + a5,
            ]
        });
    }

    #[inline(always)]
    fn b<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
        let (two, four, five) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(5.0));
        map_lanes(d, out, |[a0, a1, a2, a3, a4, a5]| {
            [
                four * a0,
                four * (a2 - a1 + a5) + two * (a4 - a3),
                T::ZERO - five * a0 - four * (a1 + a2) - a3 - a4,
                a1 - a2 + two * (a3 - a4) - five * a5,
                a0 + a1 + a2 + a3 + a4,
                a5,
            ]
        });
    }

    #[inline(always)]
    fn at<T: Float>(m: [&[T]; 6], out: [&mut [T]; 4]) {
        let (two, four, eight) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(8.0));
        map_lanes(m, out, |[m0, m1, m2, m3, m4, m5]| {
            let (p12, n12) = (m1 + m2, m1 - m2);
            let (p34, n34) = (m3 + m4, m3 - m4);
            [
                m0 + p12 + p34,
                n12 + two * n34,
                p12 + four * p34,
                n12 + eight * n34 + m5,
            ]
        });
    }

    #[inline(always)]
    fn a<T: Float>(p: [&[T]; 4], out: [&mut [T]; 6]) {
        let (two, four, eight) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(8.0));
        map_lanes(p, out, |[p0, p1, p2, p3]| {
            let (e, od) = (p0 + p2, p1 + p3);
            let (e4, od4) = (p0 + four * p2, two * p1 + eight * p3);
            [p0, e + od, e - od, e4 + od4, e4 - od4, p3]
        });
    }

    #[inline(always)]
    fn a_row<T: Float>(p: [&[T]; 4], j: usize, out: &mut [T]) {
        a_row_m4::<T, 6>(p, j, out);
    }

    /// `G4 v` with its rows' shared sums: 9 operations where the table's 18 products and 18
    /// sums run every zero coefficient too (the filter transforms run it on every filter of
    /// every step).
    #[inline(always)]
    fn g<T: Float>([a, b, c]: [T; 3]) -> [T; 6] {
        let (quarter, sixth) = (T::from_f64(0.25), T::from_f64(1.0 / 6.0));
        let (twelfth, twenty_fourth) = (T::from_f64(1.0 / 12.0), T::from_f64(1.0 / 24.0));
        let outer = a + c;
        let (even, odd) = (a * twenty_fourth + c * sixth, b * twelfth);
        [
            a * quarter,
            T::ZERO - (outer + b) * sixth,
            (b - outer) * sixth,
            even + odd,
            even - odd,
            c,
        ]
    }

    /// `G4ᵀ v`, from the sums and differences of its middle pairs.
    #[inline(always)]
    fn gt<T: Float>([v0, v1, v2, v3, v4, v5]: [T; 6]) -> [T; 3] {
        let (quarter, sixth) = (T::from_f64(0.25), T::from_f64(1.0 / 6.0));
        let (twelfth, twenty_fourth) = (T::from_f64(1.0 / 12.0), T::from_f64(1.0 / 24.0));
        let (s12, d12) = (v1 + v2, v2 - v1);
        let (s34, d34) = (v3 + v4, v3 - v4);
        [
            v0 * quarter - s12 * sixth + s34 * twenty_fourth,
            d12 * sixth + d34 * twelfth,
            (s34 - s12) * sixth + v5,
        ]
    }
}

/// `G v` for a G written out as a table (F(4x4, 3x3) in the tests, the 5x5 tiles).
#[inline(always)]
fn g_times<T: Float, const A: usize, const R: usize>(g: &[[f64; R]; A], v: [T; R]) -> [T; A] {
    array_of(|i| (0..R).fold(T::ZERO, |s, k| s + T::from_f64(g[i][k]) * v[k]))
}

/// `Gᵀ v` for a G written out as a table.
#[inline(always)]
fn gt_times<T: Float, const A: usize, const R: usize>(g: &[[f64; R]; A], v: [T; A]) -> [T; R] {
    array_of(|k| (0..A).fold(T::ZERO, |s, i| s + T::from_f64(g[i][k]) * v[i]))
}

// ---- F(2x2, 5x5): 6x6 input tiles at stride 2, 36 tile positions ----
//
// The same points 0, ±1, ±2, ∞ as F(4x4, 3x3), so the same Bᵀ; G (6x5) and Aᵀ (2x6) are the
// Toom-Cook matrices of those points for a filter of 5 and an output of 2.

/// F(2x2, 5x5).
struct F2R5;

/// G of F(2x2, 5x5): row i is (p_i^0, .., p_i^4) / N_i, with N_i of F(4x4, 3x3)'s G (`G4`).
const G2R5: [[f64; 5]; 6] = [
    [0.25, 0.0, 0.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0, 1.0 / 3.0, 2.0 / 3.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0, -1.0 / 3.0, 2.0 / 3.0],
    [0.0, 0.0, 0.0, 0.0, 1.0],
];

impl Tile<2, 6, 5> for F2R5 {
    #[inline(always)]
    fn bt<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
        F4::bt(d, out)
    }

    #[inline(always)]
    fn b<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
        F4::b(d, out)
    }

    #[inline(always)]
    fn at<T: Float>(m: [&[T]; 6], out: [&mut [T]; 2]) {
        let two = T::from_f64(2.0);
        map_lanes(m, out, |[m0, m1, m2, m3, m4, m5]| {
            [m0 + m1 + m2 + m3 + m4, m1 - m2 + two * (m3 - m4) + m5]
        });
    }

    #[inline(always)]
    fn a<T: Float>(p: [&[T]; 2], out: [&mut [T]; 6]) {
        let two = T::from_f64(2.0);
        map_lanes(p, out, |[p0, p1]| {
            let p12 = two * p1;
            [p0, p0 + p1, p0 - p1, p0 + p12, p0 - p12, p1]
        });
    }

    #[inline(always)]
    fn a_row<T: Float>(p: [&[T]; 2], j: usize, out: &mut [T]) {
        let n = out.len();
        let [p0, p1] = p.map(|p| &p[..n]);
        let c1 = match j {
            0 => return out.copy_from_slice(p0),
            5 => return out.copy_from_slice(p1),
            1 => 1.0,
            2 => -1.0,
            3 => 2.0,
            _ => -2.0,
        };
        let c1 = T::from_f64(c1);
        for k in 0..n {
            out[k] = p0[k] + c1 * p1[k];
        }
    }

    #[inline(always)]
    fn g<T: Float>(v: [T; 5]) -> [T; 6] {
        g_times(&G2R5, v)
    }

    #[inline(always)]
    fn gt<T: Float>(v: [T; 6]) -> [T; 5] {
        gt_times(&G2R5, v)
    }
}

// ---- F(4x4, 5x5): 8x8 input tiles at stride 4, 64 tile positions ----
//
// The points 0, ±1, ±2, ±1/2, ∞ (those of F(6x6, 3x3)): Bᵀ (8x8) is Lavin & Gray's for them,
// G (8x5) and Aᵀ (4x8) the Toom-Cook matrices of a filter of 5 and an output of 4. Each pair ±p
// shares its even and odd sums: `out[±p] = even ± odd`.

/// F(4x4, 5x5).
struct F4R5;

/// G of F(4x4, 5x5): row i is (p_i^0, .., p_i^4) / N_i, with N_i = Π_{j≠i} (p_i - p_j) over the
/// finite points (row 0's sign taken into Bᵀ's row 0).
const G4R5: [[f64; 5]; 8] = [
    [1.0, 0.0, 0.0, 0.0, 0.0],
    [-2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0],
    [-2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0],
    [1.0 / 90.0, 1.0 / 45.0, 2.0 / 45.0, 4.0 / 45.0, 8.0 / 45.0],
    [1.0 / 90.0, -1.0 / 45.0, 2.0 / 45.0, -4.0 / 45.0, 8.0 / 45.0],
    [32.0 / 45.0, 16.0 / 45.0, 8.0 / 45.0, 4.0 / 45.0, 2.0 / 45.0],
    [
        32.0 / 45.0,
        -16.0 / 45.0,
        8.0 / 45.0,
        -4.0 / 45.0,
        2.0 / 45.0,
    ],
    [0.0, 0.0, 0.0, 0.0, 1.0],
];

impl Tile<4, 8, 5> for F4R5 {
    #[inline(always)]
    fn bt<T: Float>(d: [&[T]; 8], out: [&mut [T]; 8]) {
        let c = |v: f64| T::from_f64(v);
        let (c21_4, c17_4, c5_4, c5_2) = (c(21.0 / 4.0), c(17.0 / 4.0), c(1.25), c(2.5));
        let (quarter, half, two, four, five) = (c(0.25), c(0.5), c(2.0), c(4.0), c(5.0));
        map_lanes(d, out, |[a0, a1, a2, a3, a4, a5, a6, a7]| {
            let (e1, o1) = (a2 + a6 - c17_4 * a4, a1 + a5 - c17_4 * a3);
            let (e2, o2) = (
                quarter * a2 + a6 - c5_4 * a4,
                half * a1 + two * a5 - c5_2 * a3,
            );
            let (e3, o3) = (four * a2 + a6 - five * a4, two * a1 + half * a5 - c5_2 * a3);
            [
                a0 - a6 + c21_4 * (a4 - a2),
                e1 + o1,
                e1 - o1,
                e2 + o2,
                e2 - o2,
                e3 + o3,
                e3 - o3,
                a7 - a1 + c21_4 * (a3 - a5),
            ]
        });
    }

    #[inline(always)]
    fn b<T: Float>(d: [&[T]; 8], out: [&mut [T]; 8]) {
        let c = |v: f64| T::from_f64(v);
        let (c21_4, c17_4, c5_4, c5_2) = (c(21.0 / 4.0), c(17.0 / 4.0), c(1.25), c(2.5));
        let (quarter, half, two, four, five) = (c(0.25), c(0.5), c(2.0), c(4.0), c(5.0));
        map_lanes(d, out, |[d0, d1, d2, d3, d4, d5, d6, d7]| {
            let (s1, t1) = (d1 + d2, d1 - d2);
            let (s2, t2) = (d3 + d4, d3 - d4);
            let (s3, t3) = (d5 + d6, d5 - d6);
            [
                d0,
                t1 + half * t2 + two * t3 - d7,
                s1 + quarter * s2 + four * s3 - c21_4 * d0,
                c21_4 * d7 - c17_4 * t1 - c5_2 * (t2 + t3),
                c21_4 * d0 - c17_4 * s1 - c5_4 * s2 - five * s3,
                t1 + two * t2 + half * t3 - c21_4 * d7,
                s1 + s2 + s3 - d0,
                d7,
            ]
        });
    }

    #[inline(always)]
    fn at<T: Float>(m: [&[T]; 8], out: [&mut [T]; 4]) {
        let c = |v: f64| T::from_f64(v);
        let (quarter, half, eighth) = (c(0.25), c(0.5), c(0.125));
        let (two, four, eight) = (c(2.0), c(4.0), c(8.0));
        map_lanes(m, out, |[m0, m1, m2, m3, m4, m5, m6, m7]| {
            let (s1, t1) = (m1 + m2, m1 - m2);
            let (s2, t2) = (m3 + m4, m3 - m4);
            let (s3, t3) = (m5 + m6, m5 - m6);
            [
                m0 + s1 + s2 + s3,
                t1 + two * t2 + half * t3,
                s1 + four * s2 + quarter * s3,
                t1 + eight * t2 + eighth * t3 + m7,
            ]
        });
    }

    #[inline(always)]
    fn a<T: Float>(p: [&[T]; 4], out: [&mut [T]; 8]) {
        let c = |v: f64| T::from_f64(v);
        let (quarter, half, eighth) = (c(0.25), c(0.5), c(0.125));
        let (two, four, eight) = (c(2.0), c(4.0), c(8.0));
        map_lanes(p, out, |[p0, p1, p2, p3]| {
            let (e1, o1) = (p0 + p2, p1 + p3);
            let (e2, o2) = (p0 + four * p2, two * p1 + eight * p3);
            let (e3, o3) = (p0 + quarter * p2, half * p1 + eighth * p3);
            [p0, e1 + o1, e1 - o1, e2 + o2, e2 - o2, e3 + o3, e3 - o3, p3]
        });
    }

    #[inline(always)]
    fn a_row<T: Float>(p: [&[T]; 4], j: usize, out: &mut [T]) {
        a_row_m4::<T, 8>(p, j, out);
    }

    #[inline(always)]
    fn g<T: Float>(v: [T; 5]) -> [T; 8] {
        g_times(&G4R5, v)
    }

    #[inline(always)]
    fn gt<T: Float>(v: [T; 8]) -> [T; 5] {
        gt_times(&G4R5, v)
    }
}

/// The f32 paths of their own on aarch64, for F(2x2, 3x3), F(4x4, 3x3) and F(4x4, 5x5): the
/// input, output, output-gradient and input-gradient transforms four tiles at a time in
/// registers, the filter transforms and their adjoints four filters at a time, and the
/// transposes of the filter blocks the generic path takes.
#[cfg(target_arch = "aarch64")]
mod neon {
    use super::array_of;
    use crate::util::{copy_few, copy_short};
    use std::arch::aarch64::*;
    use std::mem::MaybeUninit;

    /// Whether F(m x m, r x r) has NEON transforms here: F(2x2, 3x3), F(4x4, 3x3) and
    /// F(4x4, 5x5) (F(2x2, 5x5) keeps the generic ones).
    pub(super) const fn has_transforms(m: usize, r: usize) -> bool {
        matches!((m, r), (2, 3) | (4, 3) | (4, 5))
    }
    use std::ops::Range;

    /// The four floats as one vector (the transforms' coefficients, for multiply-adds by lane).
    #[inline(always)]
    pub(super) fn lanes(v: [f32; 4]) -> float32x4_t {
        // SAFETY: reads the array's four floats; NEON is part of the aarch64 baseline.
        unsafe { vld1q_f32(v.as_ptr()) }
    }

    /// F(4x4, 3x3)'s Aᵀ (4 x 6) times six vectors, from the sums and differences of its middle
    /// pairs; `c` = (2, 4, 8, _) for the multiply-adds by lane.
    #[inline(always)]
    pub(super) fn at_f4(d: [float32x4_t; 6], c: float32x4_t) -> [float32x4_t; 4] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (p12, n12) = (vaddq_f32(d[1], d[2]), vsubq_f32(d[1], d[2]));
            let (p34, n34) = (vaddq_f32(d[3], d[4]), vsubq_f32(d[3], d[4]));
            [
                vaddq_f32(vaddq_f32(d[0], p12), p34),
                vfmaq_laneq_f32::<0>(n12, n34, c),
                vfmaq_laneq_f32::<1>(p12, p34, c),
                vaddq_f32(vfmaq_laneq_f32::<2>(n12, n34, c), d[5]),
            ]
        }
    }

    /// F(4x4, 3x3)'s Bᵀ (6 x 6) times six vectors: `c` = (4, 5, 2, _).
    #[inline(always)]
    pub(super) fn bt_f4(
        [a0, a1, a2, a3, a4, a5]: [float32x4_t; 6],
        c: float32x4_t,
    ) -> [float32x4_t; 6] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (s12, d12) = (vaddq_f32(a1, a2), vsubq_f32(a1, a2));
            let (t, u) = (vsubq_f32(a4, a2), vsubq_f32(a3, a1));
            [
                vfmsq_laneq_f32::<1>(vfmaq_laneq_f32::<0>(a4, a0, c), a2, c),
                vfmsq_laneq_f32::<0>(vaddq_f32(a3, a4), s12, c),
                vfmaq_laneq_f32::<0>(vsubq_f32(a4, a3), d12, c),
                vfmaq_laneq_f32::<2>(t, u, c),
                vfmsq_laneq_f32::<2>(t, u, c),
                vfmsq_laneq_f32::<1>(vfmaq_laneq_f32::<0>(a5, a1, c), a3, c),
            ]
        }
    }

    /// F(2x2, 3x3)'s Bᵀ (4 x 4) times four vectors.
    #[inline(always)]
    pub(super) fn bt_f2([d0, d1, d2, d3]: [float32x4_t; 4]) -> [float32x4_t; 4] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            [
                vsubq_f32(d0, d2),
                vaddq_f32(d1, d2),
                vsubq_f32(d2, d1),
                vsubq_f32(d1, d3),
            ]
        }
    }

    /// `input_transform` for output tiles of M x M (A = M + R - 1, R = 3 or 5) in f32, four
    /// tiles of a tile row at a time in registers: per channel the band's rows (and the pad
    /// rows and columns around them) are copied into `band` with zero borders; each of a tile
    /// row's A rows then gives the four tiles' columns by two structure loads (columns 0..M
    /// of each tile, then M..A, which start the next tile), Bᵀ along the rows and down the
    /// columns (`bt` is Bᵀ), and the A·A tile positions are stored in order. `band` holds
    /// (M·rows + A - M)·(M·tw + M) floats.
    pub(super) fn input_transform<const M: usize, const A: usize>(
        x: &[f32],
        (h, w, tw): (usize, usize, usize),
        rows: &Range<usize>,
        v: &mut [f32],
        to: super::Strides,
        band: &mut [f32],
        bt: impl Fn([float32x4_t; A]) -> [float32x4_t; A],
    ) {
        check_tiling::<M>((h, w, tw), rows);
        let (n, channels) = (rows.len() * tw, x.len() / (h * w).max(1));
        if n == 0 || channels == 0 {
            return;
        }
        // Padded rows M·start .. M·end + A - M (input rows `pad` less), columns -pad ..
        // M·tw + M - pad, where pad = (A - M) / 2 = R / 2.
        let pad = (A - M) / 2;
        let (line, lines) = (M * tw + M, M * rows.len() + A - M);
        let band = &mut band[..lines * line];
        band.fill(0.0);
        let first_row = M * rows.start;
        let inside = |pr: usize| (first_row + pr).checked_sub(pad).filter(|&r| r < h);
        assert!(
            v.len() >= (A * A - 1) * to.xi + (channels - 1) * to.ch + to.at + n,
            "input_transform: destination too short"
        );
        for (ch, plane) in x.chunks_exact(h * w).enumerate() {
            for pr in 0..lines {
                if let Some(r) = inside(pr) {
                    copy_short(
                        &mut band[pr * line + pad..][..w],
                        &plane[r * w..(r + 1) * w],
                    );
                }
            }
            // SAFETY: the loads read band[(M·i + q)·line + M·t0..][..5·M] with t0 <= tw - 4,
            // inside its lines (M·tw + M long); the stores write
            // v[ξ·xi + ch·ch_stride + at + k..][..4] with k + 4 <= n (checked above); NEON is
            // part of the aarch64 baseline.
            unsafe {
                for i in 0..rows.len() {
                    for t0 in groups_of_four(tw) {
                        let e: [[float32x4_t; A]; A] = array_of(|q| {
                            let at = band.as_ptr().add((M * i + q) * line + M * t0);
                            let (lo, hi) = (
                                load_tile_columns::<M>(at),
                                load_tile_columns::<M>(at.add(M)),
                            );
                            bt(array_of(|j| if j < M { lo[j] } else { hi[j - M] }))
                        });
                        let dst = v.as_mut_ptr().add(ch * to.ch + to.at + i * tw + t0);
                        store_columns(e, &bt, dst, to.xi);
                    }
                }
            }
        }
    }

    /// F(4x4, 3x3)'s A (6 x 4) times four vectors: `c` = (2, 4, 8, _).
    #[inline(always)]
    pub(super) fn a_f4([p0, p1, p2, p3]: [float32x4_t; 4], c: float32x4_t) -> [float32x4_t; 6] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (e, od) = (vaddq_f32(p0, p2), vaddq_f32(p1, p3));
            let e4 = vfmaq_laneq_f32::<1>(p0, p2, c);
            let od4 = vfmaq_laneq_f32::<2>(vmulq_laneq_f32::<0>(p1, c), p3, c);
            [
                p0,
                vaddq_f32(e, od),
                vsubq_f32(e, od),
                vaddq_f32(e4, od4),
                vsubq_f32(e4, od4),
                p3,
            ]
        }
    }

    /// F(4x4, 3x3)'s B (6 x 6, the adjoint of `bt_f4`) times six vectors: `c` = (4, 5, 2, _).
    #[inline(always)]
    pub(super) fn b_f4(
        [a0, a1, a2, a3, a4, a5]: [float32x4_t; 6],
        c: float32x4_t,
    ) -> [float32x4_t; 6] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (p12, p34) = (vaddq_f32(a1, a2), vaddq_f32(a3, a4));
            let (n12, d43) = (vsubq_f32(a1, a2), vsubq_f32(a4, a3));
            let t = vsubq_f32(a5, n12);
            let sum = vfmaq_laneq_f32::<0>(vfmaq_laneq_f32::<1>(p34, a0, c), p12, c);
            [
                vmulq_laneq_f32::<0>(a0, c),
                vfmaq_laneq_f32::<0>(vmulq_laneq_f32::<2>(d43, c), t, c),
                vnegq_f32(sum),
                vfmsq_laneq_f32::<1>(vfmsq_laneq_f32::<2>(n12, d43, c), a5, c),
                vaddq_f32(vaddq_f32(a0, p12), p34),
                a5,
            ]
        }
    }

    /// F(2x2, 3x3)'s B (4 x 4, the adjoint of `bt_f2`) times four vectors.
    #[inline(always)]
    pub(super) fn b_f2([d0, d1, d2, d3]: [float32x4_t; 4]) -> [float32x4_t; 4] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let n12 = vsubq_f32(d1, d2);
            [
                d0,
                vaddq_f32(n12, d3),
                vsubq_f32(vaddq_f32(d1, d2), d0),
                vnegq_f32(d3),
            ]
        }
    }

    /// `input_adjoint` for output tiles of M x M (A = M + R - 1 <= 2·M) in f32, four tiles
    /// of a tile row at a time in registers: the A·A tile positions of dV loaded in order (one
    /// pointer stepping by the position stride), B dV Bᵀ down the columns and along the rows
    /// (`b` is B), and each of the tiles' A rows added into its row of the padded plane: the
    /// first M columns into the four tiles' own columns by one structure load and store
    /// (`ld2`/`ld4`, `st2`/`st4`), the last A - M into the first columns of the four tiles
    /// after them by another. A tile row's last group of four ends at its last tile; in the
    /// lanes of the tiles that the group before it added, it adds -0 (which leaves every value
    /// as it is). `acc` holds whole padded planes of `hp` x `wp`.
    pub(super) fn input_adjoint<const M: usize, const A: usize>(
        dv: &[f32],
        (hp, wp, tw): (usize, usize, usize),
        rows: &Range<usize>,
        (ld, at): (usize, usize),
        acc: &mut [f32],
        b: impl Fn([float32x4_t; A]) -> [float32x4_t; A],
    ) {
        let (n, planes) = (rows.len() * tw, acc.len() / (hp * wp).max(1));
        if n == 0 || planes == 0 {
            return;
        }
        let xi_stride = planes * ld;
        assert!(
            tw >= 4 && A - M <= M && M * tw + A - M <= wp && M * (rows.end - 1) + A <= hp,
            "input_adjoint: {M}x{M} tiles, {tw} per row, rows {rows:?}, plane {hp}x{wp}"
        );
        assert!(
            dv.len() >= (A * A - 1) * xi_stride + (planes - 1) * ld + at + n,
            "input_adjoint: dV too short"
        );
        // SAFETY: the loads read dv[ξ·xi_stride + c·ld + at + k..][..4] with k = i·tw + t0 and
        // k + 4 <= n (checked above); the structure loads and stores read and write 4·M floats
        // from column M·t0 or M·(t0 + 1) of padded row M·th + r < hp (checked above), inside
        // the row where M·(t0 + 1) + 4·M <= wp, else through a copy of the row's rest; NEON is
        // part of the aarch64 baseline.
        unsafe {
            let keep = vdupq_n_f32(-0.0);
            let lane = vld1q_u32([0, 1, 2, 3].as_ptr());
            for (c, plane) in acc.chunks_exact_mut(hp * wp).enumerate() {
                let base = dv.as_ptr().add(c * ld + at);
                for (i, th) in rows.clone().enumerate() {
                    let mut added = 0;
                    for t0 in groups_of_four(tw) {
                        // The lanes of the tiles the previous group added.
                        let again = vcltq_u32(lane, vdupq_n_u32((added - t0) as u32));
                        added = t0 + 4;
                        let mut p = base.add(i * tw + t0);
                        let d: [[float32x4_t; A]; A] = array_of(|_| {
                            array_of(|_| {
                                let v = vld1q_f32(p);
                                p = p.wrapping_add(xi_stride);
                                v
                            })
                        });
                        // u[l] = B times column l of dV; row r of B dV Bᵀ = B times (u[l][r]).
                        let u: [[float32x4_t; A]; A] = array_of(|l| b(array_of(|k| d[k][l])));
                        let tile_rows = (0..A).map(|r| (r, b(array_of(|l| u[l][r]))));
                        for (r, e) in tile_rows {
                            let e: [float32x4_t; A] = array_of(|j| vbslq_f32(again, keep, e[j]));
                            let row = plane.as_mut_ptr().add((M * th + r) * wp);
                            let own = row.add(M * t0);
                            let mut v = load_tile_columns::<M>(own);
                            for j in 0..M {
                                v[j] = vaddq_f32(v[j], e[j]);
                            }
                            store_tile_columns::<M>(own, v);
                            let next = row.add(M * (t0 + 1));
                            let add_next = |v: &mut [float32x4_t; M]| {
                                for j in M..A {
                                    v[j - M] = vaddq_f32(v[j - M], e[j]);
                                }
                            };
                            let rest = wp - M * (t0 + 1);
                            let mut v = load_tile_columns_upto::<M>(next, rest);
                            add_next(&mut v);
                            store_tile_columns_upto::<M>(next, v, rest);
                        }
                    }
                }
            }
        }
    }

    /// F(4x4, 5x5)'s Bᵀ (8 x 8) times eight vectors (the generic `F4R5::bt`, fused).
    #[inline(always)]
    pub(super) fn bt_f4r5([a0, a1, a2, a3, a4, a5, a6, a7]: [float32x4_t; 8]) -> [float32x4_t; 8] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let e1 = vfmsq_n_f32(vaddq_f32(a2, a6), a4, 4.25);
            let o1 = vfmsq_n_f32(vaddq_f32(a1, a5), a3, 4.25);
            let e2 = vfmsq_n_f32(vfmaq_n_f32(a6, a2, 0.25), a4, 1.25);
            let o2 = vfmsq_n_f32(vfmaq_n_f32(vmulq_n_f32(a1, 0.5), a5, 2.0), a3, 2.5);
            let e3 = vfmsq_n_f32(vfmaq_n_f32(a6, a2, 4.0), a4, 5.0);
            let o3 = vfmsq_n_f32(vfmaq_n_f32(vmulq_n_f32(a1, 2.0), a5, 0.5), a3, 2.5);
            let first = vfmaq_n_f32(vsubq_f32(a0, a6), vsubq_f32(a4, a2), 5.25);
            let last = vfmaq_n_f32(vsubq_f32(a7, a1), vsubq_f32(a3, a5), 5.25);
            around_pairs(first, [(e1, o1), (e2, o2), (e3, o3)], last)
        }
    }

    /// An 8-point transform's outputs from their first and last and the even and odd parts of
    /// its three middle pairs: (first, e1 + o1, e1 - o1, .., e3 + o3, e3 - o3, last).
    #[inline(always)]
    fn around_pairs(
        first: float32x4_t,
        parts: [(float32x4_t, float32x4_t); 3],
        last: float32x4_t,
    ) -> [float32x4_t; 8] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let [(e1, o1), (e2, o2), (e3, o3)] = parts;
            [
                first,
                vaddq_f32(e1, o1),
                vsubq_f32(e1, o1),
                vaddq_f32(e2, o2),
                vsubq_f32(e2, o2),
                vaddq_f32(e3, o3),
                vsubq_f32(e3, o3),
                last,
            ]
        }
    }

    /// The sums and the differences of an 8-point transform's middle pairs (v1, v2), (v3, v4)
    /// and (v5, v6): its points ±1, ±2 and ±½ in pairs.
    #[inline(always)]
    fn middle_pairs(v: [float32x4_t; 8]) -> ([float32x4_t; 3], [float32x4_t; 3]) {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            (
                array_of(|p| vaddq_f32(v[2 * p + 1], v[2 * p + 2])),
                array_of(|p| vsubq_f32(v[2 * p + 1], v[2 * p + 2])),
            )
        }
    }

    /// F(4x4, 5x5)'s B (8 x 8, the adjoint of `bt_f4r5`) times eight vectors.
    #[inline(always)]
    pub(super) fn b_f4r5(d: [float32x4_t; 8]) -> [float32x4_t; 8] {
        let (d0, d7) = (d[0], d[7]);
        let ([s1, s2, s3], [t1, t2, t3]) = middle_pairs(d);
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            [
                d0,
                vfmaq_n_f32(vfmaq_n_f32(vsubq_f32(t1, d7), t2, 0.5), t3, 2.0),
                vfmsq_n_f32(vfmaq_n_f32(vfmaq_n_f32(s1, s2, 0.25), s3, 4.0), d0, 5.25),
                vfmsq_n_f32(
                    vfmsq_n_f32(vmulq_n_f32(d7, 5.25), t1, 4.25),
                    vaddq_f32(t2, t3),
                    2.5,
                ),
                vfmsq_n_f32(
                    vfmsq_n_f32(vfmsq_n_f32(vmulq_n_f32(d0, 5.25), s1, 4.25), s2, 1.25),
                    s3,
                    5.0,
                ),
                vfmsq_n_f32(vfmaq_n_f32(vfmaq_n_f32(t1, t2, 2.0), t3, 0.5), d7, 5.25),
                vsubq_f32(vaddq_f32(vaddq_f32(s1, s2), s3), d0),
                d7,
            ]
        }
    }

    /// F(4x4, 5x5)'s Aᵀ (4 x 8) times eight vectors.
    #[inline(always)]
    pub(super) fn at_f4r5(m: [float32x4_t; 8]) -> [float32x4_t; 4] {
        let (m0, m7) = (m[0], m[7]);
        let ([s1, s2, s3], [t1, t2, t3]) = middle_pairs(m);
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            [
                vaddq_f32(vaddq_f32(m0, s1), vaddq_f32(s2, s3)),
                vfmaq_n_f32(vfmaq_n_f32(t1, t2, 2.0), t3, 0.5),
                vfmaq_n_f32(vfmaq_n_f32(s1, s2, 4.0), s3, 0.25),
                vfmaq_n_f32(vfmaq_n_f32(vaddq_f32(t1, m7), t2, 8.0), t3, 0.125),
            ]
        }
    }

    /// F(4x4, 5x5)'s A (8 x 4) times four vectors.
    #[inline(always)]
    pub(super) fn a_f4r5([p0, p1, p2, p3]: [float32x4_t; 4]) -> [float32x4_t; 8] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (e1, o1) = (vaddq_f32(p0, p2), vaddq_f32(p1, p3));
            let (e2, o2) = (
                vfmaq_n_f32(p0, p2, 4.0),
                vfmaq_n_f32(vmulq_n_f32(p1, 2.0), p3, 8.0),
            );
            let e3 = vfmaq_n_f32(p0, p2, 0.25);
            let o3 = vfmaq_n_f32(vmulq_n_f32(p1, 0.5), p3, 0.125);
            around_pairs(p0, [(e1, o1), (e2, o2), (e3, o3)], p3)
        }
    }

    /// F(2x2, 3x3)'s Aᵀ (2 x 4) times four vectors.
    #[inline(always)]
    pub(super) fn at_f2([m0, m1, m2, m3]: [float32x4_t; 4]) -> [float32x4_t; 2] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            [
                vaddq_f32(vaddq_f32(m0, m1), m2),
                vsubq_f32(vsubq_f32(m1, m2), m3),
            ]
        }
    }

    /// F(2x2, 3x3)'s A (4 x 2) times two vectors.
    #[inline(always)]
    pub(super) fn a_f2([p0, p1]: [float32x4_t; 2]) -> [float32x4_t; 4] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe { [p0, vaddq_f32(p0, p1), vsubq_f32(p0, p1), vnegq_f32(p1)] }
    }

    /// Four tiles' columns 0..M of one output row from `src`, split by column (`ld2`/`ld4`).
    ///
    /// # Safety
    /// `src` has 4·M readable floats; M is 2 or 4.
    #[inline(always)]
    unsafe fn load_tile_columns<const M: usize>(src: *const f32) -> [float32x4_t; M] {
        // SAFETY: as the caller promises; the arrays are read as M vectors where M matches.
        unsafe {
            let mut v = [vdupq_n_f32(0.0); M];
            let out = v.as_mut_ptr();
            match M {
                2 => {
                    let r = vld2q_f32(src);
                    (*out, *out.add(1)) = (r.0, r.1);
                }
                4 => {
                    let r = vld4q_f32(src);
                    (*out, *out.add(1), *out.add(2), *out.add(3)) = (r.0, r.1, r.2, r.3);
                }
                _ => unreachable!("output tiles are 2 or 4 wide"),
            }
            v
        }
    }

    /// The inverse of `load_tile_columns`: four tiles' columns interleaved into `dst`.
    ///
    /// # Safety
    /// `dst` has 4·M writable floats; M is 2 or 4.
    #[inline(always)]
    unsafe fn store_tile_columns<const M: usize>(dst: *mut f32, v: [float32x4_t; M]) {
        // SAFETY: as the caller promises.
        unsafe {
            let v = v.as_ptr();
            match M {
                2 => vst2q_f32(dst, float32x4x2_t(*v, *v.add(1))),
                4 => vst4q_f32(dst, float32x4x4_t(*v, *v.add(1), *v.add(2), *v.add(3))),
                _ => unreachable!("output tiles are 2 or 4 wide"),
            }
        }
    }

    /// `load_tile_columns` from a row with only `avail` floats left at `src`: fewer than 4·M
    /// go through a zero-padded copy.
    ///
    /// # Safety
    /// `src` has min(avail, 4·M) readable floats; M is 2 or 4.
    #[inline(always)]
    unsafe fn load_tile_columns_upto<const M: usize>(
        src: *const f32,
        avail: usize,
    ) -> [float32x4_t; M] {
        // SAFETY: as the caller promises; `padded` holds 16 >= 4·M floats.
        unsafe {
            if avail >= 4 * M {
                return load_tile_columns::<M>(src);
            }
            let mut padded = [0f32; 16];
            copy_few(src, padded.as_mut_ptr(), avail);
            load_tile_columns::<M>(padded.as_ptr())
        }
    }

    /// `store_tile_columns` into a row with only `avail` floats left at `dst`: of fewer than
    /// 4·M, only those are written.
    ///
    /// # Safety
    /// `dst` has min(avail, 4·M) writable floats; M is 2 or 4.
    #[inline(always)]
    unsafe fn store_tile_columns_upto<const M: usize>(
        dst: *mut f32,
        v: [float32x4_t; M],
        avail: usize,
    ) {
        // SAFETY: as the caller promises; `row` holds 16 >= 4·M floats.
        unsafe {
            if avail >= 4 * M {
                return store_tile_columns::<M>(dst, v);
            }
            let mut row = [0f32; 16];
            store_tile_columns::<M>(row.as_mut_ptr(), v);
            copy_few(row.as_ptr(), dst, avail);
        }
    }

    /// `f` down each column of `rows` (R rows of the four tiles' A values each), element r of
    /// column `col`'s result stored as tile position r·A + col, at `dst + (r·A + col)·xi`.
    ///
    /// # Safety
    /// Four floats are writable at each of those addresses.
    #[inline(always)]
    unsafe fn store_columns<const R: usize, const A: usize>(
        rows: [[float32x4_t; A]; R],
        f: &impl Fn([float32x4_t; R]) -> [float32x4_t; A],
        dst: *mut f32,
        xi: usize,
    ) {
        for (col, first) in (0..A).map(|col| (col, dst.wrapping_add(col * xi))) {
            let mut at = first;
            for v in f(array_of(|r| rows[r][col])) {
                // SAFETY: as the caller promises.
                unsafe { vst1q_f32(at, v) };
                at = at.wrapping_add(A * xi);
            }
        }
    }

    /// The first tile of each group of four along a tile row of `tw` (at least 4) tiles: every
    /// fourth, the last group ending at the last tile (recomputing up to three).
    fn groups_of_four(tw: usize) -> impl Iterator<Item = usize> {
        (0..tw.div_ceil(4)).map(move |g| (4 * g).min(tw - 4))
    }

    /// Checks the tiling a transform of M x M output tiles works on: `tw` tiles of M columns
    /// span the w columns, tile rows `rows` lie in the h rows.
    fn check_tiling<const M: usize>((h, w, tw): (usize, usize, usize), rows: &Range<usize>) {
        assert!(
            tw >= 4 && w <= M * tw && w + M > M * tw && M * rows.end < h + M,
            "{M}x{M} tiles: {tw} per row and rows {rows:?} do not tile {h}x{w}"
        );
    }

    /// `output_adjoint` for output tiles of M x M (A = M + R - 1) in f32, four tiles of a tile row
    /// at a time in registers: each output row of the four tiles read by one structure load
    /// (split into its M columns), A dy Aᵀ (`a` is A), and the A·A tile positions stored in
    /// order. Rows and columns past the map read as zero.
    pub(super) fn output_adjoint<const M: usize, const A: usize>(
        dy: &[f32],
        (h, w, tw): (usize, usize, usize),
        rows: &Range<usize>,
        dm: &mut [f32],
        to: super::Strides,
        a: impl Fn([float32x4_t; M]) -> [float32x4_t; A],
    ) {
        check_tiling::<M>((h, w, tw), rows);
        let (n, planes) = (rows.len() * tw, dy.len() / (h * w).max(1));
        if n == 0 || planes == 0 {
            return;
        }
        assert!(
            dm.len() >= (A * A - 1) * to.xi + (planes - 1) * to.ch + to.at + n,
            "output_adjoint: destination too short"
        );
        let out = dm.as_mut_ptr();
        // SAFETY: the loads read rows r < h of a plane of dy, 4·M floats from column M·t0
        // where M·t0 + 4·M <= w (else a zero-padded copy); the stores write
        // dm[ξ·xi + o·ch + at + k..][..4] with k + 4 <= n (checked above); NEON is part of the
        // aarch64 baseline.
        unsafe {
            let zero = vdupq_n_f32(0.0);
            for (o, plane) in dy.chunks_exact(h * w).enumerate() {
                for (i, th) in rows.clone().enumerate() {
                    let rows_in = (h - M * th).min(M);
                    for t0 in groups_of_four(tw) {
                        let row = |r: usize| {
                            let src = plane.as_ptr().add((M * th + r) * w + M * t0);
                            if r >= rows_in {
                                [zero; M]
                            } else {
                                load_tile_columns_upto::<M>(src, w - M * t0)
                            }
                        };
                        // dy Aᵀ row by row (a vector per tile column), then A (dy Aᵀ) column by
                        // column.
                        let pa: [[float32x4_t; A]; M] = array_of(|r| a(row(r)));
                        store_columns(pa, &a, out.add(o * to.ch + to.at + i * tw + t0), to.xi);
                    }
                }
            }
        }
    }

    /// `output_transform` for output tiles of M x M (A = M + R - 1) in f32, four tiles of a tile
    /// row at a time in registers: each tile position's GEMM output loaded once (in order, one
    /// pointer stepping by the position stride), M A row by row and Aᵀ (M A) column by column
    /// (`at` is Aᵀ), the bias and the ReLU without a pass over memory between them, and each
    /// output row of the four tiles stored interleaved by one structure store. The generic
    /// path keeps its intermediate rows in memory and runs a pass per step: F(4x4, 3x3) took
    /// 1.7 times the instructions there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn output_transform<const M: usize, const A: usize>(
        m: &[f32],
        (h, w, tw): (usize, usize, usize),
        rows: &Range<usize>,
        (ld, at): (usize, usize),
        y: &mut [MaybeUninit<f32>],
        bias: &[f32],
        relu: bool,
        at_times: impl Fn([float32x4_t; A]) -> [float32x4_t; M],
    ) {
        check_tiling::<M>((h, w, tw), rows);
        let (o_count, n) = (bias.len(), rows.len() * tw);
        let xi_stride = o_count * ld;
        assert!(y.len() == o_count * h * w, "output_transform: output size");
        if n == 0 || o_count == 0 {
            return;
        }
        assert!(
            m.len() >= (A * A - 1) * xi_stride + (o_count - 1) * ld + at + n,
            "output_transform: GEMM output too short"
        );
        let out = y.as_mut_ptr().cast::<f32>();
        // SAFETY: the loads read m[ξ·xi_stride + o·ld + at + k..][..4] with k = i·tw + t0 and
        // k + 4 <= n (checked above); the stores write rows r < h of plane o, columns below w
        // (the structure store only where M·t0 + 4·M <= w); NEON is part of the aarch64
        // baseline.
        unsafe {
            let zero = vdupq_n_f32(0.0);
            for (o, &b) in bias.iter().enumerate() {
                let base = m.as_ptr().add(o * ld + at);
                let plane = out.add(o * h * w);
                let b = vdupq_n_f32(b);
                for (i, th) in rows.clone().enumerate() {
                    let rows_in = (h - M * th).min(M);
                    for t0 in groups_of_four(tw) {
                        let mut p = base.add(i * tw + t0);
                        let mut next = || {
                            let v = vld1q_f32(p);
                            p = p.wrapping_add(xi_stride);
                            v
                        };
                        let ma: [[float32x4_t; M]; A] =
                            array_of(|_| at_times(array_of(|_| next())));
                        let mut y = [[zero; M]; M];
                        for col in 0..M {
                            let ys = at_times(array_of(|q| ma[q][col]));
                            for (r, v) in ys.into_iter().enumerate() {
                                let v = vaddq_f32(v, b);
                                y[r][col] = if relu { vmaxnmq_f32(v, zero) } else { v };
                            }
                        }
                        for (r, yr) in y.into_iter().enumerate().take(rows_in) {
                            let dst = plane.add((M * th + r) * w + M * t0);
                            store_tile_columns_upto::<M>(dst, yr, w - M * t0);
                        }
                    }
                }
            }
        }
    }

    /// `filters_to_taps` for the whole quads of filters in `filters` (`K` floats each) into
    /// `taps` (`K` rows of `nf`).
    pub(super) fn filters_to_taps<const K: usize>(filters: &[f32], taps: &mut [f32], nf: usize) {
        let quads = filters.len() / (4 * K);
        assert!(taps.len() >= K * nf && 4 * quads <= nf);
        let (src, dst) = (filters.as_ptr(), taps.as_mut_ptr());
        // SAFETY: quad c reads filters 4c..4c + 4 (K floats each) and writes floats 4c..4c + 4
        // of each of the K rows of nf, inside both slices (asserted above); NEON is part of
        // the aarch64 baseline.
        unsafe {
            for c in 0..quads {
                for (k, v) in load_taps::<K>(src.add(4 * c * K)).into_iter().enumerate() {
                    vst1q_f32(dst.add(k * nf + 4 * c), v);
                }
            }
        }
    }

    /// The K taps of four consecutive filters (K floats each, from `f`) as K vectors, lane l
    /// from filter l: four taps of the four filters per `ld4` of one lane per filter, where
    /// element loops take a load and an insert per float.
    ///
    /// # Safety
    /// 4·K floats are readable from `f`.
    #[inline(always)]
    unsafe fn load_taps<const K: usize>(f: *const f32) -> [float32x4_t; K] {
        // SAFETY: as the caller promises; NEON is part of the aarch64 baseline.
        unsafe {
            let mut taps = [vdupq_n_f32(0.0); K];
            for k in (0..K - K % 4).step_by(4) {
                let zero = vdupq_n_f32(0.0);
                let mut v = float32x4x4_t(zero, zero, zero, zero);
                v = vld4q_lane_f32::<0>(f.add(k), v);
                v = vld4q_lane_f32::<1>(f.add(K + k), v);
                v = vld4q_lane_f32::<2>(f.add(2 * K + k), v);
                v = vld4q_lane_f32::<3>(f.add(3 * K + k), v);
                (taps[k], taps[k + 1], taps[k + 2], taps[k + 3]) = (v.0, v.1, v.2, v.3);
            }
            for (k, tap) in taps.iter_mut().enumerate().skip(K - K % 4) {
                let mut v = vdupq_n_f32(0.0);
                v = vld1q_lane_f32::<0>(f.add(k), v);
                v = vld1q_lane_f32::<1>(f.add(K + k), v);
                v = vld1q_lane_f32::<2>(f.add(2 * K + k), v);
                v = vld1q_lane_f32::<3>(f.add(3 * K + k), v);
                *tap = v;
            }
            taps
        }
    }

    /// The inverse of `load_taps`: K vectors (lane l: filter l) as four consecutive filters of
    /// K floats from `f`, by `st4` of one lane per filter.
    ///
    /// # Safety
    /// 4·K floats are writable from `f`.
    #[inline(always)]
    unsafe fn store_taps<const K: usize>(f: *mut f32, taps: [float32x4_t; K]) {
        // SAFETY: as the caller promises; NEON is part of the aarch64 baseline.
        unsafe {
            for k in (0..K - K % 4).step_by(4) {
                let v = float32x4x4_t(taps[k], taps[k + 1], taps[k + 2], taps[k + 3]);
                vst4q_lane_f32::<0>(f.add(k), v);
                vst4q_lane_f32::<1>(f.add(K + k), v);
                vst4q_lane_f32::<2>(f.add(2 * K + k), v);
                vst4q_lane_f32::<3>(f.add(3 * K + k), v);
            }
            for (k, &v) in taps.iter().enumerate().skip(K - K % 4) {
                vst1q_lane_f32::<0>(f.add(k), v);
                vst1q_lane_f32::<1>(f.add(K + k), v);
                vst1q_lane_f32::<2>(f.add(2 * K + k), v);
                vst1q_lane_f32::<3>(f.add(3 * K + k), v);
            }
        }
    }

    /// F(2x2, 3x3)'s G (4 x 3) times three vectors (the generic `F2::g`).
    #[inline(always)]
    pub(super) fn g_f2([a, b, c]: [float32x4_t; 3]) -> [float32x4_t; 4] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (h, hb) = (vmulq_n_f32(vaddq_f32(a, c), 0.5), vmulq_n_f32(b, 0.5));
            [a, vaddq_f32(h, hb), vsubq_f32(h, hb), c]
        }
    }

    /// F(2x2, 3x3)'s Gᵀ (3 x 4) times four vectors (the generic `F2::gt`).
    #[inline(always)]
    pub(super) fn gt_f2([d0, d1, d2, d3]: [float32x4_t; 4]) -> [float32x4_t; 3] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let s = vaddq_f32(d1, d2);
            [
                vfmaq_n_f32(d0, s, 0.5),
                vmulq_n_f32(vsubq_f32(d1, d2), 0.5),
                vfmaq_n_f32(d3, s, 0.5),
            ]
        }
    }

    /// F(4x4, 3x3)'s G (6 x 3, `G4`) times three vectors (the generic `F4::g`).
    #[inline(always)]
    pub(super) fn g_f4([a, b, c]: [float32x4_t; 3]) -> [float32x4_t; 6] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let outer = vaddq_f32(a, c);
            let even = vfmaq_n_f32(vmulq_n_f32(c, 1.0 / 6.0), a, 1.0 / 24.0);
            let odd = vmulq_n_f32(b, 1.0 / 12.0);
            [
                vmulq_n_f32(a, 0.25),
                vmulq_n_f32(vaddq_f32(outer, b), -1.0 / 6.0),
                vmulq_n_f32(vsubq_f32(b, outer), 1.0 / 6.0),
                vaddq_f32(even, odd),
                vsubq_f32(even, odd),
                c,
            ]
        }
    }

    /// F(4x4, 3x3)'s Gᵀ (3 x 6) times six vectors (the generic `F4::gt`).
    #[inline(always)]
    pub(super) fn gt_f4([v0, v1, v2, v3, v4, v5]: [float32x4_t; 6]) -> [float32x4_t; 3] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (p12, n12) = (vaddq_f32(v1, v2), vsubq_f32(v2, v1));
            let (p34, n34) = (vaddq_f32(v3, v4), vsubq_f32(v3, v4));
            [
                vfmaq_n_f32(
                    vfmsq_n_f32(vmulq_n_f32(v0, 0.25), p12, 1.0 / 6.0),
                    p34,
                    1.0 / 24.0,
                ),
                vfmaq_n_f32(vmulq_n_f32(n12, 1.0 / 6.0), n34, 1.0 / 12.0),
                vfmaq_n_f32(v5, vsubq_f32(p34, p12), 1.0 / 6.0),
            ]
        }
    }

    /// F(4x4, 5x5)'s G (8 x 5, `G4R5`) times five vectors: its rows in pairs (±1, ±2, ±½)
    /// from the sums of the even and of the odd taps.
    #[inline(always)]
    pub(super) fn g_f4r5([v0, v1, v2, v3, v4]: [float32x4_t; 5]) -> [float32x4_t; 8] {
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let (e, o) = (vaddq_f32(vaddq_f32(v0, v2), v4), vaddq_f32(v1, v3));
            let e2 = vfmaq_n_f32(
                vfmaq_n_f32(vmulq_n_f32(v0, 1.0 / 90.0), v2, 2.0 / 45.0),
                v4,
                8.0 / 45.0,
            );
            let o2 = vfmaq_n_f32(vmulq_n_f32(v1, 1.0 / 45.0), v3, 4.0 / 45.0);
            let e3 = vfmaq_n_f32(
                vfmaq_n_f32(vmulq_n_f32(v0, 32.0 / 45.0), v2, 8.0 / 45.0),
                v4,
                2.0 / 45.0,
            );
            let o3 = vfmaq_n_f32(vmulq_n_f32(v1, 16.0 / 45.0), v3, 4.0 / 45.0);
            [
                v0,
                vmulq_n_f32(vaddq_f32(e, o), -2.0 / 9.0),
                vmulq_n_f32(vsubq_f32(e, o), -2.0 / 9.0),
                vaddq_f32(e2, o2),
                vsubq_f32(e2, o2),
                vaddq_f32(e3, o3),
                vsubq_f32(e3, o3),
                v4,
            ]
        }
    }

    /// F(4x4, 5x5)'s Gᵀ (5 x 8) times eight vectors: the pairs of rows of G as sums (even
    /// taps) and differences (odd taps).
    #[inline(always)]
    pub(super) fn gt_f4r5(w: [float32x4_t; 8]) -> [float32x4_t; 5] {
        let (w0, w7) = (w[0], w[7]);
        let ([s12, s34, s56], [d12, d34, d56]) = middle_pairs(w);
        // SAFETY: register arithmetic of the aarch64 baseline.
        unsafe {
            let even = |c3: f32, c5: f32, v: float32x4_t| {
                vfmaq_n_f32(
                    vfmaq_n_f32(vfmsq_n_f32(v, s12, 2.0 / 9.0), s34, c3),
                    s56,
                    c5,
                )
            };
            let odd = |c3: f32, c5: f32| {
                vfmaq_n_f32(vfmaq_n_f32(vmulq_n_f32(d12, -2.0 / 9.0), d34, c3), d56, c5)
            };
            [
                even(1.0 / 90.0, 32.0 / 45.0, w0),
                odd(1.0 / 45.0, 16.0 / 45.0),
                even(2.0 / 45.0, 8.0 / 45.0, vdupq_n_f32(0.0)),
                odd(4.0 / 45.0, 4.0 / 45.0),
                even(8.0 / 45.0, 2.0 / 45.0, w7),
            ]
        }
    }

    /// `filter_transform` for the whole quads of filters in `filters` (R·R = K floats each),
    /// four filters at a time in registers: their taps by `load_taps`, G down each column and
    /// along each row (`g` is G), and tile position ξ of quad q's four filters stored at
    /// `u + ξ·oc + 4q`, without the passes over memory between the steps.
    ///
    /// # Safety
    /// For every ξ < A·A, `filters.len() / K` floats are writable from `u + ξ·oc`.
    pub(super) unsafe fn filter_transform<const R: usize, const K: usize, const A: usize>(
        filters: &[f32],
        u: *mut f32,
        oc: usize,
        g: impl Fn([float32x4_t; R]) -> [float32x4_t; A],
    ) {
        assert_eq!(R * R, K);
        // SAFETY: quad q reads filters 4q..4q + 4 of `filters` and writes floats 4q..4q + 4
        // from u + ξ·oc, as the caller promises.
        unsafe {
            for q in 0..filters.len() / (4 * K) {
                let taps = load_taps::<K>(filters.as_ptr().add(4 * q * K));
                // Column j of G g: G times the filters' column j (taps l·R + j).
                let gg: [[float32x4_t; A]; R] = array_of(|j| g(array_of(|l| taps[l * R + j])));
                // Row i of G g Gᵀ: G times row i of G g.
                for (i, row) in (0..A).map(|i| g(array_of(|j| gg[j][i]))).enumerate() {
                    for (l, v) in row.into_iter().enumerate() {
                        vst1q_f32(u.add((i * A + l) * oc + 4 * q), v);
                    }
                }
            }
        }
    }

    /// `filter_adjoint` for the whole quads of filters that `dw` holds (K = R·R floats each),
    /// four filters at a time in registers: tile position ξ of quad q's filters from
    /// `du + ξ·oc + 4q`, Gᵀ down each column and along each row (`gt` is Gᵀ), and the R·R taps
    /// into the four filters by `store_taps`, initialising them.
    ///
    /// # Safety
    /// For every ξ < A·A, `dw.len() / K` floats are readable from `du + ξ·oc`.
    pub(super) unsafe fn filter_adjoint<const R: usize, const K: usize, const A: usize>(
        du: *const f32,
        oc: usize,
        dw: &mut [MaybeUninit<f32>],
        gt: impl Fn([float32x4_t; A]) -> [float32x4_t; R],
    ) {
        assert_eq!(R * R, K);
        let out = dw.as_mut_ptr().cast::<f32>();
        // SAFETY: quad q reads floats 4q..4q + 4 from du + ξ·oc (the caller's promise) and
        // writes filters 4q..4q + 4 of `dw`.
        unsafe {
            for q in 0..dw.len() / (4 * K) {
                let d = |xi: usize| vld1q_f32(du.add(xi * oc + 4 * q));
                // t[l]: Gᵀ times column l of dU; row k of Gᵀ dU G is Gᵀ times (t[l][k]).
                let t: [[float32x4_t; R]; A] = array_of(|l| gt(array_of(|i| d(i * A + l))));
                let mut taps = [vdupq_n_f32(0.0); K];
                for k in 0..R {
                    let row = gt(array_of(|l| t[l][k]));
                    taps[k * R..(k + 1) * R].copy_from_slice(&row);
                }
                store_taps::<K>(out.add(4 * q * K), taps);
            }
        }
    }

    /// `taps_to_filters` for the whole quads of filters that `out` holds (`K` floats each),
    /// from `taps` (`K` rows of `nf`), initialising them.
    pub(super) fn taps_to_filters<const K: usize>(
        taps: &[f32],
        out: &mut [MaybeUninit<f32>],
        nf: usize,
    ) {
        let quads = out.len() / (4 * K);
        assert!(taps.len() >= K * nf && 4 * quads <= nf);
        let (src, dst) = (taps.as_ptr(), out.as_mut_ptr().cast::<f32>());
        // SAFETY: as in `filters_to_taps`, the other way round; every float of the quads'
        // filters is written.
        unsafe {
            for c in 0..quads {
                let taps = array_of(|k| vld1q_f32(src.add(k * nf + 4 * c)));
                store_taps::<K>(dst.add(4 * c * K), taps);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::Conv2d;

    #[test]
    fn tile_major_matches_xi_major() {
        // Batched layers (at least as many images as threads; the others are skipped): F(4x4,
        // 3x3) on maps whose tiles fill blocks exactly and not and on a 28x28 map cut into
        // bands, F(2x2, 3x3), F(4x4, 5x5); channels across and within groups of 16.
        let layers: [(usize, usize, usize, usize, usize, usize); 6] = [
            (17, 20, 14, 40, 3, 4),
            (6, 17, 9, 33, 3, 4),
            (5, 16, 28, 24, 3, 2),
            (4, 18, 28, 20, 3, 4),
            (4, 12, 12, 18, 5, 4),
            (16, 3, 7, 5, 3, 4),
        ];
        let values = |len: usize, seed: u64| -> Vec<f32> {
            let v = crate::test_util::Rng::new(seed).vec(len);
            v.into_iter().map(|v| v as f32).collect()
        };
        crate::test_util::on_thread_counts(|| {
            let threads = rayon::current_num_threads();
            for (n, c, h, o, r, m) in layers {
                let p = Conv2d {
                    stride: 1,
                    pad: r / 2,
                    groups: 1,
                    relu: true,
                };
                let g = Geom::new(&[n, c, h, h], &[o, c, r, r], &[o], p).unwrap();
                if few_images(&g) {
                    continue;
                }
                let x = values(n * c * h * h, 1);
                let w = values(o * c * r * r, 2);
                let bias = values(o, 3);
                let dy = values(n * o * h * h, 4);
                let u = filters(&w, &g, m);
                let what = format!("{n}x{c}x{h}x{h} -> {o}, {r}x{r}, F({m}), {threads} threads");
                let fwd = |tm| fwd_in_layout((&x, c * h * h), &u, &bias, &g, true, m, tm);
                close(&fwd(true), &fwd(false), &format!("forward {what}"));
                let bwd = |tm| bwd_both_in_layout((&x, c * h * h), &dy, &w, None, &g, m, tm);
                let ((dx_t, dw_t), (dx_x, dw_x)) = (bwd(true), bwd(false));
                close(&dx_t, &dx_x, &format!("dx {what}"));
                close(&dw_t, &dw_x, &format!("dW, db {what}"));
            }
        });
    }

    /// Equal up to the rounding of sums taken in another order.
    fn close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let scale = want.iter().fold(0f32, |a, &v| a.max(v.abs())).max(1.0);
        for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "{what}: [{i}] {a} against {b}"
            );
        }
    }

    /// On a CPU without AVX-512 F (and on aarch64) `transpose` is the element loop itself: this
    /// checks it against its definition, and `tile_major_matches_xi_major` the path around it.
    #[test]
    fn transposes_match_the_element_loop() {
        // Blocks with and without whole 16 x 16 tiles, strides past the widths.
        for (rows, cols) in [
            (16, 48),
            (48, 16),
            (16, 42),
            (42, 16),
            (8, 49),
            (33, 17),
            (1, 1),
        ] {
            let (src_rs, dst_rs) = (cols + 3, rows + 5);
            let src: Vec<f32> = (0..rows * src_rs).map(|i| i as f32 * 0.5 - 7.0).collect();
            let mut got = vec![f32::NAN; cols * dst_rs];
            transpose(&src, src_rs, (rows, cols), &mut got, dst_rs);
            for j in 0..cols {
                for i in 0..dst_rs {
                    let at = got[j * dst_rs + i];
                    if i < rows {
                        let want = src[i * src_rs + j];
                        assert_eq!(at.to_bits(), want.to_bits(), "{rows}x{cols} ({i}, {j})");
                    } else {
                        // Past each destination row's `rows` floats nothing is written.
                        assert!(at.is_nan(), "{rows}x{cols}: wrote ({j}, {i})");
                    }
                }
            }
            // f64 takes the element loop.
            let src64: Vec<f64> = src.iter().map(|&v| v as f64).collect();
            let mut got64 = vec![0f64; cols * dst_rs];
            transpose(&src64, src_rs, (rows, cols), &mut got64, dst_rs);
            for i in 0..rows {
                for j in 0..cols {
                    assert_eq!(got64[j * dst_rs + i], src64[i * src_rs + j]);
                }
            }
        }
    }

    /// 5x5 layers take F(4x4, 5x5) at any batch; 3x3 layers F(4x4, 3x3) from 24x24 on, and on
    /// smaller maps F(2x2), or F(4x4) with four images per task or more.
    #[test]
    fn tile_size_by_kernel_map_and_images() {
        let geom = |n: usize, k: usize, side: usize| {
            let p = Conv2d {
                stride: 1,
                pad: k / 2,
                groups: 1,
                relu: true,
            };
            Geom::new(&[n, 16, side, side], &[32, 16, k, k], &[32], p).unwrap()
        };
        // EDGEBENCH_WINOGRAD_TILE, where set, decides every 3x3 layer.
        let forced = tuning().winograd_tile;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            for (n, side) in [(1, 28), (8, 28), (1, 14), (8, 14)] {
                assert_eq!(tile_size(&geom(n, 5, side)), 4);
            }
            assert_eq!(tile_size(&geom(1, 3, 28)), forced.unwrap_or(4));
            assert_eq!(tile_size(&geom(2, 3, 24)), forced.unwrap_or(4));
            assert_eq!(tile_size(&geom(2, 3, 14)), forced.unwrap_or(2));
            assert_eq!(tile_size(&geom(8, 3, 14)), forced.unwrap_or(4));
            // With four images per task 7x7 maps take the path on aarch64 only.
            let on = tuning().winograd;
            let on_aarch64 = on && cfg!(target_arch = "aarch64");
            assert_eq!(applies(&geom(8, 3, 7)), on_aarch64);
            assert_eq!(applies(&geom(8, 3, 13)), on);
            // One image on two threads: split by channels from 14x14 on (GoogLeNet's 14x14
            // layers), not on 13x13 (AlexNet's).
            assert_eq!(applies(&geom(1, 3, 14)), on);
            assert!(!applies(&geom(1, 3, 13)));
        });
    }

    /// Every length from 0 to 40 (whole blocks, overlapping last blocks, pairs of 4 and the
    /// element loop) against the plain loop, with the elements past `n` left alone.
    #[test]
    fn map_lanes_matches_the_element_loop() {
        let f = |[a, b, c]: [f64; 3]| [a - c, a * b + c];
        for n in 0..=40 {
            let ins: [Vec<f64>; 3] = std::array::from_fn(|i| {
                (0..n + 3).map(|k| (k * 7 + i * 3) as f64 % 11.0).collect()
            });
            let (mut o0, mut o1) = (vec![-1.0; n + 3], vec![-1.0; n + 3]);
            map_lanes(
                [&ins[0][..], &ins[1][..], &ins[2][..]],
                [&mut o0[..n], &mut o1[..n]],
                f,
            );
            for k in 0..n {
                let want = f([ins[0][k], ins[1][k], ins[2][k]]);
                assert_eq!([o0[k], o1[k]], want, "n {n}, element {k}");
            }
            assert!(o0[n..].iter().chain(&o1[n..]).all(|&v| v == -1.0), "n {n}");
        }
    }

    /// F(4x4, 3x3)'s G and Gᵀ written out with shared sums are the products with its table.
    #[test]
    fn f4_filter_products_match_the_table() {
        let mut r = crate::test_util::Rng::new(11);
        for _ in 0..100 {
            let v: [f64; 3] = std::array::from_fn(|_| r.vec(1)[0]);
            for (got, want) in F4::g(v).iter().zip(g_times(&G4, v)) {
                assert!(
                    (got - want).abs() <= 1e-15 * want.abs().max(1.0),
                    "G: {got} against {want}"
                );
            }
            let v: [f64; 6] = std::array::from_fn(|_| r.vec(1)[0]);
            for (got, want) in F4::gt(v).iter().zip(gt_times(&G4, v)) {
                assert!(
                    (got - want).abs() <= 1e-15 * want.abs().max(1.0),
                    "Gᵀ: {got} against {want}"
                );
            }
        }
    }

    /// The two transposes of a block of filters, for whole groups of four and the rest.
    #[test]
    fn filter_taps_round_trip() {
        fn check<const K: usize>() {
            for nf in 0..=11 {
                let filters: Vec<f32> = (0..nf * K).map(|v| v as f32).collect();
                let mut taps = vec![0.0; nf * K];
                filters_to_taps::<f32, K>(&filters, &mut taps);
                for f in 0..nf {
                    for k in 0..K {
                        assert_eq!(taps[k * nf + f], filters[f * K + k], "K {K}, nf {nf}");
                    }
                }
                let mut back = vec![MaybeUninit::new(-1.0f32); nf * K];
                taps_to_filters::<f32, K>(&taps, &mut back);
                // SAFETY: every element was initialised (with -1 before the call).
                let back: Vec<f32> = back.iter().map(|v| unsafe { v.assume_init() }).collect();
                assert_eq!(back, filters, "K {K}, nf {nf}");
            }
        }
        check::<9>();
        check::<25>();
    }
}
