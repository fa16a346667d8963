/* CUDA backend: AdamW on the owner's fp32 masters (decoupled weight decay), writing the
 * fp16/bf16 working copy that travels the ring in the same pass, so the update reads and
 * writes each parameter once. */
#include "dtype.cuh"

#define WP_ADAMW_THREADS 256

template <typename W>
__global__ void adamw_kernel(float *master, float *m, float *v, const float *grad, float grad_scale, W *w_out,
                             size_t n, float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
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
