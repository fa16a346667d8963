/* The owner's optimizer state (WeiPipe: each chunk's fp32 master weights and AdamW moments
 * live only on the rank that owns the chunk; what travels the ring is the working copy in the
 * wire dtype and the gradient in bf16/fp32).
 *
 * For every owned chunk: fp32 master weights, AdamW moments m and v, an fp32 gradient
 * accumulator (the owner drains the travelling gradient into it), and the AdamW step count.
 * Where they live is the placement (wp_optim_place, --optimizer-memory): backend memory (host
 * for the CPU backend, device for CUDA), or host memory apart from the backend's, updated by the
 * CPU kernels, with the working copy and the gradient staged across (docs/memory.md, "Optimizer
 * state in host memory"). Every call below means the same under either placement: pointers
 * handed in or out are backend memory unless said otherwise. With host placement a step runs on
 * a thread of the optimizer's own (optim_step_chunk returns once it is queued), and any later
 * call that touches that chunk's state waits for it first; the caller sees no difference but
 * the time.
 *
 * A sliced schedule (schedule/ir.h, ZeRO-3) gives each rank one element range of every chunk
 * instead (optim_create_slices): then every buffer of a chunk, and every host array exchanged
 * with it, covers that range only (optim_range says which).
 *
 * optim/ sits on kernels/ only (docs/architecture.md): the model reaches it as data
 * (wp_optim_model below), flags as plain structs (wp_adamw_hparams, wp_lr_schedule). */
#ifndef WP_OPTIM_H
#define WP_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "kernels.h"
#include "result.h"

typedef struct {
    double beta1, beta2, eps;
    double weight_decay; /* decoupled (AdamW); only on the tensors the model marks as decaying */
} wp_adamw_hparams;

/* What the optimizer knows of a model: its chunks' sizes, the tensors inside each chunk (where
 * each starts, and whether weight decay applies: not to norms), and how a chunk's masters start.
 * The model layer describes itself this way (layout_optim_model in src/model/layout.h); optim
 * knows nothing else about models. ctx is passed to every callback and must outlive the
 * optimizer. */
typedef struct {
    const void *ctx;
    int n_chunks;
    size_t (*chunk_numel)(const void *ctx, int chunk);
    /* Tensor i of the chunk, in storage order: false past the last one. */
    bool (*tensor)(const void *ctx, int chunk, int i, size_t *offset, bool *decay);
    /* The chunk's initial fp32 values (chunk_numel floats), a function of (seed, chunk) only. */
    void (*init_chunk)(const void *ctx, int chunk, uint64_t seed, float *dst);
    /* Optional (NULL: none): the chunk's n elements at src are the same parameter as those at
     * dst (tied word embeddings: the head is the embedding). The optimizer then adds src's
     * gradient into dst's and zeroes it before the norm and the step, and after each step
     * copies dst's master and working copy over src's, so both stay one tensor whose gradient
     * is the sum of both uses. Whole chunks only: an optimizer of slices ignores it, and the
     * schedule moves the tie's pieces between the slices' owners (schedule.h: schedule_tie). */
    bool (*tied)(const void *ctx, int chunk, size_t *dst, size_t *src, size_t *n);
} wp_optim_model;

/* Where an owner's fp32 masters, AdamW moments and gradient accumulator live (--optimizer-memory):
 * on the compute device beside the weights, or in (pinned) host memory with the update run by the
 * CPU, so that a small GPU holds only the circulating weights, gradients and activations. */
typedef enum { WP_OPTIM_MEM_DEVICE = 0, WP_OPTIM_MEM_HOST } wp_optim_memory;

/* The placement an optimizer is created with. With WP_OPTIM_MEM_HOST the state is page-locked
 * host memory (kern_host_alloc of the compute context: cudaHostAlloc on CUDA; on the CPU backend
 * plain heap memory outside the backend's allocations), and the optimizer opens its own CPU
 * kernel context of `threads` threads (0: all cores) for the update, the norm and the drains:
 * give the compute context's count, so that the CPU backend's arithmetic is the same call for
 * call (its kernels do not depend on the thread count, but the split of work should match). */
typedef struct {
    wp_optim_memory memory;
    int threads;
} wp_optim_place;

typedef enum { WP_OPT_MASTER = 0, WP_OPT_EXP_AVG, WP_OPT_EXP_AVG_SQ, WP_OPT_GRAD } wp_optim_buf;

typedef struct wp_optim wp_optim;


/* State for the chunks listed (each distinct, 0 <= chunk < m.n_chunks); all buffers zeroed,
 * step count 0. m.ctx must outlive the optimizer. NULL with a reason in err. */
wp_optim *optim_create(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, const wp_adamw_hparams *hp,
                       char *err, size_t errlen);
/* State for elements slice_range(chunk_numel, slice, nslices) of each chunk listed (nslices 0:
 * the whole chunk, as optim_create), placed as place says (NULL: on the device, as
 * optim_create). */
wp_optim *optim_create_slices(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, int slice, int nslices,
                              const wp_adamw_hparams *hp, const wp_optim_place *place, char *err, size_t errlen);
/* Where the state lives (WP_OPTIM_MEM_DEVICE for optim_create and optim_create_weights). */
wp_optim_memory optim_memory(const wp_optim *o);
/* Weights only (`weipipe sample`, `eval`, loading a model to run it): fp32 masters alone, so a
 * loader that fills masters (hf_load_masters and its kin) serves inference without the moments
 * and gradient, three times the weights' memory. What needs those (optim_grad, optim_step_chunk,
 * optim_accumulate, optim_chunk_sumsq, optim_zero_grad, optim_get/set of another buffer) records
 * an error instead; optim_reset zeroes the step count only. */
wp_optim *optim_create_weights(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, char *err, size_t errlen);
void optim_destroy(wp_optim *o);

/* The model description the optimizer was made with. */
const wp_optim_model *optim_model(const wp_optim *o);

int optim_n_owned(const wp_optim *o);
int optim_owned_chunk(const wp_optim *o, int i); /* i-th owned chunk, in the order given */
bool optim_owns(const wp_optim *o, int chunk);
/* The elements [*off, *off + *len) of the chunk this optimizer holds; false when not owned. */
bool optim_range(const wp_optim *o, int chunk, size_t *off, size_t *len);

/* Masters from the model's deterministic init (chunking-independent); moments, gradient and
 * step count zeroed. */
wp_result optim_init_from_seed(wp_optim *o, uint64_t seed);

/* Moments, gradient and step count back to zero (masters kept), e.g. after loading weights
 * from elsewhere. */
wp_result optim_reset(wp_optim *o);

/* Copy one buffer of a chunk (its owned range: chunk_numel floats when whole) to or from host
 * memory (the caller's: plain host memory under either placement). */
wp_result optim_get(wp_optim *o, int chunk, wp_optim_buf which, float *host);
wp_result optim_set(wp_optim *o, int chunk, wp_optim_buf which, const float *host);

/* The chunk's fp32 gradient accumulator in backend memory, for a W-pass that adds into it
 * directly (to_master); a drain of a travelling gradient (gt: WP_BF16 or WP_F32, backend memory)
 * into the accumulator in fp32 is optim_accumulate.
 *
 * With host placement the accumulator the W-pass sees is a device window of the host one: one
 * fp32 buffer per chunk in backend memory, allocated on first use, filled from the host
 * accumulator when handed out and copied back (a copy, not a sum: the same bits as adding in
 * place) before anything else reads or changes the gradient. So a to_master strategy keeps the
 * fp32 gradient on the device and moves only masters and moments to the host. */
float *optim_grad(wp_optim *o, int chunk);
/* Any of the chunk's buffers (backend memory, its owned range), or NULL after recording an error
 * when the chunk is not owned or the state is in host memory (optim_host_view, or the piece
 * calls below). */
float *optim_buffer(wp_optim *o, int chunk, wp_optim_buf which);
/* The same buffer when it is host memory (the CPU backend, or host placement), for readers that
 * need no copy of it (a checkpoint writes straight from it); NULL otherwise (use optim_get), and
 * NULL after recording an error when the chunk is not owned. */
const float *optim_host_view(wp_optim *o, int chunk, wp_optim_buf which);
wp_result optim_accumulate(wp_optim *o, int chunk, const void *grad, wp_dtype gt);

/* n fp32 elements of a buffer from element `at` of the chunk (inside the range held here) to
 * backend memory dst; take: the piece is zeroed after (a tied gradient handed to its other
 * owner). And back: src (backend memory, fp32) copied over the piece, or added in fp32 (add). */
wp_result optim_piece_get(wp_optim *o, int chunk, wp_optim_buf which, size_t at, size_t n, void *dst, bool take);
wp_result optim_piece_put(wp_optim *o, int chunk, wp_optim_buf which, size_t at, size_t n, const void *src, bool add);

/* Squared norm of the chunk's accumulated gradient, in fp64; inf/NaN anywhere make it
 * non-finite. Read it before deciding the step (decision.h). Tied tensors' gradients are
 * folded first (wp_optim_model.tied; once per gradient: optim_step_chunk does not fold again
 * unless the gradient was handed out or changed since), so the norm counts their sum. */
double optim_chunk_sumsq(wp_optim *o, int chunk);

/* One AdamW step of a chunk: g = grad * grad_scale (grad_scale folds 1/loss_scale and the
 * clip factor), bias-corrected moments, decoupled weight decay except on norms; a tied chunk's
 * second copy becomes the stepped one again. Increments the chunk's step count. It writes no
 * working copy: the next LOAD makes the one that travels (optim_working_copy; with host
 * placement one made here would cross the host link for nothing). Never called for a skipped
 * step, so a skip changes nothing.
 *
 * With host placement the step is queued to the optimizer's update worker and the call returns
 * at once. An error on the worker is reported by the next call. */
wp_result optim_step_chunk(wp_optim *o, int chunk, float lr, float grad_scale);

/* The decided step on every owned chunk: nothing at all when d->skip (masters, moments and
 * step counts stay bit-identical), else optim_step_chunk(c, lr, d->grad_scale). */
wp_result optim_apply(wp_optim *o, const wp_step_decision *d, float lr);

/* The working copy of the current masters, without a step (the first weights to travel). */
wp_result optim_working_copy(wp_optim *o, int chunk, void *w_out, wp_dtype wtype);

/* Every queued step done; the worker's error if one failed. Nothing to wait for with device
 * placement: the status only. */
wp_result optim_sync(wp_optim *o);

/* Zero every owned chunk's gradient accumulator, or one chunk's (right after the chunk's step,
 * as UPDATE does, chained behind it on the update worker rather than waiting for it). */
wp_result optim_zero_grad(wp_optim *o);
wp_result optim_zero_chunk_grad(wp_optim *o, int chunk);

/* AdamW step count t of the owned chunks (they step together; -1 if they disagree). */
int64_t optim_steps(const wp_optim *o);
void optim_set_steps(wp_optim *o, int64_t t);

/* First kernel error of the optimizer's backend (or of its host update context), or NULL. Functions returning int give 0 on
 * success and 1 after such an error (or a bad chunk id, recorded the same way). */
const char *optim_error(const wp_optim *o);

#endif
