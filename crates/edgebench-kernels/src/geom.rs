//! Convolution geometry: the hyper-parameters ([`Conv2d`]), the shapes they give ([`Geom`]),
//! and im2col/col2im of one image's rows, which the CPU kernels (`conv`, `winograd`) and the
//! CUDA paths (`im2col`, `cudnn`) share.

use crate::tuning;
use crate::util::Float;
use candle_core::{bail, Result};
use std::ops::Range;

/// Convolution hyper-parameters; the kernel size comes from the weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    pub stride: usize,
    pub pad: usize,
    pub groups: usize,
    /// Apply ReLU to the output (fused; the backward masks the gradient with `y > 0`).
    pub relu: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Geom {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    pub(crate) o: usize,
    pub(crate) kh: usize,
    pub(crate) kw: usize,
    pub(crate) ho: usize,
    pub(crate) wo: usize,
    pub(crate) stride: usize,
    pub(crate) pad: usize,
    pub(crate) groups: usize,
}

impl Geom {
    pub(crate) fn new(x: &[usize], w: &[usize], b: &[usize], p: Conv2d) -> Result<Geom> {
        let (&[n, c, h, wd], &[o, cg, kh, kw], &[bo]) = (x, w, b) else {
            bail!("conv2d: expects x (N,C,H,W), w (O,C/g,KH,KW), b (O); got {x:?}, {w:?}, {b:?}")
        };
        if p.stride == 0 || p.groups == 0 || c % p.groups != 0 || o % p.groups != 0 {
            bail!("conv2d: bad stride/groups {p:?} for {c} input and {o} output channels");
        }
        if cg != c / p.groups || bo != o || kh == 0 || kw == 0 {
            bail!("conv2d: weight {w:?} / bias {b:?} do not fit input {x:?} with {p:?}");
        }
        if h + 2 * p.pad < kh || wd + 2 * p.pad < kw {
            bail!(
                "conv2d: kernel {kh}x{kw} larger than padded input {x:?} (pad {})",
                p.pad
            );
        }
        Ok(Geom {
            n,
            c,
            h,
            w: wd,
            o,
            kh,
            kw,
            ho: (h + 2 * p.pad - kh) / p.stride + 1,
            wo: (wd + 2 * p.pad - kw) / p.stride + 1,
            stride: p.stride,
            pad: p.pad,
            groups: p.groups,
        })
    }
    pub(crate) fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub(crate) fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of col: input channels of a group times kernel taps.
    pub(crate) fn kk(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    pub(crate) fn hw(&self) -> usize {
        self.h * self.w
    }
    pub(crate) fn ohw(&self) -> usize {
        self.ho * self.wo
    }
    /// col is the input itself.
    pub(crate) fn direct(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == 1 && self.pad == 0
    }
    /// Scratch for the columns of `images` images side by side (one block of rows each).
    pub(crate) fn col_len(&self, images: usize) -> usize {
        if self.direct() && images == 1 {
            0
        } else {
            self.kk() * self.block_rows(images) * self.wo * images
        }
    }

    /// Output rows per block. A single image's columns go through im2col, GEMM (and col2im) in
    /// blocks of rows whose columns fit in `tuning::COL_BLOCK_BYTES`, so they are still in the
    /// cache when the GEMM packs them (GoogLeNet conv2/3x3 has 7 MB of columns per image).
    /// Sub-batches (small maps) and 1x1 convolutions, which read the input in place, take all
    /// rows at once.
    pub(crate) fn block_rows(&self, images: usize) -> usize {
        if images > 1 || self.direct() {
            return self.ho;
        }
        let row_bytes = self.kk() * self.wo * std::mem::size_of::<f32>();
        (tuning::COL_BLOCK_BYTES / row_bytes.max(1)).clamp(1, self.ho.max(1))
    }

    /// The output rows in blocks (see `block_rows`).
    pub(crate) fn row_blocks(&self, images: usize) -> impl Iterator<Item = Range<usize>> {
        let (step, ho) = (self.block_rows(images), self.ho);
        (0..ho)
            .step_by(step.max(1))
            .map(move |r| r..(r + step).min(ho))
    }
    /// The columns of one image's output (or col) that output rows `rows` cover.
    pub(crate) fn cols_of(&self, rows: &Range<usize>) -> Range<usize> {
        rows.start * self.wo..rows.end * self.wo
    }

    /// Output columns `ow` whose input column `ow * stride + kj - pad` lies in [0, w).
    fn valid_cols(&self, kj: usize) -> (usize, usize) {
        let (s, p) = (self.stride, self.pad);
        let lo = if kj >= p { 0 } else { (p - kj).div_ceil(s) };
        let hi = if self.w + p > kj {
            ((self.w + p - kj - 1) / s + 1).min(self.wo)
        } else {
            0
        };
        (lo.min(hi), hi)
    }
    /// Input row of output row `oh` at kernel row `ki`, if inside the image.
    fn in_row(&self, oh: usize, ki: usize) -> Option<usize> {
        (oh * self.stride + ki)
            .checked_sub(self.pad)
            .filter(|&r| r < self.h)
    }

    /// col (kk, |rows|·wo) <- the patches of one group's input `x` (cg, h, w) for output rows
    /// `rows`; col's rows are `ld` apart and this image's columns start at `off` (several images
    /// side by side).
    pub(crate) fn im2col<T: Float>(
        &self,
        x: &[T],
        col: &mut [T],
        ld: usize,
        off: usize,
        out_rows: Range<usize>,
    ) {
        let (hw, wo, s) = (self.hw(), self.wo, self.stride);
        let len = out_rows.len() * wo;
        let mut rows = col.chunks_mut(ld).map(|r| &mut r[off..off + len]);
        for plane in x.chunks_exact(hw) {
            for ki in 0..self.kh {
                for kj in 0..self.kw {
                    let row = rows.next().expect("col has kk rows");
                    let (lo, hi) = self.valid_cols(kj);
                    if s == 1 && wo == self.w {
                        self.im2col_same(plane, row, (ki, kj), (lo, hi), out_rows.clone());
                        continue;
                    }
                    #[cfg(target_arch = "aarch64")]
                    if s == 2 {
                        if let (Some(plane), Some(row)) =
                            (crate::util::as_f32(plane), crate::util::as_f32_mut(row))
                        {
                            self.im2col_stride_2(plane, row, (ki, kj), (lo, hi), out_rows.clone());
                            continue;
                        }
                    }
                    for (oh, dst) in out_rows.clone().zip(row.chunks_exact_mut(wo)) {
                        let Some(ih) = self.in_row(oh, ki) else {
                            dst.fill(T::ZERO);
                            continue;
                        };
                        let src = &plane[ih * self.w..(ih + 1) * self.w];
                        dst[..lo].fill(T::ZERO);
                        dst[hi..].fill(T::ZERO);
                        if lo < hi {
                            let iw0 = lo * s + kj - self.pad;
                            gather_strided(&mut dst[lo..hi], &src[iw0..], s);
                        }
                    }
                }
            }
        }
    }

    /// Output rows of `out_rows` whose input row `oh * stride + ki - pad` lies in [0, h): none,
    /// a..a at the run's end, when the whole run lies in the top padding (a thread's run of one
    /// row of a 7x7 map with a 5x5 kernel) or the bottom one.
    fn valid_rows(&self, ki: usize, out_rows: &Range<usize>) -> Range<usize> {
        let (s, (r0, r1)) = (self.stride, (out_rows.start, out_rows.end));
        let a = self.pad.saturating_sub(ki).div_ceil(s).clamp(r0, r1);
        a..(self.h + self.pad)
            .saturating_sub(ki)
            .div_ceil(s)
            .clamp(a, r1)
    }

    /// Zeroes the output rows of `row` (those of `out_rows`, `wo` elements each) whose input row
    /// lies in the padding for kernel row `ki`, and returns the others' range (`valid_rows`) and
    /// elements.
    fn zero_padding_rows<'a, T: Float>(
        &self,
        row: &'a mut [T],
        ki: usize,
        out_rows: &Range<usize>,
    ) -> (Range<usize>, &'a mut [T]) {
        let valid = self.valid_rows(ki, out_rows);
        let (head, rest) = row.split_at_mut((valid.start - out_rows.start) * self.wo);
        let (inside, tail) = rest.split_at_mut(valid.len() * self.wo);
        head.fill(T::ZERO);
        tail.fill(T::ZERO);
        (valid, inside)
    }

    /// One row of im2col (kernel tap `(ki, kj)`, valid columns `lo..hi`) for a stride-2
    /// convolution in f32 on aarch64 (GoogLeNet's conv1: 147 taps of 112-column rows): the
    /// output rows whose input row lies inside the image in one call of
    /// `neon::gather_even_rows`, the others zeroed. Row by row through the generic gather, the
    /// fills and calls take as many instructions as the gather.
    #[cfg(target_arch = "aarch64")]
    fn im2col_stride_2(
        &self,
        plane: &[f32],
        row: &mut [f32],
        (ki, kj): (usize, usize),
        (lo, hi): (usize, usize),
        out_rows: Range<usize>,
    ) {
        let (w, wo, pad) = (self.w, self.wo, self.pad);
        let (Range { start: a, end: b }, inside) = self.zero_padding_rows(row, ki, &out_rows);
        if lo < hi && a < b {
            let first = (2 * a + ki - pad) * w + 2 * lo + kj - pad;
            neon::gather_even_rows((&plane[first..], 2 * w), inside, (lo, hi), wo);
        } else {
            inside.fill(0.0);
        }
    }

    /// One row of im2col (kernel tap `(ki, kj)`, valid columns `lo..hi`) for a stride-1
    /// convolution whose output rows are as long as the input's ("same" padding: every 3x3 and
    /// 5x5 in both nets). Such a row is the input plane shifted by a constant, so it is one copy,
    /// then the few columns whose tap falls in the padding are zeroed; row-by-row copies of 7-56
    /// elements cost more in calls than data.
    fn im2col_same<T: Float>(
        &self,
        plane: &[T],
        row: &mut [T],
        (ki, kj): (usize, usize),
        (lo, hi): (usize, usize),
        out_rows: Range<usize>,
    ) {
        let (w, pad) = (self.w, self.pad);
        // Output rows are as long as input rows (`wo` = `w`).
        let (Range { start: a, .. }, dst) = self.zero_padding_rows(row, ki, &out_rows);
        if dst.is_empty() {
            return;
        }
        // dst[i] = plane[start + i], where start may fall before the plane (first row, kj < pad)
        // or the copy run past its end (last row, kj > pad): those are padding columns.
        // (Clamped for planes narrower than the padding, where the shift exceeds a whole row.)
        let start = ((a + ki - pad) * w + kj) as isize - pad as isize;
        let skip = ((-start).max(0) as usize).min(dst.len());
        let from = (start.max(0) as usize).min(plane.len());
        let n = (dst.len() - skip).min(plane.len() - from);
        dst[..skip].fill(T::ZERO);
        dst[skip..skip + n].copy_from_slice(&plane[from..from + n]);
        dst[skip + n..].fill(T::ZERO);
        // Column by column down the rows: row by row, each row's one or two padding columns
        // would be a memset call.
        for j in (0..lo).chain(hi..w) {
            for r in dst.chunks_exact_mut(w) {
                r[j] = T::ZERO;
            }
        }
    }

    /// dx (cg, h, w) += the patches in `col` (kk, |rows|·wo) of output rows `rows` scattered
    /// back (the adjoint of im2col); rows `ld` apart, this image's columns from `off`.
    pub(crate) fn col2im<T: Float>(
        &self,
        col: &[T],
        dx: &mut [T],
        ld: usize,
        off: usize,
        out_rows: Range<usize>,
    ) {
        let (hw, wo, s) = (self.hw(), self.wo, self.stride);
        let len = out_rows.len() * wo;
        let mut rows = col.chunks(ld).map(|r| &r[off..off + len]);
        for plane in dx.chunks_exact_mut(hw) {
            for ki in 0..self.kh {
                for kj in 0..self.kw {
                    let row = rows.next().expect("col has kk rows");
                    let (lo, hi) = self.valid_cols(kj);
                    if lo >= hi {
                        continue;
                    }
                    for (oh, src) in out_rows.clone().zip(row.chunks_exact(wo)) {
                        let Some(ih) = self.in_row(oh, ki) else {
                            continue;
                        };
                        let dst = &mut plane[ih * self.w..(ih + 1) * self.w];
                        let iw0 = lo * s + kj - self.pad;
                        scatter_add_strided(&mut dst[iw0..], &src[lo..hi], s);
                    }
                }
            }
        }
    }

    /// Images per GEMM: small feature maps (GoogLeNet's 14x14 and 7x7, AlexNet's 13x13) put
    /// several images side by side so the GEMM's column count reaches ~`tuning::CONV_COLS`.
    pub(crate) fn sub_batch(&self, per: usize) -> usize {
        // EDGEBENCH_CONV_COLS (`Tuning::conv_cols`) overrides the target (1 = off).
        let target = tuning::tuning().conv_cols;
        target.div_ceil(self.ohw().max(1)).clamp(1, per.max(1))
    }

    /// How many images each parallel task takes. The ops that split a batch this way run only
    /// with at least one image per thread (fewer take the per-image splits: `fwd_channels`,
    /// `bwd_data_channels`, `bwd_filter_rows`, Winograd's `fwd_few`), so the GEMMs inside a task
    /// are single-threaded.
    pub(crate) fn images_per_task(&self) -> usize {
        let tasks = self.n.clamp(1, rayon::current_num_threads().max(1));
        self.n.div_ceil(tasks).max(1)
    }
}

/// dst[i] = src[i * s]: one row of im2col. The strides the nets use are constants here, so the
/// loop compiles to shuffles (a runtime `step_by` gathers one element at a time, which made
/// GoogLeNet conv1's im2col cost as much as its GEMM).
fn gather_strided<T: Float>(dst: &mut [T], src: &[T], s: usize) {
    fn fixed<T: Float, const S: usize>(dst: &mut [T], src: &[T]) {
        // (On aarch64 stride-2 f32 rows go through `neon::gather_even_rows` instead; for stride
        // 4 the compiler emits `ld4` itself.)
        let Some(last) = dst.len().checked_sub(1) else {
            return;
        };
        for (d, c) in dst[..last].iter_mut().zip(src[..last * S].chunks_exact(S)) {
            *d = c[0];
        }
        dst[last] = src[last * S];
    }
    match s {
        1 => dst.copy_from_slice(&src[..dst.len()]),
        2 => fixed::<T, 2>(dst, src),
        4 => fixed::<T, 4>(dst, src),
        _ => {
            for (d, v) in dst.iter_mut().zip(src.iter().step_by(s)) {
                *d = *v;
            }
        }
    }
}

/// dst[i * s] += src[i]: one row of col2im (see `gather_strided`).
fn scatter_add_strided<T: Float>(dst: &mut [T], src: &[T], s: usize) {
    fn fixed<T: Float, const S: usize>(dst: &mut [T], src: &[T]) {
        let Some(last) = src.len().checked_sub(1) else {
            return;
        };
        for (c, &v) in dst[..last * S].chunks_exact_mut(S).zip(&src[..last]) {
            c[0] += v;
        }
        dst[last * S] += src[last];
    }
    match s {
        1 => {
            for (d, &v) in dst[..src.len()].iter_mut().zip(src) {
                *d += v;
            }
        }
        2 => fixed::<T, 2>(dst, src),
        4 => fixed::<T, 4>(dst, src),
        _ => {
            for (d, &v) in dst.iter_mut().step_by(s).zip(src) {
                *d += v;
            }
        }
    }
}

/// NEON structure loads for `Geom::im2col_stride_2`.
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    /// Rows of a stride-2 im2col, `wo` = `lo..hi`'s row length apart in `dst`: in row r,
    /// `dst[lo + i] = src[r·stride + 2i]` for i < hi - lo, and zero outside `lo..hi`. The
    /// padding columns (`lo` and `wo - hi`, at most a few) are zeroed by whole-vector stores that
    /// the gather then overwrites where it writes; sixteen elements per iteration from four
    /// structure loads.
    pub(super) fn gather_even_rows(
        (src, stride): (&[f32], usize),
        dst: &mut [f32],
        (lo, hi): (usize, usize),
        wo: usize,
    ) {
        let n = hi - lo;
        let rows = dst.len() / wo.max(1);
        if rows == 0 || n == 0 {
            dst.fill(0.0);
            return;
        }
        assert!(
            hi <= wo && dst.len() == rows * wo && src.len() > (rows - 1) * stride + 2 * (n - 1),
            "gather_even_rows: rows past their slices"
        );
        if wo < 8 || lo > 4 || wo - hi > 4 {
            for (r, d) in dst.chunks_exact_mut(wo).enumerate() {
                d[..lo].fill(0.0);
                d[hi..].fill(0.0);
                for (i, d) in d[lo..hi].iter_mut().enumerate() {
                    *d = src[r * stride + 2 * i];
                }
            }
            return;
        }
        // Blocks of 8, then at most one of 4, whose loads (16 and 8 floats) stay inside src
        // from a row's start (`avail` floats on).
        let blocks = |avail: usize| {
            let eights = (n / 8).min(avail / 16);
            let four = usize::from(8 * eights + 4 <= n && 16 * eights + 8 <= avail);
            (eights, four)
        };
        // Every row but the last has `stride` floats up to the next (src is longer than that).
        let (inner, last) = (blocks(stride), blocks(src.len() - (rows - 1) * stride));
        for r in 0..rows {
            let (eights, four) = if r + 1 < rows { inner } else { last };
            let done = 8 * eights + 4 * four;
            // SAFETY: the zero stores write the row's first and last four floats (wo >= 8);
            // block j reads src[r·stride + 16j..][..16] and writes the row's
            // [lo + 8j..][..8] (j < eights: inside both, as counted above), the four-block
            // likewise; the tail reads src[r·stride + 2i] for i < n (asserted above) and
            // writes inside the row; NEON is part of the aarch64 baseline.
            unsafe {
                let row = dst.as_mut_ptr().add(r * wo);
                let zero = vdupq_n_f32(0.0);
                vst1q_f32(row, zero);
                vst1q_f32(row.add(wo - 4), zero);
                let (mut s, mut d) = (src.as_ptr().add(r * stride), row.add(lo));
                if eights >= 2 {
                    // Each structure load leaves its even elements in the register after the
                    // previous one's: the four are then one four-register store, 7
                    // instructions per 16 elements (the intrinsics' loop compiles to 13).
                    std::arch::asm!(
                        "2:",
                        "ld2 {{v0.4s, v1.4s}}, [{s}], #32",
                        "ld2 {{v1.4s, v2.4s}}, [{s}], #32",
                        "ld2 {{v2.4s, v3.4s}}, [{s}], #32",
                        "ld2 {{v3.4s, v4.4s}}, [{s}], #32",
                        "st1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{d}], #64",
                        "subs {k}, {k}, #1",
                        "b.ne 2b",
                        s = inout(reg) s,
                        d = inout(reg) d,
                        k = inout(reg) eights / 2 => _,
                        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                        options(nostack),
                    );
                }
                if eights % 2 == 1 {
                    vst1q_f32_x2(d, float32x4x2_t(vld2q_f32(s).0, vld2q_f32(s.add(8)).0));
                    (s, d) = (s.add(16), d.add(8));
                }
                if four == 1 {
                    vst1q_f32(d, vld2q_f32(s).0);
                }
                let s = src.as_ptr().add(r * stride);
                for i in done..n {
                    *row.add(lo + i) = *s.add(2 * i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stride-2 im2col rows against their definition: every row length up to past three
    /// blocks of eight, every padding at either end up to past what the vector stores cover,
    /// one and three rows, rows as far apart as they are long or further, and sources that end
    /// exactly at the last element read or run on.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn stride_2_rows_gather_every_other_element_and_zero_their_padding() {
        for wo in 1..30usize {
            for (lo, hi) in (0..=wo.min(6)).flat_map(|lo| (lo..=wo).map(move |hi| (lo, hi))) {
                let n = hi - lo;
                if wo - hi > 6 || n == 0 {
                    continue;
                }
                for (rows, gap, extra) in [(1, 0, 0), (1, 0, 9), (3, 0, 0), (3, 5, 1), (3, 17, 0)] {
                    let stride = 2 * n + gap;
                    let len = (rows - 1) * stride + 2 * n - 1 + extra;
                    let src: Vec<f32> = (0..len).map(|i| i as f32 + 1.0).collect();
                    let mut dst = vec![-1.0; rows * wo];
                    neon::gather_even_rows((&src, stride), &mut dst, (lo, hi), wo);
                    let want: Vec<f32> = (0..rows * wo)
                        .map(|e| {
                            let (r, o) = (e / wo, e % wo);
                            if (lo..hi).contains(&o) {
                                src[r * stride + 2 * (o - lo)]
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    let at = format!("wo {wo}, valid {lo}..{hi}, {rows} rows {stride} apart");
                    assert_eq!(dst, want, "{at}, extra {extra}");
                }
            }
        }
    }

    /// Every output length up to past four blocks of eight, at strides 1, 2, 3 and 4, from
    /// sources that end exactly at the last element read or run on.
    #[test]
    fn strided_gather_takes_every_s_th_element() {
        for s in 1..=4 {
            for len in 0..40 {
                for extra in [0, 1, 5] {
                    let src: Vec<f32> = (0..(len.max(1) - 1) * s + 1 + extra)
                        .map(|i| i as f32)
                        .collect();
                    let mut dst = vec![-1.0; len];
                    gather_strided(&mut dst, &src, s);
                    let want: Vec<f32> = (0..len).map(|i| (i * s) as f32).collect();
                    assert_eq!(dst, want, "stride {s}, length {len}, extra {extra}");
                }
            }
        }
    }
}
