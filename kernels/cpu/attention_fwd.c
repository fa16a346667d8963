/* Causal attention forward, blockwise with an online softmax (FlashAttention): each task
 * takes one (batch, head, query tile), walks the key tiles it can see, and keeps a running
 * max m, denominator l and unnormalised output, so no s x s matrix ever exists. */
#include <omp.h>

#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK };

/* Turns the scores of rows [0, nq) into probabilities relative to the updated running max,
 * rescaling the row's earlier sum and output. */
static void online_softmax(const cpu_attn_shape *sh, cpu_attn_ws *w, int q0, int nq, int k0, int nk) {
    for (int r = 0; r < nq; r++) {
        float *s = w->s + (size_t)r * BK;
        int last = sh->offset + q0 + r - k0; /* last visible key of this row, tile-relative */
        float mx = w->m[r];
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < nk; c++) {
            s[c] = c <= last ? s[c] : -INFINITY;
            mx = s[c] > mx ? s[c] : mx;
        }
        float rescale = cpu_expf(w->m[r] - mx), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < nk; c++) {
            s[c] = cpu_expf(s[c] - mx);
            sum += s[c];
        }
        w->l[r] = w->l[r] * rescale + sum;
        w->m[r] = mx;
        float *acc = w->acc + (size_t)r * sh->hd;
        for (int d = 0; d < sh->hd; d++) acc[d] *= rescale;
    }
}

static void query_tile(const cpu_attn_shape *sh, cpu_attn_ws *w, float *o, float *lse, const float *q,
                       const float *kk, const float *v, int bi, int j, int qt) {
    int hd = sh->hd, g = j / sh->rep, q0 = qt * BQ, nq = sh->sq - q0 < BQ ? sh->sq - q0 : BQ;
    int qstride = sh->nh * hd, kvstride = sh->nkv * hd;
    size_t qrow0 = (size_t)bi * sh->sq + q0, krow0 = (size_t)bi * sh->skv;
    cpu_attn_load_rows(w->qs, q, qrow0, nq, qstride, j * hd, hd, sh->scale);
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int r = 0; r < nq; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
    int kend = sh->offset + q0 + nq; /* keys [0, kend) are visible to some row of the tile */
    for (int k0 = 0; k0 < kend; k0 += BK) {
        int nk = kend - k0 < BK ? kend - k0 : BK;
        cpu_attn_load_cols(w->kt, kk, krow0 + k0, nk, kvstride, g * hd, hd);
        cpu_attn_load_rows(w->vr, v, krow0 + k0, nk, kvstride, g * hd, hd, 1.0f);
        memset(w->s, 0, (size_t)nq * BK * sizeof(float));
        cpu_attn_mm(w->s, BK, w->qs, hd, w->kt, BK, nq, nk, hd);      /* S = (q/sqrt(hd)) K^T */
        online_softmax(sh, w, q0, nq, k0, nk);
        cpu_attn_mm(w->acc, hd, w->s, BK, w->vr, hd, nq, hd, nk);     /* acc += P V */
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / w->l[r], *out = o + (qrow0 + r) * qstride + (size_t)j * hd;
        for (int d = 0; d < hd; d++) out[d] = w->acc[(size_t)r * hd + d] * inv;
        lse[((size_t)bi * sh->nh + j) * sh->sq + q0 + r] = w->m[r] + logf(w->l[r]);
    }
}

void cpu_attention_fwd(wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v, int b,
                       int sq, int skv, int nh, int nkv, int hd) {
    cpu_attn_shape sh = cpu_attn_shape_of(b, sq, skv, nh, nkv, hd);
    int threads = cpu_threads(k), tasks = b * nh * sh.nqt;
    float *ws = cpu_attn_workspace(k, hd, threads);
    if (!ws) return;
    /* Later query tiles see more keys: hand tiles out from the longest down. */
#pragma omp parallel for num_threads(threads) if (tasks > 1) schedule(dynamic)
    for (int t = 0; t < tasks; t++) {
        cpu_attn_ws w = cpu_attn_ws_of(ws, hd, omp_get_thread_num());
        int qt = sh.nqt - 1 - t % sh.nqt, bj = t / sh.nqt;
        query_tile(&sh, &w, o, lse, q, kv_k, kv_v, bj / nh, bj % nh, qt);
    }
}
