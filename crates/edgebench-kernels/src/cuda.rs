//! CUDA kernels for the ops candle 0.11 lacks (Caffe pooling, LRN), so a GPU run keeps its
//! activations on the GPU instead of copying each one to host memory and back. The source is
//! compiled once per process with NVRTC (which candle's CUDA build links anyway), so there is no
//! build-time nvcc step beyond candle's own. f32 only: training runs in f32; the f64 gradient
//! checks run on the CPU kernels.
//!
//! Semantics match the CPU kernels: max pooling takes the first strict maximum in row-major order
//! from -FLT_MAX, average pooling divides by Caffe's padded window size, LRN is Caffe's
//! ACROSS_CHANNELS formula. The pooling input gradients add with atomics (overlapping windows), so
//! their last bits may differ from run to run, as PyTorch's do.

use super::conv::Geom;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::WrapErr;
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result};
use std::sync::OnceLock;

const MODULE: &str = "edgebench_ops";

const SOURCE: &str = r#"
#define EB_LOWEST (-3.402823466e+38f)

struct Win { int start, end, avg; };

// One axis of a pooling window, as Pool2d::windows on the CPU.
__device__ Win win(int o, int n, int k, int s, int pad) {
    int st = o * s - pad;
    Win r;
    r.start = max(st, 0);
    r.end = max(min(st + k, n), r.start);
    r.avg = max(min(st + k, n + pad) - st, 0);
    return r;
}

extern "C" __global__ void eb_pool_fwd(const float* x, float* y, long long total, int h, int w,
                                       int oh, int ow, int k, int s, int pad, int is_max) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        int ox = (int)(i % ow);
        long long t = i / ow;
        int oy = (int)(t % oh);
        const float* xp = x + (t / oh) * (long long)h * w;
        Win wy = win(oy, h, k, s, pad), wx = win(ox, w, k, s, pad);
        if (is_max) {
            float m = EB_LOWEST;
            for (int yy = wy.start; yy < wy.end; ++yy)
                for (int xx = wx.start; xx < wx.end; ++xx) {
                    float e = xp[yy * w + xx];
                    if (e > m) m = e;
                }
            y[i] = m;
        } else {
            float sum = 0.0f;
            for (int yy = wy.start; yy < wy.end; ++yy)
                for (int xx = wx.start; xx < wx.end; ++xx) sum += xp[yy * w + xx];
            int size = wy.avg * wx.avg;
            y[i] = size == 0 ? 0.0f : sum / (float)size;
        }
    }
}

// One thread per output; dx must be zeroed. Max: the gradient goes to the first element equal to
// the output (Caffe's argmax), none when the window pooled nothing.
extern "C" __global__ void eb_pool_bwd(const float* x, const float* y, const float* dy, float* dx,
                                       long long total, int h, int w, int oh, int ow, int k,
                                       int s, int pad, int is_max) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        int ox = (int)(i % ow);
        long long t = i / ow;
        int oy = (int)(t % oh);
        long long plane = (t / oh) * (long long)h * w;
        Win wy = win(oy, h, k, s, pad), wx = win(ox, w, k, s, pad);
        float g = dy[i];
        if (is_max) {
            float m = y[i];
            if (!(m > EB_LOWEST)) continue;
            int arg = -1;
            for (int yy = wy.start; yy < wy.end && arg < 0; ++yy)
                for (int xx = wx.start; xx < wx.end; ++xx)
                    if (x[plane + yy * w + xx] == m) { arg = yy * w + xx; break; }
            if (arg >= 0) atomicAdd(dx + plane + arg, g);
        } else {
            int size = wy.avg * wx.avg;
            if (size == 0) continue;
            g /= (float)size;
            for (int yy = wy.start; yy < wy.end; ++yy)
                for (int xx = wx.start; xx < wx.end; ++xx) atomicAdd(dx + plane + yy * w + xx, g);
        }
    }
}

// k + alpha/size * sum of x^2 over channels [ch - pre, ch + post] of one sample at one pixel.
__device__ float lrn_scale(const float* x, long long base, int ch, int c, long long hw, int pre,
                           int post, float k, float ratio) {
    float acc = 0.0f;
    for (int cc = max(ch - pre, 0); cc <= min(ch + post, c - 1); ++cc) {
        float v = x[base + cc * hw];
        acc += v * v;
    }
    return k + ratio * acc;
}

extern "C" __global__ void eb_lrn_fwd(const float* x, float* y, long long total, int c,
                                      long long hw, int pre, int post, float k, float ratio,
                                      float beta) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        long long t = i / hw;
        int ch = (int)(t % c);
        long long base = (t / c) * c * hw + i % hw;
        y[i] = x[i] * powf(lrn_scale(x, base, ch, c, hw, pre, post, k, ratio), -beta);
    }
}

// Caffe: dx_c = dy_c * scale_c^-beta - 2 alpha beta / size * x_c * sum over the channels c'
// whose window holds c (c' in [c - post, c + pre]) of dy_c' * y_c' / scale_c'.
extern "C" __global__ void eb_lrn_bwd(const float* x, const float* y, const float* dy, float* dx,
                                      long long total, int c, long long hw, int pre, int post,
                                      float k, float ratio, float beta, float cache_ratio) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        long long t = i / hw;
        int ch = (int)(t % c);
        long long base = (t / c) * c * hw + i % hw;
        float sum = 0.0f;
        for (int cc = max(ch - post, 0); cc <= min(ch + pre, c - 1); ++cc) {
            long long j = base + cc * hw;
            sum += dy[j] * y[j] / lrn_scale(x, base, cc, c, hw, pre, post, k, ratio);
        }
        float scale = lrn_scale(x, base, ch, c, hw, pre, post, k, ratio);
        dx[i] = dy[i] * powf(scale, -beta) - cache_ratio * x[i] * sum;
    }
}

// cols (C*KH*KW, N, HO*WO) from x (N, C, H, W): one thread per column entry, coalesced writes.
extern "C" __global__ void eb_im2col(const float* x, float* cols, long long total, int n, int c,
                                     int h, int w, int kh, int kw, int ho, int wo, int s,
                                     int pad) {
    long long p = (long long)ho * wo;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        int pos = (int)(i % p);
        long long t = i / p;
        int img = (int)(t % n);
        int row = (int)(t / n);
        int kx = row % kw, ky = (row / kw) % kh, ch = row / (kw * kh);
        int y = (pos / wo) * s - pad + ky, xx = (pos % wo) * s - pad + kx;
        cols[i] = (y >= 0 && y < h && xx >= 0 && xx < w)
                      ? x[(((long long)img * c + ch) * h + y) * w + xx] : 0.0f;
    }
}

// The adjoint: one thread per input element gathers every column entry copied from it (no
// atomics, so the sum's order is fixed).
extern "C" __global__ void eb_col2im(const float* cols, float* x, long long total, int n, int c,
                                     int h, int w, int kh, int kw, int ho, int wo, int s,
                                     int pad) {
    long long p = (long long)ho * wo;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        int xx = (int)(i % w);
        long long t = i / w;
        int y = (int)(t % h);
        t /= h;
        int ch = (int)(t % c);
        int img = (int)(t / c);
        float sum = 0.0f;
        for (int ky = 0; ky < kh; ++ky) {
            int oy = y + pad - ky;
            if (oy < 0 || oy % s != 0 || oy / s >= ho) continue;
            oy /= s;
            for (int kx = 0; kx < kw; ++kx) {
                int ox = xx + pad - kx;
                if (ox < 0 || ox % s != 0 || ox / s >= wo) continue;
                ox /= s;
                long long row = ((long long)ch * kh + ky) * kw + kx;
                sum += cols[(row * n + img) * p + (long long)oy * wo + ox];
            }
        }
        x[i] = sum;
    }
}

// y[i] += b[channel] then ReLU, in place: the convolution's epilogue in one pass over y.
extern "C" __global__ void eb_bias_act(float* y, const float* b, long long total, int c,
                                       long long hw, int relu) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        float v = y[i] + b[(i / hw) % c];
        y[i] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

// SGD with momentum (Caffe's update: v = momentum v + rate (g + decay w); w -= v) over up to
// EB_SGD_MANY parameters in one launch (blockIdx.y picks one): at batch 1 a launch per
// parameter is a large part of the host's time per step.
#define EB_SGD_MANY 32
struct EbSgdTable {
    float* w[EB_SGD_MANY];
    const float* g[EB_SGD_MANY];
    float* v[EB_SGD_MANY];
    long long n[EB_SGD_MANY];
    float rate[EB_SGD_MANY];
    float decay[EB_SGD_MANY];
    int count;
};

extern "C" __global__ void eb_sgd_momentum_many(EbSgdTable t, float momentum) {
    int k = blockIdx.y;
    if (k >= t.count) return;
    float* w = t.w[k];
    const float* g = t.g[k];
    float* v = t.v[k];
    float rate = t.rate[k], decay = t.decay[k];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < t.n[k];
         i += (long long)blockDim.x * gridDim.x) {
        float u = momentum * v[i] + rate * (g[i] + decay * w[i]);
        v[i] = u;
        w[i] -= u;
    }
}

// Plain gradient descent in place: w -= rate g.
extern "C" __global__ void eb_descend(float* w, const float* g, long long total, float rate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        w[i] -= rate * g[i];
    }
}

// dropout::mix: splitmix64's finaliser of seed + (i+1)·golden ratio, top 32 bits.
__device__ unsigned int eb_mix(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + (i + 1ull) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (unsigned int)((z ^ (z >> 31)) >> 32);
}

extern "C" __global__ void eb_dropout(const float* x, float* y, long long total,
                                      unsigned long long seed, unsigned int threshold,
                                      float scale) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x)
        y[i] = eb_mix(seed, (unsigned long long)i) < threshold ? x[i] * scale : 0.0f;
}

// dy where y > 0, else 0: the gradient through a fused ReLU.
extern "C" __global__ void eb_relu_mask(const float* dy, const float* y, float* out,
                                        long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x)
        out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// db[ch] = sum of dy over images and positions: one block per channel, a fixed summation order
// (per-thread strides, then a tree), so the result does not change between runs.
extern "C" __global__ void eb_bias_grad(const float* dy, float* db, int n, int c, long long hw) {
    __shared__ float part[256];
    int ch = blockIdx.x;
    long long per = (long long)n * hw;
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < per; j += blockDim.x)
        acc += dy[((j / hw) * c + ch) * hw + j % hw];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[ch] = part[0];
}
"#;

/// The PTX of `SOURCE`, compiled on first use (NVRTC errors are kept and repeated).
fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    match PTX.get_or_init(|| {
        nvrtc::compile_ptx(SOURCE)
            .map(|p| p.to_src())
            .map_err(|e| format!("{e:?}"))
    }) {
        Ok(p) => Ok(p),
        Err(e) => bail!("compiling edgebench's CUDA kernels with NVRTC failed: {e}"),
    }
}

/// An f32 NCHW input whose images are each contiguous (`image_stride`), from the first image's
/// start to the last one's end, and the distance between images.
#[cfg(feature = "cudnn")]
pub(crate) fn images_input<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    op: &str,
) -> Result<(CudaView<'a, f32>, usize)> {
    let (&[n, c, h, w], Some(stride)) = (l.dims(), super::image_stride(l)) else {
        bail!(
            "{op}: expects NCHW images that are each contiguous, got shape {:?} strides {:?}",
            l.dims(),
            l.stride()
        );
    };
    let len = super::images_len(n, c * h * w, stride);
    let start = l.start_offset();
    match s.dtype() {
        candle_core::DType::F32 => Ok((
            s.as_cuda_slice::<f32>()?.slice(start..start + len),
            stride.max(1),
        )),
        dt => bail!("{op}: the CUDA kernel supports f32 only, got {dt:?}"),
    }
}

/// A contiguous f32 input of an op, checked.
pub(crate) fn input<'a>(s: &'a CudaStorage, l: &Layout, op: &str) -> Result<CudaView<'a, f32>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!("{op}: the CUDA kernel needs a contiguous input");
    };
    match s.dtype() {
        candle_core::DType::F32 => Ok(s.as_cuda_slice::<f32>()?.slice(a..b)),
        dt => bail!("{op}: the CUDA kernel supports f32 only, got {dt:?}"),
    }
}

/// The kernel `name`, loaded once per device.
fn kernel(dev: &CudaDevice, name: &str) -> Result<CudaFunction> {
    Ok(dev
        .get_or_load_custom_func(name, MODULE, ptx()?)?
        .into_cuda_function())
}

/// A launch over `total` items: enough blocks to fill the GPU, the grid-stride loop in each
/// kernel covers the rest.
fn config(total: usize) -> LaunchConfig {
    const THREADS: u32 = 256;
    LaunchConfig {
        grid_dim: (
            total.div_ceil(THREADS as usize).clamp(1, 65_535) as u32,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Pooling geometry, as `Pool2d` computes it on the CPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolGeom {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
    pub is_max: bool,
}

fn i32_of(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        candle_core::Error::Msg(format!("{what} {v} is too large for the CUDA kernels"))
    })
}

impl PoolGeom {
    fn out_len(&self) -> usize {
        self.planes * self.oh * self.ow
    }

    /// The pooling kernels' arguments after the element count, in order.
    fn args(&self) -> Result<[i32; 8]> {
        let v = [
            self.h,
            self.w,
            self.oh,
            self.ow,
            self.kernel,
            self.stride,
            self.pad,
            usize::from(self.is_max),
        ];
        let mut out = [0i32; 8];
        for (o, &v) in out.iter_mut().zip(&v) {
            *o = i32_of(v, "pooling size")?;
        }
        Ok(out)
    }
}

/// Runs `name` (eb_pool_fwd or eb_pool_bwd) over the pooling output: the buffers first, then
/// the output element count and the geometry.
fn pool_kernel(
    dev: &CudaDevice,
    name: &str,
    buffers: &[&CudaView<'_, f32>],
    out: &CudaSlice<f32>,
    g: PoolGeom,
) -> Result<()> {
    let total = g.out_len();
    let (n, a) = (total as i64, g.args()?);
    let func = kernel(dev, name)?;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    for buffer in buffers {
        b.arg(*buffer);
    }
    b.arg(out).arg(&n);
    for v in &a {
        b.arg(v);
    }
    // SAFETY: the arguments match the kernels' signatures in SOURCE; x (and dx) hold
    // planes*h*w elements, y (and dy) planes*oh*ow (the callers' checked shapes).
    unsafe { b.launch(config(total)) }.w()?;
    Ok(())
}

pub(crate) fn pool_fwd(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    g: PoolGeom,
) -> Result<CudaSlice<f32>> {
    // SAFETY: every element is written by the kernel.
    let y = unsafe { dev.alloc::<f32>(g.out_len())? };
    pool_kernel(dev, "eb_pool_fwd", &[x], &y, g)?;
    Ok(y)
}

/// The kernel adds into dx, so it starts zeroed.
pub(crate) fn pool_bwd(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    y: &CudaView<'_, f32>,
    dy: &CudaView<'_, f32>,
    g: PoolGeom,
) -> Result<CudaSlice<f32>> {
    let dx = dev.alloc_zeros::<f32>(g.planes * g.h * g.w)?;
    pool_kernel(dev, "eb_pool_bwd", &[x, y, dy], &dx, g)?;
    Ok(dx)
}

/// LRN parameters in the kernels' terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LrnGeom {
    pub len: usize,
    pub c: usize,
    pub hw: usize,
    pub pre: usize,
    pub post: usize,
    pub k: f32,
    pub ratio: f32,
    pub beta: f32,
    pub cache_ratio: f32,
}

pub(crate) fn lrn_fwd(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    g: LrnGeom,
) -> Result<CudaSlice<f32>> {
    // SAFETY: every element is written by the kernel.
    let y = unsafe { dev.alloc::<f32>(g.len)? };
    let (n, c, hw) = (g.len as i64, i32_of(g.c, "channels")?, g.hw as i64);
    let (pre, post) = (g.pre as i32, g.post as i32);
    let func = kernel(dev, "eb_lrn_fwd")?;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(x)
        .arg(&y)
        .arg(&n)
        .arg(&c)
        .arg(&hw)
        .arg(&pre)
        .arg(&post);
    b.arg(&g.k).arg(&g.ratio).arg(&g.beta);
    // SAFETY: the arguments match eb_lrn_fwd's signature; x and y hold len elements.
    unsafe { b.launch(config(g.len)) }.w()?;
    Ok(y)
}

pub(crate) fn lrn_bwd(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    y: &CudaView<'_, f32>,
    dy: &CudaView<'_, f32>,
    g: LrnGeom,
) -> Result<CudaSlice<f32>> {
    // SAFETY: every element is written by the kernel.
    let dx = unsafe { dev.alloc::<f32>(g.len)? };
    let (n, c, hw) = (g.len as i64, i32_of(g.c, "channels")?, g.hw as i64);
    let (pre, post) = (g.pre as i32, g.post as i32);
    let func = kernel(dev, "eb_lrn_bwd")?;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(x)
        .arg(y)
        .arg(dy)
        .arg(&dx)
        .arg(&n)
        .arg(&c)
        .arg(&hw)
        .arg(&pre)
        .arg(&post);
    b.arg(&g.k).arg(&g.ratio).arg(&g.beta).arg(&g.cache_ratio);
    // SAFETY: the arguments match eb_lrn_bwd's signature; every buffer holds len elements.
    unsafe { b.launch(config(g.len)) }.w()?;
    Ok(dx)
}

/// The im2col/col2im kernels' integer arguments after the element count, in order.
fn col_args(g: &Geom) -> Result<[i32; 10]> {
    let mut out = [0i32; 10];
    let v = [g.n, g.c, g.h, g.w, g.kh, g.kw, g.ho, g.wo, g.stride, g.pad];
    for (o, &v) in out.iter_mut().zip(&v) {
        *o = i32_of(v, "convolution size")?;
    }
    Ok(out)
}

/// im2col (x -> cols) or, `adjoint`, col2im (cols -> x), into `dst_len` elements (the caller's
/// checked output shape).
pub(crate) fn cols(
    dev: &CudaDevice,
    src: &CudaView<'_, f32>,
    g: &Geom,
    adjoint: bool,
    dst_len: usize,
) -> Result<CudaSlice<f32>> {
    let name = if adjoint { "eb_col2im" } else { "eb_im2col" };
    // SAFETY: every element is written by the kernel.
    let dst = unsafe { dev.alloc::<f32>(dst_len)? };
    let a = col_args(g)?;
    let total = dst_len as i64;
    let func = kernel(dev, name)?;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(src).arg(&dst).arg(&total);
    for v in &a {
        b.arg(v);
    }
    // SAFETY: the arguments match eb_im2col's / eb_col2im's signature (same for both); src and
    // dst hold the input and cols element counts of `g` (checked shapes in the caller).
    unsafe { b.launch(config(dst_len)) }.w()?;
    Ok(dst)
}

/// The convolution epilogue: `y += b` per channel, then ReLU if `relu`, in place.
pub(crate) fn bias_act(
    dev: &CudaDevice,
    y: &mut CudaSlice<f32>,
    b: &CudaView<'_, f32>,
    c: usize,
    hw: usize,
    relu: bool,
) -> Result<()> {
    let total = y.len();
    let (n, c, hw, relu) = (
        total as i64,
        i32_of(c, "channels")?,
        hw as i64,
        i32::from(relu),
    );
    let func = kernel(dev, "eb_bias_act")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(y).arg(b).arg(&n).arg(&c).arg(&hw).arg(&relu);
    // SAFETY: the arguments match eb_bias_act's signature; y holds total = N·c·hw elements and
    // b holds c (the caller's checked geometry).
    unsafe { l.launch(config(total)) }.w()?;
    Ok(())
}

/// `x` through the dropout mask of `d` (`crate::dropout`).
pub(crate) fn dropout(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    d: &crate::dropout::Dropout,
) -> Result<CudaSlice<f32>> {
    let total = x.len();
    // SAFETY: every element is written by the kernel.
    let y = unsafe { dev.alloc::<f32>(total)? };
    let n = total as i64;
    let func = kernel(dev, "eb_dropout")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(x)
        .arg(&y)
        .arg(&n)
        .arg(&d.seed)
        .arg(&d.threshold)
        .arg(&d.scale);
    // SAFETY: the arguments match eb_dropout's signature; x and y hold `total` elements.
    unsafe { l.launch(config(total)) }.w()?;
    Ok(y)
}

/// `dy` where `y > 0`, else 0.
pub(crate) fn relu_mask(
    dev: &CudaDevice,
    dy: &CudaView<'_, f32>,
    y: &CudaView<'_, f32>,
) -> Result<CudaSlice<f32>> {
    let total = dy.len();
    if y.len() != total {
        bail!("relu-mask: {total} gradients for {} outputs", y.len());
    }
    // SAFETY: every element is written by the kernel.
    let out = unsafe { dev.alloc::<f32>(total)? };
    let n = total as i64;
    let func = kernel(dev, "eb_relu_mask")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(dy).arg(y).arg(&out).arg(&n);
    // SAFETY: the arguments match eb_relu_mask's signature; all three hold `total` elements.
    unsafe { l.launch(config(total)) }.w()?;
    Ok(out)
}

/// `db[ch]` = the sum of `dy` (N, c, hw) over images and positions, into `db` (c elements).
pub(crate) fn bias_grad(
    dev: &CudaDevice,
    dy: &CudaView<'_, f32>,
    db: &mut CudaViewMut<'_, f32>,
    (n, c, hw): (usize, usize, usize),
) -> Result<()> {
    if dy.len() != n * c * hw {
        bail!("bias gradient: {} gradients for {n}x{c}x{hw}", dy.len());
    }
    let (ni, ci, hwi) = (i32_of(n, "batch")?, i32_of(c, "channels")?, hw as i64);
    let func = kernel(dev, "eb_bias_grad")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(dy).arg(db).arg(&ni).arg(&ci).arg(&hwi);
    let cfg = LaunchConfig {
        grid_dim: (ci.max(1) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match eb_bias_grad's signature; dy holds n·c·hw elements (checked)
    // and db at least c (the caller's slice of the output); one block per channel, 256 threads
    // as the kernel's shared array assumes.
    unsafe { l.launch(cfg) }.w()?;
    Ok(())
}

/// Parameters per launch of eb_sgd_momentum_many (its EB_SGD_MANY).
const SGD_MANY: usize = 32;

/// eb_sgd_momentum_many's argument, laid out as its C struct (raw device addresses).
#[repr(C)]
#[derive(Clone, Copy)]
struct SgdTable {
    w: [u64; SGD_MANY],
    g: [u64; SGD_MANY],
    v: [u64; SGD_MANY],
    n: [i64; SGD_MANY],
    rate: [f32; SGD_MANY],
    decay: [f32; SGD_MANY],
    count: i32,
}

// SAFETY: plain data with the kernel's C layout (repr(C), same field order and types).
unsafe impl candle_core::cuda_backend::cudarc::driver::DeviceRepr for SgdTable {}

/// The device address of a contiguous f32 CUDA tensor's first element.
fn address(t: &candle_core::Tensor, what: &str) -> Result<u64> {
    use candle_core::cuda_backend::cudarc::driver::DevicePtr;
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cuda(s) = &*storage else {
        bail!("sgd-momentum: the {what} is not on a CUDA device");
    };
    let Some((start, _)) = layout.contiguous_offsets() else {
        bail!("sgd-momentum: the {what} must be contiguous");
    };
    let slice = s.as_cuda_slice::<f32>()?;
    let (ptr, _) = slice.device_ptr(slice.stream());
    Ok(ptr + (start * std::mem::size_of::<f32>()) as u64)
}

/// `crate::sgd_momentum_all` on CUDA: one launch per `SGD_MANY` parameters.
pub(crate) fn sgd_momentum_all(updates: &[crate::SgdUpdate], momentum: f32) -> Result<()> {
    let Some(first) = updates.first() else {
        return Ok(());
    };
    let candle_core::Device::Cuda(dev) = first.w.device() else {
        bail!(
            "sgd-momentum: CUDA tensors only, got {:?}",
            first.w.device()
        );
    };
    let func = kernel(dev, "eb_sgd_momentum_many")?;
    let stream = dev.cuda_stream();
    // Largest first, so each launch groups parameters of like size: every parameter of a launch
    // gets the grid of its largest, and the blocks past a small one's end do nothing.
    let mut by_size: Vec<&crate::SgdUpdate> = updates.iter().collect();
    by_size.sort_by_key(|u| std::cmp::Reverse(u.w.elem_count()));
    for chunk in by_size.chunks(SGD_MANY) {
        let mut t = SgdTable {
            w: [0; SGD_MANY],
            g: [0; SGD_MANY],
            v: [0; SGD_MANY],
            n: [0; SGD_MANY],
            rate: [0.0; SGD_MANY],
            decay: [0.0; SGD_MANY],
            count: chunk.len() as i32,
        };
        let mut largest = 1;
        for (k, u) in chunk.iter().enumerate() {
            let n = u.w.elem_count();
            for (what, x) in [("weight", u.w), ("gradient", u.g), ("momentum", u.v)] {
                if x.elem_count() != n || x.dtype() != candle_core::DType::F32 {
                    bail!(
                        "sgd-momentum: the {what} must be f32 with the weight's {n} elements, got {:?} {:?}",
                        x.dtype(),
                        x.shape()
                    );
                }
                if !x.device().same_device(first.w.device()) {
                    bail!("sgd-momentum: the {what} is on another device");
                }
            }
            t.w[k] = address(u.w, "weight")?;
            t.g[k] = address(u.g, "gradient")?;
            t.v[k] = address(u.v, "momentum")?;
            t.n[k] = n as i64;
            t.rate[k] = u.rate;
            t.decay[k] = u.decay;
            largest = largest.max(n);
        }
        let mut cfg = config(largest);
        // Enough blocks per parameter to fill a large GPU (grid-stride loops cover the rest);
        // `config`'s 65535 per parameter would be mostly idle blocks times 32 parameters.
        cfg.grid_dim.0 = cfg.grid_dim.0.min(1024);
        cfg.grid_dim.1 = chunk.len() as u32;
        let mut l = stream.launch_builder(&func);
        l.arg(&t).arg(&momentum);
        // SAFETY: the table matches eb_sgd_momentum_many's struct; each address points at a live
        // f32 buffer of at least n[k] elements on this device and stream (checked above; the
        // caller holds the tensors, and freeing them later is ordered after this launch on the
        // stream). The kernel writes w and v through addresses taken from shared references:
        // w is a parameter only the optimiser updates, v the optimiser's own buffer (the
        // contract in `crate::sgd_momentum_all`).
        unsafe { l.launch(cfg) }.w()?;
    }
    Ok(())
}

/// `w -= rate·g` in place (`crate::descend`; shapes checked by the caller).
pub(crate) fn descend(
    w: &mut CudaStorage,
    lw: &Layout,
    g: &CudaStorage,
    lg: &Layout,
    rate: f32,
) -> Result<()> {
    let g = input(g, lg, "descend")?;
    let (a, b) = crate::descend::contiguous_range("weight", lw)?;
    let dev = w.device().clone();
    let mut w = w.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
    let total = b - a;
    let len = total as i64;
    let func = kernel(&dev, "eb_descend")?;
    let stream = dev.cuda_stream();
    let mut l = stream.launch_builder(&func);
    l.arg(&mut w).arg(&g).arg(&len).arg(&rate);
    // SAFETY: the arguments match eb_descend's signature; w and g each hold `total` elements
    // (one shape, both contiguous).
    unsafe { l.launch(config(total)) }.w()?;
    Ok(())
}

/// Wraps a kernel's output as candle storage on `dev`.
pub(crate) fn storage(slice: CudaSlice<f32>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, dev.clone())
}

/// Run with `cargo test --features cuda -p edgebench-kernels cuda::` on a machine with an NVIDIA GPU (a build
/// without a GPU skips them with a message: CI has none).
#[cfg(test)]
mod tests {
    use crate::test_util::{to_vec, Rng};
    use crate::{lrn, pool2d, Lrn, Pool2d, PoolKind};
    use candle_core::{DType, Device, Result, Tensor, Var};

    /// The GPU, and a guard that runs the GPU tests one at a time (one of them switches TF32,
    /// which is process-wide).
    /// The GPU, one test at a time. A build with the `cuda` feature is for a machine with a
    /// GPU: without one these tests fail rather than pass untested.
    fn gpu() -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        match Device::new_cuda(0) {
            Ok(d) => Some((d, guard)),
            Err(e) => panic!(
                "no CUDA device ({e}): run the CUDA tests on a machine with a GPU, or build \
                 without the cuda feature"
            ),
        }
    }

    /// Output and input gradient of loss = sum(f(x) * r) on `dev`, in f32.
    fn run(
        dev: &Device,
        x: &[f32],
        dims: (usize, usize, usize, usize),
        f: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> (Vec<f64>, Vec<f64>) {
        let var = Var::from_tensor(&Tensor::from_vec(x.to_vec(), dims, dev).unwrap()).unwrap();
        let y = f(var.as_tensor()).unwrap();
        let r: Vec<f32> = Rng::new(7)
            .vec(y.elem_count())
            .iter()
            .map(|&v| v as f32)
            .collect();
        let r = Tensor::from_vec(r, y.shape().clone(), dev).unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let dx = grads.get(var.as_tensor()).expect("input has a gradient");
        let host = |t: &Tensor| {
            to_vec(
                &t.to_device(&Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap(),
            )
        };
        (host(&y), host(dx))
    }

    fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{i}]: cuda {x} vs cpu {y}"
            );
        }
    }

    #[test]
    fn cuda_pooling_matches_cpu() {
        let Some((dev, _serial)) = gpu() else { return };
        // Every pooling of BVLC AlexNet/GoogLeNet, plus ceil mode with a partial last window.
        let cases = [
            (PoolKind::Max, 3, 2, 0, (2, 3, 13, 13)),
            (PoolKind::Max, 3, 2, 0, (2, 3, 14, 15)),
            (PoolKind::Max, 3, 1, 1, (2, 4, 7, 7)),
            (PoolKind::Avg, 5, 3, 0, (2, 3, 14, 14)),
            (PoolKind::Avg, 7, 1, 0, (2, 3, 7, 7)),
            (PoolKind::Avg, 3, 2, 1, (1, 2, 8, 9)),
        ];
        for (i, (kind, kernel, stride, pad, dims)) in cases.into_iter().enumerate() {
            let p = Pool2d {
                kind,
                kernel,
                stride,
                pad,
            };
            let n = dims.0 * dims.1 * dims.2 * dims.3;
            // Distinct values for max pooling (one argmax), some ties through ReLU-like zeros.
            let x: Vec<f32> = Rng::new(i as u64)
                .distinct(n)
                .iter()
                .map(|&v| v.max(-0.05) as f32)
                .collect();
            let (yc, gc) = run(&Device::Cpu, &x, dims, |t| pool2d(t, p));
            let (yg, gg) = run(&dev, &x, dims, |t| pool2d(t, p));
            assert_close(&format!("{p:?} forward"), &yg, &yc, 1e-6);
            assert_close(&format!("{p:?} input gradient"), &gg, &gc, 1e-5);
        }
    }

    #[test]
    fn cuda_lrn_matches_cpu() {
        let Some((dev, _serial)) = gpu() else { return };
        let p = Lrn {
            size: 5,
            alpha: 1e-4,
            beta: 0.75,
            k: 1.0,
        };
        // Large inputs so alpha/size * sum(x^2) matters; 3 and 7 channels cover clipped windows.
        for (i, dims) in [(2, 7, 5, 6), (1, 3, 4, 4), (2, 16, 3, 3)]
            .into_iter()
            .enumerate()
        {
            let n = dims.0 * dims.1 * dims.2 * dims.3;
            let x: Vec<f32> = Rng::new(10 + i as u64)
                .vec(n)
                .iter()
                .map(|&v| (v * 60.0) as f32)
                .collect();
            let (yc, gc) = run(&Device::Cpu, &x, dims, |t| lrn(t, p));
            let (yg, gg) = run(&dev, &x, dims, |t| lrn(t, p));
            assert_close("lrn forward", &yg, &yc, 1e-5);
            assert_close("lrn input gradient", &gg, &gc, 1e-4);
        }
    }

    #[test]
    fn cuda_im2col_conv_matches_cpu() {
        let Some((dev, _serial)) = gpu() else { return };
        use crate::{conv2d_im2col, Conv2d};
        // Strided 11x11, grouped padded 5x5, 7x7 stride 2 with a remainder, 1x1.
        let cases = [
            ((2, 3, 23, 23), (4, 3, 11, 11), 4, 0, 1),
            ((2, 4, 9, 9), (6, 2, 5, 5), 1, 2, 2),
            ((1, 3, 15, 14), (5, 3, 7, 7), 2, 3, 1),
            ((3, 5, 6, 7), (4, 5, 1, 1), 1, 0, 1),
        ];
        for (i, (xd, wd, stride, pad, groups)) in cases.into_iter().enumerate() {
            let p = Conv2d {
                stride,
                pad,
                groups,
                relu: true,
            };
            let f32s = |seed: u64, n: usize| -> Vec<f32> {
                Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
            };
            let w = Tensor::from_vec(
                f32s(20 + i as u64, wd.0 * wd.1 * wd.2 * wd.3),
                wd,
                &Device::Cpu,
            )
            .unwrap();
            let b = Tensor::from_vec(f32s(30 + i as u64, wd.0), wd.0, &Device::Cpu).unwrap();
            let x = f32s(40 + i as u64, xd.0 * xd.1 * xd.2 * xd.3);
            let conv = |t: &Tensor| {
                conv2d_im2col(t, &w.to_device(t.device())?, &b.to_device(t.device())?, p)
            };
            let (yc, gc) = run(&Device::Cpu, &x, xd, conv);
            let (yg, gg) = run(&dev, &x, xd, conv);
            assert_close(&format!("conv {i} forward"), &yg, &yc, 1e-4);
            assert_close(&format!("conv {i} input gradient"), &gg, &gc, 1e-4);
        }
    }

    /// y and the gradients of x, w and b of sum(conv(x, w, b) * r) on `dev`, where x is a
    /// `narrow` of `spare` extra channels (images not contiguous with each other) when spare > 0.
    #[cfg(feature = "cudnn")]
    type Dims4 = (usize, usize, usize, usize);

    #[cfg(feature = "cudnn")]
    fn conv_grads(
        dev: &Device,
        (xd, wd): (Dims4, Dims4),
        p: crate::Conv2d,
        spare: usize,
        seed: u64,
    ) -> Vec<Vec<f64>> {
        let f32s = |seed: u64, n: usize| -> Vec<f32> {
            Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
        };
        let (n, c, h, w) = xd;
        let full = (n, c + spare, h, w);
        let big = Var::from_tensor(
            &Tensor::from_vec(f32s(seed, n * (c + spare) * h * w), full, dev).unwrap(),
        )
        .unwrap();
        let wv = Var::from_tensor(
            &Tensor::from_vec(f32s(seed + 1, wd.0 * wd.1 * wd.2 * wd.3), wd, dev).unwrap(),
        )
        .unwrap();
        let bv =
            Var::from_tensor(&Tensor::from_vec(f32s(seed + 2, wd.0), wd.0, dev).unwrap()).unwrap();
        let x = big.as_tensor().narrow(1, spare / 2, c).unwrap();
        let y = crate::conv2d(&x, wv.as_tensor(), bv.as_tensor(), p).unwrap();
        let r = Tensor::from_vec(f32s(seed + 3, y.elem_count()), y.shape().clone(), dev).unwrap();
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let host = |t: &Tensor| {
            to_vec(
                &t.to_device(&Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap(),
            )
        };
        let mut out = vec![host(&y)];
        for v in [&big, &wv, &bv] {
            out.push(host(grads.get(v.as_tensor()).expect("gradient")));
        }
        out
    }

    #[cfg(feature = "cudnn")]
    #[test]
    fn cudnn_conv_matches_cpu() {
        let Some((dev, _serial)) = gpu() else { return };
        // Every kind of BVLC convolution: strided 11x11, grouped padded 5x5, 3x3 pad 1 on a
        // channel slice (an inception branch's input), 7x7 stride 2 with a remainder, 1x1.
        let cases = [
            (((2, 3, 23, 23), (4, 3, 11, 11)), 4, 0, 1, true, 0),
            (((2, 4, 9, 9), (6, 2, 5, 5)), 1, 2, 2, true, 0),
            (((3, 4, 7, 7), (5, 4, 3, 3)), 1, 1, 1, true, 4),
            (((1, 3, 15, 14), (5, 3, 7, 7)), 2, 3, 1, false, 0),
            (((3, 5, 6, 7), (4, 5, 1, 1)), 1, 0, 1, true, 2),
        ];
        for tf32 in [false, true] {
            crate::set_tf32(tf32);
            // TF32 products keep 10 mantissa bits: ~1e-3 relative error on these sums.
            let tol = if tf32 { 1e-2 } else { 1e-4 };
            for (i, (dims, stride, pad, groups, relu, spare)) in cases.into_iter().enumerate() {
                let p = crate::Conv2d {
                    stride,
                    pad,
                    groups,
                    relu,
                };
                let cpu = conv_grads(&Device::Cpu, dims, p, spare, 50 + i as u64);
                let gpu = conv_grads(&dev, dims, p, spare, 50 + i as u64);
                for (what, (g, c)) in ["y", "dx", "dw", "db"].iter().zip(gpu.iter().zip(&cpu)) {
                    assert_close(&format!("cudnn tf32={tf32} conv {i} {what}"), g, c, tol);
                }
            }
        }
        crate::set_tf32(false);
    }

    #[test]
    fn cuda_sgd_momentum_matches_the_formula() {
        let Some((dev, _serial)) = gpu() else { return };
        let n = 70_001; // not a multiple of a block
        let f32s =
            |seed: u64| -> Vec<f32> { Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect() };
        let (mut w, mut v) = (f32s(1), f32s(2));
        let wt = Tensor::from_vec(w.clone(), n, &dev).unwrap();
        let vt = Tensor::from_vec(v.clone(), n, &dev).unwrap();
        let (m, r, d) = (0.9f32, 0.01f32, 0.0005f32);
        for step in 0..3u64 {
            let g = f32s(10 + step);
            let gt = Tensor::from_vec(g.clone(), n, &dev).unwrap();
            crate::sgd_momentum(&wt, &gt, &vt, m, r, d).unwrap();
            for ((w, v), g) in w.iter_mut().zip(&mut v).zip(&g) {
                *v = m * *v + r * (g + d * *w);
                *w -= *v;
            }
        }
        let host = |t: &Tensor| {
            to_vec(
                &t.to_device(&Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap(),
            )
        };
        let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        assert_close("sgd weights", &host(&wt), &as64(&w), 1e-6);
        assert_close("sgd momentum", &host(&vt), &as64(&v), 1e-6);
    }

    #[test]
    fn cuda_sgd_momentum_all_updates_every_parameter_as_one_at_a_time() {
        let Some((dev, _serial)) = gpu() else { return };
        // More parameters than one launch takes, of sizes from one element to several blocks.
        let sizes: Vec<usize> = (0..45).map(|k| 1 + k * k * 97 + (k % 3) * 70_001).collect();
        let f32s = |seed: u64, n: usize| -> Vec<f32> {
            Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect()
        };
        let put = |v: &[f32]| Tensor::from_vec(v.to_vec(), v.len(), &dev).unwrap();
        let (m, step_rate) = (0.9f32, 0.01f32);
        let (mut ws, mut vs, mut gs, mut want) = (vec![], vec![], vec![], vec![]);
        for (k, &n) in sizes.iter().enumerate() {
            let (w, v, g) = (
                f32s(k as u64, n),
                f32s(100 + k as u64, n),
                f32s(200 + k as u64, n),
            );
            // The one-parameter kernel on copies gives the expected values.
            let (wr, vr) = (put(&w), put(&v));
            let decay = 0.0005 * (k % 2) as f32;
            let rate = step_rate * (1 + k % 2) as f32;
            crate::sgd_momentum(&wr, &put(&g), &vr, m, rate, decay).unwrap();
            want.push((wr, vr));
            ws.push(put(&w));
            vs.push(put(&v));
            gs.push((put(&g), rate, decay));
        }
        let updates: Vec<crate::SgdUpdate> = (0..sizes.len())
            .map(|k| crate::SgdUpdate {
                w: &ws[k],
                g: &gs[k].0,
                v: &vs[k],
                rate: gs[k].1,
                decay: gs[k].2,
            })
            .collect();
        crate::sgd_momentum_all(&updates, m).unwrap();
        let host = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap();
        for k in 0..sizes.len() {
            assert_eq!(host(&ws[k]), host(&want[k].0), "weights of parameter {k}");
            assert_eq!(host(&vs[k]), host(&want[k].1), "momentum of parameter {k}");
        }
    }

    #[test]
    fn cuda_descend_gives_the_cpu_update() {
        let Some((dev, _serial)) = gpu() else { return };
        let n = 1_000_003; // several blocks' grid-stride rounds, not a multiple of a block
        let f32s =
            |seed: u64| -> Vec<f32> { Rng::new(seed).vec(n).iter().map(|&v| v as f32).collect() };
        let (w, g) = (f32s(3), f32s(4));
        let on = |d: &Device| {
            let wt = Tensor::from_vec(w.clone(), n, d).unwrap();
            let gt = Tensor::from_vec(g.clone(), n, d).unwrap();
            crate::descend(&wt, &gt, 0.125).unwrap();
            let host = wt
                .to_device(&Device::Cpu)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            host.iter().map(|&v| v as f64).collect::<Vec<_>>()
        };
        // The GPU may fuse the multiply-add (one rounding less than the CPU's loop).
        assert_close("descend", &on(&dev), &on(&Device::Cpu), 1e-6);
    }

    #[test]
    fn cuda_dropout_gives_the_cpu_mask() {
        let Some((dev, _serial)) = gpu() else { return };
        let n = 100_003;
        let x: Vec<f32> = Rng::new(4).vec(n).iter().map(|&v| v as f32).collect();
        for (p, seed) in [(0.4, 1u64), (0.7, u64::MAX - 3)] {
            let cpu = crate::dropout(
                &Tensor::from_vec(x.clone(), n, &Device::Cpu).unwrap(),
                p,
                seed,
            )
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
            let gpu = crate::dropout(&Tensor::from_vec(x.clone(), n, &dev).unwrap(), p, seed)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            assert_eq!(cpu, gpu, "p {p} seed {seed}");
        }
    }
}
