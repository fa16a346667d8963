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
/* Add a line to kern_notes unless it is there already (a choice the user should hear of once). */
void cu_note(wp_kern *k, const char *fmt, ...);

/* At least bytes of device memory in the given slot (valid until the next call that asks the
 * same slot for more); NULL and an error on failure. */
void *cu_scratch(wp_kern *k, wp_scratch_slot slot, size_t bytes);

/* Largest grid for grid-stride elementwise kernels: enough blocks to fill the device. */
unsigned cu_grid_for(const wp_cuda *c, size_t n, unsigned threads);

/* Device and compute-capability probe behind kern_available(WP_BACKEND_CUDA). */
bool cu_probe(char *why, size_t whylen);

/* ---- the ops (kernels.h semantics; see there) ---- */
int cu_init(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen);
void cu_fini(wp_kern *k);
void *cu_alloc(wp_kern *k, size_t bytes);
void cu_free(wp_kern *k, void *p);
void cu_to_device(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_to_host(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_copy(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_zero(wp_kern *k, void *p, size_t bytes);
void cu_sync(wp_kern *k);
void cu_convert(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n);
void cu_accumulate(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n);
void cu_scale(wp_kern *k, void *x, wp_dtype t, float a, size_t n);
double cu_sumsq(wp_kern *k, const void *x, wp_dtype t, size_t n);
void cu_add(wp_kern *k, void *y, const void *a, const void *b, size_t n);
void cu_gemm(wp_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha, const void *A, int lda,
             const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc);
void cu_rmsnorm_fwd(wp_kern *k, void *y, float *rstd, const void *x, const void *w, int T, int h, float eps);
void cu_rmsnorm_bwd_input(wp_kern *k, void *dx, bool accumulate, const void *dy, const void *x, const void *w,
                          const float *rstd, int T, int h);
void cu_rmsnorm_bwd_weight(wp_kern *k, void *dw, wp_dtype dwtype, const void *dy, const void *x,
                           const float *rstd, int T, int h);
void cu_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc);
void cu_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc);
void cu_attention_fwd(wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v, int b,
                      int sq, int skv, int nh, int nkv, int hd);
void cu_attention_bwd(wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q,
                      const void *kv_k, const void *kv_v, const void *o, const float *lse, int b, int sq,
                      int skv, int nh, int nkv, int hd);
void cu_swiglu_fwd(wp_kern *k, void *y, const void *gate, const void *up, size_t n);
void cu_swiglu_bwd(wp_kern *k, void *dgate, void *dup, const void *dy, const void *gate, const void *up,
                   size_t n);
void cu_embedding_fwd(wp_kern *k, void *y, const int32_t *tokens, const void *wte, int T, int h);
void cu_embedding_bwd(wp_kern *k, void *dwte, wp_dtype dwtype, const int32_t *tokens, const void *dy, int T,
                      int h);
void cu_lmhead_ce_fwd(wp_kern *k, float *losses, float *lse, const void *x, const void *w_head,
                      const int32_t *targets, int T, int h, int V);
void cu_lmhead_ce_bwd(wp_kern *k, void *dx, void *dlogits_out, void *dw_head, wp_dtype dwtype, const void *x,
                      const void *w_head, const int32_t *targets, const float *lse, float dloss, int T, int h,
                      int V);
void cu_adamw(wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale, void *w_out,
              wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
              float bc1, float bc2);

/* ---- streams.h (events.c) ---- */
void *cu_event_create(wp_kern *k);
void cu_event_destroy(wp_kern *k, void *ev);
void cu_event_record(wp_kern *k, void *ev);
bool cu_event_done(wp_kern *k, void *ev);
void cu_event_wait(wp_kern *k, void *ev);
void *cu_host_alloc(wp_kern *k, size_t bytes);
void cu_host_free(wp_kern *k, void *p);
void cu_to_device_async(wp_kern *k, void *dst, const void *src, size_t bytes);
void cu_to_host_async(wp_kern *k, void *dst, const void *src, size_t bytes);
int cu_device(const wp_kern *k);
int cu_mem_info(wp_kern *k, size_t *free_bytes, size_t *total_bytes);

/* ---- helpers shared between files ---- */
/* C[i] = round(acc[i] + beta * C[i]) for an m x n row-major C (row stride ldc) in ctype, where
 * acc is a dense fp32 [m, n]: the GEMM's path for output dtypes cuBLAS cannot write. */
int cu_gemm_epilogue(wp_kern *k, void *C, wp_dtype ctype, int ldc, const float *acc, float beta, int m, int n);

#ifdef __cplusplus
}
#endif

#endif
