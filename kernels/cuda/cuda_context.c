/* CUDA backend: context lifetime (device, stream, cuBLAS handle, scratch), the device probe
 * behind kern_available, and the checks that feed the sticky error. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_impl.h"
#if WP_HAVE_CUDNN
#include "attention_cudnn.h"
#endif

#define WP_CUBLAS_WORKSPACE WP_CUDA_BLAS_WORKSPACE /* kernels.h */

int cu_check(wp_kern *k, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    kern_set_error(k, "cuda: %s failed at %s:%d: %s", call, file, line, cudaGetErrorString(e));
    return -1;
}

int cu_blas_check(wp_kern *k, cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    kern_set_error(k, "cublas: %s failed at %s:%d: %s", call, file, line, cublasGetStatusString(s));
    return -1;
}

int cu_fail(wp_kern *k, const char *kernel, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    kern_set_error(k, "cuda: %s: %s", kernel, what);
    return -1;
}

wp_cuda *cu_ctx(wp_kern *k) {
    wp_cuda *c = k->impl;
    if (CU_CHECK(k, cudaSetDevice(c->device))) return NULL;
    /* Drop a stale non-sticky error (say, one that teardown deliberately ignored) so that the
     * launch checks of this call report this call's launches; a sticky error (a fault in an
     * earlier kernel) cannot be cleared and still surfaces. */
    (void)cudaGetLastError();
    return c;
}

unsigned cu_grid_for(const wp_cuda *c, size_t n, unsigned threads) {
    size_t want = (n + threads - 1) / threads, most = (size_t)c->sm_count * 16;
    if (want < 1) want = 1;
    return (unsigned)(want < most ? want : most);
}

void *cu_scratch(wp_kern *k, wp_scratch_slot slot, size_t bytes) {
    wp_cuda *c = k->impl;
    if (bytes <= c->scratch_bytes[slot]) return c->scratch[slot];
    /* Not inside a graph's capture (replay.h): the stream-ordered malloc would become the
     * graph's own allocation, gone with a recording that is thrown away. Refused, the recording
     * fails (its reason is this message) and the span runs eagerly, growing the buffer then. */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (CU_CHECK(k, cudaStreamIsCapturing(c->stream, &cap))) return NULL;
    if (cap != cudaStreamCaptureStatusNone) {
        cu_fail(k, "scratch", "%zu bytes wanted while a graph is captured (%zu held)", bytes, c->scratch_bytes[slot]);
        return NULL;
    }
    /* Stream-ordered free and malloc: work already queued on the stream finishes with the old
     * buffer before its memory is reused, without stalling the host. */
    if (c->scratch[slot] && CU_CHECK(k, cudaFreeAsync(c->scratch[slot], c->stream))) return NULL;
    kern_mem_add(k, -(int64_t)c->scratch_bytes[slot]);
    c->scratch[slot] = NULL;
    c->scratch_bytes[slot] = 0;
    size_t grown = bytes + bytes / 4;
    if (CU_CHECK(k, cudaMallocAsync(&c->scratch[slot], grown, c->stream))) {
        c->scratch[slot] = NULL;
        return NULL;
    }
    c->scratch_bytes[slot] = grown;
    kern_mem_add(k, (int64_t)grown);
    kern_replay_stale(k); /* recorded graphs point at the old buffer */
    return c->scratch[slot];
}

bool cu_probe(char *why, size_t whylen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return false;
    }
    if (count == 0) {
        snprintf(why, whylen, "no CUDA device (cudaGetDeviceCount: 0 devices)");
        return false;
    }
    if (whylen) why[0] = '\0';
    return true;
}

bool kern_cuda_probe(char *why, size_t whylen) { return cu_probe(why, whylen); }

int kern_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
    return count;
}

static wp_result init_fail(char *err, size_t errlen, const char *what, cudaError_t e) {
    snprintf(err, errlen, "cuda: %s: %s", what, cudaGetErrorString(e));
    return WP_FAILED;
}

/* Device selection and properties; err names the culprit. */
static wp_result init_device(wp_cuda *c, wp_kern *k, int device, char *err, size_t errlen) {
    if (!cu_probe(err, errlen)) return WP_FAILED;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return init_fail(err, errlen, "cudaGetDeviceCount", e);
    if (device < 0 || device >= count) {
        snprintf(err, errlen, "cuda: device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
        return WP_FAILED;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) return init_fail(err, errlen, "cudaSetDevice", e);
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess)
        return init_fail(err, errlen, "cudaGetDeviceProperties", e);
    /* bf16 arithmetic, and the sm_80/sm_90 code this build carries, need Ampere or newer. */
    if (p.major < 8) {
        snprintf(err, errlen, "cuda: device %d (%s) has compute capability %d.%d; weipipe needs 8.0 or newer",
                 device, p.name, p.major, p.minor);
        return WP_FAILED;
    }
    c->device = device;
    snprintf(k->device_name, sizeof k->device_name, "%s", p.name); /* MFU's peak (src/runtime/peak.c) */
    c->sm_count = p.multiProcessorCount;
    c->smem_optin = p.sharedMemPerBlockOptin;
    return 0;
}

static wp_result init_handles(wp_cuda *c, char *err, size_t errlen) {
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return init_fail(err, errlen, "cudaStreamCreateWithFlags", e);
    if ((e = cudaMallocHost((void **)&c->host_result, sizeof(double))) != cudaSuccess)
        return init_fail(err, errlen, "cudaMallocHost", e);
    if ((e = cudaMalloc(&c->blas_workspace, WP_CUBLAS_WORKSPACE)) != cudaSuccess)
        return init_fail(err, errlen, "cudaMalloc (cuBLAS workspace)", e);
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->stream);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetWorkspace(c->blas, c->blas_workspace, WP_CUBLAS_WORKSPACE);
    /* fp32 accumulation everywhere, also inside split-K reductions of fp16/bf16 products. */
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(c->blas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublas: setting up the handle failed: %s", cublasGetStatusString(s));
        return WP_FAILED;
    }
    return 0;
}

/* Releases whatever init got to; teardown has no one left to report to, so results are
 * deliberately not checked. */
static void release(wp_cuda *c) {
    if (c->device >= 0) (void)cudaSetDevice(c->device);
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
#if WP_HAVE_CUDNN
    cudnn_attn_destroy(c->cudnn);
#endif
    for (int s = 0; s < WP_SCRATCH_SLOTS; s++)
        if (c->scratch[s]) (void)cudaFree(c->scratch[s]);
    if (c->blas) (void)cublasDestroy(c->blas);
    if (c->blas_workspace) (void)cudaFree(c->blas_workspace);
    if (c->host_result) (void)cudaFreeHost(c->host_result);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    free(c);
}

wp_result cu_init(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen) {
    if (opts->compute != WP_F16 && opts->compute != WP_BF16 && opts->compute != WP_F32) {
        snprintf(err, errlen, "cuda: compute dtype %d is not fp16, bf16 or fp32", (int)opts->compute);
        return WP_FAILED;
    }
    wp_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cuda: out of host memory for the context");
        return WP_FAILED;
    }
    c->device = -1;
    c->attention = opts->attention;
    c->nondeterministic = opts->nondeterministic;
    if (init_device(c, k, opts->device, err, errlen) || init_handles(c, err, errlen)) {
        release(c);
        return WP_FAILED;
    }
    k->impl = c;
    k->compute = opts->compute;
    kern_mem_add(k, WP_CUBLAS_WORKSPACE); /* kern_memory: ours, handed to cuBLAS */
    return 0;
}

void cu_fini(wp_kern *k) {
    if (k->impl) release(k->impl);
    k->impl = NULL;
}

cudaStream_t kern_cuda_stream(wp_kern *k) { return ((wp_cuda *)k->impl)->stream; }

int kern_cuda_device(const wp_kern *k) { return ((const wp_cuda *)k->impl)->device; }
