/* Building blocks shared by the attention forward and backward: shapes, per-thread tile
 * workspaces, the whole-sequence packing, and the elementwise work on one tile. */
#include <omp.h>

#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK };

cpu_attn_shape cpu_attn_shape_of(int b, int sq, int skv, int nh, int nkv, int hd, const int32_t *qlo) {
    cpu_attn_shape sh = {
        .b = b, .sq = sq, .skv = skv, .nh = nh, .nkv = nkv, .hd = hd,
        .rep = nh / nkv,
        .offset = skv - sq,
        .nqt = (sq + BQ - 1) / BQ,
        .nkt = (skv + BK - 1) / BK,
        .qstride = nh * hd,
        .kvstride = nkv * hd,
        .scale = 1.0f / sqrtf((float)hd),
        .qlo = qlo,
    };
    return sh;
}

/* Floats of one workspace; every piece is a multiple of 16 floats, so all stay 64-B aligned. */
static size_t ws_floats(int hd) {
    return 3 * (size_t)BQ * BK + 2 * (size_t)BQ * hd + 2 * (size_t)BK * hd + 2 * (size_t)BQ;
}

float *cpu_attn_workspace(wp_kern *k, int hd, int threads) {
    return cpu_scratch(k, CPU_SCRATCH_LAYER, (size_t)threads * ws_floats(hd) * sizeof(float), "kern_attention");
}

cpu_attn_ws cpu_attn_ws_of(float *base, int hd, int thread) {
    float *p = base + (size_t)thread * ws_floats(hd);
    size_t qk = (size_t)BQ * BK, qd = (size_t)BQ * hd, kd = (size_t)BK * hd;
    cpu_attn_ws w;
    w.s = p, p += qk;
    w.dp = p, p += qk;
    w.tr = p, p += qk;
    w.q = p, p += qd;
    w.acc = p, p += qd;
    w.dkacc = p, p += kd;
    w.dvacc = p, p += kd;
    w.m = p, p += BQ;
    w.l = p;
    return w;
}

float *cpu_attn_sequence_scratch(wp_kern *k, size_t floats) {
    return cpu_scratch(k, CPU_SCRATCH_ATTN, floats * sizeof(float), "kern_attention");
}

void cpu_attn_pack_heads(wp_kern *k, float *dst, const float *src, int b, int s, int heads, int hd) {
    int rows = b * s;
#pragma omp parallel for num_threads(cpu_threads(k)) if (rows >= 256) schedule(static)
    for (int row = 0; row < rows; row++) {
        int bi = row / s, i = row % s;
        for (int h = 0; h < heads; h++)
            memcpy(dst + ((size_t)(bi * heads + h) * s + i) * hd, src + ((size_t)row * heads + h) * hd,
                   (size_t)hd * sizeof *dst);
    }
}

void cpu_attn_pack_tiles_t(wp_kern *k, float *dst, const float *src, int b, int s, int heads, int hd) {
    int ntiles = (s + BK - 1) / BK, blocks = b * heads * ntiles;
#pragma omp parallel for num_threads(cpu_threads(k)) if (blocks > 1) schedule(static)
    for (int t = 0; t < blocks; t++) {
        int tile = t % ntiles, bh = t / ntiles, bi = bh / heads, h = bh % heads;
        int c0 = tile * BK, n = s - c0 < BK ? s - c0 : BK;
        float *out = dst + (size_t)t * hd * BK;
        for (int c = 0; c < n; c++) {
            const float *row = src + ((size_t)(bi * s + c0 + c) * heads + h) * hd;
            for (int d = 0; d < hd; d++) out[(size_t)d * BK + c] = row[d];
        }
    }
}

CPU_HOT void cpu_attn_softmax_tile(float *S, int nq, int nk, int last0, const int32_t *lo, int k0, float scale,
                                   float *m, float *l, float *acc, int hd) {
    for (int r = 0; r < nq; r++) {
        float *s = S + (size_t)r * BK, mx = m[r];
        int last = last0 + r, first = lo ? lo[r] - k0 : 0;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < nk; c++) {
            s[c] = c <= last && c >= first ? s[c] * scale : -INFINITY;
            mx = s[c] > mx ? s[c] : mx;
        }
        if (mx == -INFINITY) { /* nothing of this row's document yet: exp(-inf - -inf) would be NaN */
            memset(s, 0, (size_t)nk * sizeof *s);
            continue;
        }
        float rescale = cpu_expf(m[r] - mx), sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < nk; c++) {
            s[c] = cpu_expf(s[c] - mx);
            sum += s[c];
        }
        l[r] = l[r] * rescale + sum;
        m[r] = mx;
        float *a = acc + (size_t)r * hd;
        for (int d = 0; d < hd; d++) a[d] *= rescale;
    }
}

CPU_HOT void cpu_attn_probs_tile(float *S, float *dP, int nq, int nk, int last0, const int32_t *lo, int k0,
                                 float scale, const float *lse, const float *D) {
    for (int r = 0; r < nq; r++) {
        float *s = S + (size_t)r * BK, *dp = dP + (size_t)r * BK, lr = lse[r], dr = D[r];
        int last = last0 + r, first = lo ? lo[r] - k0 : 0;
#pragma omp simd
        for (int c = 0; c < nk; c++) {
            float p = c <= last && c >= first ? cpu_expf(s[c] * scale - lr) : 0.0f;
            s[c] = p;
            dp[c] = p * (dp[c] - dr);
        }
    }
}

void cpu_attn_transpose_tile(float *tr, const float *x, int nq, int nk) {
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < nk; c++) tr[(size_t)c * BQ + r] = x[(size_t)r * BK + c];
}
