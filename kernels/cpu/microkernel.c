/* The register-tiled product behind the GEMM fallback and the attention tiles:
 * C[M,N] += A[M,K] @ B[K,N], row-major with leading dimensions. An 8 x 8 tile of C sums its K
 * terms in registers (eight 8-lane vectors), starting from zero and in order, then adds to C
 * once. Edge tiles do the same arithmetic with scalar loops, so every element of C gets the
 * same bits whichever tile computes it: the attention backward relies on that to produce
 * identical results from its two schedules. */
#include "cpu.h"

enum { MR = 8, NR = 8 };

typedef float v8f __attribute__((vector_size(NR * sizeof(float))));

/* Vectors move through memcpy and pointers only: unaligned access is fine, and no 32-byte
 * vector crosses a function boundary (whose ABI would differ between the two clones). */
static inline __attribute__((always_inline)) void add_to(float *p, const v8f *v) {
    v8f c;
    memcpy(&c, p, sizeof c);
    c += *v;
    memcpy(p, &c, sizeof c);
}

static inline __attribute__((always_inline)) void tile_full(float *restrict C, int ldc, const float *restrict A,
                                                               int lda, const float *restrict B, int ldb, int K) {
    v8f acc[MR] = {{0}};
    for (int p = 0; p < K; p++) {
        v8f b;
        memcpy(&b, B + (size_t)p * ldb, sizeof b);
        for (int r = 0; r < MR; r++) acc[r] += A[(size_t)r * lda + p] * b;
    }
    for (int r = 0; r < MR; r++) add_to(C + (size_t)r * ldc, &acc[r]);
}

static inline __attribute__((always_inline)) void tile_edge(float *restrict C, int ldc, const float *restrict A,
                                                               int lda, const float *restrict B, int ldb, int K,
                                                               int rows, int cols) {
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

CPU_HOT void cpu_mm_acc(float *restrict C, int ldc, const float *restrict A, int lda, const float *restrict B,
                        int ldb, int M, int N, int K) {
    for (int i = 0; i < M; i += MR)
        for (int j = 0; j < N; j += NR) {
            int rows = M - i < MR ? M - i : MR, cols = N - j < NR ? N - j : NR;
            float *c = C + (size_t)i * ldc + j;
            const float *a = A + (size_t)i * lda, *b = B + j;
            if (rows == MR && cols == NR)
                tile_full(c, ldc, a, lda, b, ldb, K);
            else
                tile_edge(c, ldc, a, lda, b, ldb, K, rows, cols);
        }
}
