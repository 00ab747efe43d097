//! Fully connected layer `y = x · Wᵀ + b` (optionally ReLU) as one differentiable op with GEMM
//! forward and backward. candle's `x.matmul(&w.t())` differentiates through the transpose and
//! leaves the weight gradient transposed (strided), which the SGD update then walks slowly.

use crate::matmul::{gemm_strided, gemm_uninit};
use crate::relu::ReluMask;
use crate::tuning::{LINEAR_STREAM_MAX_ROWS, LINEAR_STREAM_ROWS_PER_TASK};
use crate::util::{nchw_slice, relu_f, vec_written_by, zeros, Float};
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
    let rows = LINEAR_STREAM_ROWS_PER_TASK;
    // SAFETY: each chunk of `rows` W rows writes its n values per row below.
    unsafe {
        vec_written_by(o * n, |yt| {
            yt.par_chunks_mut(rows * n)
                .zip(w.par_chunks(rows * i))
                .for_each(|(yt, w)| {
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
    let rows = LINEAR_STREAM_ROWS_PER_TASK;
    // SAFETY: every element of every row of every chunk is written by the first input row's
    // pass below (n >= 1, x holds n rows of i).
    unsafe {
        vec_written_by(o * i, |dw| {
            dw.par_chunks_mut(rows * i).enumerate().for_each(|(t, dw)| {
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

fn fwd<T: Float>(
    x: &[T],
    w: &[T],
    b: &[T],
    (n, i, o): (usize, usize, usize),
    relu: bool,
) -> Vec<T> {
    let yt = if (1..=LINEAR_STREAM_MAX_ROWS).contains(&n) && i > 0 {
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
            // (dx stays on gemm: as fast as a streaming pass over W at 1-4 rows, measured.)
            LinearBwd::Weight if (1..=LINEAR_STREAM_MAX_ROWS).contains(&n) && i > 0 => {
                stream_weight(dy, other, (n, i, o))
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
            // of W are two streaming tasks, 37 inputs more than two 16-lane chunks.
            for (n, i, o, relu) in [
                (3, 7, 5, false),
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
                for j in 0..wv.len() {
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
}
