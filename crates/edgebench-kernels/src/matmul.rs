//! The calls into the `gemm` crate, with their operands' bounds checked: strided products for
//! the convolution and fully connected kernels, and [`mm`], a differentiable matrix product. On
//! aarch64 with NEON and x86_64 with AVX-512 the strided f32 products run edgebench's own kernel
//! instead ([`crate::sgemm`]).

use crate::util::{is_f32, Float};
use ::gemm::Parallelism;
use candle_core::{bail, CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// dst (m, n) = [dst +] lhs (m, k) · rhs (k, n); strides are (row, column) in elements.
#[allow(clippy::too_many_arguments)]
#[track_caller]
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
#[track_caller]
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
    if !accumulate {
        // SAFETY: MaybeUninit<T> has T's layout, and gemm_strided_uninit writes only
        // initialised values.
        let dst = unsafe { &mut *(dst as *mut [T] as *mut [std::mem::MaybeUninit<T>]) };
        return gemm_strided_uninit(
            (m, n, k),
            dst,
            (dst_rs, dst_cs),
            lhs,
            lhs_s,
            rhs,
            rhs_s,
            par,
        );
    }
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    // The pointers below are only valid if every element the strides reach is in bounds.
    assert!(dst.len() > (m - 1) * dst_rs + (n - 1) * dst_cs);
    let dst = (dst.as_mut_ptr(), (dst_rs, dst_cs));
    // SAFETY: dst is initialised memory, in bounds (asserted above).
    unsafe { gemm_raw((m, n, k), dst, true, (lhs, lhs_s), (rhs, rhs_s), par, false) }
}

/// [`gemm_strided`] without accumulating, into memory that need not be initialised: every
/// element the strides reach is written and none is read.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(crate) fn gemm_strided_uninit<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [std::mem::MaybeUninit<T>],
    (dst_rs, dst_cs): (usize, usize),
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst.len() > (m - 1) * dst_rs + (n - 1) * dst_cs);
    let dst = dst.as_mut_ptr().cast::<T>();
    // SAFETY: in bounds (asserted above), and the &mut borrow keeps it ours.
    unsafe {
        gemm_into_ptr(
            (m, n, k),
            dst,
            (dst_rs, dst_cs),
            lhs,
            lhs_s,
            rhs,
            rhs_s,
            par,
        )
    }
}

/// [`gemm_strided_uninit`] through a pointer: for tasks that each write their own part of one
/// matrix where the parts interleave in memory (bands of columns), which slices cannot express.
///
/// # Safety
/// Every element (r, c) < (m, n) at dst + r * dst_rs + c * dst_cs must lie in one allocation,
/// be writable, and be neither read nor written by anything else meanwhile.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(crate) unsafe fn gemm_into_ptr<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: *mut T,
    dst_s: (usize, usize),
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for r in 0..m {
            for c in 0..n {
                // SAFETY: in bounds and ours, as the caller promises.
                unsafe { dst.add(r * dst_s.0 + c * dst_s.1).write(T::ZERO) };
            }
        }
        return;
    }
    // SAFETY: as the caller promises; gemm writes dst without reading it (no accumulate).
    unsafe {
        gemm_raw(
            (m, n, k),
            (dst, dst_s),
            false,
            (lhs, lhs_s),
            (rhs, rhs_s),
            par,
            false,
        )
    }
}

/// dst (m, n) = lhs (m, k) · rhs (k, n) into uninitialised memory, row-major, every element
/// written (no zero-fill first: fc6's 151 MB weight gradient took 5 ms to zero per step).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub(crate) fn gemm_uninit<T: Float>(
    dims: (usize, usize, usize),
    dst: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
) {
    product_uninit(dims, dst, lhs, lhs_s, rhs, rhs_s, par, false)
}

/// [`gemm_uninit`], with edgebench's own kernel when `own` (see [`gemm_raw`]).
#[allow(clippy::too_many_arguments)]
#[track_caller]
fn product_uninit<T: Float>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_s: (usize, usize),
    rhs: &[T],
    rhs_s: (usize, usize),
    par: Parallelism,
    own: bool,
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
    unsafe { gemm_raw((m, n, k), dst, false, (lhs, lhs_s), (rhs, rhs_s), par, own) }
}

/// Whether the training kernels' T products run edgebench's own kernel on this CPU (f32, where
/// [`crate::sgemm::trains_with`] it), given a product that fills its tiles.
fn trains_on_own_kernel<T: Float>() -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    return is_f32::<T>() && crate::sgemm::trains_with(crate::sgemm::Kernel::detect());
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return false;
}

/// Whether an m x n row-major T product of the training kernels runs edgebench's own kernel
/// (which reads either operand in any layout, so the caller may pick the layout it wants).
pub(crate) fn own_kernel_takes<T: Float>(m: usize, n: usize) -> bool {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    return trains_on_own_kernel::<T>() && crate::sgemm::tiles_fit(m, n);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return {
        let _ = (m, n);
        false
    };
}

/// Floating-point operations (a multiply-add counts as two) of the matrix products the kernels
/// have run in this process: the convolutions' GEMMs as multiplied (Winograd's on transformed
/// tiles, so its savings show), the fully connected layers' GEMMs and streaming loops, and
/// [`mm`]'s. Against the machine's SGEMM peak it gives the time the products alone would take.
static PRODUCT_FLOPS: AtomicU64 = AtomicU64::new(0);

/// The floating-point operations of every matrix product the kernels have run in this process
/// so far (see [`Product`]); `edgebench profile` reports them per image.
pub fn product_flops() -> u64 {
    PRODUCT_FLOPS.load(Ordering::Relaxed)
}

/// Whether each [`Product`] is timed into [`PRODUCT_LOG`] (`log_products`).
static LOG_PRODUCTS: AtomicBool = AtomicBool::new(false);

/// What the product log keeps per shape and call site: calls and seconds.
type ProductLog = std::collections::BTreeMap<ProductKey, (u64, f64)>;

/// A logged product's (m, n, k), threads and call site.
type ProductKey = (
    (usize, usize, usize),
    usize,
    &'static std::panic::Location<'static>,
);

static PRODUCT_LOG: std::sync::Mutex<ProductLog> = std::sync::Mutex::new(ProductLog::new());

/// The matrix products of one shape from one call site in the kernels, as logged between
/// [`log_products`]`(true)` and [`take_logged_products`].
#[derive(Debug, Clone, PartialEq)]
pub struct ProductShape {
    /// Rows of the destination, its columns, and the depth of the sum.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Threads each call ran on (1: the calling thread alone, inside a kernel's own task).
    pub threads: usize,
    /// The kernels' source line that asked for the product, `file.rs:line`.
    pub site: String,
    pub calls: u64,
    /// Wall time inside the calls, summed over the calls (the threads that ran them in
    /// parallel each count their own).
    pub seconds: f64,
}

impl ProductShape {
    /// Floating-point operations of all the calls (a multiply-add counts as two).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.calls as f64
    }
}

/// Starts (`true`) or stops logging every matrix product's shape, call site and time; starting
/// clears the log. Off, a product pays one relaxed atomic load for it.
pub fn log_products(on: bool) {
    if on {
        PRODUCT_LOG
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
    LOG_PRODUCTS.store(on, Ordering::Relaxed);
}

/// The products logged since [`log_products`]`(true)`, most time first; the log is left empty.
pub fn take_logged_products() -> Vec<ProductShape> {
    let log = std::mem::take(
        &mut *PRODUCT_LOG
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut shapes: Vec<ProductShape> = log
        .into_iter()
        .map(|(((m, n, k), threads, site), (calls, seconds))| {
            let file = site
                .file()
                .rsplit(['/', '\\'])
                .next()
                .unwrap_or(site.file());
            ProductShape {
                m,
                n,
                k,
                threads,
                site: format!("{file}:{}", site.line()),
                calls,
                seconds,
            }
        })
        .collect();
    shapes.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    shapes
}

/// The threads a product with `par` runs on.
fn threads_of(par: Parallelism) -> usize {
    match par {
        Parallelism::None => 1,
        Parallelism::Rayon(0) => rayon::current_num_threads(),
        Parallelism::Rayon(threads) => threads,
    }
}

/// One matrix product while it runs: counted in [`product_flops`] at its start and, if
/// [`log_products`] was on then, timed into [`PRODUCT_LOG`] under its caller's source line when
/// dropped. Every product takes one, so the count and the log hold the same products.
pub(crate) struct Product(Option<(ProductKey, std::time::Instant)>);

impl Product {
    /// An m x n x k product on the threads `par` gives it.
    #[track_caller]
    pub(crate) fn start((m, n, k): (usize, usize, usize), par: Parallelism) -> Product {
        let flops = 2 * m as u64 * n as u64 * k as u64;
        PRODUCT_FLOPS.fetch_add(flops, Ordering::Relaxed);
        if !LOG_PRODUCTS.load(Ordering::Relaxed) {
            return Product(None);
        }
        let key = ((m, n, k), threads_of(par), std::panic::Location::caller());
        Product(Some((key, std::time::Instant::now())))
    }
}

impl Drop for Product {
    fn drop(&mut self) {
        if let Some((key, t0)) = self.0.take() {
            let seconds = t0.elapsed().as_secs_f64();
            let mut log = PRODUCT_LOG
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let entry = log.entry(key).or_insert((0, 0.0));
            entry.0 += 1;
            entry.1 += seconds;
        }
    }
}

/// The call into gemm (f32 into [`crate::sgemm`]'s blocked product where
/// [`crate::sgemm::trains_with`] this CPU's kernel), with its operands' bounds checked here and
/// dst's by the caller; `own` takes edgebench's kernel whatever `trains_with` says ([`mm`]'s products
/// where [`crate::sgemm::multiplies_with`] it).
///
/// # Safety
/// Every element (r, c) < (m, n) of dst at r * rs + c * cs must be in one allocation, writable
/// and not aliased; when `accumulate` it must be initialised. m, n and k are not zero.
#[track_caller]
unsafe fn gemm_raw<T: Float>(
    (m, n, k): (usize, usize, usize),
    (dst, (dst_rs, dst_cs)): (*mut T, (usize, usize)),
    accumulate: bool,
    (lhs, (lhs_rs, lhs_cs)): (&[T], (usize, usize)),
    (rhs, (rhs_rs, rhs_cs)): (&[T], (usize, usize)),
    par: Parallelism,
    own: bool,
) {
    assert!(lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs);
    assert!(rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs);
    let _product = Product::start((m, n, k), par);
    // f32 on aarch64 (and for `own`): edgebench's own kernel (crate::sgemm), when dst has a unit
    // stride and the product fills its tiles (row-major C as m x n, column-major as C^T, n x m).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if (if own {
        is_f32::<T>()
    } else {
        trains_on_own_kernel::<T>()
    }) && ((dst_cs == 1 && crate::sgemm::tiles_fit(m, n))
        || (dst_cs != 1 && dst_rs == 1 && crate::sgemm::tiles_fit(n, m)))
    {
        let threads = threads_of(par);
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

/// a (m, k) · b (k, n) -> (m, n), differentiable: f32 on the CPU through edgebench's own GEMM
/// where [`crate::sgemm::multiplies_with`] this CPU's kernel (transposed views read in place,
/// as candle's matmul reads them; products too skinny for its tiles on the gemm crate),
/// everything else (other devices, dtypes, batched shapes, CPUs with AVX2 only) through
/// candle's matmul.
pub fn mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let own = a.device().is_cpu()
        && a.dtype() == DType::F32
        && b.dtype() == DType::F32
        && a.rank() == 2
        && b.rank() == 2
        && own_kernel();
    if own {
        a.apply_op2(b, MatMul)
    } else {
        a.matmul(b)
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn own_kernel() -> bool {
    crate::sgemm::multiplies_with(crate::sgemm::Kernel::detect())
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn own_kernel() -> bool {
    false
}

/// The product of [`mm`] on the CPU.
struct MatMul;

impl CustomOp2 for MatMul {
    fn name(&self) -> &'static str {
        "mm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let ((m, k), (k2, n)) = (l1.shape().dims2()?, l2.shape().dims2()?);
        if k != k2 {
            bail!("mm: {:?} · {:?} do not fit", l1.dims(), l2.dims());
        }
        let strides = |l: &Layout| (l.stride()[0], l.stride()[1]);
        let out = float_kernel!("mm", |a in s1, b in s2| {
            let (a, b) = (&a[l1.start_offset()..], &b[l2.start_offset()..]);
            // SAFETY: gemm_uninit writes all of the (m, n) product, as vec_written_by needs.
            unsafe {
                crate::util::vec_written_by(m * n, |c| {
                    product_uninit(
                        (m, n, k),
                        c,
                        a,
                        strides(l1),
                        b,
                        strides(l2),
                        Parallelism::Rayon(0),
                        true,
                    )
                })
            }
        });
        Ok((out, Shape::from((m, n))))
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        _c: &Tensor,
        dc: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let da = if a.track_op() {
            Some(mm(dc, &b.t()?)?)
        } else {
            None
        };
        let db = if b.track_op() {
            Some(mm(&a.t()?, dc)?)
        } else {
            None
        };
        Ok((da, db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{on_thread_counts, to_vec, Rng};
    use candle_core::{Device, Var};

    fn var(rows: usize, cols: usize, seed: u64) -> Var {
        let v: Vec<f32> = Rng::new(seed)
            .vec(rows * cols)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        Var::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    fn assert_close(got: &Tensor, want: &Tensor, depth: usize, what: &str) {
        assert_eq!(got.dims(), want.dims(), "{what}");
        for (i, (g, w)) in to_vec(got).iter().zip(to_vec(want)).enumerate() {
            assert!(
                (g - w).abs() <= 2e-6 * depth as f64 + 1e-6,
                "{what}: element {i} = {g}, want {w}"
            );
        }
    }

    /// mm against candle's matmul, forward and both gradients, with operands contiguous and
    /// transposed (strided views), at shapes around the tiles' edges and at every thread count.
    #[test]
    fn mm_matches_candles_matmul_and_its_gradients() {
        on_thread_counts(|| {
            for (m, k, n) in [(1, 1, 1), (7, 13, 5), (64, 150, 100), (33, 301, 97)] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    let what = format!("{m}x{k}x{n}, transposed {ta} {tb}");
                    let a = if ta { var(k, m, 1) } else { var(m, k, 1) };
                    let b = if tb { var(n, k, 2) } else { var(k, n, 2) };
                    let view = |v: &Var, t: bool| {
                        if t {
                            v.as_tensor().t().unwrap()
                        } else {
                            v.as_tensor().clone()
                        }
                    };
                    let (av, bv) = (view(&a, ta), view(&b, tb));
                    let ours = mm(&av, &bv).unwrap();
                    let theirs = av.matmul(&bv).unwrap();
                    assert_close(&ours, &theirs, k, &format!("{what}: product"));
                    let r = Tensor::from_vec(
                        Rng::new(3)
                            .vec(m * n)
                            .into_iter()
                            .map(|x| x as f32)
                            .collect::<Vec<_>>(),
                        (m, n),
                        &Device::Cpu,
                    )
                    .unwrap();
                    let g_ours = (ours * &r).unwrap().sum_all().unwrap().backward().unwrap();
                    let g_theirs = (theirs * &r)
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .backward()
                        .unwrap();
                    for (v, name, depth) in [(&a, "da", n), (&b, "db", m)] {
                        assert_close(
                            g_ours.get(v.as_tensor()).expect("a gradient"),
                            g_theirs.get(v.as_tensor()).expect("a gradient"),
                            depth,
                            &format!("{what}: {name}"),
                        );
                    }
                }
            }
        });
    }

    /// What mm does not take on goes to candle's matmul: batched shapes and f64.
    #[test]
    fn mm_hands_batched_and_f64_products_to_candle() {
        let a = Tensor::ones((2, 3, 4), DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::ones((2, 4, 5), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(mm(&a, &b).unwrap().dims(), [2, 3, 5]);
        let a = Tensor::ones((3, 4), DType::F64, &Device::Cpu).unwrap();
        let b = Tensor::ones((4, 5), DType::F64, &Device::Cpu).unwrap();
        assert_eq!(to_vec(&mm(&a, &b).unwrap()), vec![4.0; 15]);
    }
}
