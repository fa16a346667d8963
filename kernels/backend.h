/* Private to kernels/: how kernels.h dispatches to a backend. Each backend fills one
 * wp_kern_ops table; kernels/dispatch.c implements kernels.h by checking the sticky error,
 * then calling through the table. Signatures mirror kernels.h without the wp_kern prefix
 * argument being special: every op receives the context first. */
#ifndef WP_KERNELS_BACKEND_H
#define WP_KERNELS_BACKEND_H

#include "kernels.h"
#include "wp_config.h"

typedef struct wp_kern_ops {
    const char *name;
    /* lifetime: init fills k->impl; fini releases it */
    int (*init)(wp_kern *k, const wp_kern_opts *opts, char *err, size_t errlen);
    void (*fini)(wp_kern *k);
    void *(*alloc)(wp_kern *k, size_t bytes);
    void (*free)(wp_kern *k, void *p);
    void (*to_device)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*to_host)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*copy)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*zero)(wp_kern *k, void *p, size_t bytes);
    void (*sync)(wp_kern *k);
    void (*convert)(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n);
    void (*accumulate)(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n);
    void (*scale)(wp_kern *k, void *x, wp_dtype t, float a, size_t n);
    double (*sumsq)(wp_kern *k, const void *x, wp_dtype t, size_t n);
    void (*add)(wp_kern *k, void *y, const void *a, const void *b, size_t n);
    void (*gemm)(wp_kern *k, bool trans_a, bool trans_b, int m, int n, int kk, float alpha, const void *A,
                 int lda, const void *B, int ldb, float beta, void *C, wp_dtype ctype, int ldc);
    void (*rmsnorm_fwd)(wp_kern *k, void *y, float *rstd, const void *x, const void *w, int T, int h, float eps);
    void (*rmsnorm_bwd_input)(wp_kern *k, void *dx, bool accumulate, const void *dy, const void *x,
                              const void *w, const float *rstd, int T, int h);
    void (*rmsnorm_bwd_weight)(wp_kern *k, void *dw, wp_dtype dwtype, const void *dy, const void *x,
                               const float *rstd, int T, int h);
    void (*rope_fwd)(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                     const wp_rope_scaling *sc);
    void (*rope_bwd)(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                     const wp_rope_scaling *sc);
    void (*attention_fwd)(wp_kern *k, void *o, float *lse, const void *q, const void *kv_k, const void *kv_v,
                          int b, int sq, int skv, int nh, int nkv, int hd);
    void (*attention_bwd)(wp_kern *k, void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *kv_k, const void *kv_v, const void *o, const float *lse,
                          int b, int sq, int skv, int nh, int nkv, int hd);
    void (*swiglu_fwd)(wp_kern *k, void *y, const void *gate, const void *up, size_t n);
    void (*swiglu_bwd)(wp_kern *k, void *dgate, void *dup, const void *dy, const void *gate, const void *up, size_t n);
    void (*embedding_fwd)(wp_kern *k, void *y, const int32_t *tokens, const void *wte, int T, int h);
    void (*embedding_bwd)(wp_kern *k, void *dwte, wp_dtype dwtype, const int32_t *tokens, const void *dy, int T, int h);
    void (*lmhead_ce_fwd)(wp_kern *k, float *losses, float *lse, const void *x, const void *w_head,
                          const int32_t *targets, int T, int h, int V);
    void (*lmhead_ce_bwd)(wp_kern *k, void *dx, void *dlogits_out, void *dw_head, wp_dtype dwtype,
                          const void *x, const void *w_head, const int32_t *targets, const float *lse,
                          float dloss, int T, int h, int V);
    void (*adamw)(wp_kern *k, float *master, float *m, float *v, const float *grad, float grad_scale,
                  void *w_out, wp_dtype wtype, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2);
    /* streams.h; NULL in a backend whose calls complete before they return (the CPU): the
     * dispatcher then treats events as complete and copies synchronously */
    void *(*event_create)(wp_kern *k);
    void (*event_destroy)(wp_kern *k, void *ev);
    void (*event_record)(wp_kern *k, void *ev);
    bool (*event_done)(wp_kern *k, void *ev);
    void (*event_wait)(wp_kern *k, void *ev);
    void *(*host_alloc)(wp_kern *k, size_t bytes);
    void (*host_free)(wp_kern *k, void *p);
    void (*to_device_async)(wp_kern *k, void *dst, const void *src, size_t bytes);
    void (*to_host_async)(wp_kern *k, void *dst, const void *src, size_t bytes);
    int (*device)(const wp_kern *k);
    int (*mem_info)(wp_kern *k, size_t *free_bytes, size_t *total_bytes); /* 0 ok; NULL: host memory */
} wp_kern_ops;

struct wp_kern {
    const wp_kern_ops *ops;
    wp_backend_kind kind;
    wp_dtype compute;
    int threads;
    char error[512];  /* first error, "" while none */
    char notes[512];  /* kern_notes: choices a user may want to know, newline-separated */
    char device_name[256]; /* kern_device_name: the GPU's name (cudaDeviceProp.name), "cpu" */
    void *impl;       /* backend-private state (scratch, cuBLAS handle, streams, ...) */
    /* kern_memory: bytes held now and at most, kern_alloc's blocks (sizes by address in an
     * open-addressing table) plus what the backend reports with kern_mem_add */
    size_t mem_now, mem_peak;
    size_t term_now[WP_MEM_TERMS], term_peak[WP_MEM_TERMS], term_at_peak[WP_MEM_TERMS];
    wp_mem_term term; /* kern_mem_term: what the next allocations are for */
    struct wp_mem_block { void *p; size_t bytes; wp_mem_term term; } *blocks;
    size_t nblocks, cap_blocks;
};

/* A backend's own allocations (scratch, library workspaces) into kern_memory: +bytes when
 * taken, -bytes when given back; kern_mem_add_term names what they are for (kern_mem_add:
 * scratch). */
void kern_mem_add(wp_kern *k, int64_t delta);
void kern_mem_add_term(wp_kern *k, wp_mem_term t, int64_t delta);

extern const wp_kern_ops wp_cpu_ops;
#if WP_HAVE_CUDA
extern const wp_kern_ops wp_cuda_ops;
int kern_cuda_device_count(void); /* cuda_context.c; 0 when none or the driver fails */
#endif

#endif
