//! Inverted dropout (Caffe's: keep with probability 1-p, scale kept elements by 1/(1-p)) whose
//! mask is a hash of (seed, element index) instead of a stored array. On a GPU the mask is made
//! where it is used: a mask drawn on the host has to be copied over, and a copy from pageable
//! memory that large makes the host wait for the GPU to catch up mid-step. The backward applies
//! the same mask again from the seed. CPU and CUDA give the same mask for the same seed.

use crate::util::{nchw_slice, Float};
use candle_core::{bail, CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// splitmix64's finaliser of `seed + (i+1)·golden ratio`, top 32 bits: a uniform u32 per element,
/// the same on the host and in the CUDA kernel (`eb_mix` in `cuda/dropout.cu`).
pub(crate) fn mix(seed: u64, i: u64) -> u32 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 32) as u32
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Dropout {
    /// An element is kept when its draw is below this (keep·2^32).
    pub threshold: u32,
    pub scale: f32,
    pub seed: u64,
}

/// `x` with each element kept with probability 1-p and scaled by 1/(1-p), else zero; the
/// element's fate is a function of `seed` and its index in `x` (made contiguous first).
/// Differentiable: the gradient goes through the same mask.
pub fn dropout(x: &Tensor, p: f64, seed: u64) -> Result<Tensor> {
    if !(0.0..1.0).contains(&p) {
        bail!("dropout: p = {p} is outside [0, 1)");
    }
    let keep = 1.0 - p;
    let op = Dropout {
        threshold: (keep * 4_294_967_296.0).min(f64::from(u32::MAX)) as u32,
        scale: (1.0 / keep) as f32,
        seed,
    };
    x.contiguous()?.apply_op1(op)
}

impl Dropout {
    fn cpu<T: Float>(&self, x: &[T]) -> Vec<T> {
        let scale = T::from_f64(f64::from(self.scale));
        let mut out = Vec::new();
        x.par_iter()
            .enumerate()
            .with_min_len(1 << 14)
            .map(|(i, &v)| {
                if mix(self.seed, i as u64) < self.threshold {
                    v * scale
                } else {
                    T::ZERO
                }
            })
            .collect_into_vec(&mut out);
        out
    }
}

impl CustomOp1 for Dropout {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let n = self.name();
        let out = float_kernel!(n, |v in s| self.cpu(nchw_slice(v, l, n)?));
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use crate::cuda::{input, storage};
        use candle_core::backend::BackendStorage;
        let dev = s.device();
        let out = gpu::dropout(dev, &input(s, l, self.name())?, self)?;
        Ok((storage(out, dev), l.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.contiguous()?.apply_op1_no_bwd(self)?))
    }
}

/// The CUDA kernel (`cuda/dropout.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use super::Dropout;
    use crate::cuda::{config, Module};
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaDevice, Result};

    static KERNELS: Module = Module::new("edgebench_dropout", include_str!("cuda/dropout.cu"));

    /// `x` through the dropout mask of `d`.
    pub(super) fn dropout(
        dev: &CudaDevice,
        x: &CudaView<'_, f32>,
        d: &Dropout,
    ) -> Result<CudaSlice<f32>> {
        let total = x.len();
        // SAFETY: every element is written by the kernel.
        let y = unsafe { dev.alloc::<f32>(total)? };
        let n = total as i64;
        let func = KERNELS.kernel(dev, "eb_dropout")?;
        let stream = dev.cuda_stream();
        let mut l = stream.launch_builder(&func);
        l.arg(x)
            .arg(&y)
            .arg(&n)
            .arg(&d.seed)
            .arg(&d.threshold)
            .arg(&d.scale);
        // SAFETY: the arguments match eb_dropout's signature; x and y hold `total` elements.
        unsafe { l.launch(config(total)) }.w()?;
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn keeps_the_asked_fraction_scaled_and_repeats_per_seed() {
        let n = 200_000;
        let x = Tensor::ones(n, candle_core::DType::F32, &Device::Cpu).unwrap();
        for p in [0.4, 0.7] {
            let y: Vec<f32> = dropout(&x, p, 7).unwrap().to_vec1().unwrap();
            let scale = (1.0 / (1.0 - p)) as f32;
            assert!(
                y.iter().all(|&v| v == 0.0 || v == scale),
                "values other than 0 and 1/(1-p)"
            );
            let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
            // 200k Bernoulli draws: the kept fraction is within 0.5 % of 1-p (> 4 sigma).
            assert!((kept - (1.0 - p)).abs() < 0.005, "p {p}: kept {kept}");
            let again: Vec<f32> = dropout(&x, p, 7).unwrap().to_vec1().unwrap();
            assert_eq!(y, again, "the same seed gives the same mask");
            let other: Vec<f32> = dropout(&x, p, 8).unwrap().to_vec1().unwrap();
            let same = y.iter().zip(&other).filter(|(a, b)| a == b).count() as f64 / n as f64;
            assert!(same < 0.7, "another seed gives another mask ({same} equal)");
        }
        assert!(dropout(&x, 1.0, 1).is_err());
    }

    #[test]
    fn gradient_goes_through_the_same_mask() {
        let x = Var::new(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &Device::Cpu).unwrap();
        let y = dropout(x.as_tensor(), 0.5, 3).unwrap();
        let r = Tensor::new(
            &[1.0f64, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0],
            &Device::Cpu,
        )
        .unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let g: Vec<f64> = grads.get(x.as_tensor()).unwrap().to_vec1().unwrap();
        let (y, x, r): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            y.to_vec1().unwrap(),
            x.as_tensor().to_vec1().unwrap(),
            r.to_vec1().unwrap(),
        );
        for i in 0..8 {
            // y = m·x with m in {0, 2}: dL/dx = m·r = (y/x)·r.
            assert_eq!(g[i], y[i] / x[i] * r[i], "element {i}");
        }
        assert!(y.contains(&0.0) && y.iter().any(|&v| v != 0.0));
    }
}
