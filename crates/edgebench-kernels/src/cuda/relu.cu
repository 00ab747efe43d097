// dy where y > 0, else 0: the gradient through a fused ReLU (src/relu.rs launches it).
extern "C" __global__ void eb_relu_mask(const float* dy, const float* y, float* out,
                                        long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x)
        out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
