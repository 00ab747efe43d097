//! What an op executes: its operands drawn from the seed, one execution with edgebench's
//! kernels or with candle's tensor ops.

use super::*;
use anyhow::{Context, Result};

/// The operands of a trial, drawn from its seed: A and B uniform in [-1, 1) (sigmoid and tanh
/// in [-4, 4), their interesting range), C zeroed.
pub(crate) struct Operands<T> {
    pub a: Vec<T>,
    pub b: Vec<T>,
    pub c: Vec<T>,
}

/// (len A, len B, len C) of an op's shape.
fn operand_lens(op: Op, shape: Shape) -> (usize, usize, usize) {
    match (op, shape) {
        (Op::Dot, Shape::Matrix { m, n, k }) => (m * k, k * n, m * n),
        (Op::Dot, Shape::Elements(_)) => {
            let Counts { elements, .. } = counts(op, Dtype::F32, shape);
            let side = (elements as f64).sqrt().round() as usize;
            (side * side, side * side, side * side)
        }
        (Op::Add | Op::Mul, shape) => {
            let len = counts(op, Dtype::F32, shape).elements as usize;
            (len, len, len)
        }
        (_, shape) => {
            let len = counts(op, Dtype::F32, shape).elements as usize;
            (len, 0, len)
        }
    }
}

/// The matrix product's (m, n, k), whichever way the shape was given.
pub(super) fn dot_dims(shape: Shape) -> (usize, usize, usize) {
    match shape {
        Shape::Matrix { m, n, k } => (m, n, k),
        Shape::Elements(_) => {
            let side = (counts(Op::Dot, Dtype::F32, shape).elements as f64).sqrt() as usize;
            (side, side, side)
        }
    }
}

impl<T: Elem> Operands<T> {
    pub(crate) fn new(op: Op, shape: Shape, seed: u64) -> Self {
        let (la, lb, lc) = operand_lens(op, shape);
        let range = match op {
            Op::Sigmoid | Op::Tanh => 4.0,
            _ => 1.0,
        };
        Operands {
            a: kernels::fill(la, seed, -range, range),
            b: kernels::fill(lb, seed.wrapping_add(1), -range, range),
            c: kernels::fill(lc, 0, 0.0, 0.0),
        }
    }
}

/// Executes the op once with edgebench's kernels: C from A (and B).
pub(crate) fn execute_native<T: Elem>(op: Op, shape: Shape, x: &mut Operands<T>) {
    let Operands { a, b, c } = x;
    match op {
        Op::Add => kernels::binary(a, b, c, T::add),
        Op::Mul => kernels::binary(a, b, c, T::mul),
        Op::Dot => kernels::matmul(a, b, c, dot_dims(shape)),
        Op::Scalar => {
            let s = T::from_f64(SCALAR);
            kernels::unary(a, c, move |v| v.mul(s))
        }
        Op::Sigmoid => kernels::sigmoid(a, c),
        Op::Tanh => kernels::tanh(a, c),
    }
}

/// Executes the op once with candle's tensor ops; the result stays on the device.
pub(crate) fn execute_candle(
    op: Op,
    a: &candle_core::Tensor,
    b: &candle_core::Tensor,
) -> candle_core::Result<candle_core::Tensor> {
    match op {
        Op::Add => a.add(b),
        Op::Mul => a.mul(b),
        Op::Dot => a.matmul(b),
        Op::Scalar => a.affine(SCALAR, 0.0),
        Op::Sigmoid => candle_nn::ops::sigmoid(a),
        Op::Tanh => a.tanh(),
    }
}

/// The operands as candle tensors on `device` (dot: A m×k, B k×n; others: flat vectors, B
/// empty where unused).
pub(crate) fn candle_operands(
    job: &OpsJob,
    device: &candle_core::Device,
) -> Result<(candle_core::Tensor, candle_core::Tensor)> {
    use candle_core::Tensor;
    fn to_tensors<T: Elem + candle_core::WithDType>(
        job: &OpsJob,
        device: &candle_core::Device,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let x = Operands::<T>::new(job.op, job.shape, job.seed);
        let (sa, sb) = match job.op {
            Op::Dot => {
                let (m, n, k) = dot_dims(job.shape);
                (vec![m, k], vec![k, n])
            }
            _ => (vec![x.a.len()], vec![x.b.len()]),
        };
        Ok((
            Tensor::from_vec(x.a, sa, device)?,
            Tensor::from_vec(x.b, sb, device)?,
        ))
    }
    let tensors = match job.dtype {
        Dtype::F32 => to_tensors::<f32>(job, device),
        Dtype::F64 => to_tensors::<f64>(job, device),
    };
    tensors.with_context(|| format!("placing the operands of {} on {device:?}", job.label()))
}

