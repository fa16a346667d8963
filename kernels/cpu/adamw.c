/* AdamW with decoupled weight decay (Loshchilov & Hutter) on fp32 masters:
 *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
 *   master -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * master)
 * then the working copy that travels the ring is written in wtype (w_out NULL: not written).
 * Memory-bound (28 bytes a parameter plus the working copy): the block's loop has no calls nor
 * branches, its pointers are restrict, and sqrtf vectorises because kernels/ is built with
 * -fno-math-errno (v >= 0: sqrtf never had an errno to set). Every element takes the same
 * fp32 operations in the same order as the scalar loop did, so the bits are the same. */
#include "cpu.h"

enum { BLOCK = 1024, GRAB = 64 /* blocks a thread takes at a time */ };

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
    /* the working copy is written, never read here: past the caches when it cannot stay in them */
    const bool stream = n * wp_dtype_size(wtype) >= cpu_of(k)->stream_min;
#pragma omp parallel for num_threads(kern_bulk_threads(k, n)) schedule(dynamic, GRAB)
    for (size_t blk = 0; blk < nblocks; blk++) {
        size_t i0 = blk * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
        adamw_block(master + i0, m + i0, v + i0, grad + i0, len, c);
        if (w_out) (stream ? cpu_store_stream : cpu_store)(w_out, wtype, i0, master + i0, len);
    }
}

/* The reference of the multi-tensor step: the per-piece calls, in order, so the bits are the
 * per-piece path's (pieces is host memory here; first is the CUDA kernel's business). */
void cpu_adamw_multi(wp_kern *k, const wp_adamw_piece *pieces, int n_pieces, size_t numel, float grad_scale,
                     wp_dtype wtype, float lr, float beta1, float beta2, float eps, float bc1, float bc2) {
    (void)numel;
    for (int p = 0; p < n_pieces; p++)
        cpu_adamw(k, pieces[p].master, pieces[p].m, pieces[p].v, pieces[p].grad, grad_scale, pieces[p].w_out, wtype,
                  pieces[p].n, lr, beta1, beta2, eps, pieces[p].weight_decay, bc1, bc2);
}
