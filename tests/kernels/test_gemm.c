/* GEMM: all four transpose combinations, odd sizes and sizes crossing the fallback's blocks,
 * alpha/beta, row strides larger than the rows (padding filled with NaN, so reading it shows),
 * fp32 and bf16 C. The BLAS path and the C fallback are each held against an fp64 loop with
 * the classical error bound |c - ref| <= (kk + 2) u (|alpha| sum|a||b| + |beta c0|). */
#include "cpu.h"
#include "kt.h"
#include "wp_config.h"

typedef struct {
    int m, n, kk;
} shape;

typedef struct {
    bool ta, tb;
    int m, n, kk, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0;
    double *ref, *bound; /* fp64 result and the error bound of each element */
} problem;

static float *padded(kt_rng *r, int rows, int cols, int ld) {
    float *x = kt_floats((size_t)rows * ld);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++) x[(size_t)i * ld + j] = j < cols ? kt_uniform(r, -1, 1) : NAN;
    return x;
}

static double op(const float *X, int ld, bool t, int i, int j) { return t ? X[(size_t)j * ld + i] : X[(size_t)i * ld + j]; }

static problem make(kt_rng *r, bool ta, bool tb, shape s, float alpha, float beta, int pad) {
    problem p = {ta, tb, s.m, s.n, s.kk, 0, 0, 0, alpha, beta, NULL, NULL, NULL, NULL, NULL};
    int a_rows = ta ? s.kk : s.m, a_cols = ta ? s.m : s.kk, b_rows = tb ? s.n : s.kk, b_cols = tb ? s.kk : s.n;
    p.lda = a_cols + pad, p.ldb = b_cols + 2 * pad, p.ldc = s.n + pad;
    p.A = padded(r, a_rows, a_cols, p.lda);
    p.B = padded(r, b_rows, b_cols, p.ldb);
    p.C0 = padded(r, s.m, s.n, p.ldc);
    if (beta == 0.0f) /* beta = 0 must ignore C entirely, NaN included */
        for (int i = 0; i < s.m; i++) p.C0[(size_t)i * p.ldc] = NAN;
    p.ref = kt_doubles((size_t)s.m * s.n);
    p.bound = kt_doubles((size_t)s.m * s.n);
    for (int i = 0; i < s.m; i++)
        for (int j = 0; j < s.n; j++) {
            double acc = 0, mag = 0;
            for (int q = 0; q < s.kk; q++) {
                double t = op(p.A, p.lda, ta, i, q) * op(p.B, p.ldb, tb, q, j);
                acc += t;
                mag += fabs(t);
            }
            double c0 = beta == 0.0f ? 0 : p.C0[(size_t)i * p.ldc + j];
            p.ref[(size_t)i * s.n + j] = alpha * acc + beta * c0;
            p.bound[(size_t)i * s.n + j] = (s.kk + 2) * KT_U32 * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
        }
    return p;
}

static void release(problem *p) {
    free(p->A), free(p->B), free(p->C0), free(p->ref), free(p->bound);
}

/* Largest |c - ref| / bound over C; padding of C must still be NaN (untouched). */
static double worst_ratio(const problem *p, const float *C, bool *pad_ok) {
    double worst = 0;
    *pad_ok = true;
    for (int i = 0; i < p->m; i++)
        for (int j = 0; j < p->ldc; j++) {
            float c = C[(size_t)i * p->ldc + j];
            if (j >= p->n) {
                if (!isnan(c)) *pad_ok = false;
                continue;
            }
            double e = fabs(c - p->ref[(size_t)i * p->n + j]) / p->bound[(size_t)i * p->n + j];
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    return worst;
}

static float *run(wp_kern *k, const problem *p, bool blas) {
    float *C = kt_floats((size_t)p->m * p->ldc);
    memcpy(C, p->C0, (size_t)p->m * p->ldc * sizeof *C);
    bool was = cpu_gemm_use_blas(k, blas);
    kern_gemm(k, p->ta, p->tb, p->m, p->n, p->kk, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta, C, WP_F32, p->ldc);
    cpu_gemm_use_blas(k, was);
    return C;
}

static void fp32_case(wp_kern *k, wp_kern *k2, kt_rng *r, bool ta, bool tb, shape s, float alpha, float beta, int pad) {
    problem p = make(r, ta, tb, s, alpha, beta, pad);
    char what[128];
    snprintf(what, sizeof what, "op(A)=%s op(B)=%s m=%d n=%d k=%d alpha=%g beta=%g pad=%d", ta ? "A^T" : "A",
             tb ? "B^T" : "B", s.m, s.n, s.kk, alpha, beta, pad);
    bool pad_ok;
    for (int blas = 0; blas <= WP_HAVE_BLAS; blas++) {
        float *C = run(k, &p, blas);
        double w = worst_ratio(&p, C, &pad_ok);
        check_say(w <= 1.0 && pad_ok, "gemm %s %s: max error / bound = %.3f (<= 1), C padding untouched", blas ? "blas" : "fallback",
                  what, w);
        free(C);
    }
    /* the fallback's result does not depend on the thread count */
    float *C1 = run(k, &p, false), *C2 = run(k2, &p, false);
    check_say(kt_same_bits(C1, C2, (size_t)p.m * p.ldc * sizeof *C1), "gemm fallback %s: 1 and 3 threads give the same bits", what);
    free(C1), free(C2);
    release(&p);
}

/* bf16 C: the result is bf16(beta * c0 + fp32 product), rounded once; checked bit for bit
 * against that formula (product from the same fp32 GEMM) and against the fp64 loop within
 * bf16's unit roundoff (2^-8 relative) plus the fp32 bound. */
static void bf16_case(wp_kern *k, kt_rng *r, bool ta, bool tb, shape s, float alpha, float beta) {
    problem p = make(r, ta, tb, s, alpha, beta, 1);
    size_t nc = (size_t)p.m * p.ldc;
    uint16_t *C = kt_alloc(nc * sizeof *C);
    float *c0 = kt_floats(nc), *prod = kt_floats((size_t)p.m * p.n);
    for (size_t i = 0; i < nc; i++) C[i] = wp_f32_to_bf16(p.C0[i]);
    for (size_t i = 0; i < nc; i++) c0[i] = wp_bf16_to_f32(C[i]);
    kern_gemm(k, ta, tb, p.m, p.n, p.kk, alpha, p.A, p.lda, p.B, p.ldb, beta, C, WP_BF16, p.ldc);
    kern_gemm(k, ta, tb, p.m, p.n, p.kk, alpha, p.A, p.lda, p.B, p.ldb, 0.0f, prod, WP_F32, p.n);
    int exact_bad = 0;
    double worst = 0;
    for (int i = 0; i < p.m; i++)
        for (int j = 0; j < p.n; j++) {
            size_t at = (size_t)i * p.ldc + j;
            float want = beta == 0.0f ? prod[(size_t)i * p.n + j] : beta * c0[at] + prod[(size_t)i * p.n + j];
            if (C[at] != wp_f32_to_bf16(want)) exact_bad++;
            double ref = p.ref[(size_t)i * p.n + j]; /* C0 was rounded to bf16 before the call: */
            if (beta != 0.0f) ref += beta * ((double)c0[at] - p.C0[at]);
            double e = fabs(wp_bf16_to_f32(C[at]) - ref) / (0x1p-8 * fabs(ref) + 1.01 * p.bound[(size_t)i * p.n + j]);
            if (e > worst) worst = e;
        }
    check_say(exact_bad == 0 && worst <= 1.0,
              "gemm bf16 C %s%s m=%d n=%d k=%d beta=%g: rounded once (%d differ), error / (bf16 roundoff + bound) = %.3f",
              ta ? "T" : "N", tb ? "T" : "N", s.m, s.n, s.kk, beta, exact_bad, worst);
    free(C), free(c0), free(prod);
    release(&p);
}

int main(void) {
    kt_rng r = {7};
    wp_kern *k = kt_cpu(1), *k3 = kt_cpu(3);
    shape shapes[] = {{1, 1, 1}, {7, 13, 5}, {5, 3, 17}, {65, 70, 257}, {130, 300, 40}, {33, 17, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int t = 0; t < 4; t++) {
            float alpha = i % 2 ? 0.7f : 1.0f, beta = (float)((int)(i + t) % 3) * 0.5f - 0.5f; /* -0.5, 0, 0.5 */
            fp32_case(k, k3, &r, t & 1, t & 2, shapes[i], alpha, beta, (int)(i + t) % 3);
        }
    fp32_case(k, k3, &r, false, false, (shape){64, 256, 256}, -1.25f, 1.0f, 0);
    for (int t = 0; t < 4; t++) {
        bf16_case(k, &r, t & 1, t & 2, (shape){9, 21, 11}, 1.0f, 1.0f);
        bf16_case(k, &r, t & 1, t & 2, (shape){40, 70, 130}, 0.5f, t == 3 ? 0.0f : 1.0f);
    }
    kt_no_error(k, "gemm");
    kern_destroy(k);
    kern_destroy(k3);
    return check_result("kernels/gemm");
}
