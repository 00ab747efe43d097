//! edgebench's compute kernels, as candle custom ops with forward and backward: convolution
//! (im2col + GEMM, Winograd F(2x2)/F(4x4) for 3x3 layers), fully connected layers, and what
//! candle 0.11 lacks or cannot differentiate: Caffe-exact 2-D pooling (padding, ceil-mode output
//! size, kernel != stride) and cross-channel LRN. CPU kernels here, CUDA kernels in `cuda` (with
//! the `cuda` feature); on any other device the public wrappers route the tensor through host
//! memory (see `native_or_host`). The tuning knobs are in [`Tuning`].
//!
//! How each kernel works, why it is shaped as it is and what it measured: docs/kernels.md in the
//! repository.
//!
//! Benchmarks (criterion, `benches/kernels.rs`): `cargo bench -p edgebench-kernels --bench
//! kernels` times each kernel on AlexNet's and GoogLeNet's layer shapes at batch 32: convolution
//! forward and backward by path (im2col, Winograd F(2x2) and F(4x4); GFLOP/s as criterion's
//! element throughput), im2col/col2im, pooling, LRN and fc6 (against a parallel copy, the
//! memory floor). Append a filter to pick benchmarks (`-- conv/fwd`, `-- 'goog 3a'`) and
//! `--quick` for a short run.

/// The f32/f64 dispatch of a custom op's `cpu_fwd`: binds each `$v` to the elements of storage
/// `$s` (all f32 or all f64) and wraps the `Vec` that `$kernel` returns in a storage of that type;
/// other or mixed dtypes return `unsupported_dtypes`. The kernel expression is written once and
/// compiled for both types.
macro_rules! float_kernel {
    ($op:expr, |$($v:ident in $s:ident),+| $kernel:expr) => {
        match ($($s,)+) {
            ($(candle_core::CpuStorage::F32($v),)+) => candle_core::CpuStorage::F32($kernel),
            ($(candle_core::CpuStorage::F64($v),)+) => candle_core::CpuStorage::F64($kernel),
            _ => {
                let dtypes = [$(candle_core::backend::BackendStorage::dtype($s)),+];
                return Err($crate::unsupported_dtypes($op, &dtypes));
            }
        }
    };
}

#[doc(hidden)]
pub mod bench_api;
pub mod conv;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cudnn")]
mod cudnn;
pub mod descend;
pub mod dropout;
pub mod elementwise;
pub mod im2col;
pub mod linear;
pub mod lrn;
pub mod pool;
pub mod sgemm;
mod tuning;
mod winograd;

pub use conv::{conv2d, conv2d_candle, Conv2d};
pub use descend::descend;
pub use dropout::dropout;
pub use im2col::conv2d_im2col;
pub use linear::{linear, linear_candle};
pub use lrn::{lrn, Lrn};
pub use pool::{pool2d, pool_output_size, Pool2d, PoolKind};
pub use tuning::{tuning, Tuning};

use candle_core::{bail, DType, Layout, Result, Tensor};
use std::ops::{Add, AddAssign, Div, Mul, Sub};
use std::sync::atomic::{AtomicBool, Ordering};

static TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matrix products and convolutions on CUDA use TF32 tensor cores (10-bit mantissa
/// products, f32 sums), as PyTorch does by default for convolutions; off (strict fp32) unless
/// set. Covers cuBLAS (candle's matmul) and cuDNN (`cudnn` feature); no effect on the CPU.
pub fn set_tf32(on: bool) {
    TF32.store(on, Ordering::Relaxed);
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(on);
}

/// Whether `set_tf32(true)` is in effect.
pub fn tf32() -> bool {
    TF32.load(Ordering::Relaxed)
}

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
        return cuda::sgd_momentum_all(updates, momentum);
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

/// Whether `conv2d` runs natively on `device`: always on the CPU, on CUDA with the `cudnn`
/// feature (elsewhere use `conv2d_im2col` or `conv2d_candle`).
pub fn conv2d_runs_on(device: &candle_core::Device) -> bool {
    device.is_cpu() || (cfg!(feature = "cudnn") && device.is_cuda())
}

/// The float types the kernels are generic over (f32 for training, f64 for gradient tests).
pub(crate) trait Float:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    /// Caffe initialises the running max with -FLT_MAX, so an empty window yields this.
    const LOWEST: Self;
    fn from_f64(v: f64) -> Self;
    fn powf(self, e: Self) -> Self;
    fn sqrt(self) -> Self;
}

macro_rules! impl_float {
    ($t:ty) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::MIN;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }
    };
}
impl_float!(f32);
impl_float!(f64);

/// The error of an op given storages that are not all f32 or all f64 (`float_kernel!`).
pub(crate) fn unsupported_dtypes(op: &str, dtypes: &[DType]) -> candle_core::Error {
    let msg = match dtypes {
        [one] => format!("{op}: only f32/f64 are supported, got {one:?}"),
        _ => format!("{op}: need matching f32/f64 inputs, got {dtypes:?}"),
    };
    candle_core::Error::Msg(msg).bt()
}

/// The sum of `v` in 16 interleaved partial sums, so it vectorises: one running sum is a chain
/// of dependent adds, ~4 cycles per element (the bias gradients sum every output gradient).
pub(crate) fn sum<T: Float>(v: &[T]) -> T {
    const LANES: usize = 16;
    let mut acc = [T::ZERO; LANES];
    let chunks = v.chunks_exact(LANES);
    let mut total = chunks.remainder().iter().fold(T::ZERO, |s, &x| s + x);
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    for a in acc {
        total += a;
    }
    total
}

/// `vec![T::ZERO; len]`, zeroed by the rayon workers in parallel. glibc's calloc zeroes reused
/// heap memory on the calling thread (training processes keep freed memory, see
/// `keep_freed_memory`), and the other cores sat idle through those memsets: ~40 % of the
/// main thread's own time in a GoogLeNet step. Writing here also maps the pages on the threads
/// that go on to fill them.
pub(crate) fn zeros<T: Float>(len: usize) -> Vec<T> {
    par_chunks_zeroed(len, 1 << 16, || (), |_, _, _| {})
}

/// A vector of `len` elements built by `f(state, index, chunk)` over chunks of `chunk` elements
/// in parallel (`init` makes each worker's scratch `state`). Each chunk is zeroed right before
/// `f` gets it, while it is in the cache, instead of in a separate pass over memory first
/// (`zeros`): for outputs that `f` overwrites or accumulates into plane by plane.
pub(crate) fn par_chunks_zeroed<T: Float, S>(
    len: usize,
    chunk: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    let mut v: Vec<T> = Vec::with_capacity(len);
    v.spare_capacity_mut()
        .par_chunks_mut(chunk.max(1))
        .enumerate()
        .for_each_init(init, |state, (i, c)| f(state, i, init_slice(c, T::ZERO)));
    // SAFETY: the chunks cover all `len` elements of the spare capacity, each initialised above.
    unsafe { v.set_len(len) };
    v
}

/// A vector of `len` elements written by `fill` straight into its uninitialised storage (no
/// zeroing pass first).
///
/// # Safety
/// `fill` must initialise every element of the slice it is given.
pub(crate) unsafe fn vec_written_by<T>(
    len: usize,
    fill: impl FnOnce(&mut [std::mem::MaybeUninit<T>]),
) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the caller's `fill` initialised all `len` elements.
    unsafe { v.set_len(len) };
    v
}

/// Fills uninitialised memory with `v` and hands it out initialised.
pub(crate) fn init_slice<T: Copy>(c: &mut [std::mem::MaybeUninit<T>], v: T) -> &mut [T] {
    c.fill(std::mem::MaybeUninit::new(v));
    // SAFETY: every element of `c` was just initialised; MaybeUninit<T> has T's layout.
    unsafe { &mut *(c as *mut [std::mem::MaybeUninit<T>] as *mut [T]) }
}

/// Keeps freed memory in the process instead of handing it back to the kernel. A training step
/// frees and re-allocates the same large activation and gradient buffers every time; glibc serves
/// blocks above its mmap threshold with fresh mappings, so every step page-faulted all of them in
/// again (4 GoogLeNet batch-32 steps: 1.44M page faults and 3.5 s of system time; 0.34M and 0.9 s
/// with this, 10 % less time per step). Peak RSS is unchanged: the memory is reused, not added.
/// For the processes that train (a worker, `profile`), which end when their training does.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// NCHW strides whose images are each contiguous, `stride[0]` >= C·H·W apart: a contiguous
/// tensor, or a `narrow` of its channels (an inception branch's slice of a stacked 1x1
/// convolution's output), which the convolution reads in place instead of copying.
pub(crate) fn image_stride(layout: &Layout) -> Option<usize> {
    let (&[n, c, h, w], s) = (layout.dims(), layout.stride()) else {
        return None;
    };
    if layout.is_contiguous() {
        return Some(c * h * w);
    }
    // Strides of dimensions of size 1 do not matter; images apart by at least one image.
    let inner = (h <= 1 || s[2] == w) && (w <= 1 || s[3] == 1) && (c <= 1 || s[1] == h * w);
    (inner && (n <= 1 || s[0] >= c * h * w)).then_some(if n <= 1 { c * h * w } else { s[0] })
}

/// `x` as it is if its images are each contiguous (see `image_stride`), else a contiguous copy.
pub(crate) fn images_in_place(x: &Tensor) -> Result<Tensor> {
    if image_stride(x.layout()).is_some() {
        Ok(x.clone())
    } else {
        x.contiguous()
    }
}

/// The elements of an NCHW layout whose images are each contiguous, from the first image's
/// start to the last one's end, and the distance between images.
pub(crate) fn images_slice<'a, T>(
    data: &'a [T],
    layout: &Layout,
    op: &str,
) -> Result<(&'a [T], usize)> {
    let &[n, c, h, w] = layout.dims() else {
        bail!(
            "{op}: expects an NCHW tensor, got shape {:?}",
            layout.dims()
        )
    };
    let Some(stride) = image_stride(layout) else {
        // Reports the strides.
        return Ok((nchw_slice(data, layout, op)?, c * h * w));
    };
    let start = layout.start_offset();
    let len = images_len(n, c * h * w, stride);
    Ok((&data[start..start + len], stride.max(1)))
}

/// Elements from the first of `n` images of `image_len` elements, `stride` apart, to the last
/// one's end.
pub(crate) fn images_len(n: usize, image_len: usize, stride: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) * stride + image_len
    }
}

/// The elements of a contiguous layout; the public wrappers make inputs contiguous, so a
/// strided layout here is a bug in the caller and is reported rather than misread.
pub(crate) fn nchw_slice<'a, T>(data: &'a [T], layout: &Layout, op: &str) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!(
            "{op}: expects a contiguous NCHW tensor, got shape {:?} strides {:?} (call .contiguous())",
            layout.dims(),
            layout.stride()
        ),
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use candle_core::{Device, Result, Tensor, Var};

    /// The thread counts the kernels are checked at: one, the boards' 4, 6, 8 and 12 cores, 16,
    /// and 3 (uneven splits). Small batches and maps leave threads with no work or with only
    /// padding rows at the high counts.
    pub(crate) const THREAD_COUNTS: [usize; 7] = [1, 3, 4, 6, 8, 12, 16];

    /// Runs `f` inside a rayon pool of each of `THREAD_COUNTS` threads.
    pub(crate) fn on_thread_counts(f: impl Fn() + Sync) {
        for threads in THREAD_COUNTS {
            // Captured output, shown with a failure: which pool it happened in.
            println!("rayon pool of {threads} threads");
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(&f);
        }
    }

    /// Deterministic xorshift so the tests need no extra crates.
    pub(crate) struct Rng(u64);

    impl Rng {
        pub(crate) fn new(seed: u64) -> Self {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        pub(crate) fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Uniform in [-1, 1).
        pub(crate) fn uniform(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        }
        pub(crate) fn vec(&mut self, n: usize) -> Vec<f64> {
            (0..n).map(|_| self.uniform()).collect()
        }
        /// Pairwise distinct values 0.01 apart (shuffled), so max-pool argmaxes survive
        /// finite-difference nudges.
        pub(crate) fn distinct(&mut self, n: usize) -> Vec<f64> {
            let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.01 - n as f64 * 0.005).collect();
            for i in (1..n).rev() {
                let j = (self.next_u64() % (i as u64 + 1)) as usize;
                v.swap(i, j);
            }
            v
        }
    }

    pub(crate) fn tensor(v: &[f64], dims: (usize, usize, usize, usize)) -> Tensor {
        Tensor::from_vec(v.to_vec(), dims, &Device::Cpu).unwrap()
    }

    pub(crate) fn to_vec(t: &Tensor) -> Vec<f64> {
        t.to_dtype(candle_core::DType::F64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// Checks the autograd input gradient of `f` against central differences of
    /// loss = sum(f(x) * w) in f64; returns the worst relative error.
    pub(crate) fn grad_check(
        x: &[f64],
        dims: (usize, usize, usize, usize),
        seed: u64,
        f: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> f64 {
        let var = Var::from_tensor(&tensor(x, dims)).unwrap();
        let y = f(var.as_tensor()).unwrap();
        let w = Tensor::from_vec(
            Rng::new(seed).vec(y.elem_count()),
            y.shape().clone(),
            &Device::Cpu,
        )
        .unwrap();
        let loss = |t: &Tensor| -> f64 {
            (f(t).unwrap() * &w)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        let grads = (y * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let analytic = to_vec(grads.get(var.as_tensor()).expect("input has a gradient"));
        assert_eq!(analytic.len(), x.len());
        assert!(
            analytic.iter().any(|g| g.abs() > 1e-3),
            "gradient is (nearly) all zero"
        );
        let eps = 1e-6;
        let mut worst = 0f64;
        let mut xp = x.to_vec();
        for i in 0..x.len() {
            xp[i] = x[i] + eps;
            let lp = loss(&tensor(&xp, dims));
            xp[i] = x[i] - eps;
            let lm = loss(&tensor(&xp, dims));
            xp[i] = x[i];
            let numeric = (lp - lm) / (2.0 * eps);
            let err =
                (analytic[i] - numeric).abs() / analytic[i].abs().max(numeric.abs()).max(1e-2);
            worst = worst.max(err);
        }
        worst
    }
}

/// Runs an op with CPU and CUDA kernels on a tensor of any device. On another device (Metal) the
/// tensor goes through host memory and back (`to_device` is differentiable, so gradients follow).
fn native_or_host(
    x: &candle_core::Tensor,
    op: impl Fn(&candle_core::Tensor) -> candle_core::Result<candle_core::Tensor>,
) -> candle_core::Result<candle_core::Tensor> {
    if x.device().is_cpu() || x.device().is_cuda() {
        op(x)
    } else {
        op(&x.to_device(&candle_core::Device::Cpu)?)?.to_device(x.device())
    }
}

#[cfg(test)]
mod dtype_tests {
    use super::*;
    use candle_core::Device;

    /// Every op's CPU dispatch (`float_kernel!`) names the op and the dtypes it was given.
    #[test]
    fn other_or_mixed_dtypes_are_refused_by_name() {
        let cpu = &Device::Cpu;
        let x = Tensor::zeros((1, 2, 5, 5), DType::F32, cpu).unwrap();
        let w = Tensor::zeros((3, 2, 3, 3), DType::F64, cpu).unwrap();
        let b = Tensor::zeros(3, DType::F32, cpu).unwrap();
        let p = Conv2d {
            stride: 1,
            pad: 1,
            groups: 1,
            relu: false,
        };
        let err = conv2d(&x, &w, &b, p).unwrap_err().to_string();
        assert!(
            err.contains("conv2d: need matching f32/f64 inputs, got [F32, F64, F32]"),
            "{err}"
        );
        let bytes = x.to_dtype(DType::U8).unwrap();
        let norm = Lrn {
            size: 5,
            alpha: 1e-4,
            beta: 0.75,
            k: 1.0,
        };
        let err = lrn(&bytes, norm).unwrap_err().to_string();
        assert!(
            err.contains("lrn: only f32/f64 are supported, got U8"),
            "{err}"
        );
        let pool = Pool2d {
            kind: PoolKind::Avg,
            kernel: 3,
            stride: 2,
            pad: 0,
        };
        let err = pool2d(&bytes, pool).unwrap_err().to_string();
        assert!(
            err.contains("pool2d: only f32/f64 are supported, got U8"),
            "{err}"
        );
        let w_fc = Tensor::zeros((3, 50), DType::F64, cpu).unwrap();
        let err = linear(&x, &w_fc, &b, false).unwrap_err().to_string();
        assert!(
            err.contains("linear: need matching f32/f64 inputs, got [F32, F64, F32]"),
            "{err}"
        );
    }
}
