//! The CPU kernels of the operator benchmark (edgebench's `ops` workload): each op over
//! preallocated buffers, split into
//! contiguous chunks over the rayon pool, with loops the compiler vectorises. candle's CPU ops
//! run elementwise ops on one thread and allocate a fresh output on every call (for large
//! tensors: fresh pages, a page fault per 4 KiB), so they time the allocator, not the op.
//!
//! sigmoid and tanh in f32 use [`exp_f32`], a branch-free exponential the compiler vectorises
//! (libm's `expf` is a call per element), on x86-64 with AVX2 and FMA and on aarch64 through
//! an explicitly vectorised copy (see `avx2_fma` and `neon`); f64 keeps the standard library's
//! `exp`. f32 dot is
//! [`crate::sgemm`].

use crate::sgemm::{gemm_crate, sgemm};
use crate::util::with_widest_vectors;
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
    /// The GEMM [`matmul`] runs for this type.
    fn gemm(a: &[Self], b: &[Self], c: &mut [Self], dims: (usize, usize, usize));
    /// What [`sigmoid`] runs for this type: [`unary`] over [`Elem::sigmoid`].
    fn sigmoid_slice(a: &[Self], c: &mut [Self]) {
        match fused_multiply_add() {
            true => unary(a, c, <Self as Elem>::sigmoid::<true>),
            false => unary(a, c, <Self as Elem>::sigmoid::<false>),
        }
    }
    /// What [`tanh`] runs for this type: [`unary`] over [`Elem::tanh`].
    fn tanh_slice(a: &[Self], c: &mut [Self]) {
        match fused_multiply_add() {
            true => unary(a, c, <Self as Elem>::tanh::<true>),
            false => unary(a, c, <Self as Elem>::tanh::<false>),
        }
    }
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
    fn gemm(a: &[Self], b: &[Self], c: &mut [Self], dims: (usize, usize, usize)) {
        sgemm(a, b, c, dims)
    }
    fn sigmoid_slice(a: &[Self], c: &mut [Self]) {
        #[cfg(target_arch = "x86_64")]
        if avx2_fma::available() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unary_chunks(a, c, |a, c| unsafe { avx2_fma::sigmoid(a, c) });
        }
        #[cfg(target_arch = "aarch64")]
        if neon::available() {
            // SAFETY: the CPU has NEON.
            return unary_chunks(a, c, |a, c| unsafe { neon::sigmoid(a, c) });
        }
        match fused_multiply_add() {
            true => unary(a, c, <Self as Elem>::sigmoid::<true>),
            false => unary(a, c, <Self as Elem>::sigmoid::<false>),
        }
    }
    fn tanh_slice(a: &[Self], c: &mut [Self]) {
        #[cfg(target_arch = "x86_64")]
        if avx2_fma::available() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unary_chunks(a, c, |a, c| unsafe { avx2_fma::tanh(a, c) });
        }
        #[cfg(target_arch = "aarch64")]
        if neon::available() {
            // SAFETY: the CPU has NEON.
            return unary_chunks(a, c, |a, c| unsafe { neon::tanh(a, c) });
        }
        match fused_multiply_add() {
            true => unary(a, c, <Self as Elem>::tanh::<true>),
            false => unary(a, c, <Self as Elem>::tanh::<false>),
        }
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
    fn gemm(a: &[Self], b: &[Self], c: &mut [Self], dims: (usize, usize, usize)) {
        gemm_crate(a, b, c, dims)
    }
}

/// Cephes' `expf` coefficients: e^r ~ 1 + r + r^2 (P0 r^5 + P1 r^4 + ... + P5).
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

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
    // p(r) = (P5 + P4 r) + r^2 (P3 + P2 r) + r^4 (P1 + P0 r) (Estrin's scheme): a chain of
    // three multiply-adds instead of Horner's five, so more elements overlap in flight.
    let r2 = r * r;
    let p = madd(
        r2 * r2,
        madd(EXP_P[0], r, EXP_P[1]),
        madd(r2, madd(EXP_P[2], r, EXP_P[3]), madd(EXP_P[4], r, EXP_P[5])),
    );
    let er = madd(r2, p, r) + 1.0;
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

/// `c[i] = sigmoid(a[i])` on all threads; in f32 with AVX2 and FMA or NEON an explicitly
/// vectorised loop with the same results as [`Elem::sigmoid`]`::<true>`, bit for bit.
pub fn sigmoid<T: Elem>(a: &[T], c: &mut [T]) {
    assert!(a.len() == c.len(), "operand lengths differ");
    T::sigmoid_slice(a, c)
}

/// `c[i] = tanh(a[i])` on all threads; in f32 with AVX2 and FMA or NEON an explicitly
/// vectorised loop with the same results as [`Elem::tanh`]`::<true>`, bit for bit.
pub fn tanh<T: Elem>(a: &[T], c: &mut [T]) {
    assert!(a.len() == c.len(), "operand lengths differ");
    T::tanh_slice(a, c)
}

/// `body(a, c)` over matching chunks of `a` and `c` on all threads.
fn unary_chunks<T: Elem>(a: &[T], c: &mut [T], body: impl Fn(&[T], &mut [T]) + Sync) {
    assert!(a.len() == c.len(), "operand lengths differ");
    let chunk = chunk_len(c.len());
    c.par_chunks_mut(chunk)
        .zip(a.par_chunks(chunk))
        .for_each(|(c, a)| body(a, c));
}

/// f32 sigmoid and tanh in AVX2/FMA intrinsics. The compiler's vectorisation of
/// [`Elem::sigmoid`] runs one 8-lane vector per iteration, and exp's chain of ~15 dependent
/// operations then bounds it by latency (the scheduler holds too few iterations to overlap
/// them); here every step is applied to [`UNROLL`] independent vectors before the next, so
/// their chains interleave. Same operations, same order: the results equal
/// `Elem::sigmoid::<true>` / `Elem::tanh::<true>` bit for bit.
#[cfg(target_arch = "x86_64")]
mod avx2_fma {
    use std::arch::x86_64::*;

    /// Vectors in flight per iteration: with 4 the loop spills to the stack, and tanh is ~10 %
    /// slower per element on an EPYC (Zen 3) core; 2 leaves sigmoid's chains exposed.
    const UNROLL: usize = 3;
    const BLOCK: usize = 8 * UNROLL;

    pub(super) fn available() -> bool {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }

    type V = [__m256; UNROLL];

    /// [`super::exp_f32`]`::<true>` on every lane.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp(x: V) -> V {
        let splat = _mm256_set1_ps;
        let rounder = splat(12_582_912.0);
        let mut t = x;
        let mut n = x;
        let mut r = x;
        for i in 0..UNROLL {
            let x = _mm256_min_ps(splat(88.0), _mm256_max_ps(splat(-87.0), x[i]));
            t[i] = _mm256_fmadd_ps(x, splat(std::f32::consts::LOG2_E), rounder);
            n[i] = _mm256_sub_ps(t[i], rounder);
            r[i] = _mm256_fnmadd_ps(n[i], splat(0.693_359_4), x);
        }
        for i in 0..UNROLL {
            r[i] = _mm256_fnmadd_ps(n[i], splat(-2.121_944_4e-4), r[i]);
        }
        let c = |i: usize| _mm256_set1_ps(super::EXP_P[i]);
        let mut r2 = r;
        let mut p = r;
        for i in 0..UNROLL {
            r2[i] = _mm256_mul_ps(r[i], r[i]);
            let high = _mm256_fmadd_ps(c(0), r[i], c(1));
            let mid = _mm256_fmadd_ps(c(2), r[i], c(3));
            let low = _mm256_fmadd_ps(c(4), r[i], c(5));
            let r4 = _mm256_mul_ps(r2[i], r2[i]);
            p[i] = _mm256_fmadd_ps(r4, high, _mm256_fmadd_ps(r2[i], mid, low));
        }
        let mut out = x;
        for i in 0..UNROLL {
            let er = _mm256_add_ps(_mm256_fmadd_ps(r2[i], p[i], r[i]), splat(1.0));
            let n_bits = _mm256_sub_epi32(_mm256_castps_si256(t[i]), _mm256_castps_si256(rounder));
            let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(n_bits, _mm256_set1_epi32(127)));
            out[i] = _mm256_mul_ps(er, _mm256_castsi256_ps(two_n));
        }
        out
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn sigmoid_v(x: V) -> V {
        let one = _mm256_set1_ps(1.0);
        let mut neg = x;
        for v in &mut neg {
            *v = _mm256_xor_ps(*v, _mm256_set1_ps(-0.0));
        }
        let mut e = exp(neg);
        for e in &mut e {
            *e = _mm256_div_ps(one, _mm256_add_ps(one, *e));
        }
        e
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn tanh_v(x: V) -> V {
        let one = _mm256_set1_ps(1.0);
        let sign = _mm256_set1_ps(-0.0);
        let mut m = x;
        for v in &mut m {
            // -2|x|
            *v = _mm256_mul_ps(_mm256_set1_ps(-2.0), _mm256_andnot_ps(sign, *v));
        }
        let e = exp(m);
        let mut out = x;
        for i in 0..UNROLL {
            let q = _mm256_div_ps(_mm256_sub_ps(one, e[i]), _mm256_add_ps(one, e[i]));
            out[i] = _mm256_or_ps(_mm256_andnot_ps(sign, q), _mm256_and_ps(sign, x[i]));
        }
        out
    }

    /// How far ahead of the block being computed the input and the output are prefetched.
    /// Beyond the last-level cache a core alternates between 0.5-0.8 ns of arithmetic per
    /// element and waiting for lines; the prefetchers alone do not keep enough lines in flight
    /// to overlap the two. Prefetching the output too fetches its lines (which every store
    /// must read first) ahead of the stores. On a 2-core EPYC at 128 MiB: tanh 81 % -> 90 % and
    /// sigmoid 90 % -> 92 % of STREAM copy (docs/kernels.md).
    const PREFETCH_INPUT_BYTES: usize = 4096;
    const PREFETCH_OUTPUT_BYTES: usize = 2048;

    /// `c = f(a)` in blocks of [`BLOCK`]; the tail goes through one zero-padded block.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn map(a: &[f32], c: &mut [f32], f: impl Fn(V) -> V) {
        assert_eq!(a.len(), c.len());
        let mut a_blocks = a.chunks_exact(BLOCK);
        let mut c_blocks = c.chunks_exact_mut(BLOCK);
        for (a, c) in (&mut a_blocks).zip(&mut c_blocks) {
            let mut x = [_mm256_setzero_ps(); UNROLL];
            for (i, x) in x.iter_mut().enumerate() {
                // SAFETY: a holds BLOCK floats, lanes 8i..8i + 8 among them.
                *x = unsafe { _mm256_loadu_ps(a.as_ptr().add(8 * i)) };
            }
            // Prefetches never fault; past the end of the slice they fetch a neighbour's
            // lines or nothing.
            let ahead = |p: *const f32, bytes: usize| p.cast::<i8>().wrapping_add(bytes);
            _mm_prefetch::<_MM_HINT_T0>(ahead(a.as_ptr(), PREFETCH_INPUT_BYTES));
            _mm_prefetch::<_MM_HINT_T0>(ahead(c.as_ptr(), PREFETCH_OUTPUT_BYTES));
            let y = f(x);
            for (i, y) in y.iter().enumerate() {
                // SAFETY: c holds BLOCK floats.
                unsafe { _mm256_storeu_ps(c.as_mut_ptr().add(8 * i), *y) };
            }
        }
        let (a, c) = (a_blocks.remainder(), c_blocks.into_remainder());
        if !a.is_empty() {
            let mut block = [0f32; BLOCK];
            block[..a.len()].copy_from_slice(a);
            let mut x = [_mm256_setzero_ps(); UNROLL];
            for (i, x) in x.iter_mut().enumerate() {
                // SAFETY: block holds BLOCK floats.
                *x = unsafe { _mm256_loadu_ps(block.as_ptr().add(8 * i)) };
            }
            for (i, y) in f(x).iter().enumerate() {
                // SAFETY: block holds BLOCK floats.
                unsafe { _mm256_storeu_ps(block.as_mut_ptr().add(8 * i), *y) };
            }
            c.copy_from_slice(&block[..a.len()]);
        }
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sigmoid(a: &[f32], c: &mut [f32]) {
        map(a, c, |x| sigmoid_v(x))
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tanh(a: &[f32], c: &mut [f32]) {
        map(a, c, |x| tanh_v(x))
    }
}

/// f32 sigmoid and tanh in NEON (ASIMD) intrinsics, the aarch64 counterpart of `avx2_fma`:
/// base ASIMD only (no fp16, no dotprod), so a Cortex-A57 runs it. LLVM's vectorisation of
/// [`Elem::sigmoid`] runs one 4-lane vector per iteration with exp's chain exposed; here every
/// step is applied to [`UNROLL`] independent vectors before the next. Same operations, same
/// order, each multiply-add fused as `f32::mul_add` is on aarch64: the results equal
/// `Elem::sigmoid::<true>` / `Elem::tanh::<true>` bit for bit. The clamp is `fmax`/`fmin`
/// (a NaN stays NaN, as in `f32::clamp`; `fmaxnm`/`fminnm` would turn it into a bound), and
/// the division stays `fdiv` (a reciprocal estimate refined by Newton steps rounds
/// differently).
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    /// Vectors in flight per iteration: the most that fit the 32 vector registers. The loops
    /// keep 13 (sigmoid) or 14 (tanh) of them for constants (clamp bounds, exp's coefficients,
    /// 1, -2, the exponent bias, the sign mask); each vector in flight holds about 4 more
    /// (t, r, r^2, the polynomial's partial sums). With 4, tanh uses all 32 and neither loop
    /// spills; with 6, tanh spills (6 stack accesses per iteration). llvm-mca's Cortex-A57
    /// model puts 3, 4 and 6 at the same cycles per element (bound by the two FP pipes, one
    /// of them held by the division), 2 at 5 % more for sigmoid (bench/arm/mca-elementwise.sh).
    const UNROLL: usize = 4;
    const BLOCK: usize = 4 * UNROLL;

    pub(super) fn available() -> bool {
        std::arch::is_aarch64_feature_detected!("neon")
    }

    type V = [float32x4_t; UNROLL];

    /// [`super::exp_f32`]`::<true>` on every lane, past its clamp: each lane is in
    /// [-87, 88] or NaN.
    #[inline]
    #[target_feature(enable = "neon")]
    fn exp_of_clamped(x: V) -> V {
        let splat = vdupq_n_f32;
        let rounder = splat(12_582_912.0);
        let mut t = x;
        let mut n = x;
        let mut r = x;
        for i in 0..UNROLL {
            // vfmaq_f32(a, b, c) = a + b c, vfmsq_f32(a, b, c) = a - b c, each rounded once.
            t[i] = vfmaq_f32(rounder, x[i], splat(std::f32::consts::LOG2_E));
            n[i] = vsubq_f32(t[i], rounder);
            r[i] = vfmsq_f32(x[i], n[i], splat(0.693_359_4));
        }
        for i in 0..UNROLL {
            r[i] = vfmsq_f32(r[i], n[i], splat(-2.121_944_4e-4));
        }
        let c = |i: usize| vdupq_n_f32(super::EXP_P[i]);
        let mut r2 = r;
        let mut p = r;
        for i in 0..UNROLL {
            r2[i] = vmulq_f32(r[i], r[i]);
            let high = vfmaq_f32(c(1), c(0), r[i]);
            let mid = vfmaq_f32(c(3), c(2), r[i]);
            let low = vfmaq_f32(c(5), c(4), r[i]);
            let r4 = vmulq_f32(r2[i], r2[i]);
            p[i] = vfmaq_f32(vfmaq_f32(low, r2[i], mid), r4, high);
        }
        // 2^n from t's bits: (t - rounder + 127) << 23 in wrapping i32 arithmetic, with the
        // two constants folded into one.
        let bias = vdupq_n_s32(127_i32.wrapping_sub(12_582_912f32.to_bits() as i32));
        let mut out = x;
        for i in 0..UNROLL {
            let er = vaddq_f32(vfmaq_f32(r[i], r2[i], p[i]), splat(1.0));
            let n_bits = vaddq_s32(vreinterpretq_s32_f32(t[i]), bias);
            let two_n = vreinterpretq_f32_s32(vshlq_n_s32::<23>(n_bits));
            out[i] = vmulq_f32(er, two_n);
        }
        out
    }

    #[inline]
    #[target_feature(enable = "neon")]
    fn sigmoid_v(x: V) -> V {
        let one = vdupq_n_f32(1.0);
        let mut clamped = x;
        for v in &mut clamped {
            // f32::clamp(-x, -87, 88)
            *v = vminq_f32(
                vmaxq_f32(vnegq_f32(*v), vdupq_n_f32(-87.0)),
                vdupq_n_f32(88.0),
            );
        }
        let mut e = exp_of_clamped(clamped);
        for e in &mut e {
            *e = vdivq_f32(one, vaddq_f32(one, *e));
        }
        e
    }

    #[inline]
    #[target_feature(enable = "neon")]
    fn tanh_v(x: V) -> V {
        let one = vdupq_n_f32(1.0);
        let mut clamped = x;
        for v in &mut clamped {
            // f32::clamp(-2|x|, -87, 88): -2|x| <= 0 (or NaN), the upper bound never applies.
            let m = vmulq_f32(vdupq_n_f32(-2.0), vabsq_f32(*v));
            *v = vmaxq_f32(m, vdupq_n_f32(-87.0));
        }
        let e = exp_of_clamped(clamped);
        let sign = vdupq_n_u32(0x8000_0000);
        let mut out = x;
        for i in 0..UNROLL {
            let q = vdivq_f32(vsubq_f32(one, e[i]), vaddq_f32(one, e[i]));
            // copysign(q, x): q >= +0 (e <= 1, and 1 - 1 = +0), so its sign bit is clear and
            // OR-ing in x's is enough (one instruction fewer than a bit select as LLVM
            // lowers it).
            let x_sign = vandq_u32(vreinterpretq_u32_f32(x[i]), sign);
            out[i] = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(q), x_sign));
        }
        out
    }

    /// `c = f(a)` in blocks of [`BLOCK`]; the tail goes through one zero-padded block. No
    /// software prefetch: on a Cortex-A57 the division alone takes 34 cycles per vector
    /// (llvm-mca), a pace at which the hardware prefetchers keep up.
    #[inline]
    #[target_feature(enable = "neon")]
    fn map(a: &[f32], c: &mut [f32], f: impl Fn(V) -> V) {
        assert_eq!(a.len(), c.len());
        let mut a_blocks = a.chunks_exact(BLOCK);
        let mut c_blocks = c.chunks_exact_mut(BLOCK);
        for (a, c) in (&mut a_blocks).zip(&mut c_blocks) {
            let mut x = [vdupq_n_f32(0.0); UNROLL];
            for (i, x) in x.iter_mut().enumerate() {
                // SAFETY: a holds BLOCK floats, lanes 4i..4i + 4 among them.
                *x = unsafe { vld1q_f32(a.as_ptr().add(4 * i)) };
            }
            for (i, y) in f(x).iter().enumerate() {
                // SAFETY: c holds BLOCK floats.
                unsafe { vst1q_f32(c.as_mut_ptr().add(4 * i), *y) };
            }
        }
        let (a, c) = (a_blocks.remainder(), c_blocks.into_remainder());
        if !a.is_empty() {
            let mut block = [0f32; BLOCK];
            block[..a.len()].copy_from_slice(a);
            let mut x = [vdupq_n_f32(0.0); UNROLL];
            for (i, x) in x.iter_mut().enumerate() {
                // SAFETY: block holds BLOCK floats.
                *x = unsafe { vld1q_f32(block.as_ptr().add(4 * i)) };
            }
            for (i, y) in f(x).iter().enumerate() {
                // SAFETY: block holds BLOCK floats.
                unsafe { vst1q_f32(block.as_mut_ptr().add(4 * i), *y) };
            }
            c.copy_from_slice(&block[..a.len()]);
        }
    }

    /// Not inlined: one call per chunk of at least 4096 elements costs nothing, and the loop
    /// keeps a symbol of its own for bench/arm/mca-elementwise.sh.
    ///
    /// # Safety
    /// The CPU has NEON.
    #[inline(never)]
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn sigmoid(a: &[f32], c: &mut [f32]) {
        map(a, c, |x| sigmoid_v(x))
    }

    /// Not inlined, as [`sigmoid`].
    ///
    /// # Safety
    /// The CPU has NEON.
    #[inline(never)]
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn tanh(a: &[f32], c: &mut [f32]) {
        map(a, c, |x| tanh_v(x))
    }
}

/// `c[i] = f(a[i])` on all threads.
pub fn unary<T: Elem>(a: &[T], c: &mut [T], f: impl Fn(T) -> T + Sync) {
    unary_chunks(a, c, |a, c| {
        with_widest_vectors(|| {
            for (c, &a) in c.iter_mut().zip(a) {
                *c = f(a);
            }
        })
    })
}

/// C (m x n) = A (m x k) · B (k x n), all row-major, on all rayon threads: f32 through
/// [`crate::sgemm::sgemm`] (its own AVX2/FMA kernel on x86-64 CPUs that have them and NEON
/// kernel on aarch64, else the `gemm` crate), f64 through the `gemm` crate (the GEMM candle's CPU matmul uses).
pub fn matmul<T: Elem>(a: &[T], b: &[T], c: &mut [T], dims: (usize, usize, usize)) {
    T::gemm(a, b, c, dims)
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
    /// multiply-adds the dispatch picks on this CPU (fused on aarch64 and AVX2+FMA x86-64;
    /// sigmoid and tanh through their explicitly vectorised loops on both).
    #[test]
    fn loops_match_their_references_at_every_thread_count() {
        let n = 100_003; // not a multiple of any chunk or vector width
        let a: Vec<f32> = fill(n, 7, -4.0, 4.0);
        let b: Vec<f32> = fill(n, 8, -1.0, 1.0);
        crate::test_util::on_thread_counts(|| {
            let threads = rayon::current_num_threads();
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
            // The workload's entry points (the AVX2/FMA or NEON loop where the CPU has them).
            sigmoid(&a, &mut c);
            for (c, a) in c.iter().zip(&a) {
                let want = 1.0 / (1.0 + (-(*a as f64)).exp());
                assert!(
                    (*c as f64 - want).abs() <= 3e-7 * want,
                    "{threads} threads: sigmoid({a})"
                );
            }
            tanh(&a, &mut c);
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

    /// The explicitly vectorised f32 sigmoid and tanh (AVX2/FMA on x86-64, NEON on aarch64)
    /// against the scalar functions they vectorise, bit for bit: every length up to three
    /// blocks of either (the zero-padded tail), values across and beyond exp's clamp,
    /// infinities, signed zeros and NaN; 1 to 16 threads.
    #[test]
    fn vectorised_sigmoid_and_tanh_equal_the_scalar_functions() {
        // Every aarch64 Linux CPU has NEON: the NEON loops are what this test checks there.
        #[cfg(target_arch = "aarch64")]
        assert!(neon::available(), "NEON not detected");
        // Without fused multiply-adds (x86-64 without AVX2/FMA) the entry points are `unary`
        // over the scalar functions with FMA = false: then those are what they must equal.
        let fma = fused_multiply_add();
        let mut x: Vec<f32> = fill(10_007, 3, -100.0, 100.0);
        x.extend(fill::<f32>(10_007, 4, -3.0, 3.0));
        x.extend([
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            87.0,
            -87.0,
            88.5,
            -88.5,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        let same = |got: f32, want: f32| {
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
        };
        // (name, the vectorised loop, the scalar function it must match bit for bit)
        type Pair = (&'static str, fn(&[f32], &mut [f32]), fn(f32) -> f32);
        let pairs: [Pair; 2] = match fma {
            true => [
                ("sigmoid", sigmoid, <f32 as Elem>::sigmoid::<true>),
                ("tanh", tanh, <f32 as Elem>::tanh::<true>),
            ],
            false => [
                ("sigmoid", sigmoid, <f32 as Elem>::sigmoid::<false>),
                ("tanh", tanh, <f32 as Elem>::tanh::<false>),
            ],
        };
        let (sigmoid_scalar, tanh_scalar) = (pairs[0].2, pairs[1].2);
        crate::test_util::on_thread_counts(|| {
            let threads = rayon::current_num_threads();
            let mut c = vec![0f32; x.len()];
            for (name, vectorised, scalar) in pairs {
                vectorised(&x, &mut c);
                for (&c, &x) in c.iter().zip(&x) {
                    let want = scalar(x);
                    assert!(
                        same(c, want),
                        "{threads} threads: {name}({x}) = {c}, want {want}"
                    );
                }
            }
        });
        for len in 0..=100 {
            let x = &x[10_000..10_000 + len];
            let mut c = vec![f32::NAN; len];
            sigmoid(x, &mut c);
            assert!(
                c.iter().zip(x).all(|(&c, &x)| same(c, sigmoid_scalar(x))),
                "length {len}"
            );
            tanh(x, &mut c);
            assert!(
                c.iter().zip(x).all(|(&c, &x)| same(c, tanh_scalar(x))),
                "length {len}"
            );
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
