/* Sticky errors and argument checks: each bad call sets an error naming the kernel and the
 * argument, nothing crashes, the first error is the one kept, and every later call is a no-op
 * (buffers stay as they were, allocation returns NULL). */
#include "kt.h"
#include "wp_config.h"

/* Runs `call` on a fresh context and checks that the error names `kernel` and `arg`. */
#define EXPECT_ERROR(kernel, arg, call)                                                                      \
    do {                                                                                                     \
        wp_kern *k = kt_cpu(1);                                                                              \
        call;                                                                                                \
        const char *e = kern_error(k);                                                                       \
        check_say(e && strstr(e, kernel) && strstr(e, arg), "%s with bad %s: error \"%s\"", kernel, arg,     \
                  e ? e : "(none)");                                                                         \
        kern_destroy(k);                                                                                     \
    } while (0)

static void bad_arguments(void) {
    float a[64] = {0}, b[64] = {0}, c[64] = {0}, lse[8] = {0};
    int32_t tok[4] = {0, 1, -3, 2}, tgt[4] = {0, 9, 1, -1};
    EXPECT_ERROR("kern_gemm", "lda", kern_gemm(k, false, false, 4, 4, 5, 1, a, 4, b, 4, 0, c, WP_F32, 4));
    EXPECT_ERROR("kern_gemm", "ldb", kern_gemm(k, false, true, 4, 4, 5, 1, a, 5, b, 4, 0, c, WP_F32, 4));
    EXPECT_ERROR("kern_gemm", "ldc", kern_gemm(k, false, false, 2, 6, 2, 1, a, 2, b, 6, 0, c, WP_F32, 5));
    EXPECT_ERROR("kern_gemm", "kk", kern_gemm(k, false, false, 2, 2, -1, 1, a, 2, b, 2, 0, c, WP_F32, 2));
    EXPECT_ERROR("kern_gemm", "C", kern_gemm(k, false, false, 2, 2, 2, 1, a, 2, b, 2, 0, NULL, WP_F32, 2));
    EXPECT_ERROR("kern_gemm", "ctype", kern_gemm(k, false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, WP_F16, 2));
    EXPECT_ERROR("kern_rmsnorm_fwd", "T", kern_rmsnorm_fwd(k, a, lse, b, c, -2, 4, 1e-5f));
    EXPECT_ERROR("kern_rmsnorm_fwd", "rstd", kern_rmsnorm_fwd(k, a, NULL, b, c, 2, 4, 1e-5f));
    EXPECT_ERROR("kern_rmsnorm_bwd_weight", "dwtype", kern_rmsnorm_bwd_weight(k, a, WP_F16, b, c, lse, 2, 4));
    EXPECT_ERROR("kern_rope_fwd", "hd", kern_rope_fwd(k, a, 1, 2, 2, 5, 0, 10000.0f));
    EXPECT_ERROR("kern_rope_bwd", "theta", kern_rope_bwd(k, a, 1, 2, 2, 4, 0, 0.0f));
    const wp_rope_scaling low_above_high = {8, 4, 1, 8192};
    EXPECT_ERROR("kern_rope_fwd", "rope scaling", kern_rope_fwd_scaled(k, a, 1, 2, 2, 4, 0, 10000.0f, &low_above_high, NULL));
    EXPECT_ERROR("kern_attention_fwd", "nkv", kern_attention_fwd(k, a, lse, b, c, c, 1, 2, 2, 3, 2, 4, NULL));
    EXPECT_ERROR("kern_attention_fwd", "skv", kern_attention_fwd(k, a, lse, b, c, c, 1, 4, 2, 2, 2, 4, NULL));
    EXPECT_ERROR("kern_attention_bwd", "lse",
                 kern_attention_bwd(k, a, b, c, a, b, c, c, a, NULL, 1, 2, 2, 2, 2, 4, NULL));
    EXPECT_ERROR("kern_swiglu_bwd", "dup", kern_swiglu_bwd(k, a, NULL, b, c, a, 4));
    EXPECT_ERROR("kern_embedding_fwd", "tokens[2]", kern_embedding_fwd(k, a, tok, b, 4, 2));
    EXPECT_ERROR("kern_embedding_bwd", "tokens[2]", kern_embedding_bwd(k, a, WP_F32, tok, b, 4, 2));
    EXPECT_ERROR("kern_lmhead_ce_fwd", "targets[1]", kern_lmhead_ce_fwd(k, a, lse, b, c, tgt, 4, 2, 5));
    EXPECT_ERROR("kern_lmhead_ce_bwd", "V", kern_lmhead_ce_bwd(k, a, NULL, NULL, WP_F32, b, c, tgt, lse, 1, 4, 2, 0));
    EXPECT_ERROR("kern_adamw", "grad", kern_adamw(k, a, b, c, NULL, 1, a, WP_F32, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0, 0.1f, 0.05f));
    EXPECT_ERROR("kern_adamw_multi", "pieces", kern_adamw_multi(k, NULL, 2, 8, 1, WP_F32, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f));
    EXPECT_ERROR("kern_adamw_multi", "bias corrections",
                 kern_adamw_multi(k, (const wp_adamw_piece *)a, 1, 4, 1, WP_F32, 1e-3f, 0.9f, 0.95f, 1e-8f, 0, 0.05f));
    EXPECT_ERROR("kern_convert", "dt", kern_convert(k, a, (wp_dtype)7, b, WP_F32, 4));
    EXPECT_ERROR("kern_copy", "src", kern_copy(k, a, NULL, 16));
}

static void sticky(void) {
    wp_kern *k = kt_cpu(1);
    check_say(kern_error(k) == NULL, "fresh context has no error");
    kern_set_error(k, "first failure %d", 1);
    kern_set_error(k, "second failure");
    check_say(kern_error(k) && !strcmp(kern_error(k), "first failure 1"), "the first error is kept: \"%s\"",
              kern_error(k));
    float x[16], y[16], keep[16];
    for (int i = 0; i < 16; i++) x[i] = (float)i + 0.5f, y[i] = 2.0f;
    memcpy(keep, x, sizeof x);
    kern_scale(k, x, WP_F32, 3.0f, 16);
    kern_add(k, x, x, y, 16);
    kern_swiglu_fwd(k, x, y, y, 16);
    kern_copy(k, x, y, sizeof x);
    check_say(!memcmp(x, keep, sizeof x), "after an error, kernels leave their outputs alone");
    check_say(kern_alloc(k, 64) == NULL, "after an error, kern_alloc returns NULL");
    check_say(isnan(kern_sumsq(k, y, WP_F32, 16)), "after an error, kern_sumsq returns NaN");
    kern_destroy(k);

    k = kt_cpu(1);
    kern_rope_fwd(k, x, 1, 2, 2, 3, 0, 10000.0f); /* odd hd: error */
    memcpy(keep, x, sizeof x);
    kern_rope_fwd(k, x, 1, 2, 2, 4, 0, 10000.0f); /* valid, but the context has failed */
    check_say(!memcmp(x, keep, sizeof x) && strstr(kern_error(k), "hd"), "a failed argument check is sticky too");
    kern_destroy(k);
    check_say(kern_error(NULL) != NULL, "kern_error(NULL) reports the missing context");
}

static void contexts(void) {
    char why[256] = "";
    check_say(kern_available(WP_BACKEND_CPU, why, sizeof why), "the CPU backend is available");
    wp_kern_opts o = {.kind = WP_BACKEND_CPU, .compute = WP_BF16, .threads = 0};
    char err[256] = "";
    wp_kern *k = kern_create(&o, err, sizeof err);
    check_say(k && kern_compute_dtype(k) == WP_F32 && kern_kind(k) == WP_BACKEND_CPU,
              "CPU context asked for bf16 computes in fp32");
    void *p = kern_alloc(k, 1000);
    size_t zeros = 0;
    for (int i = 0; p && i < 1000; i++) zeros += ((unsigned char *)p)[i] == 0;
    check_say(p && ((uintptr_t)p % 64) == 0 && zeros == 1000, "kern_alloc: 64-byte aligned and zeroed");
    kern_free(k, p);
    kern_destroy(k);
    o.threads = -1;
    check_say(kern_create(&o, err, sizeof err) == NULL && strstr(err, "threads"), "negative threads refused: \"%s\"",
              err);
#if !WP_HAVE_CUDA
    o.kind = WP_BACKEND_CUDA, o.threads = 0;
    check_say(kern_create(&o, err, sizeof err) == NULL && strstr(err, "cuda"), "CUDA context without CUDA: \"%s\"", err);
    check_say(!kern_available(WP_BACKEND_CUDA, why, sizeof why) && strstr(why, "cuda"), "CUDA not available: \"%s\"",
              why);
#endif
}

int main(void) {
    bad_arguments();
    sticky();
    contexts();
    return check_result("kernels/errors");
}
