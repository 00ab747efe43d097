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
        }
    };
}
impl_float!(f32);
impl_float!(f64);

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
#[cfg(target_arch = "aarch64")]
pub(crate) fn as_f32<T: Float>(v: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (same TypeId): the same slice.
    is_f32::<T>().then(|| unsafe { &*(v as *const [T] as *const [f32]) })
}

/// A mutable slice as f32 when T is f32.
#[cfg(target_arch = "aarch64")]
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

/// `even[j]`, `odd[j]` = `src[2j]`, `src[2j + 1]`, as far as all three reach. On aarch64 f32
/// goes four pairs at a time through NEON's two-way structure load (`ld2`): one load and two
/// stores where the element loop takes a load and a store per element.
pub(crate) fn deinterleave2<T: Float>(src: &[T], even: &mut [T], odd: &mut [T]) {
    let len = (src.len() / 2).min(even.len()).min(odd.len());
    let (src, even, odd) = (&src[..2 * len], &mut even[..len], &mut odd[..len]);
    #[allow(unused_mut)]
    let mut from = 0;
    #[cfg(target_arch = "aarch64")]
    if let (Some(s), Some(e), Some(o)) = (as_f32(src), as_f32_mut(even), as_f32_mut(odd)) {
        use std::arch::aarch64::*;
        from = len - len % 4;
        for j in (0..from).step_by(4) {
            // SAFETY: 2j + 8 <= 2·len floats of s, and j + 4 <= len of e and o; NEON is part
            // of the aarch64 baseline.
            unsafe {
                let v = vld2q_f32(s.as_ptr().add(2 * j));
                vst1q_f32(e.as_mut_ptr().add(j), v.0);
                vst1q_f32(o.as_mut_ptr().add(j), v.1);
            }
        }
    }
    for ((pair, e), o) in src[2 * from..]
        .chunks_exact(2)
        .zip(&mut even[from..])
        .zip(&mut odd[from..])
    {
        (*e, *o) = (pair[0], pair[1]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the NEON path's four pairs, with runs shorter than half the source.
    fn check<T: Float + std::fmt::Debug>(of: fn(usize) -> T) {
        for n in 0..21 {
            for short in [0, 1, 3] {
                let src: Vec<T> = (0..n).map(of).collect();
                let len = (n / 2).saturating_sub(short);
                let (mut even, mut odd) = (vec![T::LOWEST; len + short], vec![T::LOWEST; len]);
                deinterleave2(&src, &mut even, &mut odd);
                for j in 0..len {
                    assert_eq!(
                        (even[j], odd[j]),
                        (src[2 * j], src[2 * j + 1]),
                        "n {n}, j {j}"
                    );
                }
                assert!(
                    even[len..].iter().all(|&v| v == T::LOWEST),
                    "n {n}: past the end"
                );
            }
        }
    }

    #[test]
    fn deinterleave2_splits_even_and_odd_elements() {
        check::<f32>(|i| i as f32 * 0.5 - 3.0);
        check::<f64>(|i| i as f64 * 0.25 + 1.0);
    }
}
