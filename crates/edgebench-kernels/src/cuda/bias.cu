// The cuDNN convolution's bias: the epilogue (bias, then ReLU) and the bias gradient
// (src/cudnn.rs launches them).

// y[i] += b[channel] then ReLU, in place: the convolution's epilogue in one pass over y.
extern "C" __global__ void eb_bias_act(float* y, const float* b, long long total, int c,
                                       long long hw, int relu) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        float v = y[i] + b[(i / hw) % c];
        y[i] = relu && !(v > 0.0f) ? 0.0f : v;
    }
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
