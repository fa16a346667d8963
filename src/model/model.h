/* The Llama-style model, split per chunk so that every pipeline strategy can call it:
 * forward (F), backward for inputs (B), backward for weights (W-pass), and a fused backward.
 *
 * A chunk's weights are one contiguous buffer in the backend's compute dtype, laid out as
 * wp_layout says. One wp_acts holds what one (chunk, micro-batch) keeps between its F, B and
 * W-pass. Token ids and targets live in backend memory ([b*s] int32 each).
 *
 * Loss convention: the objective is dloss * sum over tokens of their cross-entropy; the caller
 * passes dloss = loss_scale / (tokens in the optimizer step), so gradients of all micro-batches
 * add up to the gradient of the mean loss (times the loss scale).
 *
 * Errors: the entry points below that return int (model_acts_relink, F, B, W-pass, fused
 * backward) return 0, or 1 with the reason in the backend context's sticky error
 * (kern_error(model_kern(m)): misuse such as a wrong chunk, a NULL buffer or segments out of
 * order, or a failed kernel or allocation). Once that context holds an error they return 1 at
 * once; those returning a pointer give NULL with a kern error instead. */
#ifndef WP_MODEL_H
#define WP_MODEL_H

#include "kernels.h"
#include "layout.h"
#include "result.h"

typedef struct wp_model wp_model;
typedef struct wp_acts wp_acts;

wp_model *model_create(const wp_layout *L, wp_kern *k, char *err, size_t errlen);
void model_destroy(wp_model *m);
const wp_layout *model_layout(const wp_model *m);
wp_kern *model_kern(const wp_model *m);

/* State of one (chunk, micro-batch); NULL and a kern error when memory runs out. */
wp_acts *model_acts_create(wp_model *m, int chunk);
void model_acts_destroy(wp_model *m, wp_acts *a);
/* Bytes one wp_acts holds at its peak (after F, or after B when the backward is split),
 * so that schedules can predict memory without allocating. */
size_t model_acts_bytes(const wp_layout *L, int chunk, wp_dtype compute, bool split_backward);
/* The model's scratch (model_create's one block), without making a model. */
size_t model_scratch_bytes(const wp_layout *L, wp_dtype compute);

/* Sequence segments (Seq1F1B: a micro-batch split along the sequence). The state of positions
 * [t0, t1) of each of the micro-batch's b sequences; prev is the same chunk's state of the
 * segment that ends at t0 (none when t0 == 0), which must outlive this one's B; it may be given
 * later with model_acts_relink, but before this state's F. With such a state,
 * model_forward reads tokens, targets and x_in of the segment alone ([b, t1-t0] row-major) and
 * attends to the keys and values the earlier segments kept; B hands their share of dK/dV back
 * to them, so the B (or fused backward) of a segment runs before its predecessor's (last in,
 * first out). The sum over segments equals the whole-sequence run up to fp32 rounding.
 * A segment state [0, seq) is the same as model_acts_create's. NULL and a kern error on misuse. */
wp_acts *model_acts_create_segment(wp_model *m, int chunk, int t0, int t1, wp_acts *prev);
/* Link a segment state to a micro-batch's state of the segment before it (NULL for the first),
 * e.g. to reuse its memory for another micro-batch. 0, or 1 with a kern error on a mismatch. */
wp_result model_acts_relink(wp_model *m, wp_acts *a, wp_acts *prev);
/* model_acts_bytes for a segment state (its K/V and dK/dV accumulators included). */
size_t model_acts_bytes_segment(const wp_layout *L, int chunk, wp_dtype compute, bool split_backward, int t0, int t1);

/* F. chunk 0 reads tokens (x_in unused); later chunks read x_in [T,h], and with document masks
 * (cfg.doc_mask) the tokens too, where they find the documents (src/model/doc_mask.c). Chunks before the last
 * write x_out [T,h]; the last chunk reads targets and adds its token losses to *loss_sum.
 * x_in is copied into a, so the caller may reuse its buffer. */
wp_result model_forward(wp_model *m, int chunk, const void *w, wp_acts *a, const void *x_in,
                  const int32_t *tokens, const int32_t *targets, void *x_out, double *loss_sum);

/* F for training: the same, and on the last chunk the LM head's backward too, in the same pass
 * over its row blocks (kern_lmhead_ce_fwd_bwd: the logits once, where F then B computes them
 * twice), with the dloss that chunk's B will be given (the same value: B's dloss is then not
 * read for the head). The head's input gradient stays in a until B; its weight gradient sums in
 * the model's fp32 [V,h] buffer until the next weight part of the last chunk (fused backward or
 * W-pass) adds it to that call's gw. So every such F must be followed, before the gradients are
 * read, by the weight part of its micro-batch; gradient sums then differ from model_forward's
 * path in fp32 order only. Other chunks: as model_forward. */
wp_result model_forward_train(wp_model *m, int chunk, const void *w, wp_acts *a, const void *x_in,
                              const int32_t *tokens, const int32_t *targets, void *x_out, double *loss_sum,
                              float dloss);
/* The token losses a last chunk's F with loss_sum NULL left in a, added to *loss_sum (the same
 * sum, in the same order, as F's own): a caller whose F only issues device work (a replay,
 * kernels/replay.h) reads the loss after it. */
wp_result model_loss_sum(wp_model *m, const wp_acts *a, double *loss_sum);

/* B. g_out [T,h] is the gradient of the chunk's output (unused for the last chunk, which
 * starts from dloss); writes g_in [T,h], the gradient of its input (unused for chunk 0).
 * Keeps what the W-pass needs in a. */
wp_result model_backward_input(wp_model *m, int chunk, const void *w, wp_acts *a, const void *g_out,
                         float dloss, void *g_in);

/* W-pass. Adds this micro-batch's weight gradient to gw (chunk_numel elements of gw_dtype:
 * WP_F32 or WP_BF16) and releases what B kept. Needs no weights. */
wp_result model_backward_weight(wp_model *m, int chunk, wp_acts *a, void *gw, wp_dtype gw_dtype);

/* B and W-pass in one: the same arithmetic as model_backward_input followed by
 * model_backward_weight (bit-identical results), without keeping the W-pass state. */
wp_result model_backward(wp_model *m, int chunk, const void *w, wp_acts *a, const void *g_out, float dloss,
                   void *g_in, void *gw, wp_dtype gw_dtype);

#endif
