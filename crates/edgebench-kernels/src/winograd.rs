//! Winograd F(2x2, 3x3) for the 3x3, stride 1, pad 1, ungrouped convolutions (GoogLeNet's
//! conv2/3x3 and every inception 3x3: ~60 % of the net's multiply-adds). Each 2x2 output tile
//! is `Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A` of the 4x4 input tile `d` around it (Lavin & Gray 2016),
//! so a layer is 16 GEMMs, one per tile position ξ, of (O x C)·(C x tiles): 16 multiplies per
//! 4 outputs and input channel instead of 36, 2.25x fewer than im2col's GEMM. The backward is
//! the exact adjoint of the same linear maps:
//! - input gradient: dM = A dy Aᵀ per tile, dV_ξ = U_ξᵀ · dM_ξ, dx = Σ_tiles B dV Bᵀ;
//! - weight gradient: dU_ξ = Σ_tiles dM_ξ · V_ξᵀ, dW = Gᵀ dU G.
//!
//! The transforms' coefficients are 0, ±1 and ½, so the results differ from im2col's only by
//! rounding (the tests compare both). Work is split as in `conv`: one contiguous run of images
//! per rayon thread; the GEMMs take blocks of tiles (whole images side by side for small maps,
//! bands of tile rows for large ones) of about `TILES` columns.
//!
//! Maps of at least `F4_MIN_SIDE` (GoogLeNet's 56x56 conv2/3x3) take F(4x4, 3x3) instead: 6x6
//! input tiles at stride 4, 36 GEMMs, 36 multiplies per 16 outputs (4x fewer than im2col) and
//! tiles expanded 2.25x instead of 4x, for transforms with coefficients up to 8 (f32 error
//! ~10x im2col's; the tests bound it).

use super::conv::{gemm, Geom, SERIAL};
use super::Float;
use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::ops::Range;

/// Tile positions of F(2x2): its GEMMs per block.
const XI: usize = 16;

/// Target tile columns per GEMM (`Tuning::winograd_tiles`, EDGEBENCH_WINOGRAD_TILES, overrides it). 196 keeps one image
/// per block on 56x56 (F(4x4)) and 28x28 maps (196 tiles each) instead of two, and four 14x14
/// images instead of six: with 256 a block's transformed tiles were larger and conv2/3x3, 3a,
/// 3b and 4e measured 2-7 % slower (in-process alternating runs, 20 rounds per layer; 128 and
/// 160 were no better than 196 on 3b and 4e).
pub(crate) const TILES: usize = 196;

/// Whether a convolution takes this path: 3x3, stride 1, pad 1, one group, maps of at least
/// `MIN_SIDE`, at least one image per thread (with fewer, one task holds the batch and its
/// transforms run on one core while gemm's threads share only the GEMMs: batch 1 measured
/// slower than im2col), and not turned off
/// with EDGEBENCH_WINOGRAD=0 (`Tuning::winograd`; the im2col path, for comparison).
pub(crate) fn applies(g: &Geom) -> bool {
    crate::tuning().winograd
        && fits(g)
        && g.h.min(g.w) >= MIN_SIDE
        && g.n >= rayon::current_num_threads()
}

/// Whether the Winograd kernels compute a convolution of this shape at all: 3x3, stride 1,
/// pad 1, one group.
pub(crate) fn fits(g: &Geom) -> bool {
    g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad == 1 && g.groups == 1
}

/// Smaller maps stay on im2col: a 7x7 map is 4x4 tiles covering 8x8 (31 % of the work wasted)
/// with rows too short for the transforms' vectors; measured slower there (GoogLeNet 5a/5b).
const MIN_SIDE: usize = 10;

/// Output tile side for a layer: 4 (F(4x4, 3x3)) on maps of at least `F4_MIN_SIDE`, else 2;
/// EDGEBENCH_WINOGRAD_TILE=2 or 4 (`Tuning::winograd_tile`) sets it for every layer.
fn tile_size(g: &Geom) -> usize {
    let forced = crate::tuning().winograd_tile;
    forced.unwrap_or(if g.h.min(g.w) >= F4_MIN_SIDE { 4 } else { 2 })
}

/// F(4x4) does 4x fewer multiplies than direct convolution (F(2x2): 2.25x) but its transforms
/// cost more per tile, and a map that is not a multiple of 4 wastes more of its last tiles:
/// measured faster than F(2x2) on GoogLeNet's 56x56 conv2/3x3, level on 28x28, slower on 14x14.
const F4_MIN_SIDE: usize = 48;

fn tiles_target() -> usize {
    crate::tuning().winograd_tiles
}

/// The tiling of one image and how a task's images are cut into GEMM blocks.
#[derive(Clone, Copy)]
struct Tiles {
    /// Output tile side: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3).
    m: usize,
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
        let (th, tw) = (g.h.div_ceil(m), g.w.div_ceil(m));
        let (target, per_image) = (tiles_target(), th * tw);
        let (nb, rb) = if per_image >= target {
            (1, (target / tw.max(1)).clamp(1, th.max(1)))
        } else {
            (target.div_ceil(per_image.max(1)).clamp(1, per.max(1)), th)
        };
        Tiles {
            m,
            h: g.h,
            w: g.w,
            th,
            tw,
            nb,
            rb,
        }
    }
    /// Tile positions: the GEMMs per block.
    fn xi(&self) -> usize {
        (self.m + 2) * (self.m + 2)
    }
    /// Most tile columns of a block.
    fn max_cols(&self) -> usize {
        self.nb * self.rb * self.tw
    }
    /// Padded plane of the input gradient: a border of one, rounded up to whole tiles.
    fn padded(&self) -> (usize, usize) {
        (self.m * self.th + 2, self.m * self.tw + 2)
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

/// Four disjoint `len`-long windows of `s` at increasing offsets.
fn four_mut<T>(s: &mut [T], at: [usize; 4], len: usize) -> [&mut [T]; 4] {
    let (a, r) = s[at[0]..].split_at_mut(at[1] - at[0]);
    let (b, r) = r.split_at_mut(at[2] - at[1]);
    let (c, d) = r.split_at_mut(at[3] - at[2]);
    [&mut a[..len], &mut b[..len], &mut c[..len], &mut d[..len]]
}

/// U[ξ][o][c] = (G g Gᵀ)[ξ] for each filter g = w[o][c] (3x3).
fn filter_transform<T: Float>(w: &[T], oc: usize) -> Vec<T> {
    let half = T::from_f64(0.5);
    let per_filter = w.par_chunks_exact(9).map(|g| {
        // G g (4x3) from the filter's rows, then each of its rows times Gᵀ.
        let row = |k: usize| [g[3 * k], g[3 * k + 1], g[3 * k + 2]];
        let (a, b, c) = (row(0), row(1), row(2));
        let t: [[T; 3]; 4] = [
            a,
            [0, 1, 2].map(|j| (a[j] + b[j] + c[j]) * half),
            [0, 1, 2].map(|j| (a[j] - b[j] + c[j]) * half),
            c,
        ];
        let mut u = [T::ZERO; XI];
        for (i, t) in t.iter().enumerate() {
            u[i * 4..i * 4 + 4].copy_from_slice(&[
                t[0],
                (t[0] + t[1] + t[2]) * half,
                (t[0] - t[1] + t[2]) * half,
                t[2],
            ]);
        }
        u
    });
    xi_major(per_filter.collect(), oc)
}

/// The transformed filters (one array of tile positions per filter) laid out ξ-major, as the
/// GEMMs take them: u[ξ·oc + filter]. (Done on all threads: on one, with the other waiting, it
/// cost ~1 % of a GoogLeNet step.)
fn xi_major<T: Float, const X: usize>(per_filter: Vec<[T; X]>, oc: usize) -> Vec<T> {
    let mut u = vec![T::ZERO; X * oc];
    u.par_chunks_mut(oc.max(1))
        .enumerate()
        .for_each(|(xi, row)| {
            for (d, f) in row.iter_mut().zip(&per_filter) {
                *d = f[xi];
            }
        });
    u
}

/// dW[o][c] = Gᵀ dU[o][c] G (the adjoint of `filter_transform`).
fn filter_adjoint<T: Float>(du: &[T], oc: usize) -> Vec<T> {
    let half = T::from_f64(0.5);
    let mut dw = vec![T::ZERO; 9 * oc];
    dw.par_chunks_exact_mut(9)
        .enumerate()
        .for_each(|(kc, out)| {
            let d = |i: usize, j: usize| du[(i * 4 + j) * oc + kc];
            // Gᵀ dU: 3x4.
            let s: [[T; 4]; 3] = [
                [0, 1, 2, 3].map(|j| d(0, j) + (d(1, j) + d(2, j)) * half),
                [0, 1, 2, 3].map(|j| (d(1, j) - d(2, j)) * half),
                [0, 1, 2, 3].map(|j| (d(1, j) + d(2, j)) * half + d(3, j)),
            ];
            for (r, s) in s.iter().enumerate() {
                out[3 * r] = s[0] + (s[1] + s[2]) * half;
                out[3 * r + 1] = (s[1] - s[2]) * half;
                out[3 * r + 2] = (s[1] + s[2]) * half + s[3];
            }
        });
    dw
}

/// Per-task scratch of the transforms. The tile arithmetic runs over whole bands (all tiles of
/// an image's tile rows in a block, `n` = rows·tw of them) as long vectors: GoogLeNet's 14x14
/// and 7x7 maps have only 7 and 4 tiles per row, too few for one AVX-512 vector. Only the
/// (de)interleaving of image rows goes row by row.
struct Rows<T> {
    /// Zero-bordered copy of one input row, then its even and odd elements.
    line: Vec<T>,
    even: Vec<T>,
    odd: Vec<T>,
    /// F(4x4): a row's four phases (or four runs being interleaved), `tw + 1` each.
    ph: Vec<T>,
    /// Band-long vectors: Bᵀ-transformed padded rows ([parity][j][row pair][tw], 8 of
    /// (rows + 1)·tw), or 16 + 4 of n for the adjoints.
    v: Vec<T>,
}

impl<T: Float> Rows<T> {
    fn new(t: &Tiles) -> Rows<T> {
        let n = (t.rb + 1) * t.tw;
        // F(4x4): 24 runs of the input transform, 42 of the input adjoint (F(2x2): 20).
        let runs = if t.m == 4 { 42 } else { 20 };
        Rows {
            line: vec![T::ZERO; t.m * (t.tw + 1)],
            even: vec![T::ZERO; t.tw + 1],
            odd: vec![T::ZERO; t.tw + 1],
            ph: vec![T::ZERO; 4 * (t.tw + 1)],
            v: vec![T::ZERO; runs * n],
        }
    }
}

/// Splits `src` into its even and odd elements.
fn deinterleave<T: Float>(src: &[T], even: &mut [T], odd: &mut [T]) {
    for ((e, o), p) in even.iter_mut().zip(odd.iter_mut()).zip(src.chunks_exact(2)) {
        *e = p[0];
        *o = p[1];
    }
}

/// `k` consecutive `len`-long windows of `s` from its start.
fn windows_mut<T, const K: usize>(s: &mut [T], len: usize) -> [&mut [T]; K] {
    let mut rest = s;
    std::array::from_fn(|_| {
        let (w, r) = std::mem::take(&mut rest).split_at_mut(len);
        rest = r;
        w
    })
}

/// V[ξ][c][at + (th - rows.start)·tw + tw'] = (Bᵀ d B)[ξ] of one image's channels `x` (C, h, w),
/// for tile rows `rows`; V's rows (per ξ and channel) are `ld` long.
fn input_transform<T: Float>(
    x: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    v: &mut [T],
    (ld, at): (usize, usize),
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let channels = x.len() / (h * w);
    let xi_stride = channels * ld;
    let n = rows.len() * tw;
    // Padded rows 2·start .. 2·end + 2 in two halves by parity: tile row i takes rows 2i, 2i+1
    // (the first pair) and 2i+2, 2i+3 (the next), so each half is read at offsets 0 and tw.
    let pairs = rows.len() + 1;
    let half = 4 * pairs * tw;
    for (c, plane) in x.chunks_exact(h * w).enumerate() {
        // Bᵀ along each padded row p (input row p - 1): [d0-d2, d1+d2, d2-d1, d1-d3] per tile.
        for pr in 0..2 * pairs {
            let p = 2 * rows.start + pr;
            let base = (pr % 2) * half + (pr / 2) * tw;
            let [r0, r1, r2, r3] = [0, 1, 2, 3].map(|j| base + j * pairs * tw);
            if p == 0 || p > h {
                for r in [r0, r1, r2, r3] {
                    s.v[r..r + tw].fill(T::ZERO);
                }
                continue;
            }
            // line[0] and line[w + 1..] are the zero border, never written.
            s.line[1..=w].copy_from_slice(&plane[(p - 1) * w..p * w]);
            deinterleave(&s.line, &mut s.even, &mut s.odd);
            let (e0, e1) = (&s.even[..tw], &s.even[1..=tw]);
            let (o0, o1) = (&s.odd[..tw], &s.odd[1..=tw]);
            let [r0, r1, r2, r3] = four_mut(&mut s.v, [r0, r1, r2, r3], tw);
            for k in 0..tw {
                r0[k] = e0[k] - e1[k];
                r1[k] = o0[k] + e1[k];
                r2[k] = e1[k] - o0[k];
                r3[k] = o0[k] - o1[k];
            }
        }
        // Bᵀ down the columns, for every tile of the band at once.
        let off = c * ld + at;
        for j in 0..4 {
            let ev = &s.v[j * pairs * tw..][..pairs * tw];
            let od = &s.v[half + j * pairs * tw..][..pairs * tw];
            let (d0, d1, d2, d3) = (&ev[..n], &od[..n], &ev[tw..tw + n], &od[tw..tw + n]);
            let at4 = [0, 1, 2, 3].map(|i| (i * 4 + j) * xi_stride + off);
            let [v0, v1, v2, v3] = four_mut(v, at4, n);
            for k in 0..n {
                v0[k] = d0[k] - d2[k];
                v1[k] = d1[k] + d2[k];
                v2[k] = d2[k] - d1[k];
                v3[k] = d1[k] - d3[k];
            }
        }
    }
}

/// One image's output (O, h, w) from M[ξ][o][at + ...] (tile rows `rows`): Aᵀ M A, plus the
/// bias, ReLU'd when `relu`.
#[allow(clippy::too_many_arguments)]
fn output_transform<T: Float>(
    m: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    y: &mut [MaybeUninit<T>],
    bias: &[T],
    relu: bool,
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let n = rows.len() * tw;
    let xi_stride = bias.len() * ld;
    let act = |v: T| if relu { super::conv::relu_f(v) } else { v };
    for (o, (plane, &b)) in y.chunks_exact_mut(h * w).zip(bias).enumerate() {
        let mv = |xi: usize| &m[xi * xi_stride + o * ld + at..][..n];
        // Aᵀ M: rows a = 0, 1 at tile column j (each M vector read once), then times A.
        let [s00, s01, s02, s03, s10, s11, s12, s13] = windows_mut::<T, 8>(&mut s.v, n);
        let pairs = [
            (&mut *s00, &mut *s10),
            (&mut *s01, &mut *s11),
            (&mut *s02, &mut *s12),
            (&mut *s03, &mut *s13),
        ];
        for (j, (s0, s1)) in pairs.into_iter().enumerate() {
            let (m0, m1, m2, m3) = (mv(j), mv(4 + j), mv(8 + j), mv(12 + j));
            for k in 0..n {
                s0[k] = m0[k] + m1[k] + m2[k];
                s1[k] = m1[k] - m2[k] - m3[k];
            }
        }
        // In place: s?0 <- Y(?, 0), s?1 <- Y(?, 1).
        for [s0, s1, s2, s3] in [
            [&mut *s00, &mut *s01, &mut *s02, &mut *s03],
            [&mut *s10, &mut *s11, &mut *s12, &mut *s13],
        ] {
            for k in 0..n {
                let (a, b1, c, d) = (s0[k], s1[k], s2[k], s3[k]);
                s0[k] = act(a + b1 + c + b);
                s1[k] = act(b1 - c - d + b);
            }
        }
        let ys = [[&*s00, &*s01], [&*s10, &*s11]];
        for (i, th) in rows.clone().enumerate() {
            for (a, [y0, y1]) in ys.iter().enumerate() {
                let r = 2 * th + a;
                if r >= h {
                    continue;
                }
                let (y0, y1) = (&y0[i * tw..(i + 1) * tw], &y1[i * tw..(i + 1) * tw]);
                let out = &mut plane[r * w..(r + 1) * w];
                for (pair, (&a0, &a1)) in out.chunks_exact_mut(2).zip(y0.iter().zip(y1)) {
                    pair[0].write(a0);
                    pair[1].write(a1);
                }
                if w % 2 == 1 {
                    out[w - 1].write(y0[tw - 1]);
                }
            }
        }
    }
}

/// dM[ξ][o][at + ...] = (A dy Aᵀ)[ξ] per tile of one image's output gradient `dy` (O, h, w),
/// tile rows `rows` (outputs past the edge count as zero).
fn output_adjoint<T: Float>(
    dy: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    dm: &mut [T],
    (ld, at): (usize, usize),
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let n = rows.len() * tw;
    let outs = dy.len() / (h * w);
    let xi_stride = outs * ld;
    for (o, plane) in dy.chunks_exact(h * w).enumerate() {
        // p_a, q_a: even and odd elements of output row 2th + a, tile row by tile row.
        let [p0, q0, p1, q1, r0, r1] = windows_mut::<T, 6>(&mut s.v, n);
        for (i, th) in rows.clone().enumerate() {
            for (a, (p, q)) in [(&mut *p0, &mut *q0), (&mut *p1, &mut *q1)]
                .into_iter()
                .enumerate()
            {
                let (p, q) = (&mut p[i * tw..(i + 1) * tw], &mut q[i * tw..(i + 1) * tw]);
                let r = 2 * th + a;
                if r >= h {
                    p.fill(T::ZERO);
                    q.fill(T::ZERO);
                    continue;
                }
                let src = &plane[r * w..(r + 1) * w];
                deinterleave(src, p, q);
                if w % 2 == 1 {
                    p[tw - 1] = src[w - 1];
                    q[tw - 1] = T::ZERO;
                }
            }
        }
        let off = o * ld + at;
        for j in 0..4 {
            // Row a of dy Aᵀ at tile column j, for a = 0, 1.
            for (r, p, q) in [(&mut *r0, &*p0, &*q0), (&mut *r1, &*p1, &*q1)] {
                match j {
                    0 => r.copy_from_slice(p),
                    1 => (0..n).for_each(|k| r[k] = p[k] + q[k]),
                    2 => (0..n).for_each(|k| r[k] = p[k] - q[k]),
                    _ => (0..n).for_each(|k| r[k] = T::ZERO - q[k]),
                }
            }
            let at4 = [0, 1, 2, 3].map(|k| (k * 4 + j) * xi_stride + off);
            let [d0, d1, d2, d3] = four_mut(dm, at4, n);
            for k in 0..n {
                d0[k] = r0[k];
                d1[k] = r0[k] + r1[k];
                d2[k] = r0[k] - r1[k];
                d3[k] = T::ZERO - r1[k];
            }
        }
    }
}

/// acc (C padded planes of one image's input gradient) += Σ_tiles B dV Bᵀ, from
/// dV[ξ][c][at + ...] for tile rows `rows`.
fn input_adjoint<T: Float>(
    dv: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    acc: &mut [T],
    s: &mut Rows<T>,
) {
    let tw = t.tw;
    let n = rows.len() * tw;
    let (hp, wp) = t.padded();
    let channels = acc.len() / (hp * wp);
    let xi_stride = channels * ld;
    for (c, plane) in acc.chunks_exact_mut(hp * wp).enumerate() {
        let dv = |xi: usize| &dv[xi * xi_stride + c * ld + at..][..n];
        // u[r][l] = (B dV)[r][l] over the band, then c[r][j] = (u Bᵀ)[r][j].
        let (u, cs) = s.v.split_at_mut(16 * n);
        for l in 0..4 {
            let (d0, d1, d2, d3) = (dv(l), dv(4 + l), dv(8 + l), dv(12 + l));
            let at4 = [0, 1, 2, 3].map(|r| (r * 4 + l) * n);
            let [u0, u1, u2, u3] = four_mut(u, at4, n);
            for k in 0..n {
                u0[k] = d0[k];
                u1[k] = d1[k] - d2[k] + d3[k];
                u2[k] = d1[k] + d2[k] - d0[k];
                u3[k] = T::ZERO - d3[k];
            }
        }
        for r in 0..4 {
            let uv = |l: usize| &u[(r * 4 + l) * n..][..n];
            let (u0, u1, u2, u3) = (uv(0), uv(1), uv(2), uv(3));
            let [c0, c1, c2, c3] = windows_mut::<T, 4>(cs, n);
            for k in 0..n {
                c0[k] = u0[k];
                c1[k] = u1[k] - u2[k] + u3[k];
                c2[k] = u1[k] + u2[k] - u0[k];
                c3[k] = T::ZERO - u3[k];
            }
            // Tile tw' covers padded columns 2tw'..2tw'+4: even columns get c0 and the left
            // neighbour's c2, odd ones c1 and its c3.
            for (i, th) in rows.clone().enumerate() {
                let tile = i * tw..(i + 1) * tw;
                let (c0, c1, c2, c3) = (
                    &c0[tile.clone()],
                    &c1[tile.clone()],
                    &c2[tile.clone()],
                    &c3[tile],
                );
                let (e, o) = (&mut s.even, &mut s.odd);
                e[..tw].copy_from_slice(c0);
                o[..tw].copy_from_slice(c1);
                e[tw] = T::ZERO;
                o[tw] = T::ZERO;
                for (e, &c) in e[1..].iter_mut().zip(c2) {
                    *e += c;
                }
                for (o, &c) in o[1..].iter_mut().zip(c3) {
                    *o += c;
                }
                let row = &mut plane[(2 * th + r) * wp..(2 * th + r + 1) * wp];
                for (pair, (&ev, &ov)) in row.chunks_exact_mut(2).zip(e.iter().zip(o.iter())) {
                    pair[0] += ev;
                    pair[1] += ov;
                }
            }
        }
    }
}

/// Per-task buffers: the transformed input or gradient and the GEMM's output.
struct Task<T> {
    a: Vec<T>,
    b: Vec<T>,
    rows: Rows<T>,
}

impl<T: Float> Task<T> {
    fn new(t: &Tiles, a_channels: usize, b_channels: usize) -> Task<T> {
        Task {
            a: vec![T::ZERO; t.xi() * a_channels * t.max_cols()],
            b: vec![T::ZERO; t.xi() * b_channels * t.max_cols()],
            rows: Rows::new(t),
        }
    }
}

/// The `count` GEMMs dst_ξ (m, n) [+]= lhs_ξ (m, k) · rhs_ξ (k, n), each operand ξ-major.
#[allow(clippy::too_many_arguments)]
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

/// Output channels per GEMM chunk of the forward: 16 x chunk x `ld` outputs in about 1 MB
/// (EDGEBENCH_WINOGRAD_CHUNK_KB, `Tuning::winograd_chunk_kb`, overrides; half of a 2 MB L2).
fn out_chunk(ld: usize, o: usize, xi: usize) -> usize {
    let kb = crate::tuning().winograd_chunk_kb;
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
    for (dst, src) in dx
        .chunks_exact_mut(g.h * g.w)
        .zip(acc.chunks_exact(hp * wp))
    {
        for (r, row) in dst.chunks_exact_mut(g.w).enumerate() {
            let from = &src[(r + 1) * wp + 1..][..g.w];
            for (d, &v) in row.iter_mut().zip(from) {
                d.write(v);
            }
        }
    }
}

/// db[o] += the sum of output-gradient plane o, over a run of images.
fn sum_planes<T: Float>(dys: &[T], hw: usize, db: &mut [T]) {
    let o = db.len();
    for (i, plane) in dys.chunks_exact(hw).enumerate() {
        db[i % o] += super::sum(plane);
    }
}

/// Forward: y = conv(x, w) + b (ReLU'd when `relu`); x's images are `x_img` elements apart.
pub(crate) fn fwd<T: Float>(x: (&[T], usize), w: &[T], bias: &[T], g: &Geom, relu: bool) -> Vec<T> {
    fwd_with(x, w, bias, g, relu, tile_size(g))
}

/// A filter transform or its adjoint: (filters, O·C) -> transformed filters.
type FilterFn<T> = fn(&[T], usize) -> Vec<T>;
/// `input_transform` / `output_adjoint`: one image's planes -> a tile-major band.
type ToTilesFn<T> = fn(&[T], &Tiles, &Range<usize>, &mut [T], (usize, usize), &mut Rows<T>);
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
    filter_adjoint: FilterFn<T>,
    input: ToTilesFn<T>,
    output: OutputFn<T>,
    output_adjoint: ToTilesFn<T>,
    input_adjoint: FromTilesFn<T>,
}

impl<T: Float> Transforms<T> {
    fn of(m: usize) -> Transforms<T> {
        if m == 4 {
            Transforms {
                filter: filter_transform4,
                filter_adjoint: filter_adjoint4,
                input: input_transform4,
                output: output_transform4,
                output_adjoint: output_adjoint4,
                input_adjoint: input_adjoint4,
            }
        } else {
            Transforms {
                filter: filter_transform,
                filter_adjoint,
                input: input_transform,
                output: output_transform,
                output_adjoint,
                input_adjoint,
            }
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
) -> Vec<T> {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let len = g.n * o * hw;
    let mut y = Vec::with_capacity(len);
    if len == 0 {
        return y;
    }
    let per = g.images_per_task();
    let t = Tiles::new(g, per, m);
    let f = Transforms::of(m);
    let u = (f.filter)(w, o * c);
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
                    (f.input)(xj, &t, &rows, &mut s.a, (ld, at), &mut s.rows);
                }
                // Output channels in chunks whose GEMM outputs stay in L2 for the transform.
                let step = out_chunk(ld, o, t.xi());
                for o0 in (0..o).step_by(step) {
                    let oc = step.min(o - o0);
                    let xi = (o * c, c * ld, oc * ld);
                    let lhs = &u[o0 * c..];
                    gemms(
                        t.xi(),
                        (oc, ld, c),
                        &mut s.b,
                        false,
                        lhs,
                        (c, 1),
                        &s.a,
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

/// [dx (N·C·H·W) | dW (O·C·9) | db (O)] in one pass over the tiles: each block's output
/// gradient transform dM serves both the input gradient (dV = Uᵀ·dM) and the weight gradient
/// (dU += dM·Vᵀ). (A layer whose input needs no gradient takes im2col's weight gradient.)
pub(crate) fn bwd_both<T: Float>(x: (&[T], usize), dy: &[T], w: &[T], g: &Geom) -> Vec<T> {
    bwd_both_with(x, dy, w, g, tile_size(g))
}

/// `bwd_both` with output tiles of `m` x `m` (2 or 4).
pub(crate) fn bwd_both_with<T: Float>(
    (x, x_img): (&[T], usize),
    dy: &[T],
    w: &[T],
    g: &Geom,
    m: usize,
) -> Vec<T> {
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    let (ndx, oc) = (g.n * c * hw, o * c);
    let len = ndx + 9 * oc + o;
    let mut out = Vec::with_capacity(len);
    if g.n == 0 || hw == 0 {
        out.resize(len, T::ZERO);
        return out;
    }
    let per = g.images_per_task();
    let t = Tiles::new(g, per, m);
    let xis = t.xi();
    let f = Transforms::of(m);
    let u = (f.filter)(w, oc);
    let (hp, wp) = t.padded();
    let (dx, _) = out.spare_capacity_mut().split_at_mut(ndx);
    let partials: Vec<Vec<T>> = dx
        .par_chunks_mut(per * c * hw)
        .zip(x.par_chunks(per * x_img))
        .zip(dy.par_chunks(per * o * hw))
        .map(|((dxs, xs), dys)| {
            // s.a: dM, s.b: dV; v: V.
            let mut s = Task::new(&t, o, c);
            let mut v = vec![T::ZERO; xis * c * t.max_cols()];
            let mut acc = vec![T::ZERO; t.nb * c * hp * wp];
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
                    (f.output_adjoint)(dyj, &t, &rows, &mut s.a, (ld, at), &mut s.rows);
                    (f.input)(xj, &t, &rows, &mut v, (ld, at), &mut s.rows);
                }
                let xi = (o * c, o * ld, c * ld);
                gemms(
                    xis,
                    (c, ld, o),
                    &mut s.b,
                    false,
                    &u,
                    (1, c),
                    &s.a,
                    (ld, 1),
                    xi,
                );
                let xi = (o * ld, c * ld, oc);
                gemms(xis, (o, c, ld), du, true, &s.a, (ld, 1), &v, (1, ld), xi);
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
    let total = super::conv::sum_partials(partials);
    let dw = (f.filter_adjoint)(&total[..xis * oc], oc);
    let tail = &mut out.spare_capacity_mut()[ndx..];
    for (d, &v) in tail.iter_mut().zip(dw.iter().chain(&total[xis * oc..])) {
        d.write(v);
    }
    // SAFETY: every image's dx is copied out once its last band is done, and the tail
    // (dW, db) was written just above.
    unsafe { out.set_len(len) };
    out
}

// ---- F(4x4, 3x3): 6x6 input tiles at stride 4, 36 tile positions ----
//
// Bᵀ (6x6), G (6x3) and Aᵀ (4x6) of Lavin & Gray for the points 0, ±1, ±2, ∞: the same three
// linear maps and adjoints as F(2x2), with coefficients up to 8 instead of 1.

/// G of F(4x4, 3x3).
const G4: [[f64; 3]; 6] = [
    [0.25, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// U[ξ][o][c] = (G g Gᵀ)[ξ] for each filter g = w[o][c] (3x3), ξ = 6·row + column.
fn filter_transform4<T: Float>(w: &[T], oc: usize) -> Vec<T> {
    let g4 = G4.map(|r| r.map(T::from_f64));
    let per_filter = w.par_chunks_exact(9).map(|g| {
        // t = G g (6x3), then U = t Gᵀ (6x6).
        let t: [[T; 3]; 6] = std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).fold(T::ZERO, |s, k| s + g4[i][k] * g[3 * k + j]))
        });
        let u: [T; 36] = std::array::from_fn(|il| {
            let (t, gl) = (&t[il / 6], &g4[il % 6]);
            (0..3).fold(T::ZERO, |s, j| s + t[j] * gl[j])
        });
        u
    });
    xi_major(per_filter.collect(), oc)
}

/// dW[o][c] = Gᵀ dU[o][c] G (the adjoint of `filter_transform4`).
fn filter_adjoint4<T: Float>(du: &[T], oc: usize) -> Vec<T> {
    let g4 = G4.map(|r| r.map(T::from_f64));
    let mut dw = vec![T::ZERO; 9 * oc];
    dw.par_chunks_exact_mut(9)
        .enumerate()
        .for_each(|(kc, out)| {
            let d = |i: usize, l: usize| du[(i * 6 + l) * oc + kc];
            // s = Gᵀ dU (3x6), then dW = s G (3x3).
            let s: [[T; 6]; 3] = std::array::from_fn(|k| {
                std::array::from_fn(|l| (0..6).fold(T::ZERO, |s, i| s + g4[i][k] * d(i, l)))
            });
            for (k, s) in s.iter().enumerate() {
                for j in 0..3 {
                    out[3 * k + j] = (0..6).fold(T::ZERO, |acc, l| acc + s[l] * g4[l][j]);
                }
            }
        });
    dw
}

/// Splits `src` into its four phases: `ph[q][j] = src[4j + q]` (`ph` four `len`-long runs).
fn deinterleave4<T: Float>(src: &[T], ph: &mut [T], len: usize) {
    let [p0, p1, p2, p3] = windows_mut::<T, 4>(ph, len);
    let quads = src.chunks_exact(4);
    for ((((a, b), c), d), q) in p0.iter_mut().zip(p1).zip(p2).zip(p3).zip(quads) {
        (*a, *b, *c, *d) = (q[0], q[1], q[2], q[3]);
    }
}

/// Bᵀ applied to six vectors: `out[k] = Σ_l Bᵀ[k][l] d[l]`, element by element.
#[inline(always)]
fn bt6<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
    let n = out[0].len();
    let (four, five, two) = (T::from_f64(4.0), T::from_f64(5.0), T::from_f64(2.0));
    let [d0, d1, d2, d3, d4, d5] = d.map(|d| &d[..n]);
    let [o0, o1, o2, o3, o4, o5] = out.map(|o| &mut o[..n]);
    for k in 0..n {
        let (a0, a1, a2, a3, a4, a5) = (d0[k], d1[k], d2[k], d3[k], d4[k], d5[k]);
        o0[k] = four * a0 - five * a2 + a4;
        o1[k] = a3 + a4 - four * (a1 + a2);
        o2[k] = four * (a1 - a2) - a3 + a4;
        o3[k] = two * (a3 - a1) - a2 + a4;
        o4[k] = two * (a1 - a3) - a2 + a4;
        o5[k] = four * a1 - five * a3 + a5;
    }
}

/// F(4x4) `input_transform`: V[ξ][c][at + ...] = (Bᵀ d B)[ξ] of one image's channels, tile
/// rows `rows`.
fn input_transform4<T: Float>(
    x: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    v: &mut [T],
    (ld, at): (usize, usize),
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let channels = x.len() / (h * w);
    let xi_stride = channels * ld;
    let n = rows.len() * tw;
    // Padded rows 4·start .. 4·end + 4 by phase (p mod 4): tile row i takes rows 4i..4i+3 and
    // 4i+4, 4i+5 (the next quad's first two), so each phase is read at offsets 0 and tw.
    let quads = rows.len() + 1;
    let run = quads * tw;
    let slot = |q: usize, k: usize| (q * 6 + k) * run;
    for (c, plane) in x.chunks_exact(h * w).enumerate() {
        // Bᵀ along each padded row p (input row p - 1), six values per tile.
        for pr in 0..4 * quads {
            let p = 4 * rows.start + pr;
            let base = (pr / 4) * tw;
            let at6 = |k: usize| slot(pr % 4, k) + base;
            if p == 0 || p > h {
                for k in 0..6 {
                    s.v[at6(k)..at6(k) + tw].fill(T::ZERO);
                }
                continue;
            }
            // line[0] and line[w + 1..] are the zero border, never written.
            s.line[1..=w].copy_from_slice(&plane[(p - 1) * w..p * w]);
            deinterleave4(&s.line, &mut s.ph, tw + 1);
            let ph = |q: usize, off: usize| &s.ph[q * (tw + 1) + off..][..tw];
            let d = [ph(0, 0), ph(1, 0), ph(2, 0), ph(3, 0), ph(0, 1), ph(1, 1)];
            let out = six_mut(&mut s.v, std::array::from_fn(at6), tw);
            bt6(d, out);
        }
        // Bᵀ down the columns, for every tile of the band at once.
        let off = c * ld + at;
        for k in 0..6 {
            let d: [&[T]; 6] = std::array::from_fn(|l| &s.v[slot(l % 4, k) + (l / 4) * tw..][..n]);
            let at6 = std::array::from_fn(|i| (i * 6 + k) * xi_stride + off);
            bt6(d, six_mut(v, at6, n));
        }
    }
}

/// Six disjoint `len`-long windows of `s` at increasing offsets.
fn six_mut<T>(s: &mut [T], at: [usize; 6], len: usize) -> [&mut [T]; 6] {
    let mut rest = &mut s[at[0]..];
    let mut from = at[0];
    std::array::from_fn(|i| {
        let next = if i < 5 { at[i + 1] } else { from + len };
        let (w, r) = std::mem::take(&mut rest).split_at_mut(next - from);
        rest = r;
        from = next;
        &mut w[..len]
    })
}

/// Aᵀ applied to six vectors: the four `out[a] = Σ_i Aᵀ[a][i] m[i]`.
#[inline(always)]
fn at6<T: Float>(m: [&[T]; 6], out: [&mut [T]; 4]) {
    let n = out[0].len();
    let (two, four, eight) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(8.0));
    let [m0, m1, m2, m3, m4, m5] = m.map(|m| &m[..n]);
    let [o0, o1, o2, o3] = out.map(|o| &mut o[..n]);
    for k in 0..n {
        let (p12, n12) = (m1[k] + m2[k], m1[k] - m2[k]);
        let (p34, n34) = (m3[k] + m4[k], m3[k] - m4[k]);
        o0[k] = m0[k] + p12 + p34;
        o1[k] = n12 + two * n34;
        o2[k] = p12 + four * p34;
        o3[k] = n12 + eight * n34 + m5[k];
    }
}

/// A applied to four vectors: the six `out[i] = Σ_a A[i][a] p[a]` (the adjoint of `at6`).
#[inline(always)]
fn a6<T: Float>(p: [&[T]; 4], out: [&mut [T]; 6]) {
    let n = out[0].len();
    let (two, four, eight) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(8.0));
    let [p0, p1, p2, p3] = p.map(|p| &p[..n]);
    let [o0, o1, o2, o3, o4, o5] = out.map(|o| &mut o[..n]);
    for k in 0..n {
        let (e, od) = (p0[k] + p2[k], p1[k] + p3[k]);
        let (e4, od4) = (p0[k] + four * p2[k], two * p1[k] + eight * p3[k]);
        o0[k] = p0[k];
        o1[k] = e + od;
        o2[k] = e - od;
        o3[k] = e4 + od4;
        o4[k] = e4 - od4;
        o5[k] = p3[k];
    }
}

/// B applied to six vectors: `out[r] = Σ_k Bᵀ[k][r] d[k]` (the adjoint of `bt6`).
#[inline(always)]
fn b6<T: Float>(d: [&[T]; 6], out: [&mut [T]; 6]) {
    let n = out[0].len();
    let (two, four, five) = (T::from_f64(2.0), T::from_f64(4.0), T::from_f64(5.0));
    let [d0, d1, d2, d3, d4, d5] = d.map(|d| &d[..n]);
    let [o0, o1, o2, o3, o4, o5] = out.map(|o| &mut o[..n]);
    for k in 0..n {
        let (a0, a1, a2, a3, a4, a5) = (d0[k], d1[k], d2[k], d3[k], d4[k], d5[k]);
        o0[k] = four * a0;
        o1[k] = four * (a2 - a1 + a5) + two * (a4 - a3);
        o2[k] = T::ZERO - five * a0 - four * (a1 + a2) - a3 - a4;
        o3[k] = a1 - a2 + two * (a3 - a4) - five * a5;
        o4[k] = a0 + a1 + a2 + a3 + a4;
        o5[k] = a5;
    }
}

/// F(4x4) `output_transform`: one image's output (O, h, w) from M (tile rows `rows`), plus the
/// bias, ReLU'd when `relu`.
#[allow(clippy::too_many_arguments)]
fn output_transform4<T: Float>(
    m: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    y: &mut [MaybeUninit<T>],
    bias: &[T],
    relu: bool,
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let n = rows.len() * tw;
    let xi_stride = bias.len() * ld;
    let act = |v: T| if relu { super::conv::relu_f(v) } else { v };
    for (o, (plane, &b)) in y.chunks_exact_mut(h * w).zip(bias).enumerate() {
        let mv = |xi: usize| &m[xi * xi_stride + o * ld + at..][..n];
        // sa[a][j] = (Aᵀ M)[a][j] (24 vectors, a-major), then Y[a][b] = (sa A)[a][b] into the
        // first four of each row a.
        let sv = &mut s.v[..24 * n];
        for j in 0..6 {
            let mj = std::array::from_fn(|i| mv(i * 6 + j));
            let at4 = [0, 1, 2, 3].map(|a| (a * 6 + j) * n);
            at6(mj, four_mut(sv, at4, n));
        }
        let (ys, tmp) = s.v.split_at_mut(24 * n);
        for a in 0..4 {
            let row = &ys[a * 6 * n..(a + 1) * 6 * n];
            let sj: [&[T]; 6] = std::array::from_fn(|j| &row[j * n..(j + 1) * n]);
            let [t0, t1, t2, t3] = windows_mut::<T, 4>(tmp, n);
            at6(sj, [&mut *t0, &mut *t1, &mut *t2, &mut *t3]);
            for tb in [&mut *t0, &mut *t1, &mut *t2, &mut *t3] {
                for v in tb.iter_mut() {
                    *v = act(*v + b);
                }
            }
            for (i, th) in rows.clone().enumerate() {
                let r = 4 * th + a;
                if r >= h {
                    continue;
                }
                let tile = i * tw..(i + 1) * tw;
                let (y0, y1, y2, y3) = (
                    &t0[tile.clone()],
                    &t1[tile.clone()],
                    &t2[tile.clone()],
                    &t3[tile],
                );
                let out = &mut plane[r * w..(r + 1) * w];
                let cols = y0.iter().zip(y1).zip(y2.iter().zip(y3));
                for (q, ((&v0, &v1), (&v2, &v3))) in out.chunks_exact_mut(4).zip(cols) {
                    q[0].write(v0);
                    q[1].write(v1);
                    q[2].write(v2);
                    q[3].write(v3);
                }
                let full = w / 4 * 4;
                for (bcol, e) in out[full..].iter_mut().enumerate() {
                    e.write([y0, y1, y2, y3][bcol][tw - 1]);
                }
            }
        }
    }
}

/// F(4x4) `output_adjoint`: dM[ξ][o][at + ...] = (A dy Aᵀ)[ξ] per tile of one image's output
/// gradient, tile rows `rows` (outputs past the edge count as zero).
fn output_adjoint4<T: Float>(
    dy: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    dm: &mut [T],
    (ld, at): (usize, usize),
    s: &mut Rows<T>,
) {
    let (h, w, tw) = (t.h, t.w, t.tw);
    let n = rows.len() * tw;
    let outs = dy.len() / (h * w);
    let xi_stride = outs * ld;
    let full = w / 4;
    for (o, plane) in dy.chunks_exact(h * w).enumerate() {
        // p[a][b]: element b of each tile's row a (16 vectors, a-major), then r[a] per column j.
        let (p, r) = s.v[..20 * n].split_at_mut(16 * n);
        for (i, th) in rows.clone().enumerate() {
            for a in 0..4 {
                let row = 4 * th + a;
                let at4 = [0, 1, 2, 3].map(|b| (a * 4 + b) * n + i * tw);
                let [q0, q1, q2, q3] = four_mut(p, at4, tw);
                if row >= h {
                    for q in [q0, q1, q2, q3] {
                        q.fill(T::ZERO);
                    }
                    continue;
                }
                let src = &plane[row * w..(row + 1) * w];
                let cols = q0
                    .iter_mut()
                    .zip(q1.iter_mut())
                    .zip(q2.iter_mut().zip(q3.iter_mut()));
                for (((e0, e1), (e2, e3)), v) in cols.zip(src.chunks_exact(4)) {
                    (*e0, *e1, *e2, *e3) = (v[0], v[1], v[2], v[3]);
                }
                if full < tw {
                    let tail = |b: usize| src.get(4 * full + b).copied().unwrap_or(T::ZERO);
                    (q0[full], q1[full], q2[full], q3[full]) = (tail(0), tail(1), tail(2), tail(3));
                }
            }
        }
        let off = o * ld + at;
        for j in 0..6 {
            // r[a] = (dy Aᵀ)[a][j] for the four rows a.
            for a in 0..4 {
                let pa: [&[T]; 4] = std::array::from_fn(|b| &p[(a * 4 + b) * n..][..n]);
                let ra = &mut r[a * n..(a + 1) * n];
                a6_one(pa, j, ra);
            }
            let ra: [&[T]; 4] = std::array::from_fn(|a| &r[a * n..(a + 1) * n]);
            let at6 = std::array::from_fn(|i| (i * 6 + j) * xi_stride + off);
            a6(ra, six_mut(dm, at6, n));
        }
    }
}

/// Row `j` of `a6`: `out = Σ_b A[j][b] p[b]`.
#[inline(always)]
fn a6_one<T: Float>(p: [&[T]; 4], j: usize, out: &mut [T]) {
    let n = out.len();
    let [p0, p1, p2, p3] = p.map(|p| &p[..n]);
    let (c1, c2, c3) = match j {
        0 => (0.0, 0.0, 0.0),
        1 => (1.0, 1.0, 1.0),
        2 => (-1.0, 1.0, -1.0),
        3 => (2.0, 4.0, 8.0),
        4 => (-2.0, 4.0, -8.0),
        _ => {
            out.copy_from_slice(p3);
            return;
        }
    };
    let (c1, c2, c3) = (T::from_f64(c1), T::from_f64(c2), T::from_f64(c3));
    for k in 0..n {
        out[k] = p0[k] + c1 * p1[k] + c2 * p2[k] + c3 * p3[k];
    }
}

/// F(4x4) `input_adjoint`: acc (C padded planes of one image's input gradient) += Σ_tiles
/// B dV Bᵀ, from dV[ξ][c][at + ...] for tile rows `rows`.
fn input_adjoint4<T: Float>(
    dv: &[T],
    t: &Tiles,
    rows: &Range<usize>,
    (ld, at): (usize, usize),
    acc: &mut [T],
    s: &mut Rows<T>,
) {
    let tw = t.tw;
    let n = rows.len() * tw;
    let (hp, wp) = t.padded();
    let channels = acc.len() / (hp * wp);
    let xi_stride = channels * ld;
    for (c, plane) in acc.chunks_exact_mut(hp * wp).enumerate() {
        let dv = |xi: usize| &dv[xi * xi_stride + c * ld + at..][..n];
        // u[r][l] = (B dV)[r][l] over the band (r-major), then c[r][j] = (u Bᵀ)[r][j].
        let (u, cs) = s.v[..42 * n].split_at_mut(36 * n);
        for l in 0..6 {
            let d = std::array::from_fn(|k| dv(k * 6 + l));
            let at6 = std::array::from_fn(|r| (r * 6 + l) * n);
            b6(d, six_mut(u, at6, n));
        }
        for r in 0..6 {
            let ur: [&[T]; 6] = std::array::from_fn(|l| &u[(r * 6 + l) * n..][..n]);
            let cr = windows_mut::<T, 6>(cs, n);
            b6(ur, cr);
            let cr: [&[T]; 6] = std::array::from_fn(|j| &cs[j * n..(j + 1) * n]);
            // Tile tw' covers padded columns 4tw'..4tw'+6: phase 0 gets c0 and the left
            // neighbour's c4, phase 1 c1 and its c5, phases 2 and 3 c2 and c3.
            for (i, th) in rows.clone().enumerate() {
                let tile = |j: usize| &cr[j][i * tw..(i + 1) * tw];
                let [q0, q1, q2, q3] = windows_mut::<T, 4>(&mut s.ph, tw + 1);
                q0[..tw].copy_from_slice(tile(0));
                q1[..tw].copy_from_slice(tile(1));
                q2[..tw].copy_from_slice(tile(2));
                q3[..tw].copy_from_slice(tile(3));
                q0[tw] = T::ZERO;
                q1[tw] = T::ZERO;
                for (e, &v) in q0[1..].iter_mut().zip(tile(4)) {
                    *e += v;
                }
                for (e, &v) in q1[1..].iter_mut().zip(tile(5)) {
                    *e += v;
                }
                let row = &mut plane[(4 * th + r) * wp..(4 * th + r + 1) * wp];
                let (body, tail) = row.split_at_mut(4 * tw);
                let phases = q0.iter().zip(q1.iter()).zip(q2.iter().zip(q3.iter()));
                for (quad, ((&v0, &v1), (&v2, &v3))) in body.chunks_exact_mut(4).zip(phases) {
                    quad[0] += v0;
                    quad[1] += v1;
                    quad[2] += v2;
                    quad[3] += v3;
                }
                tail[0] += q0[tw];
                tail[1] += q1[tw];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{bwd_data_im2col, bwd_filter_im2col, fwd_im2col, Conv2d};
    use crate::test_util::Rng;

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()).max(1.0))
            .fold(0.0, f64::max)
    }

    /// Forward, input gradient and weight/bias gradient against the im2col path, in f64, for
    /// maps that take several images per GEMM, one image in bands of tile rows (40x40, 45x37),
    /// odd sizes (a last tile half outside) and 1x1 maps; on 1 to 16 threads (more threads
    /// than images: fewer images per task, and the im2col path's per-image splits).
    #[test]
    fn matches_im2col_path() {
        let shapes = [
            (3, 4, 7, 7, 5),
            (2, 3, 5, 6, 2),
            (1, 2, 40, 40, 3),
            (1, 3, 45, 37, 2),
            (2, 3, 41, 23, 4),
            (4, 2, 1, 1, 3),
            (5, 6, 14, 14, 7),
        ];
        let run = || {
            for (i, &(n, c, h, w, o)) in shapes.iter().enumerate() {
                let p = Conv2d {
                    stride: 1,
                    pad: 1,
                    groups: 1,
                    relu: i % 2 == 0,
                };
                let g = Geom::new(&[n, c, h, w], &[o, c, 3, 3], &[o], p).unwrap();
                let threads = rayon::current_num_threads();
                assert_eq!(applies(&g), h.min(w) >= MIN_SIDE && n >= threads);
                let mut r = Rng::new(7 + i as u64);
                let (x, wt, b) = (r.vec(n * c * h * w), r.vec(o * c * 9), r.vec(o));
                let dy = r.vec(n * o * h * w);
                let x_img = (&x[..], c * h * w);
                let ndx = n * c * h * w;
                let want_y = fwd_im2col(x_img, &wt, &b, &g, p.relu);
                let filter = bwd_filter_im2col(x_img, &dy, &g);
                let mut both = bwd_data_im2col(&dy, &wt, &g);
                both.extend(filter);
                for m in [2, 4] {
                    let ctx = format!("F({m}x{m}) {:?} relu {}", (n, c, h, w, o), p.relu);
                    let e = max_rel(&fwd_with(x_img, &wt, &b, &g, p.relu, m), &want_y);
                    assert!(e < 1e-12, "forward {ctx}: {e}");
                    let winograd = bwd_both_with(x_img, &dy, &wt, &g, m);
                    let e = max_rel(&winograd[ndx..], &both[ndx..]);
                    assert!(e < 1e-12, "weight gradient {ctx}: {e}");
                    let e = max_rel(&winograd, &both);
                    assert!(e < 1e-12, "both gradients {ctx}: {e}");
                }
            }
        };
        crate::test_util::on_thread_counts(run);
    }

    /// In f32 each F(2x2) pass stays as close to the exact result (f64 im2col) as im2col's own
    /// f32 does (within 3x; measured 0.6-1.7x, ~1e-5 of max(|value|, 1)); F(4x4) within 20x.
    #[test]
    fn f32_error_is_small() {
        let (n, c, h, w, o) = (2, 64, 16, 16, 32);
        let p = Conv2d {
            stride: 1,
            pad: 1,
            groups: 1,
            relu: false,
        };
        let g = Geom::new(&[n, c, h, w], &[o, c, 3, 3], &[o], p).unwrap();
        let mut r = Rng::new(3);
        let (x, wt, b) = (r.vec(n * c * h * w), r.vec(o * c * 9), r.vec(o));
        let dy = r.vec(n * o * h * w);
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<_>>();
        let back = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
        let (x32, w32, b32, dy32) = (f(&x), f(&wt), f(&b), f(&dy));
        let (xi, xi32) = ((&x[..], c * h * w), (&x32[..], c * h * w));
        let exact = [
            fwd_im2col(xi, &wt, &b, &g, false),
            bwd_data_im2col(&dy, &wt, &g),
            bwd_filter_im2col(xi, &dy, &g),
        ];
        let im2col = [
            back(fwd_im2col(xi32, &w32, &b32, &g, false)),
            back(bwd_data_im2col(&dy32, &w32, &g)),
            back(bwd_filter_im2col(xi32, &dy32, &g)),
        ];
        // F(4x4)'s transforms have coefficients up to 8 (and 1/24 in G), so its rounding error
        // is larger: measured 8-17x im2col's, ~1e-4 of max(|value|, 1).
        for (m, bound) in [(2, 3.0), (4, 20.0)] {
            let both = bwd_both_with(xi32, &dy32, &w32, &g, m);
            let winograd = [
                back(fwd_with(xi32, &w32, &b32, &g, false, m)),
                back(both[..n * c * h * w].to_vec()),
                back(both[n * c * h * w..].to_vec()),
            ];
            for (pass, e) in ["forward", "input gradient", "weight gradient"]
                .into_iter()
                .enumerate()
            {
                let (ew, ei) = (
                    max_rel(&exact[pass], &winograd[pass]),
                    max_rel(&exact[pass], &im2col[pass]),
                );
                println!(
                    "F({m}x{m}) {e}: {ew:.2e} vs im2col {ei:.2e} ({:.1}x)",
                    ew / ei
                );
                assert!(
                    ew < bound * ei.max(1e-6),
                    "F({m}x{m}) {e}: winograd f32 off by {ew}, im2col by {ei}"
                );
            }
        }
    }
}
