//! The portable path: the `gemm` crate, for CPUs without one of edgebench's microkernels.

use crate::util::Float;
use ::gemm::Parallelism;

/// The `gemm` crate on all rayon threads: the portable path (other CPUs, and f64 for the
/// operator benchmark's `dot`), and the reference in tests.
pub(crate) fn gemm_crate<T: Float>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, n, k): (usize, usize, usize),
) {
    assert!(
        a.len() == m * k && b.len() == k * n && c.len() == m * n,
        "matmul shapes"
    );
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: the asserts above make every index gemm reads or writes fall inside a, b, c
    // (row-major, row strides k, n, n; column stride 1); c is borrowed mutably, so it overlaps
    // neither a nor b. alpha is unused (read_dst false), beta = 1 scales the product.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}
