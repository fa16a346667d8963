/* LM head fused with softmax cross-entropy. The [T, V] logits never exist at once: rows go
 * in blocks of ROWS tokens, and the backward recomputes its block's logits from x and the
 * saved log-sum-exp instead of keeping them. fwd_bwd does both in one pass over the blocks
 * (training knows dloss at the forward), so the logits are computed once; each of its steps
 * is the same call on the same operands as fwd's or bwd's, so its results are those of fwd
 * then bwd, bit for bit. */
#include "cpu.h"

enum { ROWS = 128 };

static bool targets_ok(wp_kern *k, const int32_t *targets, int T, int V, const char *who) {
    for (int t = 0; t < T; t++)
        if (targets[t] >= V) {
            kern_set_error(k, "%s: targets[%d] = %d is outside the vocabulary [0, %d)", who, t, targets[t], V);
            return false;
        }
    return true;
}

static float *logits_block(wp_kern *k, int V, const char *who) {
    return cpu_scratch(k, CPU_SCRATCH_LAYER, (size_t)ROWS * V * sizeof(float), who);
}

static float row_lse(const float *row, int V) {
    float mx = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < V; c++) mx = row[c] > mx ? row[c] : mx;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < V; c++) sum += cpu_expf(row[c] - mx);
    return mx + logf(sum);
}

/* lse and losses of a block's nt rows from their logits (the pointers at the block's first row) */
static void block_losses(const float *logits, float *losses, float *lse, const int32_t *targets, int nt, int V,
                         int threads) {
#pragma omp parallel for num_threads(threads) if (nt > 1) schedule(static)
    for (int r = 0; r < nt; r++) {
        const float *row = logits + (size_t)r * V;
        lse[r] = row_lse(row, V);
        losses[r] = targets[r] < 0 ? 0.0f : lse[r] - row[targets[r]];
    }
}

void cpu_lmhead_ce_fwd(wp_kern *k, float *losses, float *lse, const void *x, const void *w_head,
                       const int32_t *targets, int T, int h, int V) {
    if (!targets_ok(k, targets, T, V, "kern_lmhead_ce_fwd")) return;
    float *logits = logits_block(k, V, "kern_lmhead_ce_fwd");
    if (!logits) return;
    const float *xf = x, *w = w_head;
    for (int t0 = 0; t0 < T; t0 += ROWS) {
        int nt = T - t0 < ROWS ? T - t0 : ROWS;
        cpu_gemm_f32(k, false, true, nt, V, h, 1.0f, xf + (size_t)t0 * h, h, w, h, 0.0f, logits, V);
        block_losses(logits, losses + t0, lse + t0, targets + t0, nt, V, cpu_threads(k));
    }
}

/* dlogits = (softmax - onehot(target)) * dloss in place; zero on masked rows (lse and targets
 * at the block's first row). */
static void dlogits_rows(float *logits, const float *lse, const int32_t *targets, float dloss, int nt, int V,
                         int threads) {
#pragma omp parallel for num_threads(threads) if (nt > 1) schedule(static)
    for (int r = 0; r < nt; r++) {
        float *row = logits + (size_t)r * V, l = lse[r];
        int target = targets[r];
        if (target < 0) {
            memset(row, 0, (size_t)V * sizeof *row);
            continue;
        }
#pragma omp simd
        for (int c = 0; c < V; c++) row[c] = cpu_expf(row[c] - l) * dloss;
        row[target] -= dloss;
    }
}

void cpu_lmhead_ce_bwd(wp_kern *k, void *dx, void *dlogits_out, void *dw_head, wp_dtype dwtype, const void *x,
                       const void *w_head, const int32_t *targets, const float *lse, float dloss, int T, int h,
                       int V) {
    if (!targets_ok(k, targets, T, V, "kern_lmhead_ce_bwd")) return;
    float *logits = logits_block(k, V, "kern_lmhead_ce_bwd");
    if (!logits) return;
    /* The head's gradient sums over all blocks in fp32 and is rounded once when it is not fp32. */
    float *dw = dwtype == WP_F32 ? dw_head : NULL;
    if (dw_head && dwtype != WP_F32) {
        dw = cpu_scratch(k, CPU_SCRATCH_GRAD, (size_t)V * h * sizeof(float), "kern_lmhead_ce_bwd");
        if (!dw) return;
        memset(dw, 0, (size_t)V * h * sizeof(float));
    }
    const float *xf = x, *w = w_head;
    for (int t0 = 0; t0 < T; t0 += ROWS) {
        int nt = T - t0 < ROWS ? T - t0 : ROWS;
        const float *xb = xf + (size_t)t0 * h;
        cpu_gemm_f32(k, false, true, nt, V, h, 1.0f, xb, h, w, h, 0.0f, logits, V);
        dlogits_rows(logits, lse + t0, targets + t0, dloss, nt, V, cpu_threads(k));
        if (dlogits_out) memcpy((float *)dlogits_out + (size_t)t0 * V, logits, (size_t)nt * V * sizeof(float));
        cpu_gemm_f32(k, false, false, nt, h, V, 1.0f, logits, V, w, h, 0.0f, (float *)dx + (size_t)t0 * h, h);
        if (dw) cpu_gemm_f32(k, true, false, V, h, nt, 1.0f, logits, V, xb, h, 1.0f, dw, h);
    }
    if (dw_head && dwtype != WP_F32) cpu_accumulate(k, dw_head, dwtype, dw, WP_F32, (size_t)V * h);
}

void cpu_lmhead_ce_fwd_bwd(wp_kern *k, float *losses, void *dx, float *dw_head, const void *x, const void *w_head,
                           const int32_t *targets, float dloss, int T, int h, int V) {
    if (!targets_ok(k, targets, T, V, "kern_lmhead_ce_fwd_bwd")) return;
    float *logits = logits_block(k, V, "kern_lmhead_ce_fwd_bwd");
    if (!logits) return;
    float lse[ROWS]; /* the block's: what fwd keeps and bwd reads back */
    const float *xf = x, *w = w_head;
    for (int t0 = 0; t0 < T; t0 += ROWS) {
        int nt = T - t0 < ROWS ? T - t0 : ROWS;
        const float *xb = xf + (size_t)t0 * h;
        cpu_gemm_f32(k, false, true, nt, V, h, 1.0f, xb, h, w, h, 0.0f, logits, V);
        block_losses(logits, losses + t0, lse, targets + t0, nt, V, cpu_threads(k));
        dlogits_rows(logits, lse, targets + t0, dloss, nt, V, cpu_threads(k));
        cpu_gemm_f32(k, false, false, nt, h, V, 1.0f, logits, V, w, h, 0.0f, (float *)dx + (size_t)t0 * h, h);
        cpu_gemm_f32(k, true, false, V, h, nt, 1.0f, logits, V, xb, h, 1.0f, dw_head, h);
    }
}
