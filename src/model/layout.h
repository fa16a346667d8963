/* Model configuration and the parameter layout: which tensors exist, which chunk each lives
 * in, and where. A chunk's parameters are one contiguous range, so a chunk travels the ring
 * as one pointer and a length. Computed once from the config; every rank computes the same.
 * src/model sits on kernels/ and optim/ only (docs/architecture.md). */
#ifndef WP_LAYOUT_H
#define WP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "optim.h"
#include "result.h"

#define WP_MAX_CHUNKS 256

typedef enum { WP_PREC_MIXED = 0, WP_PREC_BF16, WP_PREC_FP32 } wp_precision;
/* Positions of packed documents (--doc-positions): continue through the sequence, or restart at
 * each document's start, so that every document is computed exactly as if it were alone (what
 * transformers' position_ids packing, DataCollatorWithFlattening, does). */
typedef enum { WP_DOC_POS_CONTINUE = 0, WP_DOC_POS_RESTART } wp_doc_positions;

typedef struct {
    int n_layers;      /* L */
    int h;             /* hidden size */
    int ffn;           /* SwiGLU inner size */
    int n_heads;       /* query heads */
    int n_kv_heads;    /* key/value heads (grouped-query attention) */
    int head_dim;      /* h / n_heads */
    int seq;           /* s */
    int micro_batch;   /* micro-batch size b (sequences); "mb" names a micro-batch index (ir.h) */
    int vocab;         /* V */
    double rope_theta;
    wp_rope_scaling rope_scaling; /* llama3 frequency scaling; factor 0: none */
    int max_pos;       /* max_position_embeddings an export declares; 0: the default (docs/formats.md) */
    bool has_bos, has_eos; /* bos/eos token ids an export declares (zeroed: none given) */
    int bos_id, eos_id;
    double norm_eps;
    double init_std;
    bool recompute;
    bool doc_mask;     /* document masks: attention stays inside documents (kernels.h: doc_starts) */
    int32_t doc_boundary; /* with doc_mask: the token that starts a document (BOS, or EOS without one) */
    wp_doc_positions doc_positions; /* with doc_mask: RoPE positions continue or restart per document */
    double attn_share; /* with doc_mask: the fraction of causal attention's query-key pairs that the
                          documents keep, what the FLOP counts charge (attn_pairs_*); 0 or 1: all */
    bool tied;         /* tie_word_embeddings: lm_head.weight is model.embed_tokens.weight (the
                          optimizer ties them inside one chunk, schedule_tie across chunks) */
    wp_precision precision;
    int n_chunks;
    int chunk_layers[WP_MAX_CHUNKS]; /* layers in each chunk (may be uneven, may be 0 only for
                                        a lone chunk holding embedding and head) */
} wp_model_cfg;

/* Wire and compute dtypes that a precision implies. */
wp_dtype precision_weight_dtype(wp_precision p);   /* W on the wire: fp16 | bf16 | fp32 */
wp_dtype precision_grad_dtype(wp_precision p);     /* gW on the wire: bf16 | bf16 | fp32 */
wp_dtype precision_act_dtype(wp_precision p);      /* A, gA on the wire: fp16 | bf16 | fp32 */
const char *precision_name(wp_precision p);

typedef enum { WP_PARAM_EMBED, WP_PARAM_NORM, WP_PARAM_MATRIX } wp_param_kind;

typedef struct {
    char name[64];      /* Hugging Face Llama name, e.g. model.layers.3.mlp.up_proj.weight */
    wp_param_kind kind; /* norms get no weight decay */
    int chunk;
    int layer;          /* -1 for embedding, final norm and head */
    size_t offset;      /* first element, counted from the start of its chunk */
    int rows, cols;     /* [out, in] for matrices, [V, h] for embedding and head, [h, 1] norms */
} wp_param;

typedef struct {
    wp_model_cfg cfg;
    int n_params;
    wp_param *params;                   /* in storage order, chunk by chunk */
    size_t chunk_numel[WP_MAX_CHUNKS];  /* elements in each chunk */
    size_t chunk_offset[WP_MAX_CHUNKS]; /* first element of each chunk in the flat model */
    int chunk_first_layer[WP_MAX_CHUNKS];
    size_t total_numel;
} wp_layout;


/* Split L layers into n chunks as evenly as possible (earlier chunks get the extra layers). */
void model_cfg_even_chunks(wp_model_cfg *cfg, int n_chunks);
/* Split L layers into n chunks so that the costliest chunk (forward + backward FLOPs, the
 * forward twice with recompute; the LM head makes the last chunk heavier) costs the least
 * (--chunk-layers auto). Needs every other field of cfg; n <= L. */
void model_cfg_balanced_chunks(wp_model_cfg *cfg, int n_chunks);

/* 0; 2 with a reason naming the flag when cfg's chunking is impossible (--num-chunks,
 * --chunk-layers); 1 when memory runs out. Caller frees with layout_free. */
wp_result layout_build(const wp_model_cfg *cfg, wp_layout *L, char *err, size_t errlen);
void layout_free(wp_layout *L);
const wp_param *layout_find(const wp_layout *L, const char *name);
/* Elements of one parameter (rows x cols). */
static inline size_t layout_param_numel(const wp_param *p) { return (size_t)p->rows * (size_t)p->cols; }
/* Index of the first parameter of chunk c, and one past its last. */
void layout_chunk_params(const wp_layout *L, int c, int *first, int *end);

/* Parameters of one block, and of the whole model (embedding and head included). */
size_t layout_block_numel(const wp_model_cfg *cfg);

/* Model FLOPs of one micro-batch through chunk c (matrix products and attention scores,
 * counted as 2 per multiply-add; no recomputation): forward, input-gradient (B) and
 * weight-gradient (W-pass) parts. Attention is charged for cfg.attn_share of the causal
 * query-key pairs (document masks). Used by the simulator, the pacing and MFU. */
typedef struct {
    double fwd, bwd_input, bwd_weight;
} wp_flops;
wp_flops layout_chunk_flops(const wp_layout *L, int c);

/* Query-key pairs attention scores in one sequence of s tokens (src/model/attn_pairs.c):
 * causal, s(s+1)/2; with document masks over tok (a document starts at the sequence's start and
 * at every boundary token), the sum of len(len+1)/2 over its documents; cut from the start into
 * documents of len tokens (the last one shorter; len <= 0 or >= s: one document). A sequence of
 * k equal documents (len = s/k) scores k len(len+1)/2 = (s/k + 1)/(s + 1) of the causal pairs. */
double attn_pairs_causal(int s);
double attn_pairs_docs(const int32_t *tok, int s, int32_t boundary);
double attn_pairs_equal_docs(int s, int len);

/* Deterministic init of chunk c's fp32 parameters (host memory, chunk_numel[c] floats):
 * each tensor's values depend only on (seed, tensor name), never on the chunking. */
void layout_init_chunk(const wp_layout *L, int c, uint64_t seed, float *dst);

/* The layout as the optimizer sees it (optim.h): chunk sizes, each tensor's offset and weight
 * decay (none on norms), and layout_init_chunk. L must outlive the optimizers made from it. */
wp_optim_model layout_optim_model(const wp_layout *L);
/* The layout an optimizer was made from with layout_optim_model, or NULL. */
const wp_layout *layout_of_optim(const wp_optim *o);

#endif
