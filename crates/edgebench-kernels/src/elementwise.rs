//! The CPU kernels of the operator benchmark (edgebench's `ops` workload): each op over
//! preallocated buffers, split into
//! contiguous chunks over the rayon pool, with loops the compiler vectorises. candle's CPU ops
//! run elementwise ops on one thread and allocate a fresh output on every call (for large
//! tensors: fresh pages, a page fault per 4 KiB), so they time the allocator, not the op.
//!
//! sigmoid and tanh in f32 use [`exp_f32`], a branch-free exponential the compiler vectorises
//! (libm's `expf` is a call per element); f64 keeps the standard library's `exp`.

use rayon::prelude::*;

/// The element types the benchmark runs in.
pub trait Elem: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `FMA`: multiply-adds are fused (only in code compiled where they are one instruction,
    /// see [`fused_multiply_add`]).
    fn sigmoid<const FMA: bool>(self) -> Self;
    fn tanh<const FMA: bool>(self) -> Self;
}

impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self + o
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self * o
    }
    #[inline(always)]
    fn sigmoid<const FMA: bool>(self) -> Self {
        1.0 / (1.0 + exp_f32::<FMA>(-self))
    }
    #[inline(always)]
    fn tanh<const FMA: bool>(self) -> Self {
        // tanh|x| = (1 - e^-2|x|) / (1 + e^-2|x|): the exponential never overflows. Near 0
        // the subtraction cancels: the absolute error stays ~1e-7, the relative one grows.
        let e = exp_f32::<FMA>(-2.0 * self.abs());
        ((1.0 - e) / (1.0 + e)).copysign(self)
    }
}

impl Elem for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self + o
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self * o
    }
    #[inline(always)]
    fn sigmoid<const FMA: bool>(self) -> Self {
        1.0 / (1.0 + (-self).exp())
    }
    #[inline(always)]
    fn tanh<const FMA: bool>(self) -> Self {
        f64::tanh(self)
    }
}

/// e^x in f32 without branches or calls (Cephes' `expf`: x = n ln2 + r, |r| <= ln2/2, a
/// degree-7 polynomial for e^r, 2^n built in the exponent bits), so loops over it vectorise.
/// Relative error about 2e-7 over the clamped range; x is clamped to [-87, 88], where e^x is a
/// normal f32 (e^-87 ~ 1.6e-38, e^88 ~ 1.7e38).
#[inline(always)]
pub fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    let madd = |a: f32, b: f32, c: f32| if FMA { a.mul_add(b, c) } else { a * b + c };
    // Adding 1.5 x 2^23 rounds to an integer held in the low mantissa bits: n as a float and,
    // from the bits, as an integer, with no float-to-int conversion (which would not vectorise).
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let t = madd(x, std::f32::consts::LOG2_E, ROUNDER);
    let n = t - ROUNDER;
    let n_bits = (t.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32);
    let r = madd(-n, LN2_LO, madd(-n, LN2_HI, x));
    let mut p = madd(1.987_569_1e-4, r, 1.398_199_9e-3);
    for c in [8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = madd(p, r, c);
    }
    let er = madd(p * r, r, r) + 1.0;
    let two_n = f32::from_bits((n_bits.wrapping_add(127) << 23) as u32);
    er * two_n
}

/// Elements per rayon task: a few contiguous chunks per thread (the hardware prefetchers want
/// long runs), none so small that scheduling dominates.
fn chunk_len(len: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    len.div_ceil(threads * 4).max(4096)
}

/// Whether fused multiply-adds are single instructions in the loops [`unary`] and [`binary`]
/// run: always on aarch64; on x86-64 where the CPU has AVX2 and FMA (the loops then run in
/// their AVX2+FMA copy). Elsewhere `mul_add` would be a library call per element.
pub fn fused_multiply_add() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    cfg!(target_arch = "aarch64")
}

/// Runs `body` compiled for AVX2 (8 f32 lanes) and FMA when the CPU has them: the build targets
/// baseline x86-64 (SSE2, 4 lanes, no FMA), and sigmoid and tanh are bound by arithmetic, not
/// memory, at that width. The closure and the op it calls are inlined into that copy.
#[inline(always)]
fn with_widest_vectors(body: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2_fma(body: impl FnOnce()) {
            body()
        }
        // SAFETY: the CPU has AVX2 and FMA, checked just above.
        return unsafe { avx2_fma(body) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(body: impl FnOnce()) {
            body()
        }
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { avx2(body) };
    }
    body()
}

/// `c[i] = f(a[i], b[i])` on all threads.
pub fn binary<T: Elem>(a: &[T], b: &[T], c: &mut [T], f: impl Fn(T, T) -> T + Sync) {
    assert!(
        a.len() == c.len() && b.len() == c.len(),
        "operand lengths differ"
    );
    let chunk = chunk_len(c.len());
    c.par_chunks_mut(chunk)
        .zip(a.par_chunks(chunk).zip(b.par_chunks(chunk)))
        .for_each(|(c, (a, b))| {
            with_widest_vectors(|| {
                for ((c, &a), &b) in c.iter_mut().zip(a).zip(b) {
                    *c = f(a, b);
                }
            })
        });
}

/// `c[i] = f(a[i])` on all threads.
pub fn unary<T: Elem>(a: &[T], c: &mut [T], f: impl Fn(T) -> T + Sync) {
    assert!(a.len() == c.len(), "operand lengths differ");
    let chunk = chunk_len(c.len());
    c.par_chunks_mut(chunk)
        .zip(a.par_chunks(chunk))
        .for_each(|(c, a)| {
            with_widest_vectors(|| {
                for (c, &a) in c.iter_mut().zip(a) {
                    *c = f(a);
                }
            })
        });
}

/// C (m x n) = A (m x k) · B (k x n), all row-major, through the `gemm` crate (the GEMM
/// candle's CPU matmul uses) on all rayon threads.
pub fn matmul<T: Elem>(a: &[T], b: &[T], c: &mut [T], (m, n, k): (usize, usize, usize)) {
    assert!(
        a.len() == m * k && b.len() == k * n && c.len() == m * n,
        "matmul shapes"
    );
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the asserts above make every index gemm reads or writes fall inside a, b, c
    // (row-major, row strides k, n, n; column stride 1); c is borrowed mutably, so it overlaps
    // neither a nor b. alpha is unused (read_dst false), beta = 1 scales the product.
    unsafe {
        gemm::gemm(
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
            T::from_f64(0.0),
            T::from_f64(1.0),
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `len` pseudo-random values in [lo, hi), the same for a given seed at any thread count
/// (each element hashes its own index; filling in parallel also maps the pages on the threads
/// that go on to use them).
pub fn fill<T: Elem>(len: usize, seed: u64, lo: f64, hi: f64) -> Vec<T> {
    let mut v: Vec<T> = vec![T::from_f64(0.0); len];
    let chunk = chunk_len(len);
    v.par_chunks_mut(chunk).enumerate().for_each(|(ci, c)| {
        for (j, x) in c.iter_mut().enumerate() {
            let i = (ci * chunk + j) as u64;
            let unit = (splitmix64(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 11) as f64
                / (1u64 << 53) as f64;
            *x = T::from_f64(lo + (hi - lo) * unit);
        }
    });
    v
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_within_a_few_ulp_of_f64_exp() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let got = exp_f32::<false>(x) as f64;
            let fused = exp_f32::<true>(x) as f64;
            worst = worst.max(((fused - (x as f64).exp()) / (x as f64).exp()).abs());
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "worst relative error {worst:e}");
        // Beyond the clamp it saturates to finite values instead of inf / 0 / NaN.
        assert!(exp_f32::<false>(1000.0).is_finite() && exp_f32::<false>(-1000.0) > 0.0);
        assert!(exp_f32::<true>(1000.0).is_finite() && exp_f32::<true>(-1000.0) > 0.0);
    }

    #[test]
    fn f32_sigmoid_and_tanh_match_f64_references() {
        f32_sigmoid_and_tanh_match::<false>();
        f32_sigmoid_and_tanh_match::<true>();
    }

    fn f32_sigmoid_and_tanh_match<const FMA: bool>() {
        let mut x = -30.0f32;
        while x <= 30.0 {
            let s = Elem::sigmoid::<FMA>(x) as f64;
            let s_ref = 1.0 / (1.0 + (-(x as f64)).exp());
            assert!(
                (s - s_ref).abs() <= 2e-7 * s_ref.max(1e-30) + 1e-12,
                "sigmoid({x})"
            );
            let t = Elem::tanh::<FMA>(x) as f64;
            assert!((t - (x as f64).tanh()).abs() <= 3e-7, "tanh({x}) = {t}");
            x += 0.00731;
        }
        assert_eq!(Elem::tanh::<FMA>(0.0f32), 0.0);
        assert_eq!(Elem::tanh::<FMA>(-50.0f32), -1.0);
    }

    /// Every loop against its f64 reference in pools of 1 to 16 threads, each with the
    /// multiply-adds the dispatch picks on this CPU (fused on aarch64 and AVX2+FMA x86-64).
    #[test]
    fn loops_match_their_references_at_every_thread_count() {
        let n = 100_003; // not a multiple of any chunk or vector width
        let a: Vec<f32> = fill(n, 7, -4.0, 4.0);
        let b: Vec<f32> = fill(n, 8, -1.0, 1.0);
        let fused = fused_multiply_add();
        for threads in [1, 3, 4, 6, 8, 12, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut c = vec![0f32; n];
                binary(&a, &b, &mut c, <f32 as Elem>::add);
                assert!(c
                    .iter()
                    .zip(a.iter().zip(&b))
                    .all(|(c, (a, b))| *c == a + b));
                binary(&a, &b, &mut c, <f32 as Elem>::mul);
                assert!(c
                    .iter()
                    .zip(a.iter().zip(&b))
                    .all(|(c, (a, b))| *c == a * b));
                match fused {
                    true => unary(&a, &mut c, <f32 as Elem>::sigmoid::<true>),
                    false => unary(&a, &mut c, <f32 as Elem>::sigmoid::<false>),
                }
                for (c, a) in c.iter().zip(&a) {
                    let want = 1.0 / (1.0 + (-(*a as f64)).exp());
                    assert!(
                        (*c as f64 - want).abs() <= 3e-7 * want,
                        "{threads} threads: sigmoid({a})"
                    );
                }
                match fused {
                    true => unary(&a, &mut c, <f32 as Elem>::tanh::<true>),
                    false => unary(&a, &mut c, <f32 as Elem>::tanh::<false>),
                }
                for (c, a) in c.iter().zip(&a) {
                    let want = (*a as f64).tanh();
                    assert!(
                        (*c as f64 - want).abs() <= 3e-7,
                        "{threads} threads: tanh({a})"
                    );
                }
                // A 37 x 29 x 41 product against the triple loop in f64.
                let (m, k, p) = (37, 29, 41);
                let mut c = vec![0f32; m * p];
                matmul(&a[..m * k], &b[..k * p], &mut c, (m, p, k));
                for i in 0..m {
                    for j in 0..p {
                        let want: f64 = (0..k)
                            .map(|l| a[i * k + l] as f64 * b[l * p + j] as f64)
                            .sum();
                        let got = c[i * p + j] as f64;
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{threads} threads: c[{i},{j}]"
                        );
                    }
                }
            });
        }
    }

    #[test]
    fn fill_is_the_same_at_any_thread_count_and_in_range() {
        let reference: Vec<f32> = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| fill(100_003, 7, -2.0, 3.0));
        assert!(reference.iter().all(|&v| (-2.0..3.0).contains(&v)));
        let distinct: std::collections::HashSet<u32> =
            reference.iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 99_000, "values repeat: {}", distinct.len());
        for threads in [3, 16] {
            let v: Vec<f32> = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| fill(100_003, 7, -2.0, 3.0));
            assert_eq!(v, reference, "{threads} threads");
        }
    }
}
