//! 2-D convolution as a differentiable candle op built on GEMM, replacing `Tensor::conv2d` on the
//! CPU: candle 0.11 computes the input gradient with a direct conv_transpose2d loop (no GEMM) and
//! splits grouped convolutions into chunk + cat.
//!
//! - forward: per image and group, im2col then `y = W_g · col` (1x1/stride 1/pad 0 convolutions
//!   use the input as `col` directly), with the bias written first and ReLU applied in place;
//! - backward: `dW_g += dy_g · colᵀ`, `db += Σ dy`, `dcol = W_gᵀ · dy_g` then col2im into dx.
//!
//! The batch is split into one contiguous run of images per rayon thread (fixed split, so the
//! weight-gradient sum is reproducible for a given thread count), each with its own scratch and
//! single-threaded GEMMs. A batch smaller than the thread count splits each image instead:
//! forward by runs of output rows (on small maps by output channels), input gradient by input
//! channels, weight gradient by runs of output rows with per-thread partial sums (on small maps
//! by runs of input planes).

pub use crate::geom::Conv2d;

use crate::geom::Geom;
use crate::matmul::{
    gemm, gemm_into_ptr, gemm_strided, gemm_strided_uninit, gemm_uninit, own_kernel_takes, SERIAL,
};
use crate::relu::ReluMask;
use crate::util::{
    images_in_place, images_slice, init_slice, nchw_slice, relu_f, sum, sum_partials, Float,
    SharedPtr,
};
use crate::winograd;
use candle_core::op::BackpropOp;
use candle_core::{
    bail, CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Storage, Tensor, WithDType,
};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

/// x: (N, C, H, W), w: (O, C / groups, KH, KW), b: (O) -> (N, O, HO, WO), differentiable in all
/// three. On the CPU, and on CUDA through cuDNN with the `cudnn` feature (`conv2d_runs_on`);
/// callers route other devices to `conv2d_im2col` or `conv2d_candle`.
pub fn conv2d(x: &Tensor, w: &Tensor, b: &Tensor, p: Conv2d) -> Result<Tensor> {
    conv2d_with(x, w, b, p, None)
}

/// `conv2d` for weights that no longer change (an inference network's): on the CPU's Winograd
/// path it transforms them once, into `filters`, and later calls take them from there.
pub fn conv2d_frozen(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    p: Conv2d,
    filters: &FrozenFilters,
) -> Result<Tensor> {
    conv2d_with(x, w, b, p, Some(filters))
}

fn conv2d_with(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    p: Conv2d,
    frozen: Option<&FrozenFilters>,
) -> Result<Tensor> {
    Geom::new(x.dims(), w.dims(), b.dims(), p)?;
    let (x, w, b) = (images_in_place(x)?, w.contiguous()?, b.contiguous()?);
    if x.device().is_cpu() {
        let op = ConvCpu {
            p,
            filters: std::sync::Mutex::new(None),
            frozen: frozen.cloned(),
        };
        return x.apply_op3(&w, &b, op);
    }
    x.apply_op3(&w, &b, p)
}

/// A convolution's Winograd-transformed filters, made by its first forward on that path
/// (`conv2d_frozen`) and taken by the later ones, with the tile size they were made for. Clones
/// share them.
#[derive(Clone, Default)]
pub struct FrozenFilters(Arc<Mutex<Option<TileFilters>>>);

/// Transformed filters (shared) and the tile size, m of F(m x m), they were made for.
type TileFilters = (usize, Arc<CpuStorage>);

impl FrozenFilters {
    /// The filters for tiles of `m` x `m`, made by `make` where there are none for that tile.
    fn get_or_make(&self, m: usize, make: impl FnOnce() -> CpuStorage) -> Arc<CpuStorage> {
        let slot = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((tile, u)) = &*slot() {
            if *tile == m {
                return u.clone();
            }
        }
        // Made without the lock: the transform runs on rayon's threads, and a thread that waits
        // for them may take up another task of this layer's.
        let u = Arc::new(make());
        *slot() = Some((m, u.clone()));
        u
    }
}

/// Whether `conv2d` runs natively on `device`: always on the CPU, on CUDA with the `cudnn`
/// feature (elsewhere use `conv2d_im2col` or `conv2d_candle`).
pub fn conv2d_runs_on(device: &candle_core::Device) -> bool {
    device.is_cpu() || (cfg!(feature = "cudnn") && device.is_cuda())
}

/// The same computation with candle's own ops (the reference in tests and on GPUs).
pub fn conv2d_candle(x: &Tensor, w: &Tensor, b: &Tensor, p: Conv2d) -> Result<Tensor> {
    let y = x
        .conv2d(w, p.pad, p.stride, 1, p.groups)?
        .broadcast_add(&b.reshape((1, b.dim(0)?, 1, 1))?)?;
    if p.relu {
        y.relu()
    } else {
        Ok(y)
    }
}

/// One group's input columns for images `n0..n0 + nb` of a task and output rows `rows` (all rows
/// when nb > 1), with their row length: col (kk, nb * |rows| * wo), or the input itself from the
/// run's first column (1x1 convolution, one image; its rows are the image's, ohw long).
fn gather_cols<'a, T: Float>(
    g: &Geom,
    (xs, x_img): (&'a [T], usize),
    gi: usize,
    (n0, nb): (usize, usize),
    rows: Range<usize>,
    col: &'a mut [T],
) -> (&'a [T], usize) {
    let (cghw, ohw) = (g.cg() * g.hw(), g.ohw());
    let x_of = |j: usize| &xs[(n0 + j) * x_img + gi * cghw..(n0 + j) * x_img + (gi + 1) * cghw];
    if g.direct() && nb == 1 {
        return (&x_of(0)[rows.start * g.wo..], ohw);
    }
    let ohw = if nb == 1 { rows.len() * g.wo } else { ohw };
    let ld = nb * ohw;
    let col = &mut col[..g.kk() * ld];
    for j in 0..nb {
        if g.direct() {
            for (dst, src) in col.chunks_exact_mut(ld).zip(x_of(j).chunks_exact(ohw)) {
                dst[j * ohw..(j + 1) * ohw].copy_from_slice(src);
            }
        } else {
            g.im2col(x_of(j), col, ld, j * ohw, rows.clone());
        }
    }
    (col, ld)
}

/// One group's output gradient for images `n0..n0 + nb`: (og, nb * ohw), gathered into `buf`
/// when nb > 1.
fn gather_dy<'a, T: Float>(
    g: &Geom,
    dys: &'a [T],
    gi: usize,
    n0: usize,
    nb: usize,
    buf: &'a mut [T],
) -> &'a [T] {
    let (ohw, og) = (g.ohw(), g.og());
    let at = |j: usize| (n0 + j) * g.o * ohw + gi * og * ohw;
    if nb == 1 {
        return &dys[at(0)..at(0) + og * ohw];
    }
    let ld = nb * ohw;
    let buf = &mut buf[..og * ld];
    for j in 0..nb {
        for (dst, src) in buf
            .chunks_exact_mut(ld)
            .zip(dys[at(j)..at(j) + og * ohw].chunks_exact(ohw))
        {
            dst[j * ohw..(j + 1) * ohw].copy_from_slice(src);
        }
    }
    buf
}

/// The forward, and the Winograd path's transformed filters where it takes that path; x's
/// images are `x_img` elements apart (C·H·W, or more for a narrow of channels).
fn fwd<T: Float>(
    x: (&[T], usize),
    wt: &[T],
    b: &[T],
    g: &Geom,
    relu: bool,
) -> (Vec<T>, Option<Vec<T>>) {
    if winograd::applies(g) {
        let (y, filters) = winograd::fwd(x, wt, b, g, relu);
        (y, Some(filters))
    } else {
        (fwd_im2col(x, wt, b, g, relu), None)
    }
}

/// `Conv2d`'s forward on CPU storages: y, its shape, and the Winograd filters `fwd` kept (none
/// where they came from `frozen`).
fn cpu_fwd(
    p: &Conv2d,
    frozen: Option<&FrozenFilters>,
    (s1, l1): (&CpuStorage, &Layout),
    (s2, l2): (&CpuStorage, &Layout),
    (s3, l3): (&CpuStorage, &Layout),
) -> Result<(CpuStorage, Shape, Option<CpuStorage>)> {
    let g = geom_of(p, l1, l2, l3.dims())?;
    let n = "conv2d";
    let mut filters = None;
    let y = float_kernel!(n, |x in s1, w in s2, b in s3| {
        let (x, w, b) = (images_slice(x, l1, n)?, nchw_slice(w, l2, n)?, nchw_slice(b, l3, n)?);
        match frozen.filter(|_| winograd::applies(&g)) {
            Some(cache) => {
                let m = winograd::tile_size(&g);
                let u = cache.get_or_make(m, || {
                    WithDType::to_cpu_storage_owned(winograd::filters(w, &g, m))
                });
                winograd::fwd_filtered(x, u.as_slice()?, b, &g, p.relu, m)
            }
            None => {
                let (y, u) = fwd(x, w, b, &g, p.relu);
                filters = u.map(WithDType::to_cpu_storage_owned);
                y
            }
        }
    });
    Ok((y, Shape::from((g.n, g.o, g.ho, g.wo)), filters))
}

/// The forward as im2col + GEMM.
pub(crate) fn fwd_im2col<T: Float>(
    (x, x_img): (&[T], usize),
    wt: &[T],
    b: &[T],
    g: &Geom,
    relu: bool,
) -> Vec<T> {
    let (ohw, kk, og) = (g.ohw(), g.kk(), g.og());
    let len = g.n * g.o * ohw;
    let mut y = Vec::with_capacity(len);
    if len == 0 {
        return y;
    }
    if g.n < rayon::current_num_threads() {
        let f = Fwd {
            x,
            x_img,
            wt,
            b,
            g,
            relu,
        };
        if fwd_by_rows(g) {
            fwd_rows(f, y.spare_capacity_mut());
        } else {
            fwd_channels(f, y.spare_capacity_mut());
        }
        // SAFETY: both write every output plane of every image.
        unsafe { y.set_len(len) };
        return y;
    }
    let per = g.images_per_task();
    let bsz = g.sub_batch(per);
    // Every output is written once before the GEMM adds to it (the bias, or the scatter of a
    // sub-batch), so the output is never zeroed first.
    y.spare_capacity_mut()
        .par_chunks_mut(per * g.o * ohw)
        .zip(x.par_chunks(per * x_img))
        .for_each(|(ys, xs)| {
            let mut col = vec![T::ZERO; g.col_len(bsz)];
            let mut buf = vec![T::ZERO; if bsz > 1 { og * bsz * ohw } else { 0 }];
            let nimg = ys.len() / (g.o * ohw);
            let xs = (xs, x_img);
            for n0 in (0..nimg).step_by(bsz) {
                let nb = bsz.min(nimg - n0);
                for gi in 0..g.groups {
                    let wg = &wt[gi * og * kk..(gi + 1) * og * kk];
                    let bg = &b[gi * og..(gi + 1) * og];
                    if nb == 1 {
                        let at = n0 * g.o * ohw + gi * og * ohw;
                        // The bias first, as the GEMM's accumulator.
                        let yg = &mut ys[at..at + og * ohw];
                        for (row, &bv) in yg.chunks_exact_mut(ohw).zip(bg) {
                            init_slice(row, bv);
                        }
                        // SAFETY: every element of yg was just initialised.
                        let yg = unsafe { &mut *(yg as *mut [_] as *mut [T]) };
                        for rows in g.row_blocks(1) {
                            let (colg, ld) =
                                gather_cols(g, xs, gi, (n0, 1), rows.clone(), &mut col);
                            let cols = g.cols_of(&rows);
                            let dst = &mut yg[cols.start..];
                            let shape = (og, cols.len(), kk);
                            gemm_strided(
                                shape,
                                dst,
                                (ohw, 1),
                                true,
                                wg,
                                (kk, 1),
                                colg,
                                (ld, 1),
                                SERIAL,
                            );
                            if relu {
                                for row in yg.chunks_exact_mut(ohw) {
                                    for v in &mut row[cols.clone()] {
                                        *v = relu_f(*v);
                                    }
                                }
                            }
                        }
                        continue;
                    }
                    let (colg, ld) = gather_cols(g, xs, gi, (n0, nb), 0..g.ho, &mut col);
                    let out = &mut buf[..og * ld];
                    gemm((og, ld, kk), out, false, wg, (kk, 1), colg, (ld, 1), SERIAL);
                    // Scatter to NCHW with the bias and the ReLU.
                    for j in 0..nb {
                        let at = (n0 + j) * g.o * ohw + gi * og * ohw;
                        for ((dst, src), &bv) in ys[at..at + og * ohw]
                            .chunks_exact_mut(ohw)
                            .zip(out.chunks_exact(ld))
                            .zip(bg)
                        {
                            for (d, &v) in dst.iter_mut().zip(&src[j * ohw..(j + 1) * ohw]) {
                                let v = v + bv;
                                d.write(if relu { relu_f(v) } else { v });
                            }
                        }
                    }
                }
            }
        });
    // SAFETY: the tasks cover all `len` outputs and write each of them (bias fill or scatter).
    unsafe { y.set_len(len) };
    y
}

/// The operands of one forward: the images (`x_img` elements apart), filters, bias, geometry,
/// and whether a ReLU follows.
#[derive(Clone, Copy)]
struct Fwd<'a, T> {
    x: &'a [T],
    x_img: usize,
    wt: &'a [T],
    b: &'a [T],
    g: &'a Geom,
    relu: bool,
}

/// Whether a batch smaller than the thread count takes its forward by runs of output rows
/// (`fwd_rows`) rather than by runs of output channels (`fwd_channels`): where each thread's
/// columns fill at least one of the gemm crate's 64-row AVX-512 tiles (on 2 threads GoogLeNet's
/// maps down to 14x14; its 7x7 maps took 20 % longer by rows).
fn fwd_by_rows(g: &Geom) -> bool {
    g.n * g.ohw() >= 64 * rayon::current_num_threads()
}

/// `fwd_im2col` for fewer images than threads on large maps: each image's output rows in runs
/// that split evenly over the threads (`row_runs`); a task gathers its runs' columns and computes
/// every output channel over them, so each column is gathered and packed for a GEMM once, by the
/// task that uses it (by runs of channels every thread packs all of them). Bias and ReLU follow
/// on the run's columns while they are in the cache.
fn fwd_rows<T: Float>(
    Fwd {
        x,
        x_img,
        wt,
        b,
        g,
        relu,
    }: Fwd<'_, T>,
    y: &mut [std::mem::MaybeUninit<T>],
) {
    let (ohw, kk, og) = (g.ohw(), g.kk(), g.og());
    let threads = rayon::current_num_threads();
    let runs = row_runs(g, threads);
    let out = SharedPtr(y.as_mut_ptr().cast::<T>());
    runs.par_chunks(runs.len().div_ceil(threads).max(1))
        .for_each(|runs| {
            let mut col = vec![T::ZERO; g.col_len(1)];
            for (n, rows) in runs {
                let cols = g.cols_of(rows);
                for gi in 0..g.groups {
                    let (colg, ld) =
                        gather_cols(g, (x, x_img), gi, (*n, 1), rows.clone(), &mut col);
                    let wg = &wt[gi * og * kk..][..og * kk];
                    let at = (n * g.o + gi * og) * ohw + cols.start;
                    // SAFETY: the run's columns of the group's og planes lie inside y, and no
                    // other task writes them; gemm writes every one before the loop reads it.
                    unsafe {
                        let dst = out.at(at);
                        gemm_into_ptr(
                            (og, cols.len(), kk),
                            dst,
                            (ohw, 1),
                            wg,
                            (kk, 1),
                            colg,
                            (ld, 1),
                            SERIAL,
                        );
                        for (o, &bv) in b[gi * og..][..og].iter().enumerate() {
                            let plane =
                                std::slice::from_raw_parts_mut(dst.add(o * ohw), cols.len());
                            for v in plane {
                                *v = if relu { relu_f(*v + bv) } else { *v + bv };
                            }
                        }
                    }
                }
            }
        });
}

/// `fwd_im2col` for fewer images than threads (batch 1): per block of output rows, im2col runs
/// over the input channels on all threads, then each thread computes its own run of output
/// channels (their planes of y) with a single-threaded GEMM, bias and ReLU, instead of one task
/// doing im2col, bias and ReLU on one core and handing the GEMM to gemm's threads.
fn fwd_channels<T: Float>(
    Fwd {
        x,
        x_img,
        wt,
        b,
        g,
        relu,
    }: Fwd<'_, T>,
    y: &mut [std::mem::MaybeUninit<T>],
) {
    let (ohw, kk, og, cg, hw) = (g.ohw(), g.kk(), g.og(), g.cg(), g.hw());
    let threads = rayon::current_num_threads();
    let per_o = og.div_ceil(threads).max(1);
    let mut col = vec![T::ZERO; g.col_len(1)];
    for (n, yn) in y.chunks_exact_mut(g.o * ohw).enumerate() {
        for (gi, yg) in yn.chunks_exact_mut(og * ohw).enumerate() {
            let xg = &x[n * x_img + gi * cg * hw..][..cg * hw];
            let wg = &wt[gi * og * kk..][..og * kk];
            let bg = &b[gi * og..][..og];
            // The bias first, as the GEMMs' accumulator.
            yg.par_chunks_mut(ohw).zip(bg).for_each(|(plane, &bv)| {
                init_slice(plane, bv);
            });
            // SAFETY: every element of yg was just initialised.
            let yg = unsafe { &mut *(yg as *mut [_] as *mut [T]) };
            for rows in g.row_blocks(1) {
                let cols = g.cols_of(&rows);
                let colg: &[T] = if g.direct() {
                    &xg[cols.start..]
                } else {
                    let taps = g.kh * g.kw * cols.len();
                    let col = &mut col[..kk * cols.len()];
                    col.par_chunks_mut(taps)
                        .zip(xg.par_chunks(hw))
                        .for_each(|(c, plane)| g.im2col(plane, c, cols.len(), 0, rows.clone()));
                    col
                };
                let ld = if g.direct() { ohw } else { cols.len() };
                yg.par_chunks_mut(per_o * ohw)
                    .enumerate()
                    .for_each(|(t, yp)| {
                        let oc = yp.len() / ohw;
                        gemm_strided(
                            (oc, cols.len(), kk),
                            &mut yp[cols.start..],
                            (ohw, 1),
                            true,
                            &wg[t * per_o * kk..],
                            (kk, 1),
                            colg,
                            (ld, 1),
                            SERIAL,
                        );
                        if relu {
                            for plane in yp.chunks_exact_mut(ohw) {
                                for v in &mut plane[cols.clone()] {
                                    *v = relu_f(*v);
                                }
                            }
                        }
                    });
            }
        }
    }
}

/// dx from dy (already masked by the ReLU): per image and group dcol = W_gᵀ · dy_g, col2im.
/// (Layers on the Winograd path get dx from `ConvBwdWinograd` with their weight gradient.)
pub(crate) fn bwd_data_im2col<T: Float>(dy: &[T], wt: &[T], g: &Geom) -> Vec<T> {
    let (chw, ohw, kk, og, cg, hw) = (g.c * g.hw(), g.ohw(), g.kk(), g.og(), g.cg(), g.hw());
    let len = g.n * chw;
    let mut dx = Vec::with_capacity(len);
    if len == 0 {
        return dx;
    }
    if g.n < rayon::current_num_threads() {
        bwd_data_channels(dy, wt, g, dx.spare_capacity_mut());
        // SAFETY: `bwd_data_channels` writes every plane of every image.
        unsafe { dx.set_len(len) };
        return dx;
    }
    let per = g.images_per_task();
    let bsz = g.sub_batch(per);
    dx.spare_capacity_mut()
        .par_chunks_mut(per * chw)
        .zip(dy.par_chunks(per * g.o * ohw))
        .for_each(|(dxs, dys)| {
            let mut col = vec![T::ZERO; g.col_len(bsz)];
            let mut buf = vec![T::ZERO; if bsz > 1 { og * bsz * ohw } else { 0 }];
            let nimg = dxs.len() / chw;
            for n0 in (0..nimg).step_by(bsz) {
                let nb = bsz.min(nimg - n0);
                let ld = nb * ohw;
                let dx_of = |j: usize, gi: usize| j * chw + gi * cg * hw;
                let dxs = &mut dxs[n0 * chw..(n0 + nb) * chw];
                if g.direct() && nb > 1 {
                    // A 1x1 sub-batch's dcol is its dx, copied out image by image: every
                    // element is written once, so dx is not zeroed first.
                    for gi in 0..g.groups {
                        let dyg = gather_dy(g, dys, gi, n0, nb, &mut buf);
                        let wg = &wt[gi * og * kk..(gi + 1) * og * kk];
                        let dcol = &mut col[..kk * ld];
                        gemm((kk, ld, og), dcol, false, wg, (1, kk), dyg, (ld, 1), SERIAL);
                        for j in 0..nb {
                            let at = dx_of(j, gi);
                            for (dst, src) in dxs[at..at + cg * hw]
                                .chunks_exact_mut(hw)
                                .zip(dcol.chunks_exact(ld))
                            {
                                for (d, &v) in dst.iter_mut().zip(&src[j * ohw..(j + 1) * ohw]) {
                                    d.write(v);
                                }
                            }
                        }
                    }
                    continue;
                }
                // Zeroed per sub-batch, just before the GEMM or col2im writes into it.
                let dxs = init_slice(dxs, T::ZERO);
                for gi in 0..g.groups {
                    let dyg = gather_dy(g, dys, gi, n0, nb, &mut buf);
                    let wg = &wt[gi * og * kk..(gi + 1) * og * kk];
                    let dx_of = |j: usize| dx_of(j, gi);
                    if g.direct() && nb == 1 {
                        let at = dx_of(0);
                        let dst = &mut dxs[at..at + cg * hw];
                        gemm((kk, ohw, og), dst, false, wg, (1, kk), dyg, (ld, 1), SERIAL);
                        continue;
                    }
                    if nb == 1 {
                        let at = dx_of(0);
                        let dxg = &mut dxs[at..at + cg * hw];
                        for rows in g.row_blocks(1) {
                            let cols = g.cols_of(&rows);
                            let dcol = &mut col[..kk * cols.len()];
                            let shape = (kk, cols.len(), og);
                            let dyb = &dyg[cols.start..];
                            gemm(shape, dcol, false, wg, (1, kk), dyb, (ohw, 1), SERIAL);
                            g.col2im(dcol, dxg, cols.len(), 0, rows);
                        }
                        continue;
                    }
                    let dcol = &mut col[..kk * ld];
                    gemm((kk, ld, og), dcol, false, wg, (1, kk), dyg, (ld, 1), SERIAL);
                    for j in 0..nb {
                        let at = dx_of(j);
                        g.col2im(dcol, &mut dxs[at..at + cg * hw], ld, j * ohw, 0..g.ho);
                    }
                }
            }
        });
    // SAFETY: the tasks' chunks cover all `len` elements, each initialised by `init_slice` or
    // written by the 1x1 copy.
    unsafe { dx.set_len(len) };
    dx
}

/// `bwd_data_im2col` for fewer images than threads (batch 1): each image's input channels are
/// cut into one run per thread; a run's rows of dcol = Wᵀ·dy and its col2im touch only its own
/// planes of dx, so the threads share no output and each GEMM is single-threaded.
fn bwd_data_channels<T: Float>(dy: &[T], wt: &[T], g: &Geom, dx: &mut [std::mem::MaybeUninit<T>]) {
    let (ohw, kk, og, cg, hw) = (g.ohw(), g.kk(), g.og(), g.cg(), g.hw());
    let taps = g.kh * g.kw;
    let per = cg.div_ceil(rayon::current_num_threads()).max(1);
    for (dxn, dyn_) in dx
        .chunks_exact_mut(g.c * hw)
        .zip(dy.chunks_exact(g.o * ohw))
    {
        for (gi, dxg) in dxn.chunks_exact_mut(cg * hw).enumerate() {
            let dyg = &dyn_[gi * og * ohw..][..og * ohw];
            let wg = &wt[gi * og * kk..][..og * kk];
            dxg.par_chunks_mut(per * hw)
                .enumerate()
                .for_each(|(t, dxp)| {
                    let (r0, planes) = (t * per * taps, dxp.len() / hw);
                    let rk = planes * taps;
                    let lhs = &wg[r0..];
                    if g.direct() {
                        // Written whole by the GEMM: not zeroed first.
                        gemm_uninit((rk, ohw, og), dxp, lhs, (1, kk), dyg, (ohw, 1), SERIAL);
                        return;
                    }
                    let dxp = init_slice(dxp, T::ZERO);
                    let mut dcol = vec![T::ZERO; rk * g.block_rows(1) * g.wo];
                    for rows in g.row_blocks(1) {
                        let cols = g.cols_of(&rows);
                        let dcol = &mut dcol[..rk * cols.len()];
                        let dyb = &dyg[cols.start..];
                        let shape = (rk, cols.len(), og);
                        gemm(shape, dcol, false, lhs, (1, kk), dyb, (ohw, 1), SERIAL);
                        g.col2im(dcol, dxp, cols.len(), 0, rows);
                    }
                });
        }
    }
}

/// [dW (O·kk) | db (O)] from x and dy (already masked by the ReLU). (Layers on the Winograd
/// path get theirs from `ConvBwdWinograd` with dx; one whose input needs no gradient, which no
/// net here has, comes here.)
pub(crate) fn bwd_filter_im2col<T: Float>((x, x_img): (&[T], usize), dy: &[T], g: &Geom) -> Vec<T> {
    let (ohw, kk, og) = (g.ohw(), g.kk(), g.og());
    let len = g.o * kk + g.o;
    if g.n == 0 {
        return vec![T::ZERO; len];
    }
    if g.n < rayon::current_num_threads() {
        if dw_by_planes(g) {
            return bwd_filter_planes((x, x_img), dy, g);
        }
        return bwd_filter_rows((x, x_img), dy, g);
    }
    let per = g.images_per_task();
    let bsz = g.sub_batch(per);
    let partials: Vec<Vec<T>> = x
        .par_chunks(per * x_img)
        .zip(dy.par_chunks(per * g.o * ohw))
        .map(|(xs, dys)| {
            let mut acc = vec![T::ZERO; len];
            let mut col = vec![T::ZERO; g.col_len(bsz)];
            let mut buf = vec![T::ZERO; if bsz > 1 { og * bsz * ohw } else { 0 }];
            let (dw, db) = acc.split_at_mut(g.o * kk);
            let nimg = dys.len() / (g.o * ohw);
            let xs = (xs, x_img);
            for n0 in (0..nimg).step_by(bsz) {
                let nb = bsz.min(nimg - n0);
                // dy's row length: one image's, or the sub-batch's side by side.
                let ld = nb * ohw;
                for gi in 0..g.groups {
                    let dyg = gather_dy(g, dys, gi, n0, nb, &mut buf);
                    for rows in g.row_blocks(nb) {
                        let (colg, n) = gather_cols(g, xs, gi, (n0, nb), rows.clone(), &mut col);
                        let cols = if nb == 1 { g.cols_of(&rows) } else { 0..ld };
                        let dw = &mut dw[gi * og * kk..(gi + 1) * og * kk];
                        let db = &mut db[gi * og..(gi + 1) * og];
                        add_weight_grad(g, Grads::Add(dw, db), (dyg, ld), cols, (colg, n));
                    }
                }
            }
            acc
        })
        .collect();
    dw_total(partials, g)
}

/// Each image's output rows cut into runs, as (image, rows): each run fits a column block, and
/// all images' runs split evenly over `threads`, the rows spread evenly over the runs (runs of
/// whole blocks would leave 56x56 maps 4 runs of 8 rows on one thread and 3 on the other, 28x28
/// ones 20 rows against 8).
fn row_runs(g: &Geom, threads: usize) -> Vec<(usize, Range<usize>)> {
    let mut per_image = g.ho.div_ceil(g.block_rows(1)).max(threads.div_ceil(g.n));
    while !(g.n * per_image).is_multiple_of(threads) && per_image < g.ho {
        per_image += 1;
    }
    let per_image = per_image.clamp(1, g.ho.max(1));
    (0..g.n)
        .flat_map(|n| {
            (0..per_image).map(move |r| (n, r * g.ho / per_image..(r + 1) * g.ho / per_image))
        })
        .collect()
}

/// `bwd_filter_im2col` for fewer images than threads (batch 1): each image's output rows are cut
/// into runs, a run or more per thread, and each thread adds its own partial dW with
/// single-threaded GEMMs (one task holding the image handed every small GEMM to gemm's threads,
/// and ran its im2col on one core).
fn bwd_filter_rows<T: Float>((x, x_img): (&[T], usize), dy: &[T], g: &Geom) -> Vec<T> {
    let (ohw, kk, og) = (g.ohw(), g.kk(), g.og());
    let threads = rayon::current_num_threads();
    let runs = row_runs(g, threads);
    let len = g.o * kk + g.o;
    let partials: Vec<Vec<T>> = runs
        .par_chunks(runs.len().div_ceil(threads).max(1))
        .map(|runs| {
            // Not zeroed: a task's first run writes all of it (zeroing every task's copy of
            // every layer's dW costs 2 % of a batch-1 GoogLeNet step).
            let mut acc = Vec::with_capacity(len);
            let mut col = vec![T::ZERO; g.col_len(1)];
            for (i, (n, rows)) in runs.iter().enumerate() {
                let cols = g.cols_of(rows);
                for gi in 0..g.groups {
                    let dyg = &dy[(n * g.o + gi * og) * ohw..][..og * ohw];
                    let (colg, ld) =
                        gather_cols(g, (x, x_img), gi, (*n, 1), rows.clone(), &mut col);
                    let (dw, db) = (gi * og * kk..(gi + 1) * og * kk, gi * og..(gi + 1) * og);
                    let grads = if i == 0 {
                        let (dws, dbs) = acc.spare_capacity_mut()[..len].split_at_mut(g.o * kk);
                        Grads::Set(&mut dws[dw], &mut dbs[db])
                    } else {
                        let (dws, dbs) = acc.split_at_mut(g.o * kk);
                        Grads::Add(&mut dws[dw], &mut dbs[db])
                    };
                    add_weight_grad(g, grads, (dyg, ohw), cols.clone(), (colg, ld));
                }
                if i == 0 {
                    // SAFETY: the first run wrote every group's dW and db.
                    unsafe { acc.set_len(len) };
                }
            }
            acc
        })
        .collect();
    dw_total(partials, g)
}

/// Whether a batch smaller than the thread count takes its weight gradient by runs of input
/// planes (`bwd_filter_planes`) rather than by runs of output rows (`bwd_filter_rows`). Per
/// call, with T threads, runs of rows each write a whole partial dW, then the partials are read
/// and summed: (2T + 1)·og·kk elements moved; runs of planes write dW once, but every task
/// reads all of dy and a run's columns cover every output row, so they leave the cache where a
/// map's columns outgrow one block. So planes where (T - 1)·ohw < 2T·og (the 14x14 and 7x7 maps
/// of GoogLeNet, whose dW outweighs their columns) and the image's columns fit in one block.
fn dw_by_planes(g: &Geom) -> bool {
    let threads = rayon::current_num_threads();
    (g.direct() || g.block_rows(1) >= g.ho) && (threads - 1) * g.ohw() < 2 * threads * g.og()
}

/// The weight gradient of fewer images than threads, by runs of each group's input planes: a
/// task gathers its planes' columns for every image side by side (as the batch path's
/// sub-batches are, `gather_dy`) and writes their band of dW's columns, in place, with one
/// GEMM. Each column is gathered and packed for the GEMM once, by the task that uses it, and dW
/// is written once: no partial sums, no transposing pass. One image of a 1x1 convolution is read
/// in place.
fn bwd_filter_planes<T: Float>((x, x_img): (&[T], usize), dy: &[T], g: &Geom) -> Vec<T> {
    let (ohw, kk, og, cg, hw) = (g.ohw(), g.kk(), g.og(), g.cg(), g.hw());
    let (taps, ld) = (g.kh * g.kw, g.n * ohw);
    let x_of = |n: usize, gi: usize| &x[n * x_img + gi * cg * hw..][..cg * hw];
    let in_place = g.direct() && g.n == 1;
    let mut dy_buf = vec![T::ZERO; if g.n > 1 { g.o * ld } else { 0 }];
    let mut dy_bufs = dy_buf.chunks_exact_mut(og * ld);
    let dys: Vec<&[T]> = (0..g.groups)
        .map(|gi| gather_dy(g, dy, gi, 0, g.n, dy_bufs.next().unwrap_or_default()))
        .collect();
    let len = g.o * kk + g.o;
    let mut total: Vec<T> = Vec::with_capacity(len);
    let runs = rayon::current_num_threads().div_ceil(g.groups);
    let planes = cg.div_ceil(runs).max(1);
    let tasks: Vec<(usize, Range<usize>)> = (0..g.groups)
        .flat_map(|gi| {
            (0..cg)
                .step_by(planes)
                .map(move |p| (gi, p..(p + planes).min(cg)))
        })
        .collect();
    let dw = SharedPtr(total.as_mut_ptr());
    tasks.into_par_iter().for_each(|(gi, run)| {
        let rows = run.start * taps..run.end * taps;
        let mut buf = Vec::new();
        let col: &[T] = if in_place {
            &x_of(0, gi)[run.start * hw..run.end * hw]
        } else {
            buf.resize(rows.len() * ld, T::ZERO);
            for n in 0..g.n {
                let xp = &x_of(n, gi)[run.start * hw..run.end * hw];
                g.im2col(xp, &mut buf, ld, n * ohw, 0..g.ho);
            }
            &buf
        };
        // SAFETY: the task's band (og rows of dW, its columns) lies inside `total`'s capacity
        // and no other task writes it; gemm writes every element of it without reading any.
        unsafe {
            let band = dw.at(gi * og * kk + rows.start);
            let dims = (og, rows.len(), ld);
            gemm_into_ptr(dims, band, (kk, 1), dys[gi], (ld, 1), col, (1, ld), SERIAL);
        }
    });
    // SAFETY: the tasks above wrote every element of dW (the first g.o * kk).
    unsafe { total.set_len(g.o * kk) };
    total.extend((0..g.groups).flat_map(|gi| dys[gi].chunks_exact(ld).map(sum)));
    total
}

/// Where `add_weight_grad` puts a group's gradients: added to those `dw` and `db` hold, or
/// over memory not yet initialised.
enum Grads<'a, T> {
    Add(&'a mut [T], &'a mut [T]),
    Set(
        &'a mut [std::mem::MaybeUninit<T>],
        &'a mut [std::mem::MaybeUninit<T>],
    ),
}

/// One group's dW (row-major where `dw_in_place`, else column-major (og, kk), see
/// `dw_total`) and db from the gradients of the output columns `cols`: dy's rows `dy_ld`
/// apart, the input columns' rows `col_ld` apart.
fn add_weight_grad<T: Float>(
    g: &Geom,
    grads: Grads<'_, T>,
    (dy, dy_ld): (&[T], usize),
    cols: Range<usize>,
    (col, col_ld): (&[T], usize),
) {
    // Column-major for the gemm crate: it then reads the columns in place, along k, as the
    // forward does (asked for a row-major dW it transposes the problem and packs them).
    let (og, kk) = (g.og(), g.kk());
    let (dyc, n) = (&dy[cols.start..], cols.len());
    let dw_s = if dw_in_place::<T>(g) {
        (kk, 1)
    } else {
        (1, og)
    };
    let (dyc, col) = ((dyc, (dy_ld, 1)), (col, (1, col_ld)));
    let sums = dy.chunks_exact(dy_ld).map(|row| sum(&row[cols.clone()]));
    match grads {
        Grads::Add(dw, db) => {
            gemm_strided(
                (og, kk, n),
                dw,
                dw_s,
                true,
                dyc.0,
                dyc.1,
                col.0,
                col.1,
                SERIAL,
            );
            for (d, s) in db.iter_mut().zip(sums) {
                *d += s;
            }
        }
        Grads::Set(dw, db) => {
            gemm_strided_uninit((og, kk, n), dw, dw_s, dyc.0, dyc.1, col.0, col.1, SERIAL);
            for (d, s) in db.iter_mut().zip(sums) {
                d.write(s);
            }
        }
    }
}

/// Whether the weight gradient's GEMMs write dW row-major, as it is returned: where
/// edgebench's own kernel takes them (it packs the transposed columns as fast), so that no
/// transposing pass follows.
fn dw_in_place<T: Float>(g: &Geom) -> bool {
    own_kernel_takes::<T>(g.og(), g.kk())
}

/// The tasks' partial [dW | db] summed in task order (reproducible for a given thread count),
/// each group's dW block turned row-major on the way where the gemm crate wrote it column-major
/// (og, kk), so that it read the columns along k in place. One parallel pass reads every partial
/// once and writes the result once (a serial sum, then a serial transposing pass, hold one core
/// for 6 % of a batch-1 GoogLeNet step).
fn dw_total<T: Float>(partials: Vec<Vec<T>>, g: &Geom) -> Vec<T> {
    if dw_in_place::<T>(g) {
        return sum_partials(partials);
    }
    // Output rows per task: each column's run of them is one contiguous read of every partial
    // (a 64-byte line in f32), and a task writes that many rows side by side.
    const ROWS: usize = 16;
    let (kk, og, len) = (g.kk(), g.og(), g.o * g.kk() + g.o);
    let mut total = Vec::with_capacity(len);
    let (dw, db) = total.spare_capacity_mut()[..len].split_at_mut(g.o * kk);
    let (first, rest) = partials.split_first().expect("at least one task");
    dw.par_chunks_mut(og * kk)
        .enumerate()
        .for_each(|(gi, block)| {
            block
                .par_chunks_mut(ROWS * kk)
                .enumerate()
                .for_each(|(t, rows)| {
                    let nr = rows.len() / kk;
                    for c in 0..kk {
                        let at = gi * og * kk + c * og + t * ROWS;
                        let mut acc = [T::ZERO; ROWS];
                        acc[..nr].copy_from_slice(&first[at..at + nr]);
                        for p in rest {
                            for (a, &v) in acc[..nr].iter_mut().zip(&p[at..at + nr]) {
                                *a += v;
                            }
                        }
                        for (r, &a) in acc[..nr].iter().enumerate() {
                            rows[r * kk + c].write(a);
                        }
                    }
                });
        });
    for (i, d) in db.iter_mut().enumerate() {
        let at = g.o * kk + i;
        d.write(rest.iter().fold(first[at], |a, p| a + p[at]));
    }
    // SAFETY: the tasks cover every row of every group's dW, each element written once, and
    // the loop above every db.
    unsafe { total.set_len(len) };
    total
}

fn geom_of(p: &Conv2d, x: &Layout, w: &Layout, b_dims: &[usize]) -> Result<Geom> {
    Geom::new(x.dims(), w.dims(), b_dims, *p)
}

impl CustomOp3 for Conv2d {
    fn name(&self) -> &'static str {
        "conv2d-gemm"
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
        let (y, shape, _) = cpu_fwd(self, None, (s1, l1), (s2, l2), (s3, l3))?;
        Ok((y, shape))
    }

    #[cfg(feature = "cudnn")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::{cuda, cudnn};
        use candle_core::backend::BackendStorage;
        let g = geom_of(self, l1, l2, l3.dims())?;
        let n = self.name();
        let dev = s1.device();
        let x = cudnn::images_input(s1, l1, n)?;
        let (w, b) = (cuda::input(s2, l2, n)?, cuda::input(s3, l3, n)?);
        let y = cudnn::conv_fwd(dev, (&x.0, x.1), &w, &b, &g, self.relu)?;
        Ok((cuda::storage(y, dev), Shape::from((g.n, g.o, g.ho, g.wo))))
    }

    // metal_fwd: the default error; `conv2d` callers use `conv2d_candle` there.

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        conv_bwd(*self, (x, w, b, y, dy), None)
    }
}

/// The gradients of a convolution: (dx, dW, db). `filters`: the forward's Winograd-transformed
/// filters, where it kept them.
fn conv_bwd(
    p: Conv2d,
    (x, w, b, y, dy): (&Tensor, &Tensor, &Tensor, &Tensor, &Tensor),
    filters: Option<CpuStorage>,
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let dy = if p.relu {
        dy.contiguous()?
            .apply_op2_no_bwd(&y.contiguous()?, &ReluMask)?
    } else {
        dy.contiguous()?
    };
    let g = Geom::new(x.dims(), w.dims(), b.dims(), p)?;
    if x.track_op() && x.device().is_cpu() && winograd::applies(&g) {
        // Both gradients in one pass (`winograd::bwd_both`): dx as the op's output, [dW | db]
        // in a buffer of their own that the op hands over.
        let op = ConvBwdWinograd {
            p,
            filters,
            grads: Mutex::new(None),
        };
        let flat = images_in_place(x)?.apply_op3_no_bwd(&dy, &w.contiguous()?, &op)?;
        let dx = flat.reshape(x.shape())?;
        let grads = op
            .grads
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(grads) = grads else {
            bail!("conv2d-winograd-bwd: the weight gradients were not handed over");
        };
        let nw = g.o * g.kk();
        let grads = Tensor::from_storage(Storage::Cpu(grads), nw + g.o, BackpropOp::none(), false);
        let dw = grads.narrow(0, 0, nw)?.reshape(w.shape())?;
        let db = grads.narrow(0, nw, g.o)?;
        return Ok((Some(dx), Some(dw), Some(db)));
    }
    let dx = if x.track_op() {
        Some(dy.apply_op2_no_bwd(&w.contiguous()?, &ConvBwdData(p, x.dims().to_vec()))?)
    } else {
        None
    };
    let flat = images_in_place(x)?.apply_op2_no_bwd(&dy, &ConvBwdFilter(p, w.dims().to_vec()))?;
    let nw = g.o * g.kk();
    let dw = flat.narrow(0, 0, nw)?.reshape(w.shape())?;
    let db = flat.narrow(0, nw, g.o)?;
    Ok((dx, Some(dw), Some(db)))
}

/// (dy, w) -> dx; carries the op and the input dims (H, W are not implied by dy's).
struct ConvBwdData(Conv2d, Vec<usize>);

impl ConvBwdData {
    /// The geometry of the carried input dims with the weight (`l2`), dy (`l1`) checked
    /// against it.
    fn geom(&self, l1: &Layout, l2: &Layout) -> Result<Geom> {
        let wd = l2.dims();
        let g = Geom::new(&self.1, wd, &wd[..1], self.0)?;
        if l1.dims() != [g.n, g.o, g.ho, g.wo] {
            bail!("{}: dy {:?} does not fit {g:?}", self.name(), l1.dims());
        }
        Ok(g)
    }
}

impl CustomOp2 for ConvBwdData {
    fn name(&self) -> &'static str {
        "conv2d-gemm-bwd-data"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = self.geom(l1, l2)?;
        let n = self.name();
        let out = float_kernel!(n, |dy in s1, w in s2| bwd_data_im2col(
            nchw_slice(dy, l1, n)?,
            nchw_slice(w, l2, n)?,
            &g,
        ));
        Ok((out, Shape::from(self.1.as_slice())))
    }

    #[cfg(feature = "cudnn")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::{cuda, cudnn};
        use candle_core::backend::BackendStorage;
        let g = self.geom(l1, l2)?;
        let n = self.name();
        let dev = s1.device();
        let dx = cudnn::conv_bwd_data(dev, &cuda::input(s1, l1, n)?, &cuda::input(s2, l2, n)?, &g)?;
        Ok((cuda::storage(dx, dev), Shape::from(self.1.as_slice())))
    }
}

/// (x, dy) -> [dW | db].
struct ConvBwdFilter(Conv2d, Vec<usize>);

impl ConvBwdFilter {
    /// The geometry of x (`l1`) with the carried weight dims, dy (`l2`) checked against it.
    fn geom(&self, l1: &Layout, l2: &Layout) -> Result<Geom> {
        let g = Geom::new(l1.dims(), &self.1, &[self.1[0]], self.0)?;
        if l2.dims() != [g.n, g.o, g.ho, g.wo] {
            bail!("{}: dy {:?} does not fit {g:?}", self.name(), l2.dims());
        }
        Ok(g)
    }
}

impl CustomOp2 for ConvBwdFilter {
    fn name(&self) -> &'static str {
        "conv2d-gemm-bwd-filter"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = self.geom(l1, l2)?;
        let n = self.name();
        let out = float_kernel!(n, |x in s1, dy in s2| bwd_filter_im2col(
            images_slice(x, l1, n)?,
            nchw_slice(dy, l2, n)?,
            &g,
        ));
        Ok((out, Shape::from(g.o * g.kk() + g.o)))
    }

    #[cfg(feature = "cudnn")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::{cuda, cudnn};
        use candle_core::backend::BackendStorage;
        let g = self.geom(l1, l2)?;
        let n = self.name();
        let dev = s1.device();
        let x = cudnn::images_input(s1, l1, n)?;
        let out = cudnn::conv_bwd_filter(dev, (&x.0, x.1), &cuda::input(s2, l2, n)?, &g)?;
        Ok((cuda::storage(out, dev), Shape::from(g.o * g.kk() + g.o)))
    }
}

/// `Conv2d` on the CPU: where the forward takes the Winograd path it keeps its transformed
/// filters for the backward of the same step, which would otherwise transform the same weights
/// again. They live, as the op does, as long as the graph that holds it.
struct ConvCpu {
    p: Conv2d,
    filters: std::sync::Mutex<Option<CpuStorage>>,
    frozen: Option<FrozenFilters>,
}

impl CustomOp3 for ConvCpu {
    fn name(&self) -> &'static str {
        "conv2d-gemm"
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
        let frozen = self.frozen.as_ref();
        let (y, shape, filters) = cpu_fwd(&self.p, frozen, (s1, l1), (s2, l2), (s3, l3))?;
        *self.filters.lock().unwrap_or_else(|e| e.into_inner()) = filters;
        Ok((y, shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let filters = self
            .filters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        conv_bwd(self.p, (x, w, b, y, dy), filters)
    }
}

/// (x, dy, w) -> dx of a convolution on the Winograd path, with the forward's transformed
/// filters where it kept them; the same pass's [dW | db] go to `grads`.
struct ConvBwdWinograd {
    p: Conv2d,
    filters: Option<CpuStorage>,
    grads: Mutex<Option<CpuStorage>>,
}

impl CustomOp3 for ConvBwdWinograd {
    fn name(&self) -> &'static str {
        "conv2d-winograd-bwd"
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
        let wd = l3.dims();
        let g = Geom::new(l1.dims(), wd, &wd[..1], self.p)?;
        let n = "conv2d-winograd-bwd";
        if l2.dims() != [g.n, g.o, g.ho, g.wo] || !winograd::applies(&g) {
            bail!("{n}: dy {:?} does not fit {g:?}", l2.dims());
        }
        let filters = self.filters.as_ref();
        let grads;
        let dx = float_kernel!(n, |x in s1, dy in s2, w in s3| {
            let u = filters.and_then(|u| u.as_slice().ok());
            let x = images_slice(x, l1, n)?;
            let (dx, dw_db) =
                winograd::bwd_both(x, nchw_slice(dy, l2, n)?, nchw_slice(w, l3, n)?, u, &g);
            grads = WithDType::to_cpu_storage_owned(dw_db);
            dx
        });
        *self.grads.lock().unwrap_or_else(PoisonError::into_inner) = Some(grads);
        Ok((dx, Shape::from(g.n * g.c * g.hw())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{to_vec, Rng};
    use candle_core::{DType, Device, Var};

    /// Winograd's (dx, [dW | db]) as one vector, im2col's order.
    fn joined<T>((mut dx, grads): (Vec<T>, Vec<T>)) -> Vec<T> {
        dx.extend(grads);
        dx
    }

    /// (x dims, w dims, params)
    type Case = ([usize; 4], [usize; 4], Conv2d);

    fn p(stride: usize, pad: usize, groups: usize, relu: bool) -> Conv2d {
        Conv2d {
            stride,
            pad,
            groups,
            relu,
        }
    }

    fn cases() -> Vec<Case> {
        vec![
            // AlexNet conv2-like: groups 2, pad 2, k5, batch 2, ReLU.
            ([2, 4, 7, 7], [6, 2, 5, 5], p(1, 2, 2, true)),
            // conv1-like: k11 stride 4, no pad.
            ([1, 3, 23, 23], [4, 3, 11, 11], p(4, 0, 1, false)),
            // k5 pad 2, batch 2.
            ([2, 3, 8, 8], [4, 3, 5, 5], p(1, 2, 1, false)),
            // 1x1 (the direct path), batch 3.
            ([3, 5, 4, 4], [6, 5, 1, 1], p(1, 0, 1, true)),
            // GoogLeNet conv1-like: k7 s2 p3 on an odd size.
            ([1, 2, 11, 11], [3, 2, 7, 7], p(2, 3, 1, false)),
            // groups 3, k3 pad 1, stride 2, batch 2.
            ([2, 6, 6, 5], [3, 2, 3, 3], p(2, 1, 3, false)),
            // 12x12 outputs: two images per GEMM and a remainder of one (1x1 and 3x3).
            ([5, 2, 12, 12], [3, 2, 1, 1], p(1, 0, 1, true)),
            ([3, 2, 12, 12], [3, 2, 3, 3], p(1, 1, 1, false)),
            // 1x1 on one image: with 3 threads its weight gradient takes runs of rows, each a
            // range of the image's columns read in place.
            ([1, 5, 5, 4], [6, 5, 1, 1], p(1, 0, 1, false)),
            // GoogLeNet 5a/5b-like 5x5 pad 2 on 7x7, batch 1 and 3: with 7 or more threads the
            // weight gradient's runs are single rows, the first and last wholly in the padding
            // for the outer kernel rows.
            ([1, 3, 7, 7], [4, 3, 5, 5], p(1, 2, 1, true)),
            ([3, 2, 7, 7], [3, 2, 5, 5], p(1, 2, 1, false)),
            // AlexNet conv4-like grouped 3x3 pad 1 on 13x13, batch 1 and 3.
            ([1, 4, 13, 13], [4, 2, 3, 3], p(1, 1, 2, true)),
            ([3, 2, 13, 13], [3, 2, 3, 3], p(1, 1, 1, false)),
            // Products that fill edgebench's own SGEMM tiles (16 filters of 36 and of 24 taps):
            // where it trains (aarch64), the weight gradient is written row-major in place.
            ([2, 4, 6, 6], [16, 4, 3, 3], p(1, 1, 1, false)),
            ([1, 24, 5, 5], [16, 24, 1, 1], p(1, 0, 1, true)),
            // Small maps with many filters, batch 1 and 3, grouped: with more threads than
            // images the weight gradient takes runs of input planes, the last run shorter.
            ([1, 3, 5, 5], [13, 3, 3, 3], p(1, 1, 1, true)),
            ([3, 4, 4, 4], [18, 2, 3, 3], p(1, 1, 2, false)),
        ]
    }

    fn vars(c: &Case, seed: u64, dtype: DType) -> (Var, Var, Var) {
        let mut r = Rng::new(seed);
        let t = |v: Vec<f64>, d: &[usize]| {
            Var::from_tensor(
                &Tensor::from_vec(v, d, &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap(),
            )
            .unwrap()
        };
        let (xd, wd) = (c.0, c.1);
        let x = t(r.vec(xd.iter().product()), &xd);
        let w = t(r.vec(wd.iter().product()), &wd);
        let b = t(r.vec(wd[0]), &wd[..1]);
        (x, w, b)
    }

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()).max(1.0))
            .fold(0.0, f64::max)
    }

    /// Value and gradients (x, w, b) of sum(f(x, w, b) * r).
    fn grads(
        f: fn(&Tensor, &Tensor, &Tensor, Conv2d) -> Result<Tensor>,
        (x, w, b): &(Var, Var, Var),
        p: Conv2d,
    ) -> (Vec<f64>, [Vec<f64>; 3]) {
        try_grads(f, (x, w, b), p).unwrap()
    }

    fn try_grads(
        f: fn(&Tensor, &Tensor, &Tensor, Conv2d) -> Result<Tensor>,
        (x, w, b): (&Var, &Var, &Var),
        p: Conv2d,
    ) -> Result<(Vec<f64>, [Vec<f64>; 3])> {
        let y = f(x.as_tensor(), w.as_tensor(), b.as_tensor(), p)?;
        let r = Tensor::from_vec(Rng::new(99).vec(y.elem_count()), y.shape(), &Device::Cpu)
            .unwrap()
            .to_dtype(y.dtype())
            .unwrap();
        let g = (&y * &r)?.sum_all()?.backward()?;
        let get = |v: &Var| to_vec(g.get(v.as_tensor()).expect("gradient"));
        Ok((to_vec(&y), [get(x), get(w), get(b)]))
    }

    /// Runs `f` on 1 thread (whole batch per task: several images per GEMM) and on 3 to 16
    /// (batches of at least the thread count one or more images per task; smaller batches each
    /// image split over the threads, by output channels, input channels or runs of output rows,
    /// down to one row per run on 7x7 maps), the ways the op splits work.
    fn on_pools(f: impl Fn() + Sync) {
        crate::test_util::on_thread_counts(f);
    }

    #[test]
    fn forward_and_gradients_match_candle() {
        on_pools(forward_and_gradients_match_candle_here);
    }

    #[test]
    fn gradients_match_finite_differences() {
        on_pools(gradients_match_finite_differences_here);
    }

    /// A narrow of channels (images apart by more than C·H·W) is read in place, forward and in
    /// the weight gradient, and gives what its contiguous copy gives, gradients included.
    #[test]
    fn channel_narrow_input_matches_contiguous_copy() {
        on_pools(|| {
            for (i, c) in cases().iter().enumerate() {
                // The case's input as channels 1..1+C of a tensor with 3 more channels.
                let [n, ch, h, wd] = c.0;
                let wide: Case = ([n, ch + 3, h, wd], c.1, c.2);
                let (big, w, b) = vars(&wide, 40 + i as u64, DType::F64);
                let part = big.narrow(1, 1, ch).unwrap();
                assert!(
                    n == 1 || !part.is_contiguous(),
                    "case {i}: the narrow is a view"
                );
                assert!(crate::util::image_stride(part.layout()).is_some());
                let copy = Var::from_tensor(&part.contiguous().unwrap()).unwrap();
                // (y, gradient of `var`, dw, db) of sum(conv(x) * r).
                let f = |x: &Tensor, var: &Tensor| {
                    let y = conv2d(x, w.as_tensor(), b.as_tensor(), c.2).unwrap();
                    let r = Rng::new(7).vec(y.elem_count());
                    let r = Tensor::from_vec(r, y.shape(), &Device::Cpu).unwrap();
                    let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
                    let get = |t: &Tensor| g.get(t).expect("gradient").clone();
                    let (dw, db) = (get(w.as_tensor()), get(b.as_tensor()));
                    (to_vec(&y), get(var), to_vec(&dw), to_vec(&db))
                };
                let (y1, dbig, dw1, db1) = f(&part, big.as_tensor());
                let (y2, dx2, dw2, db2) = f(copy.as_tensor(), copy.as_tensor());
                let dx1 = to_vec(&dbig.narrow(1, 1, ch).unwrap());
                let outside = [dbig.narrow(1, 0, 1), dbig.narrow(1, ch + 1, 2)];
                for t in outside {
                    assert!(to_vec(&t.unwrap()).iter().all(|&v| v == 0.0), "case {i}");
                }
                assert_eq!(y1, y2, "case {i}: forward");
                assert_eq!(dx1, to_vec(&dx2), "case {i}: dx");
                assert_eq!(dw1, dw2, "case {i}: dw");
                assert_eq!(db1, db2, "case {i}: db");
            }
        });
    }

    fn forward_and_gradients_match_candle_here() {
        let mut compared = 2 * cases().len() as i32;
        let _ = crate::tuning::CONV_COLS; // the 12x12 cases assume CONV_COLS in 145..=288
        for (i, c) in cases().iter().enumerate() {
            for dtype in [DType::F64, DType::F32] {
                let v = vars(c, i as u64, dtype);
                let (y, g) = grads(conv2d, &v, c.2);
                // candle 0.11's conv2d backward fails when (H + 2p - k) % stride != 0 (its
                // conv_transpose2d input gradient comes out one row short): nothing to compare.
                let Ok((y_ref, g_ref)) = try_grads(conv2d_candle, (&v.0, &v.1, &v.2), c.2) else {
                    assert_eq!(i, 5, "only the stride-remainder case may fail in candle");
                    compared -= 1;
                    continue;
                };
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
                assert!(max_rel(&y, &y_ref) < tol, "case {i} {dtype:?}: forward");
                for (k, name) in ["x", "w", "b"].iter().enumerate() {
                    let e = max_rel(&g[k], &g_ref[k]);
                    assert!(e < tol, "case {i} {dtype:?}: d{name} differs by {e}");
                }
            }
        }
        assert!(compared >= 10);
    }

    fn gradients_match_finite_differences_here() {
        for (i, c) in cases().iter().enumerate() {
            let v = vars(c, 10 + i as u64, DType::F64);
            let (_, analytic) = grads(conv2d, &v, c.2);
            let vals: Vec<Vec<f64>> = [&v.0, &v.1, &v.2].iter().map(|t| to_vec(t)).collect();
            let dims: Vec<Vec<usize>> = [&v.0, &v.1, &v.2]
                .iter()
                .map(|t| t.dims().to_vec())
                .collect();
            let r = {
                let y = conv2d(v.0.as_tensor(), v.1.as_tensor(), v.2.as_tensor(), c.2).unwrap();
                Tensor::from_vec(Rng::new(99).vec(y.elem_count()), y.shape(), &Device::Cpu).unwrap()
            };
            let loss = |vals: &[Vec<f64>]| -> f64 {
                let t: Vec<Tensor> = vals
                    .iter()
                    .zip(&dims)
                    .map(|(v, d)| Tensor::from_vec(v.clone(), d.as_slice(), &Device::Cpu).unwrap())
                    .collect();
                (conv2d(&t[0], &t[1], &t[2], c.2).unwrap() * &r)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .to_scalar()
                    .unwrap()
            };
            let eps = 1e-6;
            for k in 0..3 {
                let mut worst = 0f64;
                let mut vp = vals.clone();
                for j in 0..vals[k].len() {
                    vp[k][j] = vals[k][j] + eps;
                    let lp = loss(&vp);
                    vp[k][j] = vals[k][j] - eps;
                    let lm = loss(&vp);
                    vp[k][j] = vals[k][j];
                    let num = (lp - lm) / (2.0 * eps);
                    let a = analytic[k][j];
                    worst = worst.max((a - num).abs() / a.abs().max(num.abs()).max(1e-2));
                }
                assert!(worst < 1e-5, "case {i}: input {k} worst rel error {worst}");
            }
        }
    }

    /// im2col of any run of output rows is that run of the whole image's columns, and col2im of
    /// it scatters what col2im of the whole columns, zero outside the run, does: runs partly or
    /// wholly in the padding (a 7x7 pad 3 kernel on a 5-row map: tap row 0 of a run of the
    /// first row reads no input row), at stride 1 with the output as wide as the input (one
    /// shifted copy per tap) and otherwise (row by row).
    #[test]
    fn im2col_of_any_row_run_matches_the_whole_image() {
        let cases: [Case; 6] = [
            ([1, 2, 5, 6], [1, 2, 7, 7], p(1, 3, 1, false)),
            // Narrower than the padding: tap columns start before and end past the plane.
            ([1, 2, 3, 1], [1, 2, 5, 5], p(1, 2, 1, false)),
            ([1, 2, 7, 7], [1, 2, 5, 5], p(1, 2, 1, false)),
            ([1, 2, 7, 7], [1, 2, 3, 3], p(1, 1, 1, false)),
            ([1, 2, 7, 9], [1, 2, 5, 3], p(1, 2, 1, false)),
            ([1, 2, 9, 8], [1, 2, 5, 5], p(2, 2, 1, false)),
        ];
        for (i, c) in cases.iter().enumerate() {
            let g = Geom::new(&c.0, &c.1, &c.1[..1], c.2).unwrap();
            let mut rng = Rng::new(60 + i as u64);
            let x = rng.vec(g.c * g.hw());
            let (kk, ohw, wo) = (g.kk(), g.ohw(), g.wo);
            // NaN where im2col must write.
            let mut whole = vec![f64::NAN; kk * ohw];
            g.im2col(&x, &mut whole, ohw, 0, 0..g.ho);
            assert!(whole.iter().all(|v| !v.is_nan()), "case {i}: whole image");
            let dcol = rng.vec(kk * ohw);
            for a in 0..g.ho {
                for b in a + 1..=g.ho {
                    let ld = (b - a) * wo;
                    let mut part = vec![f64::NAN; kk * ld];
                    g.im2col(&x, &mut part, ld, 0, a..b);
                    for (r, row) in part.chunks_exact(ld).enumerate() {
                        let want = &whole[r * ohw + a * wo..][..ld];
                        assert_eq!(row, want, "case {i}: rows {a}..{b}, col row {r}");
                    }
                    let dpart: Vec<f64> = dcol
                        .chunks_exact(ohw)
                        .flat_map(|row| row[a * wo..b * wo].to_vec())
                        .collect();
                    let masked: Vec<f64> = dcol
                        .chunks_exact(ohw)
                        .flat_map(|row| {
                            (0..ohw).map(move |j| {
                                if (a * wo..b * wo).contains(&j) {
                                    row[j]
                                } else {
                                    0.0
                                }
                            })
                        })
                        .collect();
                    let (mut got, mut want) = (vec![0.0; x.len()], vec![0.0; x.len()]);
                    g.col2im(&dpart, &mut got, ld, 0, a..b);
                    g.col2im(&masked, &mut want, ohw, 0, 0..g.ho);
                    assert_eq!(got, want, "case {i}: col2im of rows {a}..{b}");
                }
            }
        }
    }

    #[test]
    fn row_blocks_match_candle() {
        // Single images with columns over tuning::COL_BLOCK_BYTES go through im2col/GEMM/col2im in
        // blocks of output rows, the last one shorter (pad 1: a 5x5 "same" layer would take the
        // Winograd path).
        let cases: [Case; 2] = [
            ([1, 64, 43, 43], [8, 64, 5, 5], p(1, 1, 1, true)),
            ([1, 32, 45, 45], [8, 16, 7, 7], p(2, 3, 2, false)),
        ];
        for (i, c) in cases.iter().enumerate() {
            let g = Geom::new(&c.0, &c.1, &c.1[..1], c.2).unwrap();
            let blocks: Vec<_> = g.row_blocks(1).collect();
            assert!(blocks.len() > 1, "case {i}: {blocks:?}");
            assert_ne!(blocks[0].len(), blocks.last().unwrap().len(), "case {i}");
            for dtype in [DType::F64, DType::F32] {
                let v = vars(c, 20 + i as u64, dtype);
                let (y, g) = grads(conv2d, &v, c.2);
                let (y_ref, g_ref) = grads(conv2d_candle, &v, c.2);
                // f32: sums of 1600 products round differently in the two orders (~2e-5).
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
                assert!(max_rel(&y, &y_ref) < tol, "case {i} {dtype:?}: forward");
                for (k, name) in ["x", "w", "b"].iter().enumerate() {
                    let e = max_rel(&g[k], &g_ref[k]);
                    assert!(e < tol, "case {i} {dtype:?}: d{name} differs by {e}");
                }
            }
        }
    }

    /// Net-sized layers, checked natively by hand (their run under qemu-user is too slow for
    /// CI's aarch64 pass): `cargo test -p edgebench-kernels net_sized -- --ignored`.
    #[test]
    #[ignore = "net-sized layers: run by hand with -- --ignored"]
    fn net_sized_layers_match_candle() {
        let layers: [Case; 6] = [
            ([2, 32, 14, 14], [128, 32, 5, 5], p(1, 2, 1, true)),
            ([2, 48, 7, 7], [128, 48, 5, 5], p(1, 2, 1, true)),
            ([2, 528, 14, 14], [32, 528, 1, 1], p(1, 0, 1, true)),
            ([2, 384, 13, 13], [256, 192, 3, 3], p(1, 1, 2, true)),
            ([2, 256, 13, 13], [384, 256, 3, 3], p(1, 1, 1, true)),
            ([2, 3, 227, 227], [96, 3, 11, 11], p(4, 0, 1, true)),
        ];
        for (i, c) in layers.iter().enumerate() {
            for dtype in [DType::F64, DType::F32] {
                let v = vars(c, i as u64, dtype);
                let (y, g) = grads(conv2d, &v, c.2);
                let (y_ref, g_ref) = grads(conv2d_candle, &v, c.2);
                // f32: sums of up to 2304 products round differently in the two orders (up to
                // 4e-5 measured on x86_64); f64 differs by under 1e-13.
                let tol = if dtype == DType::F64 { 1e-12 } else { 2e-4 };
                let e = max_rel(&y, &y_ref);
                assert!(e < tol, "layer {i} {dtype:?}: forward differs by {e}");
                for (k, name) in ["x", "w", "b"].iter().enumerate() {
                    let e = max_rel(&g[k], &g_ref[k]);
                    assert!(e < tol, "layer {i} {dtype:?}: d{name} differs by {e}");
                }
            }
        }
    }

    /// `conv2d_frozen` gives `conv2d`'s output bit for bit (f32), from filters it transforms
    /// once per tile size: a second call takes the same ones, and an input whose tile differs
    /// makes them again.
    #[test]
    fn frozen_filters_match_conv2d_and_follow_the_tile() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            let mut r = Rng::new(11);
            let f32s = |v: Vec<f64>, d: &[usize]| {
                Tensor::from_vec(v, d, &Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
            };
            let (w, b) = (f32s(r.vec(8 * 4 * 9), &[8, 4, 3, 3]), f32s(r.vec(8), &[8]));
            let p = Conv2d {
                stride: 1,
                pad: 1,
                groups: 1,
                relu: true,
            };
            let cache = FrozenFilters::default();
            let held = || {
                let slot = cache.0.lock().unwrap();
                slot.as_ref().map(|(m, u)| (*m, Arc::clone(u)))
            };
            let mut tiles = Vec::new();
            let mut first: Option<Arc<CpuStorage>> = None;
            for side in [28, 28, 12] {
                let x = f32s(r.vec(4 * 4 * side * side), &[4, 4, side, side]);
                let g = Geom::new(x.dims(), w.dims(), b.dims(), p).unwrap();
                assert!(
                    winograd::applies(&g),
                    "{side}x{side} takes the Winograd path"
                );
                let want = to_vec(&conv2d(&x, &w, &b, p).unwrap());
                let got = conv2d_frozen(&x, &w, &b, p, &cache).unwrap();
                assert!(!got.track_op(), "a frozen forward builds no graph");
                assert_eq!(to_vec(&got), want, "{side}x{side}");
                let (m, u) = held().expect("the first forward kept its filters");
                assert_eq!(m, winograd::tile_size(&g));
                match &first {
                    None => first = Some(u),
                    Some(f) if side == 28 => {
                        assert!(Arc::ptr_eq(f, &u), "the second call reuses them")
                    }
                    Some(f) => assert!(!Arc::ptr_eq(f, &u), "a new tile remakes them"),
                }
                tiles.push(m);
            }
            assert_ne!(tiles[0], tiles[2], "the two sides take different tiles");
        });
    }

    #[test]
    fn bad_shapes_error() {
        let x = Tensor::zeros((1, 4, 5, 5), DType::F32, &Device::Cpu).unwrap();
        let w = Tensor::zeros((6, 3, 3, 3), DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::zeros(6, DType::F32, &Device::Cpu).unwrap();
        assert!(conv2d(&x, &w, &b, p(1, 0, 1, false)).is_err());
        assert!(conv2d(&x, &w, &b, p(1, 0, 3, false)).is_err());
        let w = Tensor::zeros((6, 4, 7, 7), DType::F32, &Device::Cpu).unwrap();
        assert!(conv2d(&x, &w, &b, p(1, 0, 1, false)).is_err());
    }

    /// Forward, input gradient and weight/bias gradient against the im2col path, in f64, for
    /// maps that take several images per GEMM, one image in bands of tile rows (40x40, 45x37),
    /// odd sizes (a last tile half outside), 1x1 maps and grouped layers, with 3x3 filters
    /// (F(2x2) and F(4x4)) and 5x5 (F(2x2, 5x5), whose input tiles reach two tiles on, and
    /// F(4x4, 5x5)); on 1 to 16 threads (more threads than images: fewer images per task, and
    /// the im2col path's per-image splits).
    #[test]
    fn winograd_matches_im2col_path() {
        // (N, C, H, W, O, groups)
        let shapes = [
            (3, 4, 7, 7, 5, 1),
            (2, 3, 5, 6, 2, 1),
            (1, 2, 40, 40, 3, 1),
            (1, 3, 45, 37, 2, 1),
            (2, 3, 41, 23, 4, 1),
            (4, 2, 1, 1, 3, 1),
            (5, 6, 14, 14, 7, 1),
            // 340 filters: the filter transform's blocks of 256 and its adjoint's of 128, the last
            // ones partial.
            (2, 20, 9, 9, 17, 1),
            // AlexNet conv4-like (two groups at 13x13), three groups, one grouped image in
            // bands of tile rows.
            (4, 6, 13, 13, 8, 2),
            (3, 9, 11, 12, 6, 3),
            (1, 4, 40, 40, 6, 2),
        ];
        let layers = shapes.iter().flat_map(|&s| [(s, 3), (s, 5)]).enumerate();
        let run = || {
            for (i, ((n, c, h, w, o, groups), k)) in layers.clone() {
                let p = Conv2d {
                    stride: 1,
                    pad: k / 2,
                    groups,
                    relu: i % 4 < 2,
                };
                let cg = c / groups;
                let g = Geom::new(&[n, c, h, w], &[o, cg, k, k], &[o], p).unwrap();
                let (min_side, side) = (crate::tuning::WINOGRAD_MIN_SIDE, h.min(w));
                let few_min_side = crate::tuning::WINOGRAD_FEW_MIN_SIDE;
                let splits = groups == 1 && side >= few_min_side;
                let threads = rayon::current_num_threads();
                let enough_images = if k == 5 {
                    n >= crate::tuning::WINOGRAD_5X5_MIN_IMAGES_PER_THREAD * threads || groups == 1
                } else {
                    n >= threads || splits
                };
                let batched = g.images_per_task() >= crate::tuning::WINOGRAD_F4_MIN_IMAGES_PER_TASK
                    && side >= crate::tuning::WINOGRAD_BATCHED_MIN_SIDE;
                let on = crate::tuning::tuning().winograd;
                assert_eq!(
                    winograd::applies(&g),
                    on && (side >= min_side || batched) && enough_images
                );
                let mut r = Rng::new(7 + i as u64);
                let (x, wt, b) = (r.vec(n * c * h * w), r.vec(o * cg * k * k), r.vec(o));
                let dy = r.vec(n * o * h * w);
                let x_img = (&x[..], c * h * w);
                let ndx = n * c * h * w;
                let want_y = fwd_im2col(x_img, &wt, &b, &g, p.relu);
                let filter = bwd_filter_im2col(x_img, &dy, &g);
                let mut both = bwd_data_im2col(&dy, &wt, &g);
                both.extend(filter);
                // The forward's kept filters serve the backward as its own transform does, and
                // are what it uses (zeros instead give a zero input gradient).
                let (_, kept) = winograd::fwd(x_img, &wt, &b, &g, p.relu);
                let own = joined(winograd::bwd_both(x_img, &dy, &wt, None, &g));
                assert_eq!(
                    joined(winograd::bwd_both(x_img, &dy, &wt, Some(&kept), &g)),
                    own
                );
                let zeros = vec![0.0; kept.len()];
                let with_zeros = joined(winograd::bwd_both(x_img, &dy, &wt, Some(&zeros), &g));
                assert!(with_zeros[..ndx].iter().all(|&v| v == 0.0));
                assert_eq!(with_zeros[ndx..], own[ndx..]);
                for m in [2, 4].into_iter().filter(|&m| winograd::tile_fits(&g, m)) {
                    let shape = (n, c, h, w, o, groups);
                    let ctx = format!("F({m}x{m}, {k}x{k}) {shape:?} relu {}", p.relu);
                    let e = max_rel(
                        &winograd::fwd_with(x_img, &wt, &b, &g, p.relu, m).0,
                        &want_y,
                    );
                    assert!(e < 1e-12, "forward {ctx}: {e}");
                    let winograd = joined(winograd::bwd_both_with(x_img, &dy, &wt, None, &g, m));
                    let e = max_rel(&winograd[ndx..], &both[ndx..]);
                    assert!(e < 1e-12, "weight gradient {ctx}: {e}");
                    let e = max_rel(&winograd, &both);
                    assert!(e < 1e-12, "both gradients {ctx}: {e}");
                }
            }
        };
        crate::test_util::on_thread_counts(run);
    }

    /// In f32 each F(2x2, 3x3) pass stays as close to the exact result (f64 im2col) as im2col's
    /// own f32 does (within 3x; measured 0.6-1.7x, ~1e-5 of max(|value|, 1)); F(4x4, 3x3)
    /// within 20x; F(2x2, 5x5), whose G has 2/3 and sums five taps, within 40x (measured
    /// 13-26x, ~2e-4 of max(|value|, 1)), and F(4x4, 5x5) too (measured 12-24x).
    #[test]
    fn winograd_f32_error_is_small() {
        for (k, tiles) in [
            (3, &[(2, 3.0), (4, 20.0)][..]),
            (5, &[(2, 40.0), (4, 40.0)][..]),
        ] {
            winograd_f32_error_within(k, tiles);
        }
    }

    /// The f32 transforms of their own (NEON on aarch64) on maps of many sizes: tile rows of
    /// exactly four tiles and of more, partial last tiles and tile rows, with and without the
    /// ReLU, on 1 to 16 threads (one image per thread, or split by channels). Within F(4x4)'s
    /// bound above, against f64 im2col.
    #[test]
    fn winograd_f32_matches_f64_on_maps_of_every_shape() {
        let shapes = [
            (1, 8, 16, 16, 5),
            (2, 8, 13, 13, 6),
            (1, 8, 14, 14, 4),
            (1, 6, 23, 17, 5),
        ];
        let more = [
            (1, 4, 28, 28, 3),
            (2, 4, 9, 30, 3),
            (1, 4, 5, 7, 2),
            (3, 4, 7, 7, 3),
        ];
        let run = || {
            for (i, &(n, c, h, w, o)) in shapes.iter().chain(&more).enumerate() {
                for k in [3, 5] {
                    let relu = (i + k) % 2 == 0;
                    let p = Conv2d {
                        stride: 1,
                        pad: k / 2,
                        groups: 1,
                        relu,
                    };
                    let g = Geom::new(&[n, c, h, w], &[o, c, k, k], &[o], p).unwrap();
                    let mut r = Rng::new(40 + i as u64);
                    let (x, wt, b) = (r.vec(n * c * h * w), r.vec(o * c * k * k), r.vec(o));
                    let dy = r.vec(n * o * h * w);
                    let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<_>>();
                    let back = |v: &[f32]| v.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
                    let (x32, w32, b32, dy32) = (f(&x), f(&wt), f(&b), f(&dy));
                    let xi = (&x[..], c * h * w);
                    let mut exact_grads = bwd_data_im2col(&dy, &wt, &g);
                    exact_grads.extend(bwd_filter_im2col(xi, &dy, &g));
                    let exact = [fwd_im2col(xi, &wt, &b, &g, relu), exact_grads];
                    for m in [2, 4].into_iter().filter(|&m| winograd::tile_fits(&g, m)) {
                        let xi32 = (&x32[..], c * h * w);
                        let got = [
                            back(&winograd::fwd_with(xi32, &w32, &b32, &g, relu, m).0),
                            back(&joined(winograd::bwd_both_with(
                                xi32, &dy32, &w32, None, &g, m,
                            ))),
                        ];
                        for (pass, name) in ["forward", "gradients"].into_iter().enumerate() {
                            let e = max_rel(&exact[pass], &got[pass]);
                            assert!(
                                e < 5e-4,
                                "F({m}x{m}, {k}x{k}) {name} on ({n}, {c}, {h}, {w}) -> {o}: {e}"
                            );
                        }
                    }
                }
            }
        };
        crate::test_util::on_thread_counts(run);
    }

    fn winograd_f32_error_within(k: usize, tiles: &[(usize, f64)]) {
        let (n, c, h, w, o) = (2, 64, 16, 16, 32);
        let p = Conv2d {
            stride: 1,
            pad: k / 2,
            groups: 1,
            relu: false,
        };
        let g = Geom::new(&[n, c, h, w], &[o, c, k, k], &[o], p).unwrap();
        let mut r = Rng::new(3);
        let (x, wt, b) = (r.vec(n * c * h * w), r.vec(o * c * k * k), r.vec(o));
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
        for &(m, bound) in tiles {
            let both = joined(winograd::bwd_both_with(xi32, &dy32, &w32, None, &g, m));
            let winograd = [
                back(winograd::fwd_with(xi32, &w32, &b32, &g, false, m).0),
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
                    "F({m}x{m}, {k}x{k}) {e}: {ew:.2e} vs im2col {ei:.2e} ({:.1}x)",
                    ew / ei
                );
                assert!(
                    ew < bound * ei.max(1e-6),
                    "F({m}x{m}, {k}x{k}) {e}: winograd f32 off by {ew}, im2col by {ei}"
                );
            }
        }
    }
}
