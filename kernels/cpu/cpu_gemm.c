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

/* Block sizes of the fallback: an MB x KB panel of op(A) and a KB x NB panel of op(B), packed
 * contiguous, stay in L2 while cpu_mm_acc runs its register tiles over them. */
enum { MB = 64, NB = 256, KB = 256, PANEL = 8 };

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

/* Packs alpha * op(A)[i0:i0+mb, p0:p0+kb] row-major into Ap [mb][kb]. */
static void pack_a(float *Ap, const float *A, int lda, bool ta, int i0, int mb, int p0, int kb, float alpha) {
    for (int i = 0; i < mb; i++) {
        float *dst = Ap + (size_t)i * kb;
        if (ta)
            for (int p = 0; p < kb; p++) dst[p] = alpha * A[(size_t)(p0 + p) * lda + i0 + i];
        else
            for (int p = 0; p < kb; p++) dst[p] = alpha * A[(size_t)(i0 + i) * lda + p0 + p];
    }
}

/* Packs op(B)[p0:p0+kb, j0:j0+nb] as panels of PANEL columns, each [kb][PANEL] contiguous:
 * a register tile then streams one contiguous panel instead of rows NB apart (which would
 * share a handful of L1 sets). */
static void pack_b(float *Bp, const float *B, int ldb, bool tb, int p0, int kb, int j0, int nb) {
    for (int jp = 0; jp < nb; jp += PANEL) {
        int w = nb - jp < PANEL ? nb - jp : PANEL;
        float *panel = Bp + (size_t)jp * kb;
        if (tb)
            for (int j = 0; j < w; j++) {
                const float *src = B + (size_t)(j0 + jp + j) * ldb + p0;
                for (int p = 0; p < kb; p++) panel[(size_t)p * PANEL + j] = src[p];
            }
        else
            for (int p = 0; p < kb; p++) memcpy(panel + (size_t)p * PANEL, B + (size_t)(p0 + p) * ldb + j0 + jp, (size_t)w * sizeof *panel);
    }
}

/* C block += Ap [mb][kb] @ the packed panels. */
static void block_product(float *C, int ldc, const float *Ap, const float *Bp, int mb, int nb, int kb) {
    for (int jp = 0; jp < nb; jp += PANEL)
        cpu_mm_acc(C + jp, ldc, Ap, kb, Bp + (size_t)jp * kb, PANEL, mb, nb - jp < PANEL ? nb - jp : PANEL, kb);
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
            block_product(C + (size_t)i0 * ldc + j0, ldc, Ap, Bp, mb, nb, kb);
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
