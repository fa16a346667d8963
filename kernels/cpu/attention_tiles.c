/* Building blocks shared by the attention forward and backward: shapes, per-thread tile
 * workspaces, tile loaders and the small register-tiled matrix product. */
#include "cpu.h"

enum { BQ = CPU_ATTN_BQ, BK = CPU_ATTN_BK, MR = 4, NR = 8 };

cpu_attn_shape cpu_attn_shape_of(int b, int sq, int skv, int nh, int nkv, int hd) {
    cpu_attn_shape sh = {
        .b = b, .sq = sq, .skv = skv, .nh = nh, .nkv = nkv, .hd = hd,
        .rep = nh / nkv,
        .offset = skv - sq,
        .nqt = (sq + BQ - 1) / BQ,
        .nkt = (skv + BK - 1) / BK,
        .scale = 1.0f / sqrtf((float)hd),
    };
    return sh;
}

/* Floats of one workspace; every piece is a multiple of 16 floats, so all stay 64-B aligned. */
static size_t ws_floats(int hd) {
    size_t tile_qd = (size_t)BQ * hd, tile_kd = (size_t)BK * hd, tile_qk = (size_t)BQ * BK;
    return 3 * tile_qd + 6 * tile_kd + 3 * tile_qk + 4 * (size_t)BQ;
}

float *cpu_attn_workspace(wp_kern *k, int hd, int threads) {
    return cpu_scratch(k, CPU_SCRATCH_LAYER, (size_t)threads * ws_floats(hd) * sizeof(float), "kern_attention");
}

cpu_attn_ws cpu_attn_ws_of(float *base, int hd, int thread) {
    float *p = base + (size_t)thread * ws_floats(hd);
    size_t tile_qd = (size_t)BQ * hd, tile_kd = (size_t)BK * hd, tile_qk = (size_t)BQ * BK;
    cpu_attn_ws w;
    w.qs = p, p += tile_qd;
    w.dout = p, p += tile_qd;
    w.acc = p, p += tile_qd;
    w.kt = p, p += tile_kd;
    w.vt = p, p += tile_kd;
    w.kr = p, p += tile_kd;
    w.vr = p, p += tile_kd;
    w.dkacc = p, p += tile_kd;
    w.dvacc = p, p += tile_kd;
    w.s = p, p += tile_qk;
    w.dp = p, p += tile_qk;
    w.tr = p, p += tile_qk;
    w.lse = p, p += BQ;
    w.dd = p, p += BQ;
    w.m = p, p += BQ;
    w.l = p;
    return w;
}

void cpu_attn_load_rows(float *dst, const float *src, size_t row0, int n, int stride, int col0, int hd, float mul) {
    for (int r = 0; r < n; r++) {
        const float *s = src + (row0 + (size_t)r) * stride + col0;
        float *d = dst + (size_t)r * hd;
        for (int i = 0; i < hd; i++) d[i] = mul * s[i];
    }
}

void cpu_attn_load_cols(float *dst, const float *src, size_t row0, int n, int stride, int col0, int hd) {
    for (int r = 0; r < n; r++) {
        const float *s = src + (row0 + (size_t)r) * stride + col0;
        for (int i = 0; i < hd; i++) dst[(size_t)i * BK + r] = s[i];
    }
}

/* A full MR x NR tile: constant bounds let the compiler keep the sums in registers. */
static void tile_full(float *restrict C, int ldc, const float *restrict A, int lda, const float *restrict B,
                      int ldb, int K) {
    float acc[MR][NR] = {{0}};
    for (int p = 0; p < K; p++) {
        const float *b = B + (size_t)p * ldb;
        for (int r = 0; r < MR; r++) {
            float a = A[(size_t)r * lda + p];
            for (int c = 0; c < NR; c++) acc[r][c] += a * b[c];
        }
    }
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) C[(size_t)r * ldc + c] += acc[r][c];
}

/* An edge tile: same order of operations as tile_full, variable bounds. */
static void tile_part(float *restrict C, int ldc, const float *restrict A, int lda, const float *restrict B,
                      int ldb, int K, int rows, int cols) {
    float acc[MR][NR] = {{0}};
    for (int p = 0; p < K; p++) {
        const float *b = B + (size_t)p * ldb;
        for (int r = 0; r < rows; r++) {
            float a = A[(size_t)r * lda + p];
            for (int c = 0; c < cols; c++) acc[r][c] += a * b[c];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) C[(size_t)r * ldc + c] += acc[r][c];
}

void cpu_attn_mm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M, int N, int K) {
    for (int i = 0; i < M; i += MR)
        for (int j = 0; j < N; j += NR) {
            int rows = M - i < MR ? M - i : MR, cols = N - j < NR ? N - j : NR;
            float *c = C + (size_t)i * ldc + j;
            const float *a = A + (size_t)i * lda, *b = B + j;
            if (rows == MR && cols == NR)
                tile_full(c, ldc, a, lda, b, ldb, K);
            else
                tile_part(c, ldc, a, lda, b, ldb, K, rows, cols);
        }
}
