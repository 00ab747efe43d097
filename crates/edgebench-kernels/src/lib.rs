//! edgebench's compute kernels, as candle custom ops with forward and backward: convolution
//! (im2col + GEMM, Winograd F(2x2)/F(4x4) for 3x3 layers), fully connected layers, and what
//! candle 0.11 lacks or cannot differentiate: Caffe-exact 2-D pooling (padding, ceil-mode output
//! size, kernel != stride) and cross-channel LRN. Each op has its CPU kernel and, with the `cuda`
//! feature, its CUDA launcher beside it (the CUDA C in `src/cuda/*.cu`); on any other device the
//! public wrappers route the tensor through host memory (see `util::native_or_host`). The tuning
//! knobs are in [`Tuning`].
//!
//! The modules in layers, lowest first; a module imports only from lower layers:
//! 1. leaves: `tuning` (knobs, block sizes, thresholds, the TF32 switch), `util` (the float
//!    types, output buffers, NCHW layouts), `cuda` (compiles CUDA C, launches; knows no op);
//! 2. shared pieces: `sgemm` (edgebench's blocked f32 product and its microkernels, with the
//!    gemm crate as the portable path), then `matmul` (the strided products of the ops: the
//!    gemm crate, on aarch64 `sgemm` for f32), `geom` (convolution geometry, im2col/col2im of
//!    one image);
//! 3. kernels and single ops: `winograd`, `cudnn`, `relu`, `pool`, `lrn`, `dropout`,
//!    `descend`, `sgd`, `im2col`;
//! 4. ops that combine them: `conv` (im2col + GEMM, Winograd or cuDNN), `linear`, `elementwise`;
//! 5. `bench_api`. This file only declares the modules and re-exports their API.
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
                return Err($crate::util::unsupported_dtypes($op, &dtypes));
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
mod geom;
pub mod im2col;
pub mod linear;
pub mod lrn;
mod matmul;
pub mod pool;
mod relu;
mod sgd;
pub mod sgemm;
#[cfg(test)]
mod test_util;
mod tuning;
mod util;
mod winograd;

pub use conv::{conv2d, conv2d_candle, conv2d_frozen, conv2d_runs_on, Conv2d, FrozenFilters};
pub use descend::descend;
pub use dropout::dropout;
pub use im2col::conv2d_im2col;
pub use linear::{linear, linear_candle};
pub use lrn::{lrn, Lrn};
pub use matmul::{log_products, mm, product_flops, take_logged_products, ProductShape};
pub use pool::{pool2d, pool_output_size, Pool2d, PoolKind};
pub use sgd::{sgd_momentum, sgd_momentum_all, sgd_momentum_host, SgdUpdate};
pub use tuning::{set_tf32, tf32, tuning, SgemmChoice, Tuning};
pub use util::keep_freed_memory;

#[cfg(test)]
mod dtype_tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};

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
