//! SGD with momentum (Caffe's update) on CUDA tensors, in place, many parameters per kernel
//! launch.

use candle_core::{bail, Result, Tensor};

/// SGD with momentum on CUDA tensors in one fused pass, in place on `w` and `v` (Caffe's
/// update): `v = momentum·v + rate·(g + decay·w); w -= v`. `v` must be a buffer that no other
/// tensor shares (the optimiser's own momentum history); all three f32, contiguous, one shape.
/// Errors on other devices.
pub fn sgd_momentum(
    w: &Tensor,
    g: &Tensor,
    v: &Tensor,
    momentum: f32,
    rate: f32,
    decay: f32,
) -> Result<()> {
    sgd_momentum_all(
        &[SgdUpdate {
            w,
            g,
            v,
            rate,
            decay,
        }],
        momentum,
    )
}

/// One parameter's part of [`sgd_momentum_all`]: `v = momentum·v + rate·(g + decay·w); w -= v`.
pub struct SgdUpdate<'a> {
    pub w: &'a Tensor,
    pub g: &'a Tensor,
    pub v: &'a Tensor,
    pub rate: f32,
    pub decay: f32,
}

/// [`sgd_momentum`] for many parameters at once, each with its own rate and decay: one kernel
/// launch per 32 parameters instead of one per parameter (at batch 1 the launches are much of
/// the host's time per step). Same contract per parameter: w and v written in place, v the
/// optimiser's own buffer, all f32 and contiguous on one CUDA device. Errors on other devices.
pub fn sgd_momentum_all(updates: &[SgdUpdate], momentum: f32) -> Result<()> {
    if updates.is_empty() {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    if updates.iter().all(|u| u.w.device().is_cuda()) {
        return gpu::sgd_momentum_all(updates, momentum);
    }
    let _ = momentum;
    match updates.iter().find(|u| !u.w.device().is_cuda()) {
        Some(u) => bail!(
            "sgd_momentum_all: CUDA tensors only, got {:?}",
            u.w.device()
        ),
        None => bail!("sgd_momentum_all: this build has no CUDA support"),
    }
}

/// The CUDA kernel (`cuda/sgd.cu`).
#[cfg(feature = "cuda")]
mod gpu {
    use super::SgdUpdate;
    use crate::cuda::{config, Module};
    use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{bail, Result};

    static KERNELS: Module = Module::new("edgebench_sgd", include_str!("cuda/sgd.cu"));

    /// Parameters per launch of eb_sgd_momentum_many (its EB_SGD_MANY).
    const SGD_MANY: usize = 32;

    /// eb_sgd_momentum_many's argument, laid out as its C struct (raw device addresses).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct SgdTable {
        w: [u64; SGD_MANY],
        g: [u64; SGD_MANY],
        v: [u64; SGD_MANY],
        n: [i64; SGD_MANY],
        rate: [f32; SGD_MANY],
        decay: [f32; SGD_MANY],
        count: i32,
    }

    // SAFETY: plain data with the kernel's C layout (repr(C), same field order and types).
    unsafe impl candle_core::cuda_backend::cudarc::driver::DeviceRepr for SgdTable {}

    /// The device address of a contiguous f32 CUDA tensor's first element.
    fn address(t: &candle_core::Tensor, what: &str) -> Result<u64> {
        use candle_core::cuda_backend::cudarc::driver::DevicePtr;
        let (storage, layout) = t.storage_and_layout();
        let candle_core::Storage::Cuda(s) = &*storage else {
            bail!("sgd-momentum: the {what} is not on a CUDA device");
        };
        let Some((start, _)) = layout.contiguous_offsets() else {
            bail!("sgd-momentum: the {what} must be contiguous");
        };
        let slice = s.as_cuda_slice::<f32>()?;
        let (ptr, _) = slice.device_ptr(slice.stream());
        Ok(ptr + (start * std::mem::size_of::<f32>()) as u64)
    }

    /// `sgd_momentum_all` on CUDA: one launch per `SGD_MANY` parameters.
    pub(super) fn sgd_momentum_all(updates: &[SgdUpdate], momentum: f32) -> Result<()> {
        let Some(first) = updates.first() else {
            return Ok(());
        };
        let candle_core::Device::Cuda(dev) = first.w.device() else {
            bail!(
                "sgd-momentum: CUDA tensors only, got {:?}",
                first.w.device()
            );
        };
        let func = KERNELS.kernel(dev, "eb_sgd_momentum_many")?;
        let stream = dev.cuda_stream();
        // Largest first, so each launch groups parameters of like size: every parameter of a launch
        // gets the grid of its largest, and the blocks past a small one's end do nothing.
        let mut by_size: Vec<&SgdUpdate> = updates.iter().collect();
        by_size.sort_by_key(|u| std::cmp::Reverse(u.w.elem_count()));
        for chunk in by_size.chunks(SGD_MANY) {
            let mut t = SgdTable {
                w: [0; SGD_MANY],
                g: [0; SGD_MANY],
                v: [0; SGD_MANY],
                n: [0; SGD_MANY],
                rate: [0.0; SGD_MANY],
                decay: [0.0; SGD_MANY],
                count: chunk.len() as i32,
            };
            let mut largest = 1;
            for (k, u) in chunk.iter().enumerate() {
                let n = u.w.elem_count();
                for (what, x) in [("weight", u.w), ("gradient", u.g), ("momentum", u.v)] {
                    if x.elem_count() != n || x.dtype() != candle_core::DType::F32 {
                        bail!(
                            "sgd-momentum: the {what} must be f32 with the weight's {n} elements, got {:?} {:?}",
                            x.dtype(),
                            x.shape()
                        );
                    }
                    if !x.device().same_device(first.w.device()) {
                        bail!("sgd-momentum: the {what} is on another device");
                    }
                }
                t.w[k] = address(u.w, "weight")?;
                t.g[k] = address(u.g, "gradient")?;
                t.v[k] = address(u.v, "momentum")?;
                t.n[k] = n as i64;
                t.rate[k] = u.rate;
                t.decay[k] = u.decay;
                largest = largest.max(n);
            }
            let mut cfg = config(largest);
            // Enough blocks per parameter to fill a large GPU (grid-stride loops cover the rest);
            // `config`'s 65535 per parameter would be mostly idle blocks times 32 parameters.
            cfg.grid_dim.0 = cfg.grid_dim.0.min(1024);
            cfg.grid_dim.1 = chunk.len() as u32;
            let mut l = stream.launch_builder(&func);
            l.arg(&t).arg(&momentum);
            // SAFETY: the table matches eb_sgd_momentum_many's struct; each address points at a
            // live f32 buffer of at least n[k] elements on this device and stream (checked above;
            // the caller holds the tensors, and freeing them later is ordered after this launch on
            // the stream). The kernel writes w and v through addresses taken from shared
            // references: w is a parameter only the optimiser updates, v the optimiser's own
            // buffer (the contract in `sgd_momentum_all`).
            unsafe { l.launch(cfg) }.w()?;
        }
        Ok(())
    }
}
