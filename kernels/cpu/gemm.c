/* Matrix products: OpenBLAS's sgemm when the build has it, otherwise cache-blocked C loops.
 * The loops are always compiled so that tests can hold one path against the other.
 * A non-fp32 C (a bf16 weight gradient) is computed into fp32 scratch and added once, so a
 * gradient is rounded once per call, never once per inner-product term. */
#include <omp.h>

#include "cpu.h"
#include "wp_config.h"

#if WP_HAVE_BLAS
#include <cblas.h>
#endif

/* Block sizes of the fallback: an MB x KB panel of op(A) and a KB x NB panel of op(B) stay in
 * L2 while an MR x NR tile of C lives in registers. */
enum { MB = 64, NB = 256, KB = 256, MR = 4, NR = 16 };

bool cpu_gemm_use_blas(wp_kern *k, bool on) {
    bool was = cpu_of(k)->use_blas;
    cpu_of(k)->use_blas = on && WP_HAVE_BLAS;
    return was;
}

/* C = beta * C, with beta == 0 clearing C (NaN or garbage in C must not survive, as in BLAS). */
static void scale_c(float *C, int m, int n, int ldc, float beta) {
    for (int i = 0; i < m; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(c, 0, (size_t)n * sizeof *c);
        else if (beta != 1.0f)
            for (int j = 0; j < n; j++) c[j] *= beta;
    }
}

/* op(X)[r, c] for a row-major X with row stride ld. */
static inline float op_at(const float *X, int ld, bool trans, int r, int c) {
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* Packs alpha * op(A)[i0:i0+mb, p0:p0+kb] row-major into Ap, rows padded with zeros to MR. */
static void pack_a(float *Ap, const float *A, int lda, bool ta, int i0, int mb, int p0, int kb, float alpha) {
    int mb_pad = (mb + MR - 1) / MR * MR;
    for (int i = 0; i < mb_pad; i++)
        for (int p = 0; p < kb; p++) Ap[(size_t)i * kb + p] = i < mb ? alpha * op_at(A, lda, ta, i0 + i, p0 + p) : 0.0f;
}

/* Packs op(B)[p0:p0+kb, j0:j0+nb] row-major into Bp with row length padded with zeros to NR. */
static void pack_b(float *Bp, const float *B, int ldb, bool tb, int p0, int kb, int j0, int nb) {
    int nb_pad = (nb + NR - 1) / NR * NR;
    for (int p = 0; p < kb; p++)
        for (int j = 0; j < nb_pad; j++) Bp[(size_t)p * nb_pad + j] = j < nb ? op_at(B, ldb, tb, p0 + p, j0 + j) : 0.0f;
}

/* C[0:rows, 0:cols] += Ap[MR, kb] @ Bp[kb, NR-wide column strip]; the tile sums in registers. */
static void micro_tile(const float *restrict Ap, const float *restrict Bp, int kb, int nb_pad, float *restrict C,
                       int ldc, int rows, int cols) {
    float acc[MR][NR] = {{0}};
    for (int p = 0; p < kb; p++) {
        const float *b = Bp + (size_t)p * nb_pad;
        for (int r = 0; r < MR; r++) {
            float a = Ap[(size_t)r * kb + p];
            for (int j = 0; j < NR; j++) acc[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) C[(size_t)r * ldc + j] += acc[r][j];
}

static void block_product(const float *Ap, const float *Bp, int mb, int nb, int kb, float *C, int ldc) {
    int nb_pad = (nb + NR - 1) / NR * NR;
    for (int i = 0; i < mb; i += MR)
        for (int j = 0; j < nb; j += NR)
            micro_tile(Ap + (size_t)i * kb, Bp + j, kb, nb_pad, C + (size_t)i * ldc + j, ldc,
                       mb - i < MR ? mb - i : MR, nb - j < NR ? nb - j : NR);
}

void cpu_gemm_fallback(wp_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    scale_c(C, m, n, ldc, beta);
    if (kk == 0 || alpha == 0.0f) return;
    int threads = cpu_threads(k);
    size_t per_thread = (size_t)MB * KB + (size_t)KB * NB;
    float *pack = cpu_scratch(k, CPU_SCRATCH_GEMM_PACK, (size_t)threads * per_thread * sizeof(float), "kern_gemm");
    if (!pack) return;
    int mblocks = (m + MB - 1) / MB, nblocks = (n + NB - 1) / NB;
    double flops = 2.0 * m * n * kk;
#pragma omp parallel for num_threads(threads) if (flops > 1e6) schedule(dynamic)
    for (int t = 0; t < mblocks * nblocks; t++) {
        float *Ap = pack + (size_t)omp_get_thread_num() * per_thread, *Bp = Ap + (size_t)MB * KB;
        int i0 = t / nblocks * MB, j0 = t % nblocks * NB;
        int mb = m - i0 < MB ? m - i0 : MB, nb = n - j0 < NB ? n - j0 : NB;
        for (int p0 = 0; p0 < kk; p0 += KB) { /* p blocks in order: the sum's order is fixed */
            int kb = kk - p0 < KB ? kk - p0 : KB;
            pack_a(Ap, A, lda, ta, i0, mb, p0, kb, alpha);
            pack_b(Bp, B, ldb, tb, p0, kb, j0, nb);
            block_product(Ap, Bp, mb, nb, kb, C + (size_t)i0 * ldc + j0, ldc);
        }
    }
}

void cpu_gemm_f32(wp_kern *k, bool ta, bool tb, int m, int n, int kk, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    if (m == 0 || n == 0) return;
#if WP_HAVE_BLAS
    if (cpu_of(k)->use_blas && kk > 0) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, kk, alpha,
                    A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    cpu_gemm_fallback(k, ta, tb, m, n, kk, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* C (any dtype) = beta * C + T, rounded once per element. */
static void combine_rows(void *C, wp_dtype ctype, int ldc, const float *T, int m, int n, float beta) {
    float row[NB];
    for (int i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += NB) {
            int len = n - j0 < NB ? n - j0 : NB;
            size_t first = (size_t)i * ldc + j0;
            const float *t = T + (size_t)i * n + j0;
            if (beta == 0.0f) {
                cpu_store(C, ctype, first, t, (size_t)len);
                continue;
            }
            cpu_load(row, C, ctype, first, (size_t)len);
            for (int j = 0; j < len; j++) row[j] = beta * row[j] + t[j];
            cpu_store(C, ctype, first, row, (size_t)len);
        }
}

void cpu_gemm(wp_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha, const void *A, int lda,
              const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc) {
    if (ctype == WP_F32) {
        cpu_gemm_f32(k, trans_a, trans_b, m, n, kk, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (m == 0 || n == 0) return;
    float *T = cpu_scratch(k, CPU_SCRATCH_GEMM_C, (size_t)m * n * sizeof(float), "kern_gemm");
    if (!T) return;
    cpu_gemm_f32(k, trans_a, trans_b, m, n, kk, alpha, A, lda, B, ldb, 0.0f, T, n);
    combine_rows(C, ctype, ldc, T, m, n, beta);
}
