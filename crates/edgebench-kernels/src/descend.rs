//! Plain gradient descent in place, `w -= rate·g`: one pass over the weights on the CPU (rayon)
//! and on CUDA (one kernel). As tensor ops the same update is a scaled copy of g, a difference
//! and a copy back into w: three passes and two temporaries, which on large weights (the MLP's
//! 40000 x 600 w1) cost as much as a matrix product.

use candle_core::{bail, CpuStorage, InplaceOp2, Layout, Result, Tensor};
use rayon::prelude::*;

/// `w -= rate·g` in place on `w`'s storage. Both f32, contiguous and of one shape, on the CPU or
/// (with the `cuda` feature) CUDA.
pub fn descend(w: &Tensor, g: &Tensor, rate: f32) -> Result<()> {
    w.inplace_op2(g, &Descend { rate })
}

pub(crate) struct Descend {
    pub rate: f32,
}

/// Elements per parallel task: large enough to amortise scheduling.
const CHUNK: usize = 1 << 16;

/// The `[start, end)` of a contiguous layout, or an error naming what is expected.
fn contiguous_range(what: &str, layout: &Layout) -> Result<(usize, usize)> {
    match layout.contiguous_offsets() {
        Some(range) => Ok(range),
        None => bail!("descend: the {what} must be contiguous"),
    }
}

fn same_shape(lw: &Layout, lg: &Layout) -> Result<()> {
    if lw.shape() != lg.shape() {
        bail!(
            "descend: weight {:?} and gradient {:?} differ",
            lw.shape(),
            lg.shape()
        );
    }
    Ok(())
}

impl InplaceOp2 for Descend {
    fn name(&self) -> &'static str {
        "descend"
    }

    fn cpu_fwd(&self, w: &mut CpuStorage, lw: &Layout, g: &CpuStorage, lg: &Layout) -> Result<()> {
        same_shape(lw, lg)?;
        let ((w0, w1), (g0, g1)) = (
            contiguous_range("weight", lw)?,
            contiguous_range("gradient", lg)?,
        );
        let (CpuStorage::F32(w), CpuStorage::F32(g)) = (w, g) else {
            bail!("descend: expects f32 weights and gradients");
        };
        let rate = self.rate;
        w[w0..w1]
            .par_chunks_mut(CHUNK)
            .zip(g[g0..g1].par_chunks(CHUNK))
            .for_each(|(w, g)| {
                for (w, &g) in w.iter_mut().zip(g) {
                    *w -= rate * g;
                }
            });
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        w: &mut candle_core::CudaStorage,
        lw: &Layout,
        g: &candle_core::CudaStorage,
        lg: &Layout,
    ) -> Result<()> {
        same_shape(lw, lg)?;
        gpu::descend(w, lw, g, lg, self.rate)
    }
}

/// The CUDA kernel (`cuda/descend.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use super::contiguous_range;
    use crate::cuda::{config, input, Module};
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Result};

    static KERNELS: Module = Module::new("edgebench_descend", include_str!("cuda/descend.cu"));

    /// `w -= rate·g` in place (shapes checked by the caller).
    pub(super) fn descend(
        w: &mut CudaStorage,
        lw: &Layout,
        g: &CudaStorage,
        lg: &Layout,
        rate: f32,
    ) -> Result<()> {
        let g = input(g, lg, "descend")?;
        let (a, b) = contiguous_range("weight", lw)?;
        let dev = w.device().clone();
        let mut w = w.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
        let total = b - a;
        let len = total as i64;
        let func = KERNELS.kernel(&dev, "eb_descend")?;
        let stream = dev.cuda_stream();
        let mut l = stream.launch_builder(&func);
        l.arg(&mut w).arg(&g).arg(&len).arg(&rate);
        // SAFETY: the arguments match eb_descend's signature; w and g each hold `total` elements
        // (one shape, both contiguous).
        unsafe { l.launch(config(total)) }.w()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::{on_thread_counts, Rng};
    use candle_core::{Device, Tensor};

    #[test]
    fn descend_applies_the_update_once_per_element_at_every_thread_count() {
        // Several chunks and a ragged last one, so every task boundary is crossed.
        let n = 3 * super::CHUNK + 1001;
        let w0: Vec<f32> = Rng::new(1).vec(n).iter().map(|&v| v as f32).collect();
        let g: Vec<f32> = Rng::new(2).vec(n).iter().map(|&v| v as f32).collect();
        let rate = 0.25f32;
        on_thread_counts(|| {
            let w = Tensor::from_vec(w0.clone(), n, &Device::Cpu).unwrap();
            let gt = Tensor::from_vec(g.clone(), n, &Device::Cpu).unwrap();
            super::descend(&w, &gt, rate).unwrap();
            let got = w.to_vec1::<f32>().unwrap();
            for (i, ((got, w), g)) in got.iter().zip(&w0).zip(&g).enumerate() {
                assert_eq!(*got, w - rate * g, "element {i}");
            }
        });
    }

    #[test]
    fn descend_rejects_a_shape_mismatch_and_a_strided_gradient() {
        let w = Tensor::zeros((4, 6), candle_core::DType::F32, &Device::Cpu).unwrap();
        let g = Tensor::ones((6, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = super::descend(&w, &g, 1.0).unwrap_err().to_string();
        assert!(err.contains("differ"), "{err}");
        let err = super::descend(&w, &g.t().unwrap(), 1.0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("gradient must be contiguous"), "{err}");
        // Nothing was written by the refused updates.
        assert!(w
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0));
    }
}
