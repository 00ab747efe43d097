//! What the kernels' integration tests share.

use candle_core::{Device, Tensor, Var};

/// A CPU f32 variable of `dims` with values in [-0.5, 0.5) that `seed` varies.
pub(crate) fn var(dims: &[usize], seed: u32) -> Var {
    let n: usize = dims.iter().product();
    let data: Vec<f32> = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    Var::from_tensor(&Tensor::from_vec(data, dims, &Device::Cpu).unwrap()).unwrap()
}
