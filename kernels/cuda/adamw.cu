/* CUDA backend: AdamW on the owner's fp32 masters (decoupled weight decay), writing the
 * fp16/bf16 working copy that travels the ring in the same pass, so the update reads and
 * writes each parameter once. */
#include "dtype.cuh"

#define WP_ADAMW_THREADS 256

/* One element's update: the per-tensor and the multi-tensor kernels share it, so they do the
 * same fp32 operations (the same contractions) and their bits agree. */
template <typename W>
__device__ __forceinline__ void adamw_element(float *master, float *m, float *v, const float *grad, float grad_scale,
                                              W *w_out, size_t i, float lr, float beta1, float beta2, float eps,
                                              float wd, float bc1, float bc2) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float w = master[i];
    w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
    master[i] = w;
    if (w_out) w_out[i] = wp_store<W>(w);
}

template <typename W>
__global__ void adamw_kernel(float *master, float *m, float *v, const float *grad, float grad_scale, W *w_out,
                             size_t n, float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        adamw_element<W>(master, m, v, grad, grad_scale, w_out, i, lr, beta1, beta2, eps, wd, bc1, bc2);
}

/* The multi-tensor step: block b owns the WP_ADAMW_PER_BLOCK consecutive elements from
 * b * WP_ADAMW_PER_BLOCK of the pieces laid end to end; each thread finds the piece of its first
 * element by binary search over the prefix sums (first), then walks forward, since its later
 * elements only lie further on. */
#define WP_ADAMW_ITEMS 8
#define WP_ADAMW_PER_BLOCK (WP_ADAMW_THREADS * WP_ADAMW_ITEMS)

template <typename W>
__global__ void adamw_multi_kernel(const wp_adamw_piece *pieces, int n_pieces, size_t numel, float grad_scale,
                                   float lr, float beta1, float beta2, float eps, float bc1, float bc2) {
    const size_t base = pieces[0].first;
    size_t e = blockIdx.x * (size_t)WP_ADAMW_PER_BLOCK + threadIdx.x;
    if (e >= numel) return;
    int lo = 0, hi = n_pieces - 1; /* the last piece whose first <= base + e */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (pieces[mid].first - base <= e) lo = mid;
        else hi = mid - 1;
    }
    int p = lo;
    for (int j = 0; j < WP_ADAMW_ITEMS && e < numel; j++, e += WP_ADAMW_THREADS) {
        while (p + 1 < n_pieces && e >= pieces[p].first - base + pieces[p].n) p++;
        const wp_adamw_piece &pc = pieces[p];
        if (e >= pc.first - base + pc.n) return; /* numel past the pieces: the caller's bug, no stray writes */
        adamw_element<W>(pc.master, pc.m, pc.v, pc.grad, grad_scale, (W *)pc.w_out, e - (pc.first - base), lr, beta1,
                         beta2, eps, pc.weight_decay, bc1, bc2);
    }
}

extern "C" void cu_adamw(wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale,
                         void *w_out, wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float bc1, float bc2) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    if (bc1 <= 0.0f || bc2 <= 0.0f) {
        cu_fail(k, "adamw", "bias corrections must be positive (bc1=%g, bc2=%g)", bc1, bc2);
        return;
    }
    unsigned grid = cu_grid_for(c, n, WP_ADAMW_THREADS);
    WP_WITH_DTYPE(wtype, W,
        adamw_kernel<W><<<grid, WP_ADAMW_THREADS, 0, c->stream>>>(master, m, v, grad, grad_scale, (W *)w_out, n, lr,
                                                                 beta1, beta2, eps, weight_decay, bc1, bc2));
    CU_LAUNCH_CHECK(k, "adamw_kernel");
}

extern "C" void cu_adamw_multi(wp_kern *k, const wp_adamw_piece *pieces, int n_pieces, size_t numel, float grad_scale,
                               wp_dtype wtype, float lr, float beta1, float beta2, float eps, float bc1, float bc2) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n_pieces <= 0 || numel == 0) return;
    size_t blocks = (numel + WP_ADAMW_PER_BLOCK - 1) / WP_ADAMW_PER_BLOCK;
    if (blocks > 0x7fffffffu) {
        cu_fail(k, "adamw_multi", "%zu elements need more blocks than a grid has", numel);
        return;
    }
    WP_WITH_DTYPE(wtype, W,
        adamw_multi_kernel<W><<<(unsigned)blocks, WP_ADAMW_THREADS, 0, c->stream>>>(pieces, n_pieces, numel, grad_scale,
                                                                                   lr, beta1, beta2, eps, bc1, bc2));
    CU_LAUNCH_CHECK(k, "adamw_multi_kernel");
}
