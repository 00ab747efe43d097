// Dropout whose mask is a hash of (seed, element index), the same as the CPU's; src/dropout.rs
// launches it.

// dropout::mix (src/dropout.rs): splitmix64's finaliser of seed + (i+1)·golden ratio, top 32 bits.
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
