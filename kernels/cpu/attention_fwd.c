/* Causal attention forward, blockwise with an online softmax (FlashAttention): each task
 * takes one (batch, head, query tile), walks the key tiles it can see, and keeps a running
 * max m, denominator l and unnormalised output, so no s x s matrix ever exists. */
#include <omp.h>

#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK };

typedef struct {
    const float *q;
    const float *kt; /* K tiles transposed, [b][nkv][tile][hd][BK] */
    const float *v;  /* V by head, [b][nkv][skv][hd] */
    float *o, *lse;
} fwd_args;

static void query_tile(const cpu_attn_shape *sh, cpu_attn_ws *w, const fwd_args *a, int bi, int j, int qt) {
    int hd = sh->hd, bg = bi * sh->nkv + j / sh->rep, q0 = qt * BQ, nq = sh->sq - q0 < BQ ? sh->sq - q0 : BQ;
    for (int r = 0; r < nq; r++)
        memcpy(w->q + (size_t)r * hd, a->q + ((size_t)(bi * sh->sq + q0 + r) * sh->nh + j) * hd, (size_t)hd * sizeof(float));
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int r = 0; r < nq; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
    int kend = sh->offset + q0 + nq; /* keys [0, kend) are visible to some row of the tile */
    const int32_t *lo = sh->qlo ? sh->qlo + (size_t)bi * sh->sq + q0 : NULL;
    /* document masks: key tiles before the first row's document hold nothing any row sees */
    for (int k0 = cpu_attn_first_kt(sh, bi, qt) * BK; k0 < kend; k0 += BK) {
        int nk = kend - k0 < BK ? kend - k0 : BK;
        memset(w->s, 0, (size_t)nq * BK * sizeof(float));
        cpu_mm_acc(w->s, BK, w->q, hd, cpu_attn_tile_t(a->kt, sh->nkt, hd, bg, k0 / BK), BK, nq, nk, hd); /* q K^T */
        cpu_attn_softmax_tile(w->s, nq, nk, sh->offset + q0 - k0, lo, k0, sh->scale, w->m, w->l, w->acc, hd);
        cpu_mm_acc(w->acc, hd, w->s, BK, cpu_attn_head_row(a->v, sh->skv, hd, bg, k0), hd, nq, hd, nk); /* += P V */
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / w->l[r], *out = a->o + ((size_t)(bi * sh->sq + q0 + r) * sh->nh + j) * hd;
        for (int d = 0; d < hd; d++) out[d] = w->acc[(size_t)r * hd + d] * inv;
        a->lse[((size_t)bi * sh->nh + j) * sh->sq + q0 + r] = w->m[r] + logf(w->l[r]);
    }
}

void cpu_attention_fwd(wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v, int b,
                       int sq, int skv, int nh, int nkv, int hd, const int32_t *qlo) {
    cpu_attn_shape sh = cpu_attn_shape_of(b, sq, skv, nh, nkv, hd, qlo);
    int threads = cpu_threads(k), tasks = b * nh * sh.nqt;
    size_t kt_floats = (size_t)b * nkv * sh.nkt * hd * BK, v_floats = (size_t)b * nkv * skv * hd;
    float *ws = cpu_attn_workspace(k, hd, threads);
    float *seq = ws ? cpu_attn_sequence_scratch(k, kt_floats + v_floats) : NULL;
    if (!seq) return;
    cpu_attn_pack_tiles_t(k, seq, kv_k, b, skv, nkv, hd);
    cpu_attn_pack_heads(k, seq + kt_floats, kv_v, b, skv, nkv, hd);
    fwd_args a = {q, seq, seq + kt_floats, o, lse};
    /* Later query tiles see more keys: hand tiles out from the longest down. */
#pragma omp parallel for num_threads(threads) if (tasks > 1) schedule(dynamic)
    for (int t = 0; t < tasks; t++) {
        cpu_attn_ws w = cpu_attn_ws_of(ws, hd, omp_get_thread_num());
        int qt = sh.nqt - 1 - t % sh.nqt, bj = t / sh.nqt;
        query_tile(&sh, &w, &a, bj / nh, bj % nh, qt);
    }
}
