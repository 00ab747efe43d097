// SGD with momentum (Caffe's update: v = momentum v + rate (g + decay w); w -= v) over up to
// EB_SGD_MANY parameters in one launch (blockIdx.y picks one): at batch 1 a launch per
// parameter is a large part of the host's time per step. src/sgd.rs launches it.
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
