/* Causal attention backward (FlashAttention-2's recomputation): per (query tile, key tile)
 *   S = q K^T / sqrt(hd), P = exp(S - lse), dP = dO V^T, dS = P (dP - D), D = rowsum(dO * O)
 *   dV += P^T dO, dK += dS^T q / sqrt(hd), dQ += dS K / sqrt(hd)
 * so memory stays O(s). Determinism: every output row is owned by one task and sums its tile
 * contributions in a fixed order. With enough (batch, kv head) pairs to fill the threads, one
 * task per pair does everything (fused); otherwise one pass over key tiles computes dK/dV and
 * a second over query tiles dQ (recomputing P and dS), which spreads the work over more
 * tasks. Both orders add the same terms in the same sequence, so the bits do not depend on
 * the thread count. */
#include <omp.h>

#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK };

typedef struct {
    const float *dout, *q, *k, *v, *o, *lse;
    float *dq, *dk, *dv;
} bwd_args;

static int min_int(int a, int b) { return a < b ? a : b; }

/* Does some query of tile qt see some key of tile kt? */
static bool tile_visible(const cpu_attn_shape *sh, int qt, int kt) {
    int q_last = min_int(qt * BQ + BQ, sh->sq) - 1;
    return kt * BK <= sh->offset + q_last;
}

/* Loads what a query tile contributes: q scaled, dO, lse and D = rowsum(dO * O). */
static void load_query_tile(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int q0,
                            int nq) {
    int hd = sh->hd, stride = sh->nh * hd;
    size_t row0 = (size_t)bi * sh->sq + q0;
    cpu_attn_load_rows(w->qs, a->q, row0, nq, stride, j * hd, hd, sh->scale);
    cpu_attn_load_rows(w->dout, a->dout, row0, nq, stride, j * hd, hd, 1.0f);
    const float *lse = a->lse + ((size_t)bi * sh->nh + j) * sh->sq + q0;
    for (int r = 0; r < nq; r++) {
        const float *o = a->o + (row0 + r) * stride + (size_t)j * hd, *dout = w->dout + (size_t)r * hd;
        float dd = 0.0f;
        for (int d = 0; d < hd; d++) dd += dout[d] * o[d];
        w->dd[r] = dd;
        w->lse[r] = lse[r];
    }
}

/* Loads K and V of a key tile: transposed for the score products, K by rows for dQ. */
static void load_key_tile(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g, int k0,
                          int nk) {
    int hd = sh->hd, stride = sh->nkv * hd;
    size_t row0 = (size_t)bi * sh->skv + k0;
    cpu_attn_load_cols(w->kt, a->k, row0, nk, stride, g * hd, hd);
    cpu_attn_load_cols(w->vt, a->v, row0, nk, stride, g * hd, hd);
    cpu_attn_load_rows(w->kr, a->k, row0, nk, stride, g * hd, hd, 1.0f);
}

/* P into w->s and dS into w->dp for a loaded (query tile, key tile) pair. */
static void probs_and_dscores(const cpu_attn_shape *sh, cpu_attn_ws *w, int q0, int nq, int k0, int nk) {
    int hd = sh->hd;
    memset(w->s, 0, (size_t)nq * BK * sizeof(float));
    memset(w->dp, 0, (size_t)nq * BK * sizeof(float));
    cpu_attn_mm(w->s, BK, w->qs, hd, w->kt, BK, nq, nk, hd);
    cpu_attn_mm(w->dp, BK, w->dout, hd, w->vt, BK, nq, nk, hd);
    for (int r = 0; r < nq; r++) {
        float *s = w->s + (size_t)r * BK, *dp = w->dp + (size_t)r * BK, lse = w->lse[r], dd = w->dd[r];
        int last = sh->offset + q0 + r - k0;
#pragma omp simd
        for (int c = 0; c < nk; c++) {
            float p = c <= last ? cpu_expf(s[c] - lse) : 0.0f;
            s[c] = p;
            dp[c] = p * (dp[c] - dd);
        }
    }
}

/* tr[c][r] = x[r][c] for r < nq, c < nk (x has row length BK). */
static void transpose(float *tr, const float *x, int nq, int nk) {
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < nk; c++) tr[(size_t)c * BQ + r] = x[(size_t)r * BK + c];
}

/* dV += P^T dO and dK += dS^T (q/sqrt(hd)) into the tile accumulators. */
static void add_dkdv(const cpu_attn_shape *sh, cpu_attn_ws *w, int nq, int nk) {
    int hd = sh->hd;
    transpose(w->tr, w->s, nq, nk);
    cpu_attn_mm(w->dvacc, hd, w->tr, BQ, w->dout, hd, nk, hd, nq);
    transpose(w->tr, w->dp, nq, nk);
    cpu_attn_mm(w->dkacc, hd, w->tr, BQ, w->qs, hd, nk, hd, nq);
}

static void store_dkdv(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g, int k0, int nk) {
    int hd = sh->hd, stride = sh->nkv * hd;
    for (int c = 0; c < nk; c++) {
        size_t at = ((size_t)bi * sh->skv + k0 + c) * stride + (size_t)g * hd;
        memcpy(a->dk + at, w->dkacc + (size_t)c * hd, (size_t)hd * sizeof(float));
        memcpy(a->dv + at, w->dvacc + (size_t)c * hd, (size_t)hd * sizeof(float));
    }
}

static float *dq_rows(const cpu_attn_shape *sh, const bwd_args *a, int bi, int j, int q0) {
    return a->dq + ((size_t)bi * sh->sq + q0) * sh->nh * sh->hd + (size_t)j * sh->hd;
}

/* dQ of rows (bi, j, [q0, q0+nq)) times 1/sqrt(hd), applied once after all key tiles. */
static void scale_dq(const cpu_attn_shape *sh, const bwd_args *a, int bi, int j, int q0, int nq) {
    float *dq = dq_rows(sh, a, bi, j, q0);
    for (int r = 0; r < nq; r++)
        for (int d = 0; d < sh->hd; d++) dq[(size_t)r * sh->nh * sh->hd + d] *= sh->scale;
}

/* Pass 1 of 2: dK and dV of one (batch, kv head, key tile), summed over the group's query
 * heads and the query tiles that see it, in that order. */
static void key_tile_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g, int kt) {
    int k0 = kt * BK, nk = min_int(BK, sh->skv - k0);
    load_key_tile(sh, w, a, bi, g, k0, nk);
    memset(w->dkacc, 0, (size_t)nk * sh->hd * sizeof(float));
    memset(w->dvacc, 0, (size_t)nk * sh->hd * sizeof(float));
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
        for (int qt = 0; qt < sh->nqt; qt++) {
            if (!tile_visible(sh, qt, kt)) continue;
            int q0 = qt * BQ, nq = min_int(BQ, sh->sq - q0);
            load_query_tile(sh, w, a, bi, j, q0, nq);
            probs_and_dscores(sh, w, q0, nq, k0, nk);
            add_dkdv(sh, w, nq, nk);
        }
    store_dkdv(sh, w, a, bi, g, k0, nk);
}

/* Pass 2 of 2: dQ of one (batch, head, query tile), summed over key tiles in order. */
static void query_tile_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int qt) {
    int q0 = qt * BQ, nq = min_int(BQ, sh->sq - q0), hd = sh->hd, ld = sh->nh * hd;
    float *dq = dq_rows(sh, a, bi, j, q0);
    for (int r = 0; r < nq; r++) memset(dq + (size_t)r * ld, 0, (size_t)hd * sizeof(float));
    load_query_tile(sh, w, a, bi, j, q0, nq);
    for (int kt = 0; kt < sh->nkt && tile_visible(sh, qt, kt); kt++) {
        int k0 = kt * BK, nk = min_int(BK, sh->skv - k0);
        load_key_tile(sh, w, a, bi, j / sh->rep, k0, nk);
        probs_and_dscores(sh, w, q0, nq, k0, nk);
        cpu_attn_mm(dq, ld, w->dp, BK, w->kr, hd, nq, hd, nk);
    }
    scale_dq(sh, a, bi, j, q0, nq);
}

/* Fused: everything of one (batch, kv head) in one task, the loop order of pass 1 with the
 * dQ products of pass 2 added where the tile pair is at hand. */
static void kv_head_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g) {
    int hd = sh->hd, ld = sh->nh * hd;
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
        for (int i = 0; i < sh->sq; i++) memset(dq_rows(sh, a, bi, j, i), 0, (size_t)hd * sizeof(float));
    for (int kt = 0; kt < sh->nkt; kt++) {
        int k0 = kt * BK, nk = min_int(BK, sh->skv - k0);
        load_key_tile(sh, w, a, bi, g, k0, nk);
        memset(w->dkacc, 0, (size_t)nk * hd * sizeof(float));
        memset(w->dvacc, 0, (size_t)nk * hd * sizeof(float));
        for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
            for (int qt = 0; qt < sh->nqt; qt++) {
                if (!tile_visible(sh, qt, kt)) continue;
                int q0 = qt * BQ, nq = min_int(BQ, sh->sq - q0);
                load_query_tile(sh, w, a, bi, j, q0, nq);
                probs_and_dscores(sh, w, q0, nq, k0, nk);
                add_dkdv(sh, w, nq, nk);
                cpu_attn_mm(dq_rows(sh, a, bi, j, q0), ld, w->dp, BK, w->kr, hd, nq, hd, nk);
            }
        store_dkdv(sh, w, a, bi, g, k0, nk);
    }
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
        for (int qt = 0; qt < sh->nqt; qt++) scale_dq(sh, a, bi, j, qt * BQ, min_int(BQ, sh->sq - qt * BQ));
}

void cpu_attention_bwd(wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *kv_k,
                       const void *kv_v, const void *o, const float *lse, int b, int sq, int skv, int nh, int nkv,
                       int hd) {
    cpu_attn_shape sh = cpu_attn_shape_of(b, sq, skv, nh, nkv, hd);
    bwd_args a = {dout, q, kv_k, kv_v, o, lse, dq, dk, dv};
    int threads = cpu_threads(k), pairs = b * nkv;
    float *ws = cpu_attn_workspace(k, hd, threads);
    if (!ws) return;
    if (pairs >= threads) {
#pragma omp parallel for num_threads(threads) if (pairs > 1) schedule(dynamic)
        for (int t = 0; t < pairs; t++) {
            cpu_attn_ws w = cpu_attn_ws_of(ws, hd, omp_get_thread_num());
            kv_head_task(&sh, &w, &a, t / nkv, t % nkv);
        }
        return;
    }
    int key_tasks = pairs * sh.nkt, query_tasks = b * nh * sh.nqt;
#pragma omp parallel num_threads(threads)
    {
        cpu_attn_ws w = cpu_attn_ws_of(ws, hd, omp_get_thread_num());
        /* early key tiles are seen by the most queries: hand them out first */
#pragma omp for schedule(dynamic)
        for (int t = 0; t < key_tasks; t++) key_tile_task(&sh, &w, &a, t % pairs / nkv, t % pairs % nkv, t / pairs);
#pragma omp for schedule(dynamic)
        for (int t = 0; t < query_tasks; t++) {
            int qt = sh.nqt - 1 - t % sh.nqt, bj = t / sh.nqt;
            query_tile_task(&sh, &w, &a, bj / nh, bj % nh, qt);
        }
    }
}
