//! Peak GPU memory of this process, from the CUDA driver's stream-ordered memory pool, which
//! every candle (cudarc) allocation on the device comes from: its `USED_MEM_HIGH` is the most
//! bytes that were allocated at once (tensors, cuDNN workspaces), the counterpart of PyTorch's
//! `torch.cuda.max_memory_allocated()`. The CUDA context, cuBLAS/cuDNN handles and their own
//! internal buffers are outside the pool and not counted (PyTorch does not count them either).

#[cfg(feature = "cuda")]
mod pool {
    use candle_core::cuda_backend::cudarc::driver::sys;
    use candle_core::cuda_backend::CudaDevice;
    use std::sync::Mutex;

    /// The pool of the device this process trains on (a worker opens one).
    struct Pool(sys::CUmemoryPool);
    // SAFETY: a CUmemoryPool is a process-wide driver handle, usable from any thread.
    unsafe impl Send for Pool {}

    static POOL: Mutex<Option<Pool>> = Mutex::new(None);

    fn check(what: &str, r: sys::CUresult) -> anyhow::Result<()> {
        anyhow::ensure!(
            r == sys::CUresult::CUDA_SUCCESS,
            "CUDA {what} failed: {r:?}"
        );
        Ok(())
    }

    /// Keeps freed blocks in the pool rather than returning them to the driver at every
    /// synchronisation (the default threshold is 0), as PyTorch's caching allocator does: a
    /// training step then allocates from the pool instead of the driver. Resets the peak.
    pub(crate) fn track(dev: &CudaDevice) -> anyhow::Result<()> {
        let stream = dev.cuda_stream();
        let ctx = stream.context();
        ctx.bind_to_thread()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: cu_device() is a valid device of the bound context; pool receives its handle.
        check("cuDeviceGetMemPool", unsafe {
            sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device())
        })?;
        let mut keep: u64 = u64::MAX;
        let mut zero: u64 = 0;
        // SAFETY: both attributes take a cuuint64_t, which the pointers hold.
        unsafe {
            check(
                "cuMemPoolSetAttribute(RELEASE_THRESHOLD)",
                sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut keep as *mut u64).cast(),
                ),
            )?;
            check(
                "cuMemPoolSetAttribute(USED_MEM_HIGH)",
                sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                    (&mut zero as *mut u64).cast(),
                ),
            )?;
        }
        *POOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Pool(pool));
        Ok(())
    }

    pub fn peak_bytes() -> Option<u64> {
        let guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let pool = guard.as_ref()?.0;
        let mut high: u64 = 0;
        // SAFETY: USED_MEM_HIGH is a cuuint64_t, which `high` holds; the pool lives as long as
        // the process.
        let r = unsafe {
            sys::cuMemPoolGetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut high as *mut u64).cast(),
            )
        };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(high)
    }
}

#[cfg(feature = "cuda")]
pub(crate) use pool::track;

/// The most bytes this process had allocated on the GPU at once since it opened the device
/// (`crate::train::device`); None without a CUDA device.
pub fn peak_bytes() -> Option<u64> {
    #[cfg(feature = "cuda")]
    {
        pool::peak_bytes()
    }
    #[cfg(not(feature = "cuda"))]
    {
        None
    }
}
