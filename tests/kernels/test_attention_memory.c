/* Attention memory is O(s): forward + backward at s = 4096 must grow the peak resident set by
 * far less than one s x s fp32 score matrix per head (64 MiB each at this s). Correctness at
 * this length: sampled output rows against fp64, and two identities of the backward that
 * hold for any input: sum over keys of dV = sum over queries of dO (each softmax row sums to
 * one), and sum over keys of dK = 0 (each row of dS sums to zero). */
#include <errno.h>
#include <sys/resource.h>

#include "kt.h"

enum { S = 4096, NH = 2, NKV = 2, HD = 16 };

static long peak_kib(void) {
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0, "getrusage: %s", strerror(errno));
    return ru.ru_maxrss; /* KiB on Linux */
}

/* O row (query i, head j) in fp64 from the same inputs. */
static void ref_row(const float *q, const float *k, const float *v, int i, int j, double *out) {
    int g = j / (NH / NKV);
    double mx = -INFINITY, sum = 0, scale = 1.0 / sqrt(HD);
    double *s = kt_doubles(i + 1);
    for (int c = 0; c <= i; c++) {
        double acc = 0;
        for (int d = 0; d < HD; d++) acc += (double)q[((size_t)i * NH + j) * HD + d] * k[((size_t)c * NKV + g) * HD + d];
        s[c] = acc * scale;
        mx = s[c] > mx ? s[c] : mx;
    }
    for (int c = 0; c <= i; c++) sum += exp(s[c] - mx);
    for (int c = 0; c <= i; c++) s[c] = exp(s[c] - mx) / sum;
    for (int d = 0; d < HD; d++) {
        double acc = 0;
        for (int c = 0; c <= i; c++) acc += s[c] * v[((size_t)c * NKV + g) * HD + d];
        out[d] = acc;
    }
    free(s);
}

static void check_rows(const float *q, const float *k, const float *v, const float *o) {
    int rows[] = {0, 1, 63, 64, 1000, 2047, 4095};
    double worst = 0, want[HD];
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
        for (int j = 0; j < NH; j++) {
            ref_row(q, k, v, rows[r], j, want);
            double e = kt_rel(o + ((size_t)rows[r] * NH + j) * HD, want, HD);
            if (e > worst) worst = e;
        }
    check_say(worst <= 256 * KT_U32, "attention s=%d: sampled output rows, max rel err %.2e (tol %.1e)", S, worst,
              256 * KT_U32);
}

/* Both identities per (kv head, feature), relative to the size of the terms summed. */
static void check_identities(const float *dout, const float *dk, const float *dv) {
    double worst_v = 0, worst_k = 0;
    for (int g = 0; g < NKV; g++)
        for (int d = 0; d < HD; d++) {
            double sv = 0, so = 0, sk = 0, mag_v = 0, mag_k = 0;
            for (int c = 0; c < S; c++) {
                size_t at = ((size_t)c * NKV + g) * HD + d;
                sv += dv[at], sk += dk[at], mag_v += fabs(dv[at]), mag_k += fabs(dk[at]);
            }
            for (int i = 0; i < S; i++)
                for (int j = g * (NH / NKV); j < (g + 1) * (NH / NKV); j++) so += dout[((size_t)i * NH + j) * HD + d];
            worst_v = fmax(worst_v, fabs(sv - so) / mag_v);
            worst_k = fmax(worst_k, fabs(sk) / mag_k);
        }
    check_say(worst_v <= 1e-5 && worst_k <= 1e-5,
              "attention s=%d bwd: |sum dV - sum dO| / sum|dV| = %.2e, |sum dK| / sum|dK| = %.2e (tol 1e-5)", S, worst_v,
              worst_k);
}

int main(void) {
    kt_rng r = {41};
    size_t nq = (size_t)S * NH * HD, nkv = (size_t)S * NKV * HD;
    float *q = kt_floats(nq), *k = kt_floats(nkv), *v = kt_floats(nkv), *o = kt_floats(nq), *dout = kt_floats(nq);
    float *dq = kt_floats(nq), *dk = kt_floats(nkv), *dv = kt_floats(nkv), *lse = kt_floats((size_t)NH * S);
    kt_fill(&r, q, nq, -2, 2), kt_fill(&r, k, nkv, -2, 2), kt_fill(&r, v, nkv, -1, 1), kt_fill(&r, dout, nq, -1, 1);
    memset(o, 0, nq * 4), memset(dq, 0, nq * 4), memset(dk, 0, nkv * 4), memset(dv, 0, nkv * 4);
    wp_kern *kern = kt_cpu(2);
    /* warm up at s = 64: thread pool, scratch for this head size */
    kern_attention_fwd(kern, o, lse, q, k, v, 1, 64, 64, NH, NKV, HD, NULL);
    kern_attention_bwd(kern, dq, dk, dv, dout, q, k, v, o, lse, 1, 64, 64, NH, NKV, HD, NULL);
    long before = peak_kib();
    kern_attention_fwd(kern, o, lse, q, k, v, 1, S, S, NH, NKV, HD, NULL);
    kern_attention_bwd(kern, dq, dk, dv, dout, q, k, v, o, lse, 1, S, S, NH, NKV, HD, NULL);
    long after = peak_kib();
    kt_no_error(kern, "attention s=4096");
    double matrix_kib = (double)S * S * sizeof(float) / 1024.0;
    printf("attention s=%d nh=%d hd=%d: peak RSS %ld KiB before, %ld KiB after fwd+bwd: growth %ld KiB "
           "(q is %zu KiB; the kernels keep a few repacked copies of the inputs); "
           "one s x s fp32 matrix per head would be %.0f KiB (%.0f KiB for %d heads)\n",
           S, NH, HD, before, after, after - before, nq * sizeof(float) / 1024, matrix_kib, NH * matrix_kib, NH);
    check_say(after - before < matrix_kib / 16, "attention s=%d: RSS growth %ld KiB < %.0f KiB (1/16 of one s x s matrix)",
              S, after - before, matrix_kib / 16);
    check_rows(q, k, v, o);
    check_identities(dout, dk, dv);
    kern_destroy(kern);
    free(q), free(k), free(v), free(o), free(dout), free(dq), free(dk), free(dv), free(lse);
    return check_result("kernels/attention_memory");
}
