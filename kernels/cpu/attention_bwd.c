/* Causal attention backward (FlashAttention-2's recomputation): per (query tile, key tile)
 *   S = q K^T, P = exp(S / sqrt(hd) - lse), dP = dO V^T, dS = P (dP - D), D = rowsum(dO * O)
 *   dV += P^T dO, dK += dS^T q / sqrt(hd), dQ += dS K / sqrt(hd)
 * so memory stays O(s). Determinism: every output row is owned by one task and sums its tile
 * contributions in a fixed order. With enough (batch, kv head) pairs to fill the threads, one
 * task per pair does everything (fused); otherwise one pass over key tiles computes dK/dV and
 * a second over query tiles dQ (recomputing P and dS), which spreads the work over more
 * tasks. Both add the same terms in the same sequence, so the bits do not depend on the
 * thread count. */
#include <omp.h>

#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK };

/* Inputs repacked for the tiles (see cpu_attn_pack_*), and the outputs. */
typedef struct {
    const float *q, *dout; /* by head, [b][nh][sq][hd] */
    const float *k;        /* by head, [b][nkv][skv][hd] */
    const float *kt, *vt;  /* tiles transposed, [b][nkv][tile][hd][BK] */
    const float *lse, *dd; /* [b][nh][sq]; dd = rowsum(dO * O) */
    float *dq, *dk, *dv;
} bwd_args;

static int min_int(int a, int b) { return a < b ? a : b; }

/* May some query of tile qt (of sequence bi) see some key of tile kt? Causally, the tile's
 * last query must come at or after the key tile's start; with document masks the first
 * query's document (the earliest of the tile's: qlo is nondecreasing) must start before the
 * key tile ends. A pair that passes but sees nothing only adds zeros. */
static bool tile_visible(const cpu_attn_shape *sh, int bi, int qt, int kt) {
    int q_last = min_int(qt * BQ + BQ, sh->sq) - 1;
    return kt * BK <= sh->offset + q_last && cpu_attn_first_kt(sh, bi, qt) <= kt;
}

static void compute_d(wp_kern *k, const cpu_attn_shape *sh, float *dd, const float *dout, const float *o) {
    int rows = sh->b * sh->nh * sh->sq;
#pragma omp parallel for num_threads(cpu_threads(k)) if (rows >= 256) schedule(static)
    for (int t = 0; t < rows; t++) {
        int i = t % sh->sq, bj = t / sh->sq, bi = bj / sh->nh, j = bj % sh->nh;
        size_t at = ((size_t)(bi * sh->sq + i) * sh->nh + j) * sh->hd;
        float s = 0.0f;
        for (int d = 0; d < sh->hd; d++) s += dout[at + d] * o[at + d];
        dd[t] = s;
    }
}

/* P into w->s and dS into w->dp for one (query tile, key tile) pair of query head j. */
static void probs_and_dscores(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int qt,
                              int kt) {
    int hd = sh->hd, bj = bi * sh->nh + j, bg = bi * sh->nkv + j / sh->rep, q0 = qt * BQ, k0 = kt * BK;
    int nq = min_int(BQ, sh->sq - q0), nk = min_int(BK, sh->skv - k0);
    memset(w->s, 0, (size_t)nq * BK * sizeof(float));
    memset(w->dp, 0, (size_t)nq * BK * sizeof(float));
    cpu_mm_acc(w->s, BK, cpu_attn_head_row(a->q, sh->sq, hd, bj, q0), hd, cpu_attn_tile_t(a->kt, sh->nkt, hd, bg, kt),
               BK, nq, nk, hd);
    cpu_mm_acc(w->dp, BK, cpu_attn_head_row(a->dout, sh->sq, hd, bj, q0), hd,
               cpu_attn_tile_t(a->vt, sh->nkt, hd, bg, kt), BK, nq, nk, hd);
    size_t at = (size_t)bj * sh->sq + q0;
    const int32_t *lo = sh->qlo ? sh->qlo + (size_t)bi * sh->sq + q0 : NULL;
    cpu_attn_probs_tile(w->s, w->dp, nq, nk, sh->offset + q0 - k0, lo, k0, sh->scale, a->lse + at, a->dd + at);
}

/* dV += P^T dO and dK += dS^T q into the tile accumulators (dK's 1/sqrt(hd) comes at the end). */
static void add_dkdv(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int qt, int kt) {
    int hd = sh->hd, bj = bi * sh->nh + j, q0 = qt * BQ;
    int nq = min_int(BQ, sh->sq - q0), nk = min_int(BK, sh->skv - kt * BK);
    cpu_attn_transpose_tile(w->tr, w->s, nq, nk);
    cpu_mm_acc(w->dvacc, hd, w->tr, BQ, cpu_attn_head_row(a->dout, sh->sq, hd, bj, q0), hd, nk, hd, nq);
    cpu_attn_transpose_tile(w->tr, w->dp, nq, nk);
    cpu_mm_acc(w->dkacc, hd, w->tr, BQ, cpu_attn_head_row(a->q, sh->sq, hd, bj, q0), hd, nk, hd, nq);
}

static float *dq_rows(const cpu_attn_shape *sh, const bwd_args *a, int bi, int j, int q0) {
    return a->dq + ((size_t)(bi * sh->sq + q0) * sh->nh + j) * sh->hd;
}

/* dQ += dS K straight into the output rows (touched once per register tile, so their row
 * pitch costs nothing). */
static void add_dq(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int qt, int kt) {
    int hd = sh->hd, bg = bi * sh->nkv + j / sh->rep, q0 = qt * BQ, k0 = kt * BK;
    int nq = min_int(BQ, sh->sq - q0), nk = min_int(BK, sh->skv - k0);
    cpu_mm_acc(dq_rows(sh, a, bi, j, q0), sh->qstride, w->dp, BK, cpu_attn_head_row(a->k, sh->skv, hd, bg, k0), hd,
               nq, hd, nk);
}

static void clear_tile_acc(const cpu_attn_shape *sh, cpu_attn_ws *w) {
    memset(w->dkacc, 0, (size_t)BK * sh->hd * sizeof(float));
    memset(w->dvacc, 0, (size_t)BK * sh->hd * sizeof(float));
}

static void store_dkdv(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g, int kt) {
    int hd = sh->hd, k0 = kt * BK, nk = min_int(BK, sh->skv - k0);
    for (int c = 0; c < nk; c++) {
        size_t at = ((size_t)(bi * sh->skv + k0 + c) * sh->nkv + g) * hd;
        for (int d = 0; d < hd; d++) a->dk[at + d] = w->dkacc[(size_t)c * hd + d] * sh->scale;
        memcpy(a->dv + at, w->dvacc + (size_t)c * hd, (size_t)hd * sizeof(float));
    }
}

/* dQ rows of (bi, j, [q0, q0+nq)): cleared before the key tiles, scaled by 1/sqrt(hd) after. */
static void clear_dq(const cpu_attn_shape *sh, const bwd_args *a, int bi, int j, int q0, int nq) {
    for (int r = 0; r < nq; r++) memset(dq_rows(sh, a, bi, j, q0 + r), 0, (size_t)sh->hd * sizeof(float));
}
static void scale_dq(const cpu_attn_shape *sh, const bwd_args *a, int bi, int j, int q0, int nq) {
    for (int r = 0; r < nq; r++) {
        float *dq = dq_rows(sh, a, bi, j, q0 + r);
        for (int d = 0; d < sh->hd; d++) dq[d] *= sh->scale;
    }
}

/* Pass 1 of 2: dK and dV of one (batch, kv head, key tile), summed over the group's query
 * heads and the query tiles that see it, in that order. */
static void key_tile_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g, int kt) {
    clear_tile_acc(sh, w);
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
        for (int qt = 0; qt < sh->nqt; qt++) {
            if (!tile_visible(sh, bi, qt, kt)) continue;
            probs_and_dscores(sh, w, a, bi, j, qt, kt);
            add_dkdv(sh, w, a, bi, j, qt, kt);
        }
    store_dkdv(sh, w, a, bi, g, kt);
}

/* Pass 2 of 2: dQ of one (batch, head, query tile), summed over key tiles in order. */
static void query_tile_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int j, int qt) {
    int q0 = qt * BQ, nq = min_int(BQ, sh->sq - q0);
    clear_dq(sh, a, bi, j, q0, nq);
    for (int kt = cpu_attn_first_kt(sh, bi, qt); kt < sh->nkt && tile_visible(sh, bi, qt, kt); kt++) {
        probs_and_dscores(sh, w, a, bi, j, qt, kt);
        add_dq(sh, w, a, bi, j, qt, kt);
    }
    scale_dq(sh, a, bi, j, q0, nq);
}

/* Fused: everything of one (batch, kv head) in one task, the loop order of pass 1 with the
 * dQ products of pass 2 added while the tile pair is at hand. */
static void kv_head_task(const cpu_attn_shape *sh, cpu_attn_ws *w, const bwd_args *a, int bi, int g) {
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++) clear_dq(sh, a, bi, j, 0, sh->sq);
    for (int kt = 0; kt < sh->nkt; kt++) {
        clear_tile_acc(sh, w);
        for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++)
            for (int qt = 0; qt < sh->nqt; qt++) {
                if (!tile_visible(sh, bi, qt, kt)) continue;
                probs_and_dscores(sh, w, a, bi, j, qt, kt);
                add_dkdv(sh, w, a, bi, j, qt, kt);
                add_dq(sh, w, a, bi, j, qt, kt);
            }
        store_dkdv(sh, w, a, bi, g, kt);
    }
    for (int j = g * sh->rep; j < (g + 1) * sh->rep; j++) scale_dq(sh, a, bi, j, 0, sh->sq);
}

/* Repacks the inputs for the tiles and computes D; returns false when out of memory. */
static bool prepare(wp_kern *k, const cpu_attn_shape *sh, bwd_args *a, const float *dout, const float *q,
                    const float *kv_k, const float *kv_v, const float *o) {
    size_t nq = (size_t)sh->b * sh->nh * sh->sq * sh->hd, nk = (size_t)sh->b * sh->nkv * sh->skv * sh->hd;
    size_t nt = (size_t)sh->b * sh->nkv * sh->nkt * sh->hd * BK, nd = (size_t)sh->b * sh->nh * sh->sq;
    float *p = cpu_attn_sequence_scratch(k, 2 * nq + nk + 2 * nt + nd);
    if (!p) return false;
    float *qp = p, *dop = qp + nq, *kp = dop + nq, *ktp = kp + nk, *vtp = ktp + nt, *dd = vtp + nt;
    cpu_attn_pack_heads(k, qp, q, sh->b, sh->sq, sh->nh, sh->hd);
    cpu_attn_pack_heads(k, dop, dout, sh->b, sh->sq, sh->nh, sh->hd);
    cpu_attn_pack_heads(k, kp, kv_k, sh->b, sh->skv, sh->nkv, sh->hd);
    cpu_attn_pack_tiles_t(k, ktp, kv_k, sh->b, sh->skv, sh->nkv, sh->hd);
    cpu_attn_pack_tiles_t(k, vtp, kv_v, sh->b, sh->skv, sh->nkv, sh->hd);
    compute_d(k, sh, dd, dout, o);
    a->q = qp, a->dout = dop, a->k = kp, a->kt = ktp, a->vt = vtp, a->dd = dd;
    return true;
}

void cpu_attention_bwd(wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *kv_k,
                       const void *kv_v, const void *o, const float *lse, int b, int sq, int skv, int nh, int nkv,
                       int hd, const int32_t *qlo) {
    cpu_attn_shape sh = cpu_attn_shape_of(b, sq, skv, nh, nkv, hd, qlo);
    int threads = cpu_threads(k), pairs = b * nkv;
    bwd_args a = {.lse = lse, .dq = dq, .dk = dk, .dv = dv};
    float *ws = cpu_attn_workspace(k, hd, threads);
    if (!ws || !prepare(k, &sh, &a, dout, q, kv_k, kv_v, o)) return;
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
