/* Private to kernels/cuda: the state behind wp_kern->impl for the CUDA backend, the checks
 * that turn CUDA and cuBLAS failures into the context's sticky error, and the ops that the
 * table in ops.c collects. Shared by the C host files and the .cu kernel files. */
#ifndef WP_CUDA_IMPL_H
#define WP_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wp_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"

/* Scratch buffers are grown on demand and reused; one slot per nesting level, so that an op
 * that holds WP_SCRATCH_OP (the LM head's logit block) can still call the GEMM, which may
 * need WP_SCRATCH_GEMM. */
typedef enum { WP_SCRATCH_OP = 0, WP_SCRATCH_GEMM, WP_SCRATCH_SLOTS } wp_scratch_slot;

typedef struct {
    int device;
    int sm_count;
    size_t smem_optin;       /* most dynamic shared memory one block may ask for */
    cudaStream_t stream;     /* every kernel, copy and cuBLAS call of this context */
    cublasHandle_t blas;
    void *blas_workspace;    /* our own, so cuBLAS never allocates behind the stream's back */
    void *scratch[WP_SCRATCH_SLOTS];
    size_t scratch_bytes[WP_SCRATCH_SLOTS];
    double *host_result;     /* pinned, for sumsq's one value */
    wp_attn_impl attention;  /* wp_kern_opts.attention */
    bool nondeterministic;   /* wp_kern_opts.nondeterministic: cuDNN's faster attention backward */
    struct wp_cudnn_attn *cudnn; /* made at the first attention call that may use it */
    bool cudnn_tried;        /* ... once: cudnn_why keeps why it could not be made */
    char cudnn_why[256];
    size_t cudnn_workspace;  /* its bytes as last counted into kern_memory */
} wp_cuda;

/* The context's state, after making its device current for the calling thread (ranks may
 * run as threads that share a process). NULL (and an error) if that fails. */
wp_cuda *cu_ctx(wp_kern *k);

/* 0 on success; else record "cuda: CALL failed at FILE:LINE: MESSAGE" and return -1. */
int cu_check(wp_kern *k, cudaError_t e, const char *call, const char *file, int line);
int cu_blas_check(wp_kern *k, cublasStatus_t s, const char *call, const char *file, int line);
#define CU_CHECK(k, call) cu_check((k), (call), #call, __FILE__, __LINE__)
#define CU_BLAS_CHECK(k, call) cu_blas_check((k), (call), #call, __FILE__, __LINE__)
/* After a kernel launch: catches bad launch configurations at once; faults inside the kernel
 * surface at the next synchronising call (kern_sync, kern_to_host, sumsq). */
#define CU_LAUNCH_CHECK(k, kernel) cu_check((k), cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)

/* Record "cuda: KERNEL: WHAT" (bad argument or unsupported shape); returns -1. */
int cu_fail(wp_kern *k, const char *kernel, const char *fmt, ...);

/* At least bytes of device memory in the given slot (valid until the next call that asks the
 * same slot for more); NULL and an error on failure. */
void *cu_scratch(wp_kern *k, wp_scratch_slot slot, size_t bytes);

/* Largest grid for grid-stride elementwise kernels: enough blocks to fill the device. */
unsigned cu_grid_for(const wp_cuda *c, size_t n, unsigned threads);

/* Device and compute-capability probe behind kern_available(WP_BACKEND_CUDA). */
bool cu_probe(char *why, size_t whylen);

/* ---- the ops (kernels.h semantics; see there) ---- */
wp_result cu_init(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen);
void cu_fini(wp_kern *k);
void *cu_alloc(wp_kern *k, size_t bytes);
void cu_free(wp_kern *k, void *p);
void cu_to_device(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_to_host(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_copy(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_zero(wp_kern *k, void *p, size_t bytes);
void cu_sync(wp_kern *k);
/* the compute ops: cu_<name> for each row of ops_table.h */
#define CU_OP_DECL(ret, name, params, ...) ret cu_##name params;
WP_KERN_OPS(CU_OP_DECL, CU_OP_DECL)
#undef CU_OP_DECL

/* ---- streams.h (events.c) ---- */
void *cu_event_create(wp_kern *k);
void cu_event_destroy(wp_kern *k, void *ev);
void cu_event_record(wp_kern *k, void *ev);
bool cu_event_done(wp_kern *k, void *ev);
void cu_event_wait(wp_kern *k, void *ev);
void *cu_timer_create(wp_kern *k);
int cu_timer_elapsed(wp_kern *k, void *a, void *b, double *seconds);
void *cu_host_alloc(wp_kern *k, size_t bytes);
void cu_host_free(wp_kern *k, void *p);
void cu_to_device_async(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_to_host_async(wp_kern *k, void *dst, const void *src, size_t bytes);
int cu_device(const wp_kern *k);
int cu_mem_info(wp_kern *k, size_t *free_bytes, size_t *total_bytes);
/* Document masks (kern_attention_docs): the list of documents for cuDNN (attention.cu). */
void cu_attention_docs(wp_kern *k, const int32_t *qlo, const int32_t *host_lo, int b, int s);
/* replay.h's graphs (cuda_graph.c) */
int cu_graph_begin(wp_kern *k, char *why, size_t whylen);
int cu_graph_end(wp_kern *k, void **graph, char *why, size_t whylen);
void cu_graph_launch(wp_kern *k, void *graph);
void cu_graph_free(wp_kern *k, void *graph);

/* ---- helpers shared between files ---- */
/* C[i] = round(acc[i] + beta * C[i]) for an m x n row-major C (row stride ldc) in ctype, where
 * acc is a dense fp32 [m, n]: the GEMM's path for output dtypes cuBLAS cannot write. */
int cu_gemm_epilogue(wp_kern *k, void *C, wp_dtype ctype, int ldc, const float *acc, float beta, int m, int n);

#ifdef __cplusplus
}
#endif

#endif
