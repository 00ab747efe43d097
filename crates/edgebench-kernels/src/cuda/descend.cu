// Plain gradient descent in place, w -= rate g (src/descend.rs launches it).
extern "C" __global__ void eb_descend(float* w, const float* g, long long total, float rate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)blockDim.x * gridDim.x) {
        w[i] -= rate * g[i];
    }
}
