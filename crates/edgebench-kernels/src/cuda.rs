//! The CUDA launcher: compiles CUDA C with NVRTC (which candle's CUDA build links anyway, so
//! there is no build-time nvcc step beyond candle's own), loads it once per device and sets up
//! launches. It knows none of the ops: each op keeps its kernels in `src/cuda/<op>.cu`, names
//! them with a [`Module`] and launches them beside its CPU kernel (`pool.rs`, `lrn.rs`, ...),
//! the way candle-nn's ops sit next to candle-kernels. f32 only: training runs in f32; the f64
//! gradient checks run on the CPU kernels.
//!
//! The ops' GPU tests are in `cuda/tests.rs`, so that `cargo test --features cuda -p
//! edgebench-kernels cuda::` runs them all.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaSlice, CudaView, LaunchConfig};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result};
use std::sync::OnceLock;

/// One op's CUDA C source (`include_str!` of its `.cu` file), compiled to PTX on first use.
pub(crate) struct Module {
    /// The name a device keeps the loaded module under: one per source.
    name: &'static str,
    source: &'static str,
    /// NVRTC's result, errors included (kept and repeated, not retried).
    ptx: OnceLock<std::result::Result<String, String>>,
}

impl Module {
    pub(crate) const fn new(name: &'static str, source: &'static str) -> Module {
        Module {
            name,
            source,
            ptx: OnceLock::new(),
        }
    }

    /// The PTX of the source, compiled once per process.
    fn ptx(&self) -> Result<&str> {
        match self.ptx.get_or_init(|| {
            nvrtc::compile_ptx(self.source)
                .map(|p| p.to_src())
                .map_err(|e| format!("{e:?}"))
        }) {
            Ok(p) => Ok(p),
            Err(e) => bail!(
                "compiling edgebench's CUDA kernels `{}` with NVRTC failed: {e}",
                self.name
            ),
        }
    }

    /// The kernel `name` of this module, loaded once per device.
    pub(crate) fn kernel(&self, dev: &CudaDevice, name: &str) -> Result<CudaFunction> {
        Ok(dev
            .get_or_load_custom_func(name, self.name, self.ptx()?)?
            .into_cuda_function())
    }
}

/// A contiguous f32 input of an op, checked.
pub(crate) fn input<'a>(s: &'a CudaStorage, l: &Layout, op: &str) -> Result<CudaView<'a, f32>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!("{op}: the CUDA kernel needs a contiguous input");
    };
    match s.dtype() {
        candle_core::DType::F32 => Ok(s.as_cuda_slice::<f32>()?.slice(a..b)),
        dt => bail!("{op}: the CUDA kernel supports f32 only, got {dt:?}"),
    }
}

/// Wraps a kernel's output as candle storage on `dev`.
pub(crate) fn storage(slice: CudaSlice<f32>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, dev.clone())
}

/// A launch over `total` items: enough blocks to fill the GPU, the grid-stride loop in each
/// kernel covers the rest.
pub(crate) fn config(total: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    LaunchConfig {
        grid_dim: (
            total.div_ceil(THREADS as usize).clamp(1, 65_535) as u32,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `v` as a kernel's `int` argument, or an error naming `what`.
pub(crate) fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        candle_core::Error::Msg(format!("{what} {v} is too large for the CUDA kernels"))
    })
}

#[cfg(test)]
mod tests;
