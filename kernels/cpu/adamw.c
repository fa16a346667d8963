/* AdamW with decoupled weight decay (Loshchilov & Hutter) on fp32 masters:
 *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
 *   master -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * master)
 * then the working copy that travels the ring is written in wtype. */
#include "cpu.h"

enum { BLOCK = 1024, PARALLEL_MIN = 1 << 15 };

void cpu_adamw(wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale, void *w_out,
               wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
               float bc1, float bc2) {
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
        for (size_t i = i0; i < i0 + len; i++) {
            float g = grad[i] * grad_scale;
            m[i] = beta1 * m[i] + (1.0f - beta1) * g;
            v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
            float mhat = m[i] / bc1, vhat = v[i] / bc2;
            master[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * master[i]);
        }
        cpu_store(w_out, wtype, i0, master + i0, len);
    }
}
