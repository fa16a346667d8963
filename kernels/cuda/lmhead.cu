/* CUDA backend: LM head fused with softmax cross-entropy. Rows go in blocks, so at most one
 * block of fp32 logits ([rows, V]) exists at a time: cuBLAS computes the block's logits,
 * a kernel does max / log-sum-exp / loss (forward) or softmax - onehot (backward), and cuBLAS
 * again takes dlogits to dx and to the head's weight gradient. fwd_bwd (training, dloss known
 * at the forward) does both per block with one kernel between the GEMMs, so the logits are
 * computed once: three GEMMs over the head instead of four. */
#include <math.h>

#include "dtype.cuh"

#define WP_CE_THREADS 256
/* fp32 logits of one row block stay below this many bytes */
#define WP_CE_BLOCK_BYTES ((size_t)64 << 20)

/* max and log-sum-exp of one row, computed by the whole block (two passes over the row: the
 * second pass re-reads it from L2, simpler and no less exact than an online rescale) */
__device__ float row_lse(const float *row, int V, float *red) {
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, row[v]);
    m = wp_block_max(m, red);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(row[v] - m);
    s = wp_block_sum(s, red);
    return m + logf(s);
}

/* A target at or past V breaks the header's contract; its loss becomes NaN so that the
 * mistake shows in the loss instead of reading past the row. */
__global__ void ce_fwd_kernel(float *losses, float *lse, const float *logits, const int32_t *targets, int V) {
    __shared__ float red[32];
    size_t r = blockIdx.x;
    const float *row = logits + r * V;
    float l = row_lse(row, V, red);
    if (threadIdx.x == 0) {
        int t = targets[r];
        lse[r] = l;
        losses[r] = t < 0 ? 0.0f : t < V ? l - row[t] : NAN;
    }
}

/* dlogits = (softmax - onehot(target)) * dloss, all zero on masked rows */
template <typename T>
__global__ void ce_bwd_kernel(T *dlogits, const float *logits, const int32_t *targets, const float *lse, float dloss,
                              int V) {
    size_t r = blockIdx.x;
    const float *row = logits + r * V;
    T *out = dlogits + r * V;
    int t = targets[r];
    float l = lse[r];
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float g = t < 0 ? 0.0f : (expf(row[v] - l) - (v == t ? 1.0f : 0.0f)) * dloss;
        out[v] = wp_store<T>(g);
    }
}

/* fwd and bwd of one row at once: loss from the row's lse, then (softmax - onehot) * dloss,
 * all zero on a masked row; a target at or past V gives a NaN loss, as in ce_fwd_kernel */
template <typename T>
__global__ void ce_fwd_bwd_kernel(float *losses, T *dlogits, const float *logits, const int32_t *targets, float dloss,
                                  int V) {
    __shared__ float red[32];
    size_t r = blockIdx.x;
    const float *row = logits + r * V;
    T *out = dlogits + r * V;
    float l = row_lse(row, V, red);
    int t = targets[r];
    if (threadIdx.x == 0) losses[r] = t < 0 ? 0.0f : t < V ? l - row[t] : NAN;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float g = t < 0 ? 0.0f : (expf(row[v] - l) - (v == t ? 1.0f : 0.0f)) * dloss;
        out[v] = wp_store<T>(g);
    }
}

static int block_rows(int T, int V) {
    size_t rows = WP_CE_BLOCK_BYTES / ((size_t)V * sizeof(float));
    if (rows < 1) rows = 1;
    return rows < (size_t)T ? (int)rows : T;
}

static int check_shape(wp_kern *k, const char *name, int T, int h, int V) {
    if (T < 0 || h <= 0 || V <= 0) return cu_fail(k, name, "bad shape T=%d, h=%d, V=%d", T, h, V);
    return 0;
}

extern "C" {

void cu_lmhead_ce_fwd(wp_kern *k, float *losses, float *lse, const void *x, const void *w_head,
                      const int32_t *targets, int T, int h, int V) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "lmhead_ce_fwd", T, h, V) || T == 0) return;
    int R = block_rows(T, V);
    float *logits = (float *)cu_scratch(k, WP_SCRATCH_OP, (size_t)R * V * sizeof(float));
    if (!logits) return;
    size_t es = wp_dtype_size(k->compute);
    for (int r0 = 0; r0 < T; r0 += R) {
        int rb = T - r0 < R ? T - r0 : R;
        /* logits[rb, V] = x[r0:r0+rb, h] @ Wh[V, h]^T */
        cu_gemm(k, false, true, rb, V, h, 1.0f, (const char *)x + (size_t)r0 * h * es, h, w_head, h, 0.0f, logits,
                WP_F32, V);
        if (kern_error(k)) return;
        ce_fwd_kernel<<<rb, WP_CE_THREADS, 0, c->stream>>>(losses + r0, lse + r0, logits, targets + r0, V);
        if (CU_LAUNCH_CHECK(k, "ce_fwd_kernel")) return;
    }
}

void cu_lmhead_ce_bwd(wp_kern *k, void *dx, void *dlogits_out, void *dw_head, wp_dtype dwtype, const void *x,
                      const void *w_head, const int32_t *targets, const float *lse, float dloss, int T, int h,
                      int V) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "lmhead_ce_bwd", T, h, V) || T == 0) return;
    int R = block_rows(T, V);
    size_t es = wp_dtype_size(k->compute);
    size_t logit_bytes = ((size_t)R * V * sizeof(float) + 255) / 256 * 256;
    /* without dlogits_out, each block's dlogits live in scratch behind the logits */
    char *scratch = (char *)cu_scratch(k, WP_SCRATCH_OP, logit_bytes + (dlogits_out ? 0 : (size_t)R * V * es));
    if (!scratch) return;
    float *logits = (float *)scratch;
    for (int r0 = 0; r0 < T; r0 += R) {
        int rb = T - r0 < R ? T - r0 : R;
        const char *xb = (const char *)x + (size_t)r0 * h * es;
        void *dl = dlogits_out ? (char *)dlogits_out + (size_t)r0 * V * es : scratch + logit_bytes;
        /* logits[rb, V] = x_b @ Wh^T, recomputed rather than kept */
        cu_gemm(k, false, true, rb, V, h, 1.0f, xb, h, w_head, h, 0.0f, logits, WP_F32, V);
        if (kern_error(k)) return;
        WP_WITH_DTYPE(k->compute, E,
            ce_bwd_kernel<E><<<rb, WP_CE_THREADS, 0, c->stream>>>((E *)dl, logits, targets + r0, lse + r0, dloss, V));
        if (CU_LAUNCH_CHECK(k, "ce_bwd_kernel")) return;
        /* dx[rb, h] = dlogits[rb, V] @ Wh[V, h] */
        cu_gemm(k, false, false, rb, h, V, 1.0f, dl, V, w_head, h, 0.0f, (char *)dx + (size_t)r0 * h * es,
                k->compute, h);
        /* dWh[V, h] += dlogits^T @ x_b, per block when the block's dlogits are not kept */
        if (dw_head && !dlogits_out) cu_gemm(k, true, false, V, h, rb, 1.0f, dl, V, xb, h, 1.0f, dw_head, dwtype, h);
        if (kern_error(k)) return;
    }
    /* with all dlogits kept, one product over every row rounds dWh once */
    if (dw_head && dlogits_out) cu_gemm(k, true, false, V, h, T, 1.0f, dlogits_out, V, x, h, 1.0f, dw_head, dwtype, h);
}

void cu_lmhead_ce_fwd_bwd(wp_kern *k, float *losses, void *dx, float *dw_head, const void *x, const void *w_head,
                          const int32_t *targets, float dloss, int T, int h, int V) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "lmhead_ce_fwd_bwd", T, h, V) || T == 0) return;
    int R = block_rows(T, V);
    size_t es = wp_dtype_size(k->compute);
    size_t logit_bytes = ((size_t)R * V * sizeof(float) + 255) / 256 * 256;
    /* the block's fp32 logits, then its dlogits in the compute dtype (the GEMMs' operand) */
    char *scratch = (char *)cu_scratch(k, WP_SCRATCH_OP, logit_bytes + (size_t)R * V * es);
    if (!scratch) return;
    float *logits = (float *)scratch;
    void *dl = scratch + logit_bytes;
    for (int r0 = 0; r0 < T; r0 += R) {
        int rb = T - r0 < R ? T - r0 : R;
        const char *xb = (const char *)x + (size_t)r0 * h * es;
        /* logits[rb, V] = x_b @ Wh^T, the only time */
        cu_gemm(k, false, true, rb, V, h, 1.0f, xb, h, w_head, h, 0.0f, logits, WP_F32, V);
        if (kern_error(k)) return;
        WP_WITH_DTYPE(k->compute, E,
            ce_fwd_bwd_kernel<E><<<rb, WP_CE_THREADS, 0, c->stream>>>(losses + r0, (E *)dl, logits, targets + r0,
                                                                      dloss, V));
        if (CU_LAUNCH_CHECK(k, "ce_fwd_bwd_kernel")) return;
        /* dx[rb, h] = dlogits[rb, V] @ Wh[V, h] */
        cu_gemm(k, false, false, rb, h, V, 1.0f, dl, V, w_head, h, 0.0f, (char *)dx + (size_t)r0 * h * es,
                k->compute, h);
        /* dWh[V, h] (fp32) += dlogits^T @ x_b */
        cu_gemm(k, true, false, V, h, rb, 1.0f, dl, V, xb, h, 1.0f, dw_head, WP_F32, h);
        if (kern_error(k)) return;
    }
}

} /* extern "C" */
