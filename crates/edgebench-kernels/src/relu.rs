//! The gradient through a fused ReLU, `dy * (y > 0)`, as an op (CPU and CUDA): the convolution
//! and the fully connected layer apply ReLU to their output in place and mask the gradient with
//! it in their backward.

use crate::util::{nchw_slice, vec_written_by, Float};
use candle_core::{bail, CpuStorage, CustomOp2, Layout, Result, Shape};
use rayon::prelude::*;

/// dy * (y > 0): the gradient through the fused ReLU.
pub(crate) struct ReluMask;

/// ReluMask's dy (`l1`) and y (`l2`) are one shape.
fn same_shape(l1: &Layout, l2: &Layout) -> Result<()> {
    if l1.shape() != l2.shape() {
        bail!("relu-mask: shapes differ {:?} {:?}", l1.shape(), l2.shape());
    }
    Ok(())
}

impl CustomOp2 for ReluMask {
    fn name(&self) -> &'static str {
        "relu-mask"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        fn mask<T: Float>(dy: &[T], y: &[T]) -> Vec<T> {
            // Chunks on all threads, each a plain loop over three slices, which the compiler
            // unrolls (through rayon's zipped iterator it ran one vector per iteration);
            // written in place, with no zeroing pass (see `util::zeros`).
            const CHUNK: usize = 1 << 14;
            let len = dy.len().min(y.len());
            // SAFETY: the chunks cover all `len` elements, each written below.
            unsafe {
                vec_written_by(len, |out| {
                    out.par_chunks_mut(CHUNK)
                        .zip(dy.par_chunks(CHUNK))
                        .zip(y.par_chunks(CHUNK))
                        .for_each(|((out, dy), y)| {
                            for ((o, &d), &y) in out.iter_mut().zip(dy).zip(y) {
                                o.write(if y > T::ZERO { d } else { T::ZERO });
                            }
                        })
                })
            }
        }
        same_shape(l1, l2)?;
        let n = "relu-mask";
        let out = float_kernel!(n, |d in s1, y in s2| mask(
            nchw_slice(d, l1, n)?,
            nchw_slice(y, l2, n)?
        ));
        Ok((out, l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::cuda::{input, storage};
        use candle_core::backend::BackendStorage;
        same_shape(l1, l2)?;
        let n = self.name();
        let dev = s1.device();
        let out = gpu::relu_mask(dev, &input(s1, l1, n)?, &input(s2, l2, n)?)?;
        Ok((storage(out, dev), l1.shape().clone()))
    }
}

/// The CUDA kernel (`cuda/relu.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use crate::cuda::{config, Module};
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{bail, CudaDevice, Result};

    static KERNELS: Module = Module::new("edgebench_relu", include_str!("cuda/relu.cu"));

    /// `dy` where `y > 0`, else 0.
    pub(super) fn relu_mask(
        dev: &CudaDevice,
        dy: &CudaView<'_, f32>,
        y: &CudaView<'_, f32>,
    ) -> Result<CudaSlice<f32>> {
        let total = dy.len();
        if y.len() != total {
            bail!("relu-mask: {total} gradients for {} outputs", y.len());
        }
        // SAFETY: every element is written by the kernel.
        let out = unsafe { dev.alloc::<f32>(total)? };
        let n = total as i64;
        let func = KERNELS.kernel(dev, "eb_relu_mask")?;
        let stream = dev.cuda_stream();
        let mut l = stream.launch_builder(&func);
        l.arg(dy).arg(y).arg(&out).arg(&n);
        // SAFETY: the arguments match eb_relu_mask's signature; all three hold `total` elements.
        unsafe { l.launch(config(total)) }.w()?;
        Ok(out)
    }
}
