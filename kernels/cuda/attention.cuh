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
    const int32_t *qlo; /* document masks: the first key of each query [b*sq] (device), NULL: causal */
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
/* The first key query i of sequence bi sees: its document's start (0 without document masks,
 * and for the padding rows past sq, which see nothing anyway). qlo is nondecreasing, so a
 * tile's first query has the earliest. */
__device__ __forceinline__ int attn_query_lo(const wp_attn_shape &s, int bi, int i) {
    return s.qlo && i < s.sq ? s.qlo[(size_t)bi * s.sq + i] : 0;
}
/* exp(m_old - m_new) of an online softmax whose row may not have seen a key yet (a document
 * starting in a later tile): both -inf would give NaN; nothing accumulated, so any factor does. */
__device__ __forceinline__ float attn_rescale(float m_old, float m_new) {
    return m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
}

#endif
