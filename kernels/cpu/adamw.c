/* AdamW with decoupled weight decay (Loshchilov & Hutter) on fp32 masters:
 *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
 *   master -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * master)
 * then the working copy that travels the ring is written in wtype.
 * Memory-bound (28 bytes a parameter plus the working copy): the block's loop has no calls nor
 * branches, its pointers are restrict, and sqrtf vectorises because kernels/ is built with
 * -fno-math-errno (v >= 0: sqrtf never had an errno to set). Every element takes the same
 * fp32 operations in the same order as the scalar loop did, so the bits are the same. */
#include "cpu.h"

enum { BLOCK = 1024, PARALLEL_MIN = 1 << 15 };

typedef struct {
    float grad_scale, lr, beta1, beta2, eps, weight_decay, bc1, bc2;
} adamw_consts;

CPU_HOT static void adamw_block(float *restrict master, float *restrict m, float *restrict v,
                                const float *restrict grad, size_t len, adamw_consts c) {
    for (size_t i = 0; i < len; i++) {
        float g = grad[i] * c.grad_scale;
        float mi = c.beta1 * m[i] + (1.0f - c.beta1) * g;
        float vi = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
        float mhat = mi / c.bc1, vhat = vi / c.bc2;
        float w = master[i];
        m[i] = mi;
        v[i] = vi;
        master[i] = w - c.lr * (mhat / (sqrtf(vhat) + c.eps) + c.weight_decay * w);
    }
}

void cpu_adamw(wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale, void *w_out,
               wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
               float bc1, float bc2) {
    const adamw_consts c = {grad_scale, lr, beta1, beta2, eps, weight_decay, bc1, bc2};
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
        adamw_block(master + i0, m + i0, v + i0, grad + i0, len, c);
        cpu_store(w_out, wtype, i0, master + i0, len);
    }
}
