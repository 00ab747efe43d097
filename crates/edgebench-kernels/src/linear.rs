//! Fully connected layer `y = x · Wᵀ + b` (optionally ReLU) as one differentiable op with GEMM
//! forward and backward. candle's `x.matmul(&w.t())` differentiates through the transpose and
//! leaves the weight gradient transposed (strided), which the SGD update then walks slowly.

use crate::matmul::{gemm_strided, gemm_uninit, Product};
use crate::relu::ReluMask;
#[cfg(target_arch = "aarch64")]
use crate::tuning::LINEAR_STREAM_COLS_PER_TASK;
#[cfg(target_arch = "aarch64")]
use crate::tuning::LINEAR_STREAM_MAX_ROWS_NEON;
use crate::tuning::{
    LINEAR_DATA_ROWS_PER_TASK, LINEAR_STREAM_MAX_ROWS, LINEAR_STREAM_ROWS_PER_TASK,
};
#[cfg(target_arch = "aarch64")]
use crate::util::{as_f32, as_f32_mut, as_f32_out, is_f32};
use crate::util::{nchw_slice, relu_f, sum_partials, vec_written_by, zeros, Float};
use candle_core::{bail, CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

/// x: (N, IN) (or anything flattening to it), w: (OUT, IN), b: (OUT) -> (N, OUT).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    let x = x.flatten_from(1)?;
    let (_, i) = x.dims2()?;
    let (o, wi) = w.dims2()?;
    if wi != i || b.dims() != [o] {
        bail!(
            "linear: x {:?}, w {:?}, b {:?} do not fit",
            x.dims(),
            w.dims(),
            b.dims()
        );
    }
    x.contiguous()?
        .apply_op3(&w.contiguous()?, &b.contiguous()?, Linear { relu })
}

/// The same with candle's ops (reference).
pub fn linear_candle(x: &Tensor, w: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    let y = x.flatten_from(1)?.matmul(&w.t()?)?.broadcast_add(b)?;
    if relu {
        y.relu()
    } else {
        Ok(y)
    }
}

fn par() -> Parallelism {
    match rayon::current_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

#[derive(Debug, Clone, Copy)]
struct Linear {
    relu: bool,
}

/// Σ a[k]·b[k] in 16 lanes (a plain fold does not vectorise: float addition is not associative).
fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    const LANES: usize = 16;
    let mut acc = [T::ZERO; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let mut total = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(T::ZERO, |s, (&p, &q)| p.mul_add_fast(q, s));
    for (p, q) in ca.zip(cb) {
        for ((s, &p), &q) in acc.iter_mut().zip(p).zip(q) {
            *s = p.mul_add_fast(q, *s);
        }
    }
    for s in acc {
        total += s;
    }
    total
}

/// yt (o, n), column-major y, = W · xᵀ for a few rows of x: one pass over W.
fn stream_fwd<T: Float>(x: &[T], w: &[T], (n, i, o): (usize, usize, usize)) -> Vec<T> {
    let _product = Product::start((n, o, i), Parallelism::Rayon(0));
    let rows = LINEAR_STREAM_ROWS_PER_TASK;
    // SAFETY: each chunk of `rows` W rows writes its n values per row below.
    unsafe {
        vec_written_by(o * n, |yt| {
            yt.par_chunks_mut(rows * n)
                .zip(w.par_chunks(rows * i))
                .for_each(|(yt, w)| {
                    #[cfg(target_arch = "aarch64")]
                    if let (Some(x), Some(w), Some(yt)) = (as_f32(x), as_f32(w), as_f32_out(yt)) {
                        return neon::dots(x, w, yt, (n, i));
                    }
                    for (yc, wc) in yt.chunks_exact_mut(n).zip(w.chunks_exact(i)) {
                        for (y, xr) in yc.iter_mut().zip(x.chunks_exact(i)) {
                            y.write(dot(xr, wc));
                        }
                    }
                })
        })
    }
}

/// dW (o, i) = dyᵀ (o, n) · x (n, i) for a few rows: each row of dW built in the cache and
/// written to memory once. The first input row's products are stored, not added to zeros: at
/// batch 1 that is the whole row in one multiply and one store per element.
fn stream_weight<T: Float>(dy: &[T], x: &[T], (n, i, o): (usize, usize, usize)) -> Vec<T> {
    let _product = Product::start((n, o, i), Parallelism::Rayon(0));
    let rows = LINEAR_STREAM_ROWS_PER_TASK;
    // SAFETY: every element of every row of every chunk is written by the first input row's
    // pass below (n >= 1, x holds n rows of i).
    unsafe {
        vec_written_by(o * i, |dw| {
            dw.par_chunks_mut(rows * i).enumerate().for_each(|(t, dw)| {
                #[cfg(target_arch = "aarch64")]
                if let (Some(dy), Some(x), Some(dw)) = (as_f32(dy), as_f32(x), as_f32_out(dw)) {
                    return neon::outer(dw, dy, x, (t * rows, n, i, o));
                }
                for (k, dwc) in dw.chunks_exact_mut(i).enumerate() {
                    let c = t * rows + k;
                    let mut x_rows = x.chunks_exact(i).take(n);
                    let first = x_rows.next().expect("stream_weight needs n >= 1");
                    let d = dy[c];
                    for (s, &v) in dwc.iter_mut().zip(first) {
                        s.write(d * v);
                    }
                    // SAFETY: every element was written just above.
                    let dwc = &mut *(dwc as *mut [std::mem::MaybeUninit<T>] as *mut [T]);
                    for (r, xr) in x_rows.enumerate() {
                        let d = dy[(r + 1) * o + c];
                        for (s, &v) in dwc.iter_mut().zip(xr) {
                            *s = d.mul_add_fast(v, *s);
                        }
                    }
                }
            })
        })
    }
}

/// Rows (batch) up to which the forward and the weight gradient stream W instead of calling
/// gemm: `LINEAR_STREAM_MAX_ROWS`, or `LINEAR_STREAM_MAX_ROWS_NEON` for f32 on aarch64, whose
/// NEON loops share each load of W among four rows of the product (a GEMM of depth 8 runs its
/// microkernel for two iterations per tile, the gemm crate's forward at 4.3 FLOP per
/// instruction).
fn stream_rows<T: Float>() -> usize {
    #[cfg(target_arch = "aarch64")]
    if is_f32::<T>() {
        return LINEAR_STREAM_MAX_ROWS_NEON;
    }
    LINEAR_STREAM_MAX_ROWS
}

/// dx (n, i) = dy (n, o) · W (o, i) for a few rows of dy, f32 only: each task a stretch of
/// dx's columns, built in the cache from W's rows four at a time.
#[cfg(target_arch = "aarch64")]
fn stream_data<T: Float>(dy: &[T], w: &[T], (n, i, o): (usize, usize, usize)) -> Vec<T> {
    let _product = Product::start((n, o, i), Parallelism::Rayon(0));
    let (dy, w) = (as_f32(dy).expect("f32"), as_f32(w).expect("f32"));
    let mut out = zeros::<T>(n * i);
    let dx = as_f32_mut(&mut out).expect("f32");
    let cols = LINEAR_STREAM_COLS_PER_TASK;
    for (dx, dy) in dx.chunks_exact_mut(i).zip(dy.chunks_exact(o)) {
        dx.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(t, dx)| neon::axpys(dx, dy, w, (t * cols, i)));
    }
    out
}

/// dx (n, i) = dy (n, o) · W (o, i) for a few rows of dy: one pass over W by runs of its rows,
/// each task adding its rows, four at a time, into its own partial dx (which stays in the
/// cache), the partials then summed in task order (the same result for any thread count). gemm
/// runs a product this thin on the calling thread alone; bands of dx's columns instead read W in
/// short pieces a row apart, at half the rate of the forward's pass over it.
fn rows_data<T: Float>(dy: &[T], w: &[T], (n, i, o): (usize, usize, usize)) -> Vec<T> {
    let _product = Product::start((n, o, i), Parallelism::Rayon(0));
    if o == 0 || i == 0 {
        return zeros(n * i);
    }
    let rows = LINEAR_DATA_ROWS_PER_TASK;
    let partials: Vec<Vec<T>> = w[..o * i]
        .par_chunks(rows * i)
        .enumerate()
        .map(|(task, wt)| {
            let mut dx = vec![T::ZERO; n * i];
            let first = task * rows;
            let mut quads = wt.chunks_exact(4 * i);
            for (q, quad) in (&mut quads).enumerate() {
                let (w0, rest) = quad.split_at(i);
                let (w1, rest) = rest.split_at(i);
                let (w2, w3) = rest.split_at(i);
                for (r, dxr) in dx.chunks_exact_mut(i).enumerate() {
                    let d = &dy[r * o + first + 4 * q..][..4];
                    let lanes = dxr.iter_mut().zip(w0).zip(w1).zip(w2).zip(w3);
                    for ((((x, &a), &b), &c), &e) in lanes {
                        let s = a.mul_add_fast(d[0], *x);
                        let s = b.mul_add_fast(d[1], s);
                        *x = e.mul_add_fast(d[3], c.mul_add_fast(d[2], s));
                    }
                }
            }
            let done = first + 4 * (wt.len() / (4 * i));
            for (k, wr) in quads.remainder().chunks_exact(i).enumerate() {
                for (r, dxr) in dx.chunks_exact_mut(i).enumerate() {
                    let d = dy[r * o + done + k];
                    for (x, &a) in dxr.iter_mut().zip(wr) {
                        *x = a.mul_add_fast(d, *x);
                    }
                }
            }
            dx
        })
        .collect();
    sum_partials(partials)
}

/// The fully connected loops at batch 1 to 8 in NEON: W's rows four at a time, sixteen floats
/// of each per iteration in one four-register load, so a multiply-add of 4 lanes costs little
/// more than its one instruction (the compiler's loops load each vector alone and reload x per
/// row).
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::mem::MaybeUninit;

    /// `yt[c * n + r] = x[r] · w[c]` for the rows c of `w` (each `i` long) and the `n` rows of x.
    pub(super) fn dots(x: &[f32], w: &[f32], yt: &mut [MaybeUninit<f32>], (n, i): (usize, usize)) {
        let rows = w.len() / i;
        let quads = rows / 4;
        for q in 0..quads {
            let wr: [&[f32]; 4] = std::array::from_fn(|k| &w[(4 * q + k) * i..][..i]);
            for (r, xr) in x.chunks_exact(i).take(n).enumerate() {
                let d = dot4(xr, wr);
                for (k, &d) in d.iter().enumerate() {
                    yt[(4 * q + k) * n + r].write(d);
                }
            }
        }
        for c in 4 * quads..rows {
            let wc = &w[c * i..][..i];
            for (r, xr) in x.chunks_exact(i).take(n).enumerate() {
                let d = dot4(xr, [wc; 4])[0];
                yt[c * n + r].write(d);
            }
        }
    }

    /// `x · w[k]` for four rows k.
    fn dot4(x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
        let len = x.len();
        assert!(w.iter().all(|w| w.len() == len));
        let body = len - len % 16;
        let mut acc = [[0f32; 4]; 16];
        if body > 0 {
            // In assembly: the compiler splits a four-register load into four. Per 16
            // columns one load of x and one of each row, 16 FMAs.
            // SAFETY: the loop reads `body` floats of x and of each row (all `len` long) and
            // writes the 16 accumulators to `acc` (16 x 4 floats).
            unsafe {
                std::arch::asm!(
                    "movi v16.16b, #0", "movi v17.16b, #0", "movi v18.16b, #0", "movi v19.16b, #0",
                    "movi v20.16b, #0", "movi v21.16b, #0", "movi v22.16b, #0", "movi v23.16b, #0",
                    "movi v24.16b, #0", "movi v25.16b, #0", "movi v26.16b, #0", "movi v27.16b, #0",
                    "movi v28.16b, #0", "movi v29.16b, #0", "movi v30.16b, #0", "movi v31.16b, #0",
                    "2:",
                    "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{x}], #64",
                    "ld1 {{v4.4s, v5.4s, v6.4s, v7.4s}}, [{w0}], #64",
                    "ld1 {{v8.4s, v9.4s, v10.4s, v11.4s}}, [{w1}], #64",
                    "fmla v16.4s, v0.4s, v4.4s", "fmla v17.4s, v1.4s, v5.4s",
                    "fmla v18.4s, v2.4s, v6.4s", "fmla v19.4s, v3.4s, v7.4s",
                    "ld1 {{v4.4s, v5.4s, v6.4s, v7.4s}}, [{w2}], #64",
                    "fmla v20.4s, v0.4s, v8.4s", "fmla v21.4s, v1.4s, v9.4s",
                    "fmla v22.4s, v2.4s, v10.4s", "fmla v23.4s, v3.4s, v11.4s",
                    "ld1 {{v8.4s, v9.4s, v10.4s, v11.4s}}, [{w3}], #64",
                    "fmla v24.4s, v0.4s, v4.4s", "fmla v25.4s, v1.4s, v5.4s",
                    "fmla v26.4s, v2.4s, v6.4s", "fmla v27.4s, v3.4s, v7.4s",
                    "fmla v28.4s, v0.4s, v8.4s", "fmla v29.4s, v1.4s, v9.4s",
                    "fmla v30.4s, v2.4s, v10.4s", "fmla v31.4s, v3.4s, v11.4s",
                    "subs {n}, {n}, #1",
                    "b.ne 2b",
                    "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{acc}], #64",
                    "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{acc}], #64",
                    "st1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{acc}], #64",
                    "st1 {{v28.4s, v29.4s, v30.4s, v31.4s}}, [{acc}], #64",
                    x = inout(reg) x.as_ptr() => _,
                    w0 = inout(reg) w[0].as_ptr() => _,
                    w1 = inout(reg) w[1].as_ptr() => _,
                    w2 = inout(reg) w[2].as_ptr() => _,
                    w3 = inout(reg) w[3].as_ptr() => _,
                    n = inout(reg) body / 16 => _,
                    acc = inout(reg) acc.as_mut_ptr() => _,
                    out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                    out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                    out("v8") _, out("v9") _, out("v10") _, out("v11") _,
                    out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                    out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                    out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                    out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                    options(nostack),
                );
            }
        }
        std::array::from_fn(|k| {
            let mut total = acc[4 * k..4 * k + 4].iter().flatten().sum::<f32>();
            for p in body..len {
                total = x[p].mul_add(w[k][p], total);
            }
            total
        })
    }

    /// `dx[j] += Σ_c dy[c] · w[c][col0 + j]` over the rows c of `w` (each `i` long), for the
    /// stretch `dx` of columns from `col0`.
    pub(super) fn axpys(dx: &mut [f32], dy: &[f32], w: &[f32], (col0, i): (usize, usize)) {
        let len = dx.len();
        let body = len - len % 16;
        let quads = dy.len() / 4;
        let row = |c: usize| &w[c * i + col0..][..len];
        for q in 0..quads {
            let wr: [&[f32]; 4] = std::array::from_fn(|k| row(4 * q + k));
            let d: [f32; 4] = std::array::from_fn(|k| dy[4 * q + k]);
            if body > 0 {
                // In assembly, as `dot4`: per 16 columns one load and one store of dx, one
                // load of each row, 16 FMAs.
                // SAFETY: the loop reads `body` floats of each row and reads and writes
                // `body` floats of dx (all `len` long).
                unsafe {
                    std::arch::asm!(
                        "ld1 {{v0.4s}}, [{d}]",
                        "2:",
                        "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{dx}]",
                        "ld1 {{v4.4s, v5.4s, v6.4s, v7.4s}}, [{w0}], #64",
                        "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{w1}], #64",
                        "fmla v16.4s, v4.4s, v0.s[0]", "fmla v17.4s, v5.4s, v0.s[0]",
                        "fmla v18.4s, v6.4s, v0.s[0]", "fmla v19.4s, v7.4s, v0.s[0]",
                        "ld1 {{v4.4s, v5.4s, v6.4s, v7.4s}}, [{w2}], #64",
                        "fmla v16.4s, v20.4s, v0.s[1]", "fmla v17.4s, v21.4s, v0.s[1]",
                        "fmla v18.4s, v22.4s, v0.s[1]", "fmla v19.4s, v23.4s, v0.s[1]",
                        "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{w3}], #64",
                        "fmla v16.4s, v4.4s, v0.s[2]", "fmla v17.4s, v5.4s, v0.s[2]",
                        "fmla v18.4s, v6.4s, v0.s[2]", "fmla v19.4s, v7.4s, v0.s[2]",
                        "fmla v16.4s, v20.4s, v0.s[3]", "fmla v17.4s, v21.4s, v0.s[3]",
                        "fmla v18.4s, v22.4s, v0.s[3]", "fmla v19.4s, v23.4s, v0.s[3]",
                        "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{dx}], #64",
                        "subs {n}, {n}, #1",
                        "b.ne 2b",
                        d = in(reg) d.as_ptr(),
                        dx = inout(reg) dx.as_mut_ptr() => _,
                        w0 = inout(reg) wr[0].as_ptr() => _,
                        w1 = inout(reg) wr[1].as_ptr() => _,
                        w2 = inout(reg) wr[2].as_ptr() => _,
                        w3 = inout(reg) wr[3].as_ptr() => _,
                        n = inout(reg) body / 16 => _,
                        out("v0") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                        out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                        out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                        options(nostack),
                    );
                }
            }
            for p in body..len {
                for k in 0..4 {
                    dx[p] = d[k].mul_add(wr[k][p], dx[p]);
                }
            }
        }
        for (c, &d) in dy.iter().enumerate().skip(4 * quads) {
            for (s, &v) in dx.iter_mut().zip(row(c)) {
                *s = d.mul_add(v, *s);
            }
        }
    }

    /// dW's rows `c0..` (a task's, each `i` long) = Σ_r dy[r][c] · x[r] over the `n` rows of
    /// dy (n, o) and x (n, i): four rows of dW and sixteen columns at a time in assembly, each
    /// load of x serving 16 FMAs, each row written once (with one row of x, `scaled` rows).
    pub(super) fn outer(
        dw: &mut [MaybeUninit<f32>],
        dy: &[f32],
        x: &[f32],
        (c0, n, i, o): (usize, usize, usize, usize),
    ) {
        if n == 1 {
            // One row of x: each row of dW is that row scaled.
            for (k, row) in dw.chunks_exact_mut(i).enumerate() {
                scaled(row, dy[c0 + k], &x[..i]);
            }
            return;
        }
        let body = i - i % 16;
        let coefficient = |r: usize, c: usize| dy[r * o + c];
        for (q, quad) in dw.chunks_mut(4 * i).enumerate() {
            let c = c0 + 4 * q;
            if quad.len() < 4 * i {
                // The task's last rows, fewer than four: one at a time.
                for (k, row) in quad.chunks_exact_mut(i).enumerate() {
                    for (j, e) in row.iter_mut().enumerate() {
                        let sum = (0..n)
                            .fold(0f32, |s, r| coefficient(r, c + k).mul_add(x[r * i + j], s));
                        e.write(sum);
                    }
                }
                continue;
            }
            // The four rows' coefficients of each row of x, side by side.
            let coefficients: Vec<[f32; 4]> = (0..n)
                .map(|r| std::array::from_fn(|k| coefficient(r, c + k)))
                .collect();
            let (d0, rest) = quad.split_at_mut(i);
            let (d1, rest) = rest.split_at_mut(i);
            let (d2, d3) = rest.split_at_mut(i);
            if body > 0 {
                // SAFETY: per chunk of 16 columns the loop reads 16 floats of each of the n
                // rows of x (i apart, n * i floats) and the n coefficient vectors, and writes
                // 16 floats of each of the four rows of dW (i long): body <= i.
                unsafe {
                    std::arch::asm!(
                        "2:",
                        "movi v16.16b, #0", "movi v17.16b, #0", "movi v18.16b, #0",
                        "movi v19.16b, #0", "movi v20.16b, #0", "movi v21.16b, #0",
                        "movi v22.16b, #0", "movi v23.16b, #0", "movi v24.16b, #0",
                        "movi v25.16b, #0", "movi v26.16b, #0", "movi v27.16b, #0",
                        "movi v28.16b, #0", "movi v29.16b, #0", "movi v30.16b, #0",
                        "movi v31.16b, #0",
                        "mov {xr}, {x}",
                        "mov {cp}, {coef}",
                        "mov {r}, {n}",
                        "3:",
                        "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{xr}], {stride}",
                        "ld1 {{v4.4s}}, [{cp}], #16",
                        "fmla v16.4s, v0.4s, v4.s[0]", "fmla v17.4s, v1.4s, v4.s[0]",
                        "fmla v18.4s, v2.4s, v4.s[0]", "fmla v19.4s, v3.4s, v4.s[0]",
                        "fmla v20.4s, v0.4s, v4.s[1]", "fmla v21.4s, v1.4s, v4.s[1]",
                        "fmla v22.4s, v2.4s, v4.s[1]", "fmla v23.4s, v3.4s, v4.s[1]",
                        "fmla v24.4s, v0.4s, v4.s[2]", "fmla v25.4s, v1.4s, v4.s[2]",
                        "fmla v26.4s, v2.4s, v4.s[2]", "fmla v27.4s, v3.4s, v4.s[2]",
                        "fmla v28.4s, v0.4s, v4.s[3]", "fmla v29.4s, v1.4s, v4.s[3]",
                        "fmla v30.4s, v2.4s, v4.s[3]", "fmla v31.4s, v3.4s, v4.s[3]",
                        "subs {r}, {r}, #1",
                        "b.ne 3b",
                        "st1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{d0}], #64",
                        "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{d1}], #64",
                        "st1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{d2}], #64",
                        "st1 {{v28.4s, v29.4s, v30.4s, v31.4s}}, [{d3}], #64",
                        "add {x}, {x}, #64",
                        "subs {chunks}, {chunks}, #1",
                        "b.ne 2b",
                        x = inout(reg) x.as_ptr() => _,
                        coef = in(reg) coefficients.as_ptr(),
                        n = in(reg) n,
                        stride = in(reg) i * 4,
                        chunks = inout(reg) body / 16 => _,
                        d0 = inout(reg) d0.as_mut_ptr() => _,
                        d1 = inout(reg) d1.as_mut_ptr() => _,
                        d2 = inout(reg) d2.as_mut_ptr() => _,
                        d3 = inout(reg) d3.as_mut_ptr() => _,
                        xr = out(reg) _,
                        cp = out(reg) _,
                        r = out(reg) _,
                        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                        out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                        out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                        out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                        out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                        options(nostack),
                    );
                }
            }
            for (k, row) in [d0, d1, d2, d3].into_iter().enumerate() {
                for (j, e) in row.iter_mut().enumerate().skip(body) {
                    let sum = coefficients
                        .iter()
                        .enumerate()
                        .fold(0f32, |s, (r, cf)| cf[k].mul_add(x[r * i + j], s));
                    e.write(sum);
                }
            }
        }
    }

    /// `dst = d · x` (the weight gradient's row at batch 1): in assembly, per 16 floats one
    /// load, four multiplies and one store.
    pub(super) fn scaled(dst: &mut [MaybeUninit<f32>], d: f32, x: &[f32]) {
        let len = dst.len();
        assert_eq!(x.len(), len);
        let body = len - len % 16;
        if body > 0 {
            // SAFETY: the loop reads `body` floats of x and writes `body` of dst (both `len`).
            unsafe {
                std::arch::asm!(
                    "dup v7.4s, {d:w}",
                    "2:",
                    "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{x}], #64",
                    "fmul v0.4s, v0.4s, v7.4s", "fmul v1.4s, v1.4s, v7.4s",
                    "fmul v2.4s, v2.4s, v7.4s", "fmul v3.4s, v3.4s, v7.4s",
                    "st1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{dst}], #64",
                    "subs {n}, {n}, #1",
                    "b.ne 2b",
                    d = in(reg) d.to_bits(),
                    x = inout(reg) x.as_ptr() => _,
                    dst = inout(reg) dst.as_mut_ptr() => _,
                    n = inout(reg) body / 16 => _,
                    out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v7") _,
                    options(nostack),
                );
            }
        }
        for (s, &v) in dst[body..].iter_mut().zip(&x[body..]) {
            s.write(d * v);
        }
    }
}

fn fwd<T: Float>(
    x: &[T],
    w: &[T],
    b: &[T],
    (n, i, o): (usize, usize, usize),
    relu: bool,
) -> Vec<T> {
    let yt = if (1..=stream_rows::<T>()).contains(&n) && i > 0 {
        stream_fwd(x, w, (n, i, o))
    } else {
        gemm_fwd(x, w, (n, i, o))
    };
    let mut y = Vec::new();
    (0..n * o)
        .into_par_iter()
        .with_min_len(1 << 12)
        .map(|e| {
            let (r, c) = (e / o, e % o);
            let v = yt[c * n + r] + b[c];
            if relu {
                relu_f(v)
            } else {
                v
            }
        })
        .collect_into_vec(&mut y);
    y
}

/// yt (o, n), column-major y, = W · xᵀ by gemm.
fn gemm_fwd<T: Float>(x: &[T], w: &[T], (n, i, o): (usize, usize, usize)) -> Vec<T> {
    // The product goes into a column-major (n, o) buffer, which gemm computes as asked: x is the
    // packed side and W is streamed in place. For a row-major y gemm transposes the problem and
    // packs all of W first, tripling the memory traffic of fc6's 151 MB weight.
    let mut yt = zeros(n * o);
    gemm_strided(
        (n, o, i),
        &mut yt,
        (1, n),
        false,
        x,
        (i, 1),
        w,
        (1, i),
        par(),
    );
    yt
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "linear-gemm"
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
        let (n, i) = l1.shape().dims2()?;
        let (o, _) = l2.shape().dims2()?;
        let k = "linear";
        let y = float_kernel!(k, |x in s1, w in s2, b in s3| fwd(
            nchw_slice(x, l1, k)?,
            nchw_slice(w, l2, k)?,
            nchw_slice(b, l3, k)?,
            (n, i, o),
            self.relu,
        ));
        Ok((y, Shape::from((n, o))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dy = if self.relu {
            dy.contiguous()?
                .apply_op2_no_bwd(&y.contiguous()?, &ReluMask)?
        } else {
            dy.contiguous()?
        };
        let dx = if x.track_op() {
            Some(dy.apply_op2_no_bwd(w, &LinearBwd::Data)?)
        } else {
            None
        };
        let dw = dy.apply_op2_no_bwd(x, &LinearBwd::Weight)?;
        let db = dy.sum(0)?;
        Ok((dx, Some(dw), Some(db)))
    }
}

/// (dy, w) -> dx = dy · W, or (dy, x) -> dW = dyᵀ · x.
pub(crate) enum LinearBwd {
    Data,
    Weight,
}

impl LinearBwd {
    fn run<T: Float>(&self, dy: &[T], other: &[T], (n, o): (usize, usize), i: usize) -> Vec<T> {
        match self {
            // On aarch64 the gemm crate's matrix-vector loop runs 2.3 FLOP per instruction,
            // the NEON pass over W's rows 4 at a time over 5. Elsewhere dx takes a pass over W
            // by runs of rows on all threads.
            #[cfg(target_arch = "aarch64")]
            LinearBwd::Data
                if (1..=LINEAR_STREAM_MAX_ROWS).contains(&n) && as_f32(dy).is_some() && i > 0 =>
            {
                stream_data(dy, other, (n, i, o))
            }
            LinearBwd::Weight if (1..=stream_rows::<T>()).contains(&n) && i > 0 => {
                stream_weight(dy, other, (n, i, o))
            }
            LinearBwd::Data
                if (1..=LINEAR_STREAM_MAX_ROWS).contains(&n)
                    && rayon::current_num_threads() > 1 =>
            {
                rows_data(dy, other, (n, i, o))
            }
            // SAFETY: gemm_uninit writes all of the (n, i) product dx, as vec_written_by needs.
            LinearBwd::Data => unsafe {
                vec_written_by(n * i, |dx| {
                    gemm_uninit((n, i, o), dx, dy, (o, 1), other, (i, 1), par())
                })
            },
            // SAFETY: gemm_uninit writes all of the (o, i) product dW, as vec_written_by needs.
            LinearBwd::Weight => unsafe {
                vec_written_by(o * i, |dw| {
                    gemm_uninit((o, i, n), dw, dy, (1, o), other, (i, 1), par())
                })
            },
        }
    }
}

impl CustomOp2 for LinearBwd {
    fn name(&self) -> &'static str {
        "linear-gemm-bwd"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, o) = l1.shape().dims2()?;
        let (a, i) = l2.shape().dims2()?;
        let shape = match self {
            LinearBwd::Data if a == o => Shape::from((n, i)),
            LinearBwd::Weight if a == n => Shape::from((o, i)),
            _ => bail!(
                "linear-bwd: dy {:?} and {:?} do not fit",
                l1.dims(),
                l2.dims()
            ),
        };
        let k = "linear-bwd";
        let out = float_kernel!(k, |d in s1, v in s2| self.run(
            nchw_slice(d, l1, k)?,
            nchw_slice(v, l2, k)?,
            (n, o),
            i
        ));
        Ok((out, shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{to_vec, Rng};
    use candle_core::{DType, Device, Var};

    fn grads(
        f: fn(&Tensor, &Tensor, &Tensor, bool) -> Result<Tensor>,
        (x, w, b): (&Var, &Var, &Var),
        relu: bool,
    ) -> Vec<Vec<f64>> {
        let y = f(x.as_tensor(), w.as_tensor(), b.as_tensor(), relu).unwrap();
        let r = Tensor::from_vec(Rng::new(7).vec(y.elem_count()), y.shape(), &Device::Cpu)
            .unwrap()
            .to_dtype(y.dtype())
            .unwrap();
        let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let mut out = vec![to_vec(&y)];
        for v in [x, w, b] {
            out.push(to_vec(g.get(v.as_tensor()).unwrap()));
        }
        out
    }

    #[test]
    fn matches_candle_and_finite_differences() {
        crate::test_util::on_thread_counts(|| {
            // Rows up to LINEAR_STREAM_MAX_ROWS take the streaming loops, more take gemm; 70 rows
            // of W are two streaming tasks, 37 inputs more than two 16-lane chunks; 301 rows of W
            // are three tasks of the input gradient, the last 45 rows (eleven groups of four and
            // one).
            for (n, i, o, relu) in [
                (3, 7, 5, false),
                (2, 37, 301, true),
                (2, 12, 4, true),
                (1, 5, 9, true),
                (4, 37, 70, true),
                (6, 7, 5, true),
            ] {
                let mut r = Rng::new((n * i * o) as u64);
                let v = |d: &[usize], r: &mut Rng| {
                    Var::from_tensor(
                        &Tensor::from_vec(r.vec(d.iter().product()), d, &Device::Cpu).unwrap(),
                    )
                    .unwrap()
                };
                // A 4-D input, as after a conv stage, flattens like candle's flatten_from(1).
                let (x, w, b) = (
                    v(&[n, i, 1, 1], &mut r),
                    v(&[o, i], &mut r),
                    v(&[o], &mut r),
                );
                let ours = grads(linear, (&x, &w, &b), relu);
                let reference = grads(linear_candle, (&x, &w, &b), relu);
                for (a, b) in ours.iter().zip(&reference) {
                    for (p, q) in a.iter().zip(b) {
                        assert!((p - q).abs() < 1e-12 * q.abs().max(1.0), "{a:?} vs {b:?}");
                    }
                }
                // Finite differences on the weight (x and b are checked against candle above).
                let eps = 1e-6;
                let wv = to_vec(w.as_tensor());
                let rr = Tensor::from_vec(Rng::new(7).vec(n * o), (n, o), &Device::Cpu).unwrap();
                let loss = |wv: &[f64]| -> f64 {
                    let w = Tensor::from_vec(wv.to_vec(), (o, i), &Device::Cpu).unwrap();
                    (linear(x.as_tensor(), &w, b.as_tensor(), relu).unwrap() * &rr)
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .to_scalar()
                        .unwrap()
                };
                // Every weight of the small shapes, about 200 of the large one's.
                for j in (0..wv.len()).step_by(1 + wv.len() / 200) {
                    let (mut p, mut m) = (wv.clone(), wv.clone());
                    p[j] += eps;
                    m[j] -= eps;
                    let num = (loss(&p) - loss(&m)) / (2.0 * eps);
                    assert!((num - ours[2][j]).abs() < 1e-6 * num.abs().max(1.0));
                }
            }
            let _ = DType::F32;
        });
    }

    /// f32 (the aarch64 NEON loops at 1-8 rows, gemm above) against the f64 op: outputs and all
    /// three gradients, with W's rows not a multiple of four and dx's columns more than one
    /// task's stretch and not a multiple of sixteen.
    #[test]
    fn f32_matches_f64() {
        crate::test_util::on_thread_counts(|| {
            for (n, i, o) in [
                (1, 1100, 70),
                (2, 37, 9),
                (4, 530, 13),
                (5, 40, 6),
                (8, 37, 70),
                (7, 530, 9),
                (9, 40, 6),
            ] {
                let mut r = Rng::new((n + i + o) as u64);
                let data = [r.vec(n * i), r.vec(o * i), r.vec(o), r.vec(n * o)];
                let run = |dtype: DType| -> Vec<Vec<f64>> {
                    let t = |v: &[f64], d: &[usize]| {
                        Var::from_tensor(
                            &Tensor::from_vec(v.to_vec(), d, &Device::Cpu)
                                .unwrap()
                                .to_dtype(dtype)
                                .unwrap(),
                        )
                        .unwrap()
                    };
                    let (x, w, b) = (
                        t(&data[0], &[n, i]),
                        t(&data[1], &[o, i]),
                        t(&data[2], &[o]),
                    );
                    let y = linear(x.as_tensor(), w.as_tensor(), b.as_tensor(), false).unwrap();
                    let rr = t(&data[3], &[n, o]);
                    let g = (&y * rr.as_tensor())
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .backward()
                        .unwrap();
                    let f64s = |t: &Tensor| to_vec(&t.to_dtype(DType::F64).unwrap());
                    let mut out = vec![f64s(&y)];
                    out.extend([&x, &w, &b].map(|v| f64s(g.get(v.as_tensor()).unwrap())));
                    out
                };
                let (single, double) = (run(DType::F32), run(DType::F64));
                for (what, (a, b)) in ["y", "dx", "dW", "db"]
                    .iter()
                    .zip(single.iter().zip(&double))
                {
                    assert_eq!(a.len(), b.len());
                    for (p, q) in a.iter().zip(b) {
                        assert!(
                            (p - q).abs() < 1e-4 * (i as f64).sqrt() * q.abs().max(1.0),
                            "n {n}, i {i}, o {o}: {what} {p} vs {q}"
                        );
                    }
                }
            }
        });
    }
}
