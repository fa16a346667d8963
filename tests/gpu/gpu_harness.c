/* Helpers of the GPU tests (see gpu_harness.h). */
#include "gpu_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gh_require_gpu(const char *test) {
    char why[256];
    if (kern_available(WP_BACKEND_CUDA, why, sizeof why)) return 0;
    printf("skip: %s needs a CUDA GPU: %s\n", test, why);
    return GH_SKIP;
}

void gh_ok(wp_kern *k, const char *where) {
    const char *e = kern_error(k);
    CHECK(!e, "%s: %s", where, e);
}

void gh_open(gh_pair *p, wp_dtype ct) { gh_open_attn(p, ct, WP_ATTN_AUTO); }

void gh_open_attn(gh_pair *p, wp_dtype ct, wp_attn_impl attn) {
    char err[512];
    /* the reference on 8 threads: the long cases (attention at s = 4096) stay seconds */
    wp_kern_opts cpu = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 8, .device = 0};
    wp_kern_opts gpu = {.kind = WP_BACKEND_CUDA, .compute = ct, .threads = 1, .device = 0, .attention = attn};
    p->ct = ct;
    p->cpu = kern_create(&cpu, err, sizeof err);
    CHECK(p->cpu, "cpu context: %s", err);
    p->gpu = kern_create(&gpu, err, sizeof err);
    CHECK(p->gpu, "cuda context (%s): %s", wp_dtype_name(ct), err);
}

void gh_close(gh_pair *p) {
    kern_destroy(p->gpu);
    kern_destroy(p->cpu);
}

double gh_unit_roundoff(wp_dtype t) { return t == WP_F16 ? 0x1p-11 : t == WP_BF16 ? 0x1p-8 : 0x1p-24; }

float *gh_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    CHECK(p, "out of host memory (%zu floats)", n);
    return p;
}

void gh_fill(wp_rng *g, float *x, size_t n, float scale, wp_dtype t) {
    for (size_t i = 0; i < n; i++) x[i] = wp_round_to((float)((2.0 * rng_uniform(g) - 1.0) * scale), t);
}

void *gh_upload(wp_kern *k, const float *host, size_t n, wp_dtype t) {
    size_t es = wp_dtype_size(t);
    void *dev = kern_alloc(k, n * es);
    void *staging = malloc(n * es + 1);
    CHECK(dev && staging, "upload of %zu elements: %s", n, kern_error(k) ? kern_error(k) : "out of host memory");
    if (t == WP_F32) {
        memcpy(staging, host, n * es);
    } else {
        uint16_t *h = staging;
        for (size_t i = 0; i < n; i++) h[i] = t == WP_F16 ? wp_f32_to_f16(host[i]) : wp_f32_to_bf16(host[i]);
    }
    kern_to_device(k, dev, staging, n * es);
    free(staging);
    gh_ok(k, "upload");
    return dev;
}

void gh_download(wp_kern *k, float *host, const void *dev, size_t n, wp_dtype t) {
    size_t es = wp_dtype_size(t);
    if (t == WP_F32) {
        kern_to_host(k, host, dev, n * es);
        gh_ok(k, "download");
        return;
    }
    uint16_t *h = malloc(n * es + 1);
    CHECK(h, "out of host memory");
    kern_to_host(k, h, dev, n * es);
    gh_ok(k, "download");
    for (size_t i = 0; i < n; i++) host[i] = t == WP_F16 ? wp_f16_to_f32(h[i]) : wp_bf16_to_f32(h[i]);
    free(h);
}

void *gh_upload_ints(wp_kern *k, const int32_t *host, size_t n) {
    void *dev = kern_alloc(k, n * sizeof(int32_t));
    if (!dev) gh_ok(k, "upload of ints");
    kern_to_device(k, dev, host, n * sizeof(int32_t));
    gh_ok(k, "upload of ints");
    return dev;
}

void *gh_out(wp_kern *k, size_t bytes) {
    void *dev = kern_alloc(k, bytes);
    unsigned char *poison = malloc(bytes + 1);
    CHECK(dev && poison, "output of %zu bytes: %s", bytes, kern_error(k) ? kern_error(k) : "out of host memory");
    memset(poison, 0xFF, bytes);
    kern_to_device(k, dev, poison, bytes);
    free(poison);
    gh_ok(k, "poisoned output");
    return dev;
}

double gh_rel_l2(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

void gh_expect_attn_grads(gh_pair *p, void *const cpu[3], void *const gpu[3], size_t nq, size_t nkv, wp_dtype ct,
                          float *ref, float *got, double bound, const char *shape) {
    const char *names[3] = {"dq", "dk", "dv"};
    const size_t counts[3] = {nq, nkv, nkv};
    char what[256];
    for (int i = 0; i < 3; i++) {
        gh_download(p->cpu, ref, cpu[i], counts[i], WP_F32);
        gh_download(p->gpu, got, gpu[i], counts[i], ct);
        snprintf(what, sizeof what, "attention_bwd %s %s", names[i], shape);
        gh_expect(what, got, ref, counts[i], bound);
    }
}

void gh_expect(const char *what, const float *got, const float *ref, size_t n, double bound) {
    size_t i = 0;
    while (i < n && (isfinite(got[i]) || !isfinite(ref[i]))) i++;
    if (i < n) {
        check_say(false, "%s: element %zu is %g (reference %g)", what, i, got[i], ref[i]);
        return;
    }
    double e = gh_rel_l2(got, ref, n);
    check_say(e <= bound, "%s: rel L2 error %.3g (bound %.3g)", what, e, bound);
}

void gh_expect_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    const unsigned char *x = a, *y = b;
    size_t i = 0;
    while (i < bytes && x[i] == y[i]) i++;
    if (i < bytes) check_say(false, "%s: first differing byte %zu of %zu", what, i, bytes);
    else check_say(true, "%s: %zu bytes identical", what, bytes);
}
