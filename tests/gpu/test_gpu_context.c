/* The CUDA backend's context and error handling. Runs on every machine:
 * - without a usable GPU, kern_available(WP_BACKEND_CUDA) says why ("no CUDA device
 *   (cudaGetDeviceCount: ...)", or that the build has no CUDA) and kern_create fails cleanly
 *   with the same kind of message;
 * - with one, contexts of each compute dtype come up with their own stream, a missing device
 *   ordinal is refused by name, and failures (an impossible allocation, an unsupported head
 *   size) land in the sticky error with the failing call named, after which kernels are
 *   no-ops. */
#include <stdio.h>
#include <string.h>

#include "gpu_harness.h"
#include "wp_config.h"
#if WP_HAVE_CUDA
#include "cuda_backend.h"
#endif

static void without_gpu(const char *why) {
#if WP_HAVE_CUDA
    /* no device at all, or one too old for this build's sm_80 / sm_90 code */
    bool clear = strncmp(why, "no CUDA device (cudaGetDeviceCount: ", 36) == 0 || strstr(why, "compute capability");
    check_say(clear, "kern_available says: %s", why);
#else
    check_say(strstr(why, "without the CUDA backend") != NULL, "kern_available says: %s", why);
#endif
    char err[512] = "";
    wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = WP_BF16, .threads = 1, .device = 0};
    wp_kern *k = kern_create(&o, err, sizeof err);
    check_say(k == NULL && strncmp(err, why, 16) == 0, "kern_create fails with: %s", err);
    if (k) kern_destroy(k);
}

#if WP_HAVE_CUDA
static void with_gpu(void) {
    char err[512] = "";
    const wp_dtype cts[] = {WP_F16, WP_BF16, WP_F32};
    for (int i = 0; i < 3; i++) {
        wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = cts[i], .threads = 1, .device = 0};
        wp_kern *k = kern_create(&o, err, sizeof err);
        check_say(k && kern_compute_dtype(k) == cts[i] && kern_kind(k) == WP_BACKEND_CUDA && kern_cuda_stream(k),
                  "context with %s compute, its own stream", wp_dtype_name(cts[i]));
        if (k) kern_destroy(k);
    }
    wp_kern_opts bad = {.kind = WP_BACKEND_CUDA, .compute = WP_BF16, .threads = 1, .device = 9999};
    wp_kern *none = kern_create(&bad, err, sizeof err);
    check_say(!none && strstr(err, "device 9999 does not exist"), "device 9999 refused: %s", err);
    if (none) kern_destroy(none);

    wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = WP_BF16, .threads = 1, .device = 0};
    wp_kern *k = kern_create(&o, err, sizeof err);
    if (!k) {
        check_say(false, "context: %s", err);
        return;
    }
    void *huge = kern_alloc(k, (size_t)1 << 60);
    const char *e = kern_error(k);
    check_say(!huge && e && strstr(e, "cudaMalloc"), "impossible allocation: %s", e ? e : "(no error)");
    kern_destroy(k);

    k = kern_create(&o, err, sizeof err);
    if (!k) {
        check_say(false, "context: %s", err);
        return;
    }
    const int hd = 320; /* above what either attention implementation supports */
    void *buf = kern_alloc(k, (size_t)4 * hd * 2);
    float *lse = kern_alloc(k, 64);
    kern_attention_fwd(k, buf, lse, buf, buf, buf, 1, 4, 4, 1, 1, hd, NULL);
    e = kern_error(k);
    check_say(e && strstr(e, "head size 320"), "unsupported head size: %s", e ? e : "(no error)");
    char first[512];
    snprintf(first, sizeof first, "%s", e ? e : "");
    kern_scale(k, buf, WP_BF16, 2.0f, 8);
    kern_sync(k);
    check_say(kern_error(k) && strcmp(kern_error(k), first) == 0, "the first error sticks: %s", first);
    kern_destroy(k); /* buffers go with the context's device memory on exit */
}
#endif

int main(void) {
    char why[256] = "";
    if (!kern_available(WP_BACKEND_CUDA, why, sizeof why)) {
        printf("no usable CUDA device; checking that this is reported cleanly\n");
        without_gpu(why);
    } else {
#if WP_HAVE_CUDA
        with_gpu();
#else
        check_say(false, "%s", "kern_available(CUDA) is true in a build without CUDA");
#endif
    }
    return check_result("gpu/context");
}
