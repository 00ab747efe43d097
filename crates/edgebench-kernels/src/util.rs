//! Host-side helpers every kernel shares: the float types the CPU kernels are generic over,
//! output buffers filled in parallel without a zeroing pass, and the NCHW layouts the ops accept.

use candle_core::{bail, DType, Layout, Result, Tensor};
use rayon::prelude::*;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

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
    /// `self * b + c`: fused (one rounding) on aarch64, where FMLA/FMADD are baseline and halve
    /// the arithmetic instructions of a multiply-accumulate loop; a multiply and an add
    /// elsewhere (baseline x86-64 has no FMA, and `mul_add` would be a library call).
    fn mul_add_fast(self, b: Self, c: Self) -> Self;
    /// `f` on this thread's free list of [`Scratch`] vectors of this type; None while the
    /// thread is being torn down.
    fn with_free_scratch<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
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
            #[inline(always)]
            fn mul_add_fast(self, b: Self, c: Self) -> Self {
                #[cfg(target_arch = "aarch64")]
                return <$t>::mul_add(self, b, c);
                #[cfg(not(target_arch = "aarch64"))]
                return self * b + c;
            }
            fn with_free_scratch<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R> {
                thread_local! {
                    static FREE: std::cell::RefCell<Vec<Vec<$t>>> =
                        const { std::cell::RefCell::new(Vec::new()) };
                }
                FREE.try_with(|free| f(&mut free.borrow_mut())).ok()
            }
        }
    };
}
impl_float!(f32);
impl_float!(f64);

/// Bytes of [`Scratch`] vectors a thread keeps for reuse on aarch64: most of the Winograd
/// scratch of GoogLeNet's layers at batch 1 (conv2/3x3's largest buffer, 36 x 192 x 196 floats,
/// is 5.4 MB), little of a board's memory.
#[cfg(target_arch = "aarch64")]
const FREE_SCRATCH_BYTES: usize = 8 << 20;
/// x86-64 keeps none: the kept buffers add to the peak RSS (GoogLeNet's rose 1.3 % at batch 32 on
/// two threads with 8 MiB per thread), and its step time did not change measurably.
#[cfg(not(target_arch = "aarch64"))]
const FREE_SCRATCH_BYTES: usize = 0;

/// A scratch vector of which every element that is read was first written by its user: its
/// values start unspecified (an earlier user's, or zeros). It comes from the thread's free list
/// when one there is long enough, and is kept when dropped, the list holding its largest
/// vectors within [`FREE_SCRATCH_BYTES`]: a zeroed allocation per call would zero about 50 MB
/// per batch-1 GoogLeNet step (aarch64) for buffers that the transforms and products overwrite
/// anyway.
pub(crate) struct Scratch<T: Float> {
    /// Initialised in full; `len` of it in use.
    v: Vec<T>,
    len: usize,
}

impl<T: Float> Scratch<T> {
    pub(crate) fn new(len: usize) -> Scratch<T> {
        let kept = T::with_free_scratch(|free| {
            let fits = (0..free.len())
                .filter(|&i| free[i].len() >= len)
                .min_by_key(|&i| free[i].len());
            fits.map(|i| free.swap_remove(i))
        })
        .flatten();
        let v = kept.unwrap_or_else(|| vec![T::ZERO; len]);
        Scratch { v, len }
    }
}

impl<T: Float> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.v[..self.len]
    }
}

impl<T: Float> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.v[..self.len]
    }
}

impl<T: Float> Drop for Scratch<T> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        let bytes = |v: &Vec<T>| v.len() * std::mem::size_of::<T>();
        if bytes(&v) > FREE_SCRATCH_BYTES {
            return;
        }
        T::with_free_scratch(|free| {
            free.push(v);
            // The smallest go first: the large ones save the most zeroing.
            free.sort_unstable_by_key(|v| std::cmp::Reverse(v.len()));
            while free.iter().map(bytes).sum::<usize>() > FREE_SCRATCH_BYTES {
                free.pop();
            }
        });
    }
}

/// A pointer shared by the tasks of one parallel loop, each writing only its own elements of
/// the buffer (interleaved parts, such as bands of a matrix's columns, that slices cannot
/// express); each use says which.
#[derive(Clone, Copy)]
pub(crate) struct SharedPtr<T>(pub(crate) *mut T);

// SAFETY: the tasks that share it write disjoint elements, and the buffer is read only after
// the loop (or a wait) has seen every write.
unsafe impl<T> Send for SharedPtr<T> {}
// SAFETY: as for Send.
unsafe impl<T> Sync for SharedPtr<T> {}

impl<T> SharedPtr<T> {
    /// The pointer at `offset` elements (a method, so that closures capture the Sync wrapper).
    ///
    /// # Safety
    /// `offset` stays inside the buffer.
    pub(crate) unsafe fn at(&self, offset: usize) -> *mut T {
        // SAFETY: as the caller promises.
        unsafe { self.0.add(offset) }
    }
}

/// Whether T is f32 (the kernels of edgebench's own that exist in f32 only).
pub(crate) fn is_f32<T: Float>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
}

/// `v` as an f32 slice when T is f32.
#[cfg(any(target_arch = "aarch64", target_arch = "x86_64"))]
pub(crate) fn as_f32<T: Float>(v: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (same TypeId): the same slice.
    is_f32::<T>().then(|| unsafe { &*(v as *const [T] as *const [f32]) })
}

/// A mutable slice as f32 when T is f32.
#[cfg(any(target_arch = "aarch64", target_arch = "x86_64"))]
pub(crate) fn as_f32_mut<T: Float>(v: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: T is f32 (same TypeId): the same slice.
    is_f32::<T>().then(|| unsafe { &mut *(v as *mut [T] as *mut [f32]) })
}

/// An output slice as f32 when T is f32.
#[cfg(target_arch = "aarch64")]
pub(crate) fn as_f32_out<T: Float>(
    v: &mut [std::mem::MaybeUninit<T>],
) -> Option<&mut [std::mem::MaybeUninit<f32>]> {
    // SAFETY: T is f32 (same TypeId): the same slice.
    is_f32::<T>().then(|| unsafe {
        &mut *(v as *mut [std::mem::MaybeUninit<T>] as *mut [std::mem::MaybeUninit<f32>])
    })
}

/// `runs[q][j] = src[M·j + q]` (the source's M phases), as far as all of them reach. On
/// aarch64 f32 with M of 2 or 4 goes four groups at a time through NEON's structure load
/// (`ld2`, `ld4`): one load and M stores where the element loop takes a load and a store per
/// element. A last, partial block of four is a whole one ending at the last group (rewriting a
/// few): the rows here are short (7 to 28 groups), so a scalar tail would cost as much as the
/// vectors.
#[inline(always)]
pub(crate) fn deinterleave<T: Float, const M: usize>(src: &[T], runs: [&mut [T]; M]) {
    let len = runs.iter().map(|r| r.len()).fold(src.len() / M, usize::min);
    let (src, mut runs) = (&src[..M * len], runs.map(|r| &mut r[..len]));
    #[cfg(target_arch = "aarch64")]
    if is_f32::<T>() && (M == 2 || M == 4) && len >= 4 {
        let (s, dst) = (
            src.as_ptr().cast::<f32>(),
            runs.map(|r| r.as_mut_ptr().cast()),
        );
        for_blocks_of_four(len, |j| {
            // SAFETY: T is f32; M·j + 4·M <= M·len floats of src, and j + 4 <= len of every
            // run.
            unsafe { neon::deinterleave4(s.add(M * j), &dst, j) };
        });
        return;
    }
    if let [even, odd] = &mut runs[..] {
        return split_pairs(src, even, odd);
    }
    for (j, group) in src.chunks_exact(M).enumerate() {
        for q in 0..M {
            runs[q][j] = group[q];
        }
    }
}

/// `deinterleave`'s element loop for two phases. The halves are separate arguments, so the
/// compiler knows they do not overlap and vectorises the loop (x86-64); as elements of an array
/// they stayed one element at a time.
fn split_pairs<T: Float>(src: &[T], even: &mut [T], odd: &mut [T]) {
    for ((pair, e), o) in src.chunks_exact(2).zip(even).zip(odd) {
        (*e, *o) = (pair[0], pair[1]);
    }
}

/// `out[M·j + q] = runs[q][j]` for every whole group of `out` that the runs reach, the inverse
/// of `deinterleave`, initialising them; returns the groups written. On aarch64 f32 with M of 2
/// or 4 goes four groups at a time through NEON's structure store (`st2`, `st4`), a last
/// partial block as a whole one ending at the last group.
#[inline(always)]
pub(crate) fn interleave<T: Float, const M: usize>(
    runs: [&[T]; M],
    out: &mut [std::mem::MaybeUninit<T>],
) -> usize {
    let len = runs.iter().map(|r| r.len()).fold(out.len() / M, usize::min);
    let runs = runs.map(|r| &r[..len]);
    #[cfg(target_arch = "aarch64")]
    if is_f32::<T>() && (M == 2 || M == 4) && len >= 4 {
        let (src, o) = (
            runs.map(|r| r.as_ptr().cast()),
            out.as_mut_ptr().cast::<f32>(),
        );
        for_blocks_of_four(len, |j| {
            // SAFETY: T is f32; j + 4 <= len of every run, and M·j + 4·M <= M·len elements
            // of out.
            unsafe { neon::interleave4::<M, false>(&src, j, o.add(M * j)) };
        });
        return len;
    }
    for (j, group) in out[..M * len].chunks_exact_mut(M).enumerate() {
        for q in 0..M {
            group[q].write(runs[q][j]);
        }
    }
    len
}

/// `out[M·j + q] += runs[q][j]` for every whole group of `out` that the runs reach, as
/// `interleave` (the last groups past the blocks of four one by one); returns the groups added
/// to.
#[inline(always)]
pub(crate) fn interleave_add<T: Float, const M: usize>(runs: [&[T]; M], out: &mut [T]) -> usize {
    let len = runs.iter().map(|r| r.len()).fold(out.len() / M, usize::min);
    let (runs, out) = (runs.map(|r| &r[..len]), &mut out[..M * len]);
    #[allow(unused_mut)]
    let mut from = 0;
    #[cfg(target_arch = "aarch64")]
    if is_f32::<T>() && (M == 2 || M == 4) {
        from = len - len % 4;
        let (src, o) = (
            runs.map(|r| r.as_ptr().cast()),
            out.as_mut_ptr().cast::<f32>(),
        );
        for j in (0..from).step_by(4) {
            // SAFETY: T is f32; j + 4 <= len of every run, and M·j + 4·M <= M·len floats of
            // out.
            unsafe { neon::interleave4::<M, true>(&src, j, o.add(M * j)) };
        }
    }
    for (j, group) in out.chunks_exact_mut(M).enumerate().skip(from) {
        for q in 0..M {
            group[q] += runs[q][j];
        }
    }
    len
}

/// `f(j)` for the blocks of four at j = 0, 4, 8, .. and, for a `len` (at least 4) that is not a
/// multiple of four, the block ending at `len`. A plain loop: an iterator chaining the last
/// block on cost more instructions than the blocks' own loads and stores.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn for_blocks_of_four(len: usize, mut f: impl FnMut(usize)) {
    let last = len - 4;
    let mut j = 0;
    loop {
        let at = j.min(last);
        f(at);
        if at == last {
            break;
        }
        j += 4;
    }
}

/// NEON structure loads and stores of four groups of 2 or 4 f32 (`deinterleave`,
/// `interleave`).
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    /// `util::sum` for f32: its 16 partial sums as four vectors.
    pub(super) fn sum(v: &[f32]) -> f32 {
        let chunks = v.chunks_exact(16);
        let mut total = chunks.remainder().iter().fold(0.0, |s, &x| s + x);
        // SAFETY: each chunk holds 16 floats, and `lanes` 16; NEON is part of the aarch64
        // baseline.
        unsafe {
            let mut acc = float32x4x4_t(
                vdupq_n_f32(0.0),
                vdupq_n_f32(0.0),
                vdupq_n_f32(0.0),
                vdupq_n_f32(0.0),
            );
            for c in chunks {
                let x = vld1q_f32_x4(c.as_ptr());
                acc.0 = vaddq_f32(acc.0, x.0);
                acc.1 = vaddq_f32(acc.1, x.1);
                acc.2 = vaddq_f32(acc.2, x.2);
                acc.3 = vaddq_f32(acc.3, x.3);
            }
            let mut lanes = [0f32; 16];
            vst1q_f32_x4(lanes.as_mut_ptr(), acc);
            for a in lanes {
                total += a;
            }
        }
        total
    }

    /// `dst[q][j + i] = src[M·i + q]` for i below 4, M = `dst.len()` (2 or 4).
    ///
    /// # Safety
    /// `src` holds 4·M floats, and every `dst[q]` has 4 writable floats from `j`.
    #[inline(always)]
    pub(super) unsafe fn deinterleave4(src: *const f32, dst: &[*mut f32], j: usize) {
        // SAFETY: as the caller promises; NEON is part of the aarch64 baseline.
        unsafe {
            match dst {
                [a, b] => {
                    let v = vld2q_f32(src);
                    vst1q_f32(a.add(j), v.0);
                    vst1q_f32(b.add(j), v.1);
                }
                [a, b, c, d] => {
                    let v = vld4q_f32(src);
                    vst1q_f32(a.add(j), v.0);
                    vst1q_f32(b.add(j), v.1);
                    vst1q_f32(c.add(j), v.2);
                    vst1q_f32(d.add(j), v.3);
                }
                _ => unreachable!("two or four phases"),
            }
        }
    }

    /// `out[M·i + q] (+)= src[q][j + i]` for i below 4, M = `src.len()` (2 or 4).
    ///
    /// # Safety
    /// Every `src[q]` has 4 readable floats from `j`, and `out` holds 4·M floats.
    #[inline(always)]
    pub(super) unsafe fn interleave4<const M: usize, const ADD: bool>(
        src: &[*const f32],
        j: usize,
        out: *mut f32,
    ) {
        // SAFETY: as the caller promises; NEON is part of the aarch64 baseline.
        unsafe {
            let run = |q: usize| vld1q_f32(src[q].add(j));
            match M {
                2 => {
                    let mut v = float32x4x2_t(run(0), run(1));
                    if ADD {
                        let o = vld2q_f32(out);
                        v = float32x4x2_t(vaddq_f32(o.0, v.0), vaddq_f32(o.1, v.1));
                    }
                    vst2q_f32(out, v);
                }
                4 => {
                    let mut v = float32x4x4_t(run(0), run(1), run(2), run(3));
                    if ADD {
                        let o = vld4q_f32(out);
                        v = float32x4x4_t(
                            vaddq_f32(o.0, v.0),
                            vaddq_f32(o.1, v.1),
                            vaddq_f32(o.2, v.2),
                            vaddq_f32(o.3, v.3),
                        );
                    }
                    vst4q_f32(out, v);
                }
                _ => unreachable!("two or four phases"),
            }
        }
    }
}

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
/// The order of the additions is fixed (the remainder's, then the partial sums in lane order),
/// so the NEON path gives the same bits.
pub(crate) fn sum<T: Float>(v: &[T]) -> T {
    // The compiler kept the 16 partial sums in scalar registers on aarch64, 27 instructions
    // per 16 elements: GoogLeNet's batch-8 step ran 46 M instructions in it, 17 M as vectors.
    #[cfg(target_arch = "aarch64")]
    if let Some(v) = as_f32(v) {
        return T::from_f64(f64::from(neon::sum(v)));
    }
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

/// max(v, 0), with NaN -> 0.
#[inline]
pub(crate) fn relu_f<T: Float>(v: T) -> T {
    if v > T::ZERO {
        v
    } else {
        T::ZERO
    }
}

/// The element-wise sum of the tasks' partial gradients, in task order (reproducible for a
/// given thread count), over runs of elements in parallel.
pub(crate) fn sum_partials<T: Float>(partials: Vec<Vec<T>>) -> Vec<T> {
    const RUN: usize = 1 << 14;
    let mut parts = partials.into_iter();
    let mut total = parts.next().expect("at least one task");
    let rest: Vec<Vec<T>> = parts.collect();
    if rest.is_empty() {
        return total;
    }
    total.par_chunks_mut(RUN).enumerate().for_each(|(i, run)| {
        for p in &rest {
            for (t, &v) in run.iter_mut().zip(&p[i * RUN..]) {
                *t += v;
            }
        }
    });
    total
}

/// Runs `body` compiled for AVX2 (8 f32 lanes) and FMA when the CPU has them: the build targets
/// baseline x86-64 (SSE2, 4 lanes, no FMA), and sigmoid and tanh are bound by arithmetic, not
/// memory, at that width. `body` and what it calls are compiled into that copy only where they
/// are inlined into it: a closure with more than a short loop needs `#[inline(always)]`.
/// Results are the same: Rust never fuses a multiply and an add unless asked (`mul_add`).
#[inline(always)]
pub(crate) fn with_widest_vectors(body: impl FnOnce()) {
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

/// [`with_widest_vectors`] with AVX-512 (F, VL) first, for LRN's square roots and divisions:
/// compiled for AVX2 alone, LLVM keeps them 4 lanes wide, for AVX-512 it takes 8.
#[inline(always)]
pub(crate) fn with_avx512_vectors(body: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
    {
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
        unsafe fn avx512(body: impl FnOnce()) {
            body()
        }
        // SAFETY: the CPU has AVX-512 F and VL, AVX2 and FMA, checked just above.
        return unsafe { avx512(body) };
    }
    with_widest_vectors(body)
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

/// Runs an op with CPU and CUDA kernels on a tensor of any device. On another device (Metal) the
/// tensor goes through host memory and back (`to_device` is differentiable, so gradients follow).
pub(crate) fn native_or_host(
    x: &candle_core::Tensor,
    op: impl Fn(&candle_core::Tensor) -> candle_core::Result<candle_core::Tensor>,
) -> candle_core::Result<candle_core::Tensor> {
    if x.device().is_cpu() || x.device().is_cuda() {
        op(x)
    } else {
        op(&x.to_device(&candle_core::Device::Cpu)?)?.to_device(x.device())
    }
}

/// Copies `n` < 64 elements in pieces of 32, 16, 8, 4, 2 and 1 (as n's bits say), each of a
/// size known when compiled, instead of a `memcpy` call, which takes more instructions than
/// so short a copy: the rows of an SGEMM edge tile (1 to NR - 1 floats; GoogLeNet's 49-column
/// products have one such tile per eight rows) and the rows of GoogLeNet's 7 to 56-wide maps
/// (see [`copy_short`]).
///
/// # Safety
/// `src` is readable and `dst` writable for `n` elements, and they do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_few<T>(src: *const T, dst: *mut T, n: usize) {
    #[inline(always)]
    unsafe fn piece<T, const P: usize>(src: *const T, dst: *mut T, n: usize, at: &mut usize) {
        if n & P != 0 {
            // SAFETY: *at + P <= n (the pieces before took n's higher bits), the caller's
            // promise.
            unsafe { std::ptr::copy_nonoverlapping(src.add(*at), dst.add(*at), P) };
            *at += P;
        }
    }
    debug_assert!(n < 64, "copy_few: {n} elements");
    let mut at = 0;
    // SAFETY: as the caller promises.
    unsafe {
        piece::<T, 32>(src, dst, n, &mut at);
        piece::<T, 16>(src, dst, n, &mut at);
        piece::<T, 8>(src, dst, n, &mut at);
        piece::<T, 4>(src, dst, n, &mut at);
        piece::<T, 2>(src, dst, n, &mut at);
        piece::<T, 1>(src, dst, n, &mut at);
    }
}

/// `dst` = `src` (one length), by [`copy_few`] below 64 elements and `memcpy` from there on.
#[inline(always)]
pub(crate) fn copy_short<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "copy_short: lengths differ");
    // SAFETY: both hold src.len() elements (asserted), and a shared and a mutable slice do not
    // overlap.
    unsafe { copy_short_raw(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// [`copy_short`] through pointers (a destination that may be uninitialised).
///
/// # Safety
/// `src` is readable and `dst` writable for `n` elements, and they do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_short_raw<T>(src: *const T, dst: *mut T, n: usize) {
    // SAFETY: as the caller promises.
    unsafe {
        if n < 64 {
            copy_few(src, dst, n);
        } else {
            std::ptr::copy_nonoverlapping(src, dst, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dropped scratch vector is handed out again (same storage, the asked length, its old
    /// values kept), the smallest one that fits is taken, and one larger than the thread's
    /// budget is not kept.
    #[test]
    #[cfg_attr(
        not(target_arch = "aarch64"),
        ignore = "only aarch64 keeps scratch vectors (FREE_SCRATCH_BYTES is 0 elsewhere)"
    )]
    fn scratch_is_reused_within_the_free_list_budget() {
        // A thread of its own: its free list starts empty.
        std::thread::spawn(|| {
            let mut big = Scratch::<f32>::new(1000);
            big.fill(7.0);
            let big_at = big.as_ptr();
            let small = Scratch::<f32>::new(100);
            let small_at = small.as_ptr();
            drop(big);
            drop(small);
            let again = Scratch::<f32>::new(50);
            assert_eq!((again.len(), again.as_ptr()), (50, small_at));
            let again_big = Scratch::<f32>::new(500);
            assert_eq!(again_big.as_ptr(), big_at);
            assert!(again_big.iter().all(|&v| v == 7.0));
            let fresh = Scratch::<f32>::new(2000);
            assert!(fresh.iter().all(|&v| v == 0.0));
            drop((again, again_big, fresh));
            let over = FREE_SCRATCH_BYTES / 4 + 1;
            let huge = Scratch::<f32>::new(over);
            drop(huge);
            let kept = f32::with_free_scratch(|free| free.iter().map(Vec::len).collect::<Vec<_>>());
            assert_eq!(kept, Some(vec![2000, 1000, 100]));
        })
        .join()
        .unwrap();
    }

    /// `sum` adds the remainder past the last 16, then 16 lane-wise partial sums in lane order,
    /// in f32 and f64 (on aarch64 the f32 sum runs on NEON vectors): the same bits as that
    /// order written out, for lengths around 16 and its multiples.
    #[test]
    fn sum_adds_in_its_stated_order() {
        fn check<T: Float + std::fmt::Debug>(v: &[T]) {
            let body = v.len() - v.len() % 16;
            let mut want = v[body..].iter().fold(T::ZERO, |s, &x| s + x);
            for lane in 0..16 {
                let part = v[..body]
                    .iter()
                    .skip(lane)
                    .step_by(16)
                    .fold(T::ZERO, |s, &x| s + x);
                want += part;
            }
            let got = sum(v);
            assert!(got == want, "length {}: {got:?} against {want:?}", v.len());
        }
        for len in [0, 1, 15, 16, 17, 31, 32, 49, 196, 1000] {
            let v: Vec<f64> = (0..len)
                .map(|i| ((i * 7919) % 1013) as f64 / 97.0 - 5.0)
                .collect();
            check(&v);
            check(&v.iter().map(|&x| x as f32).collect::<Vec<f32>>());
        }
    }

    /// Every length around the NEON path's four groups, with runs shorter than the source's
    /// groups; phases of 2, 3 and 4.
    fn check<T: Float + std::fmt::Debug, const M: usize>(of: fn(usize) -> T) {
        for n in 0..41 {
            for short in [0, 1, 3] {
                let src: Vec<T> = (0..n).map(of).collect();
                let len = (n / M).saturating_sub(short);
                let mut runs: [Vec<T>; M] =
                    std::array::from_fn(|q| vec![T::LOWEST; len + if q == 0 { short } else { 0 }]);
                deinterleave(&src, runs.each_mut().map(|r| &mut r[..]));
                for j in 0..len {
                    for q in 0..M {
                        assert_eq!(runs[q][j], src[M * j + q], "M {M}, n {n}, j {j}, q {q}");
                    }
                }
                assert!(
                    runs[0][len..].iter().all(|&v| v == T::LOWEST),
                    "M {M}, n {n}: past the end"
                );
                // Back again, into a row with a partial group at its end that stays as it was.
                let mut out: Vec<T> = (0..M * len + M - 1).map(|i| of(i + 1000)).collect();
                let joined = runs.each_ref().map(|r| &r[..len]);
                // SAFETY: MaybeUninit<T> has T's layout; interleave writes only whole T values.
                let out_uninit =
                    unsafe { &mut *(&mut out[..] as *mut [T] as *mut [std::mem::MaybeUninit<T>]) };
                assert_eq!(interleave::<T, M>(joined, out_uninit), len);
                assert_eq!(out[..M * len], src[..M * len], "M {M}, n {n}");
                let tail: Vec<T> = (M * len..M * len + M - 1).map(|i| of(i + 1000)).collect();
                assert_eq!(out[M * len..], tail[..], "M {M}, n {n}: past the groups");
                assert_eq!(interleave_add::<T, M>(joined, &mut out), len);
                for (i, (&o, &s)) in out.iter().zip(&src).enumerate().take(M * len) {
                    assert_eq!(o, s + s, "M {M}, n {n}, i {i}: added");
                }
            }
        }
    }

    #[test]
    fn deinterleave_and_interleave_split_and_join_phases() {
        check::<f32, 2>(|i| i as f32 * 0.5 - 3.0);
        check::<f32, 3>(|i| i as f32 * 0.5 - 3.0);
        check::<f32, 4>(|i| i as f32 * 0.5 - 3.0);
        check::<f64, 2>(|i| i as f64 * 0.25 + 1.0);
        check::<f64, 4>(|i| i as f64 * 0.25 + 1.0);
    }
}
