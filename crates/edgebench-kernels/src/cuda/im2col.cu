// im2col and its adjoint col2im for the im2col + cuBLAS convolution (src/im2col.rs launches them).

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
