/* Private to the attention files: the problem shape and the two implementations behind
 * kern_attention_fwd/bwd (see attention.cu for which one runs when). */
#ifndef WP_CUDA_ATTENTION_CUH
#define WP_CUDA_ATTENTION_CUH

#include "dtype.cuh"

typedef struct {
    int b, sq, skv, nh, nkv, hd;
    float scale;      /* 1/sqrt(hd) */
    size_t q_stride;  /* nh * hd: row stride of q, o, dout, dq */
    size_t kv_stride; /* nkv * hd: row stride of k, v, dk, dv */
} wp_attn_shape;

/* SIMT (CUDA cores): any compute dtype, hd <= WP_ATTN_SIMT_MAX_HD. */
#define WP_ATTN_SIMT_MAX_HD 256
int attn_simt_fwd(wp_kern *k, const wp_attn_shape *s, void *o, float *lse, const void *q, const void *kk,
                  const void *v);
int attn_simt_bwd(wp_kern *k, const wp_attn_shape *s, void *dq, void *dk, void *dv, const void *dout,
                  const void *q, const void *kk, const void *v, const float *lse, const float *delta);

/* Tensor cores (WMMA): fp16/bf16, hd in {16, 32, 64, 96, 128}, q/k/v/o/dout 16-byte aligned. */
bool attn_mma_supports(wp_kern *k, const wp_attn_shape *s);
int attn_mma_fwd(wp_kern *k, const wp_attn_shape *s, void *o, float *lse, const void *q, const void *kk,
                 const void *v);
int attn_mma_bwd(wp_kern *k, const wp_attn_shape *s, void *dq, void *dk, void *dv, const void *dout, const void *q,
                 const void *kk, const void *v, const float *lse, const float *delta);

/* Position of query i (0-based among the sq queries) in the sequence of skv keys. */
__device__ __forceinline__ int attn_query_pos(const wp_attn_shape &s, int i) { return s.skv - s.sq + i; }

#endif
