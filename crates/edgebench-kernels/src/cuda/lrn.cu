// Caffe LRN ACROSS_CHANNELS, forward and input gradient (src/lrn.rs launches them).

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
