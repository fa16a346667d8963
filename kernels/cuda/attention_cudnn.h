/* cuDNN's fused flash attention through NVIDIA's header-only cudnn-frontend (one C++ file,
 * attention_cudnn.cpp; built when the meson feature 'cudnn' finds cuDNN and the frontend).
 * Same contract as kern_attention_fwd / kern_attention_bwd for a whole causal sequence
 * (sq == skv): q, o [b*s, nh*hd], k, v [b*s, nkv*hd], lse [b, nh, s] fp32 natural-log
 * log-sum-exp of the scaled scores; the backward is cuDNN's deterministic algorithm unless the
 * caller asks for its faster one (--deterministic false), whose dK/dV sums vary in order.
 * Private to kernels/cuda. */
#ifndef WP_ATTENTION_CUDNN_H
#define WP_ATTENTION_CUDNN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "wp_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels.h"

typedef struct wp_cudnn_attn wp_cudnn_attn;

/* A cuDNN handle on the current device, queued on stream; NULL with why when cuDNN cannot be
 * loaded or refuses the device. */
wp_cudnn_attn *cudnn_attn_create(cudaStream_t stream, char *why, size_t whylen);
void cudnn_attn_destroy(wp_cudnn_attn *a);
/* Bytes of device memory it holds for cuDNN's workspace now. */
size_t cudnn_attn_workspace(const wp_cudnn_attn *a);
/* cuDNN's version as "9.19.0" (the library loaded at run time). */
const char *cudnn_attn_version(void);

/* Document masks (kern_attention_docs): qlo [b*s] in device memory holds lo's values (host).
 * Kept by the qlo pointer (the newest registrations; the oldest are dropped) until the next
 * registration of the same pointer. Whole documents only (each starts at a token whose lo is
 * itself, every sequence with one): anything else is kept as a refusal. 0; -1 on a failure. */
int cudnn_attn_docs(wp_cudnn_attn *a, const int32_t *qlo, const int32_t *lo, int b, int s, char *why, size_t whylen);

/* Return 0 when queued; 1 when cuDNN has no plan for this shape or dtype (why says so; nothing
 * was queued, the caller may fall back); -1 on a failure (why says which call). Graphs are
 * built once per shape and kept. qlo NULL: causal over each sequence, lse [b, nh, s]; else the
 * registered documents of qlo as cuDNN's ragged sequences, each causal, lse token-major
 * [b*s, nh] (cuDNN's ragged stats); 1 when qlo was not registered for b, s or is not whole
 * documents. */
int cudnn_attn_fwd(wp_cudnn_attn *a, wp_dtype t, void *o, float *lse, const void *q, const void *k, const void *v,
                   const int32_t *qlo, int b, int s, int nh, int nkv, int hd, char *why, size_t whylen);
int cudnn_attn_bwd(wp_cudnn_attn *a, wp_dtype t, bool deterministic, void *dq, void *dk, void *dv, const void *dout, const void *q,
                   const void *k, const void *v, const void *o, const float *lse, const int32_t *qlo, int b, int s,
                   int nh, int nkv, int hd, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
