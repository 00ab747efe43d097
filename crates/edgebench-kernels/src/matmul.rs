//! The calls into the `gemm` crate, with their operands' bounds checked: strided products for
//! the convolution and fully connected kernels. On aarch64 the strided f32 products run
//! edgebench's own NEON kernel instead ([`crate::sgemm`]).

use crate::util::Float;
use ::gemm::Parallelism;

/// dst (m, n) = [dst +] lhs (m, k) · rhs (k, n); strides are (row, column) in elements.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    gemm_strided(
        (m, n, k),
        dst,
        (n, 1),
        accumulate,
        lhs,
        lhs_s,
        rhs,
        rhs_s,
        par,
    )
}

/// [`gemm`] with the destination's (row, column) strides too.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    (dst_rs, dst_cs): (usize, usize),
    accumulate: bool,
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    // The pointers below are only valid if every element the strides reach is in bounds.
    assert!(dst.len() > (m - 1) * dst_rs + (n - 1) * dst_cs);
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                for c in 0..n {
                    dst[r * dst_rs + c * dst_cs] = T::ZERO;
                }
            }
        }
        return;
    }
    let dst = (dst.as_mut_ptr(), (dst_rs, dst_cs));
    // SAFETY: dst is initialised memory, in bounds (asserted above).
    unsafe { gemm_raw((m, n, k), dst, accumulate, (lhs, lhs_s), (rhs, rhs_s), par) }
}

/// dst (m, n) = lhs (m, k) · rhs (k, n) into uninitialised memory, row-major, every element
/// written (no zero-fill first: fc6's 151 MB weight gradient took 5 ms to zero per step).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_uninit<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    if k == 0 {
        crate::util::init_slice(&mut dst[..m * n], T::ZERO);
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst.len() >= m * n);
    let dst = (dst.as_mut_ptr().cast::<T>(), (n, 1));
    // SAFETY: in bounds (asserted above); gemm writes dst without reading it (no accumulate).
    unsafe { gemm_raw((m, n, k), dst, false, (lhs, lhs_s), (rhs, rhs_s), par) }
}

/// The call into gemm (for f32 on aarch64, into [`crate::sgemm`]'s blocked product), with its
/// operands' bounds checked here and dst's by the caller.
///
/// # Safety
/// Every element (r, c) < (m, n) of dst at r * rs + c * cs must be in one allocation, writable
/// and not aliased; when `accumulate` it must be initialised. m, n and k are not zero.
unsafe fn gemm_raw<T: Float>(
    (m, n, k): (usize, usize, usize),
    (dst, (dst_rs, dst_cs)): (*mut T, (usize, usize)),
    accumulate: bool,
    (lhs, (lhs_rs, lhs_cs)): (&[T], (usize, usize)),
    (rhs, (rhs_rs, rhs_cs)): (&[T], (usize, usize)),
    par: Parallelism,
) {
    assert!(lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs);
    assert!(rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs);
    // f32 on aarch64: edgebench's own NEON kernel (crate::sgemm), when dst has a unit stride
    // and the product fills its tiles (row-major C as m x n, column-major as C^T, n x m).
    #[cfg(target_arch = "aarch64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && crate::sgemm::native_kernel()
        && ((dst_cs == 1 && crate::sgemm::tiles_fit(m, n))
            || (dst_cs != 1 && dst_rs == 1 && crate::sgemm::tiles_fit(n, m)))
    {
        let threads = match par {
            Parallelism::None => 1,
            Parallelism::Rayon(0) => rayon::current_num_threads(),
            Parallelism::Rayon(threads) => threads,
        };
        // SAFETY: T is f32 (checked above), so the casts change no type.
        let (lhs, rhs, dst) = unsafe {
            (
                std::slice::from_raw_parts(lhs.as_ptr().cast::<f32>(), lhs.len()),
                std::slice::from_raw_parts(rhs.as_ptr().cast::<f32>(), rhs.len()),
                dst.cast::<f32>(),
            )
        };
        // A column-major dst is the row-major C^T = B^T A^T: the operands swap places and
        // their strides swap.
        let (dims, dst_stride, lhs, rhs) = if dst_cs == 1 {
            (
                (m, n, k),
                dst_rs,
                (lhs, (lhs_rs, lhs_cs)),
                (rhs, (rhs_rs, rhs_cs)),
            )
        } else {
            (
                (n, m, k),
                dst_cs,
                (rhs, (rhs_cs, rhs_rs)),
                (lhs, (lhs_cs, lhs_rs)),
            )
        };
        // SAFETY: as the caller promises for dst (its rows and columns exchanged for C^T); the
        // operands are bounds-checked above.
        unsafe {
            crate::sgemm::sgemm_strided(dims, (dst, dst_stride), accumulate, lhs, rhs, threads)
        }
        return;
    }
    // SAFETY: the asserts above keep every operand access in bounds, the caller dst's; dst does
    // not alias lhs or rhs (the caller's, and two & borrows); T is f32 or f64, which gemm
    // supports.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            par,
        )
    }
}

/// gemm on the calling thread only: the ops' tasks already use every thread.
pub(crate) const SERIAL: Parallelism = Parallelism::None;
