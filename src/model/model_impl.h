/* Private to src/model: the structs behind wp_model and wp_acts, and how their buffers are
 * carved out of one allocation each. Tests include it to see what an wp_acts really holds. */
#ifndef WP_MODEL_IMPL_H
#define WP_MODEL_IMPL_H

#include "model.h"
#include "result.h"

/* Sizes every kernel call of a chunk needs. */
typedef struct {
    int b, s, T;       /* micro-batch, sequence, tokens T = b*s */
    int h, q, kv, f;   /* width, query width nh*hd, key/value width nkv*hd, SwiGLU width */
    int nh, nkv, hd;   /* heads */
    int V;
    float eps, theta;
    wp_rope_scaling rope; /* factor 0: plain RoPE */
    wp_dtype cdt;      /* the backend's compute dtype */
    size_t ct;         /* bytes per element of it */
    int pos0;          /* position of the first of the s tokens in its sequence (0 unless a segment) */
    int seq_full;      /* whole sequence length; pos0 + s < seq_full: later segments follow */
    bool pos_restart;  /* cfg.doc_positions restart: RoPE positions count from each document's start */
} wp_dims;

wp_dims model_dims(const wp_model_cfg *cfg, wp_dtype compute);
/* Sizes of the segment [t0, t1) of every sequence (Seq1F1B): s = t1 - t0, pos0 = t0. */
wp_dims model_dims_segment(const wp_model_cfg *cfg, wp_dtype compute, int t0, int t1);
/* Later segments read this segment's K/V and add gradients into it. */
static inline bool dims_kv_later(const wp_dims *d) { return d->pos0 + d->s < d->seq_full; }

/* One allocation cut into aligned pieces. With base == NULL it only measures, so that
 * model_acts_bytes and model_acts_create share one plan and cannot disagree. */
typedef struct {
    char *base;
    size_t used;
} wp_arena;

#define WP_ARENA_ALIGN 256 /* a cache line on CPUs, a full coalesced segment on GPUs */

void *arena_take(wp_arena *ar, size_t bytes);
size_t arena_size(const wp_arena *ar);

/* What one block's forward produces ([T,x] in the compute dtype unless noted). */
typedef struct {
    void *x;                 /* block input [T,h] */
    float *rstd1;            /* [T] */
    void *n1;                /* rmsnorm(x) * w [T,h] */
    void *q, *k, *v;         /* projections, q and k after RoPE: [T,q], [T,kv], [T,kv] */
    void *att;               /* attention output [T,q] */
    float *lse;              /* attention log-sum-exp [b,nh,s] */
    const int32_t *lo;       /* document masks: first key each query sees [T] (wp_acts.doc_lo); NULL: causal */
    void *x1;                /* x + o_proj(att) [T,h] */
    float *rstd2;            /* [T] */
    void *n2;                /* [T,h] */
    void *gate, *up, *sw;    /* [T,f] each; sw = silu(gate) * up */
} wp_block_acts;

/* Output gradients of one block's layers, kept by B for the W-pass (or scratch when fused). */
typedef struct {
    void *dq, *dk, *dv;      /* of the projections before RoPE */
    void *dx1;               /* of x1: the o_proj output gradient */
    void *dgate, *dup;       /* [T,f] */
    void *dn1, *dn2;         /* of the norm outputs: the RMSNorm weights' dy */
    void *dsw, *datt;        /* scratch only: gradients of the down_proj and o_proj inputs */
} wp_block_grads;

/* Element offsets (from the chunk's start) of one block's tensors, in layout order. */
typedef struct {
    size_t ln1, wq, wk, wv, wo, ln2, wg, wu, wd;
} wp_block_offsets;

typedef struct {
    int n_layers;
    bool first, last;          /* holds the embedding / the final norm and head */
    size_t embed, norm, head;  /* element offsets, valid when first / last */
    wp_block_offsets *blocks;  /* n_layers */
} wp_chunk_map;

struct wp_acts {
    int chunk;
    wp_dims d;                 /* sizes of what this state covers (a segment or the whole sequence) */
    wp_block_acts *blocks;     /* n_layers; with recompute only x is held between F and B */
    void *x_final;             /* last chunk: input of the final norm [T,h] */
    float *rstd_final;         /* [T] */
    void *n_final;             /* LM head input [T,h] */
    float *lse_head, *losses;  /* [T] */
    void *dn_head;             /* [T,h]: the head's input gradient, when F ran the head's backward too */
    bool head_bwd_done;        /* F (model_forward_train) ran the head's backward: B reads dn_head,
                                  the weight part adds the model's head_dw */
    const int32_t *tokens, *targets;
    int32_t *doc_lo;           /* document masks (cfg.doc_mask): where each token's document starts [T], made by
                                  F from the tokens (every chunk reads them then); NULL without */
    void *fwd_mem;
    size_t fwd_bytes;

    /* Kept by B for the W-pass (split backward only). */
    bool kept_valid;
    wp_block_grads *kept;      /* n_layers */
    void **gx;                 /* n_layers+1: gradient of layer i's input; gx[n] of the chunk output */
    void *dn_final;            /* final norm output gradient [T,h] */
    void *dlogits;             /* [T,V] */
    void *kept_mem;
    size_t kept_bytes;

    /* Sequence segments (Seq1F1B, src/model/segment.c). prev is the same chunk's state of the
     * segment ending at d.pos0 (NULL for the first). When later segments follow (dims_kv_later)
     * each block keeps its K and V (even with recompute) and owns dK/dV accumulators that the
     * later segments' B add into, so this segment's B must come after theirs (LIFO). */
    wp_acts *prev;
    void **dk_acc, **dv_acc;   /* n_layers, [T,kv] each; NULL without later segments */
    bool later_awaits_b;       /* a later segment ran F but not yet its B */
};

struct wp_model {
    wp_layout L;               /* a copy; params shared with the caller's layout */
    wp_kern *k;
    wp_dims d;
    wp_chunk_map *chunks;      /* L.cfg.n_chunks */
    /* Scratch for one block at a time: the recomputed forward and the fused backward. */
    wp_block_acts sa;
    wp_block_grads sg;
    void *sgx[2];              /* ping-pong input gradients [T,h] */
    void *s_dn_final;          /* [T,h] */
    void *s_dlogits;           /* [min(T, WP_HEAD_ROWS), V]: one block of the head's dy */
    void *scratch_mem;
    void *s_head_dw;           /* [V,h] fp32, allocated on first use by a bf16 gradient */
    /* [V,h] fp32: the head's weight gradient of the training forwards (model_forward_train) whose
     * weight part has not run yet; the next weight part (fused backward or W-pass) of the last
     * chunk adds it to its gw and zeroes it. Allocated by the first such forward. */
    float *head_dw;
    float *host_losses;        /* [T] host copy for the loss sum */
    /* Segments: gathered K/V of a sequence prefix and their gradients, [b*seq, kv] each,
     * allocated by the first segment that has a predecessor. */
    void *seg_mem;
    void *s_kv_k, *s_kv_v, *s_kv_dk, *s_kv_dv;
};

/* Where a tensor at element offset off of a chunk lives in its weights w (compute dtype) or
 * in its gradient gw (fp32 or bf16). */
static inline const void *w_at(const wp_dims *d, const void *w, size_t off) { return (const char *)w + off * d->ct; }
static inline void *g_at(void *gw, wp_dtype gt, size_t off) { return (char *)gw + off * (gt == WP_F32 ? 4 : 2); }

/* Lay out the buffers F keeps, or those B keeps for the W-pass (split backward). */
void acts_plan_fwd(const wp_layout *L, int chunk, const wp_dims *d, wp_arena *ar, wp_acts *a);
void acts_plan_kept(const wp_layout *L, int chunk, const wp_dims *d, wp_arena *ar, wp_acts *a);
/* Lay out the model's scratch: one block's activations (all but x) and gradients. */
void model_plan_scratch(const wp_dims *d, wp_arena *ar, wp_model *m);
/* Bytes of backend memory a holds right now (its forward arena plus any kept arena). */
size_t model_acts_held_bytes(const wp_acts *a);

/* Sticky-error and argument checks shared by the entry points; 0, or 1 with a kern error. */
wp_result model_entry_check(wp_model *m, int chunk, const wp_acts *a, const char *fn);

/* A state of the sizes d (whole sequence or segment), its forward arena allocated (model.c). */
wp_acts *acts_create(wp_model *m, int chunk, const wp_dims *d);

/* Segment bookkeeping around the entry points (src/model/segment.c): F resets the
 * accumulators and marks the predecessor as awaiting this B; B refuses to run while a later
 * segment's B is pending, and clears the mark on its predecessor when done. The int ones return
 * 0, or 1 with a kern error. */
wp_result seg_forward_begin(wp_model *m, wp_acts *a, const char *fn);
wp_result seg_backward_check(wp_model *m, const wp_acts *a, const char *fn);
void seg_backward_end(wp_acts *a);

/* The kept arena of a split backward: allocated by B (0, or 1 with a kern error), released by
 * the W-pass (model.c). */
wp_result acts_reserve_kept(wp_model *m, wp_acts *a);
void acts_release_kept(wp_model *m, wp_acts *a);

/* Rows per block of the LM head's backward (src/model/head.c). */
#define WP_HEAD_ROWS 256

/* The last chunk's head and the loss (src/model/head.c); head_forward returns 0, or 1 with a kern
 * error. top receives the gradient of the final norm's input; gw == NULL for B (dlogits kept),
 * else fused. */
wp_result head_forward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, double *loss_sum,
                       const float *dloss);
void head_backward(wp_model *m, const wp_chunk_map *cm, const void *w, wp_acts *a, float dloss, void *top, void *gw,
                   wp_dtype gt);
void head_backward_weight(wp_model *m, const wp_chunk_map *cm, wp_acts *a, void *gw, wp_dtype gt);

/* What one block's attention needs from the other segments of its sequences (Seq1F1B);
 * NULL for a whole sequence. */
typedef struct {
    const wp_acts *prev;       /* the same chunk's state of the previous segment, or NULL */
    int layer;                 /* block index in the chunk */
    void *dk_acc, *dv_acc;     /* [T,kv]: dK/dV later segments added to this one's K/V, or NULL */
    void *k, *v, *dk, *dv;     /* model scratch [b*seq, kv] for the gathered prefix (prev != NULL) */
} wp_seg_kv;

/* Document masks (src/model/doc_mask.c): a->doc_lo from the micro-batch's tokens (backend
 * memory), continuing a->prev's last document. 0, or 1 with a kern error. */
wp_result doc_mask_starts(wp_model *m, wp_acts *a, const int32_t *tokens);

/* The segment context of layer i of a (NULL when a covers a whole sequence). */
const wp_seg_kv *seg_kv_of(const wp_model *m, const wp_acts *a, int i, wp_seg_kv *buf);
/* Attention of one block over its own and the earlier segments' K/V (src/model/segment.c).
 * The backward writes G->dq, G->dk, G->dv of this segment (dK/dV including what later segments
 * added) and adds the earlier segments' share of dK/dV into their accumulators. */
void seg_attention_fwd(wp_kern *k, const wp_dims *d, const wp_block_acts *A, const wp_seg_kv *S);
void seg_attention_bwd(wp_kern *k, const wp_dims *d, const wp_block_acts *A, const wp_block_grads *G,
                       const wp_seg_kv *S);

/* One block (src/model/block.c). w and gw point at the chunk's start; o gives the offsets;
 * S links a segment to its sequence's other segments (NULL for a whole sequence).
 * F: out == NULL skips down_proj, for a recomputation that only needs what B reads. */
void block_forward(wp_kern *k, const wp_dims *d, const void *w, const wp_block_offsets *o,
                   const wp_block_acts *A, const wp_seg_kv *S, void *out);
/* B: from dx2 (gradient of the block output) to dx (of its input); G receives the output
 * gradients. With gw != NULL each weight gradient is added as soon as its dy exists (fused). */
void block_backward(wp_kern *k, const wp_dims *d, const void *w, const wp_block_offsets *o,
                    const wp_block_acts *A, const wp_seg_kv *S, const wp_block_grads *G, const void *dx2,
                    void *dx, void *gw, wp_dtype gt);
/* W-pass: the weight-gradient calls of block_backward, with the same operands. */
void block_backward_weight(wp_kern *k, const wp_dims *d, const wp_block_offsets *o, const wp_block_acts *A,
                           const wp_block_grads *G, const void *dx2, void *gw, wp_dtype gt);

#endif
