// Caffe pooling (MAX and AVE), forward and input gradient (src/pool.rs launches them). Same
// semantics as the CPU kernels: max pooling takes the first strict maximum in row-major order
// from -FLT_MAX, average pooling divides by Caffe's padded window size. The input gradient adds
// with atomics (overlapping windows), so its last bits may differ from run to run, as
// PyTorch's do.

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
