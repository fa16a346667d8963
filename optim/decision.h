/* Global per-step decisions: gradient clipping, skipping a non-finite step, dynamic loss
 * scaling. In WeiPipe no rank holds the whole gradient — each owner holds its chunks' — so the
 * decisions are pure functions of a few scalars that every rank receives in one small exchange
 * before any update (the REDUCE action of a schedule): every rank computes the same answer.
 *
 * Protocol (docs/training.md):
 *   1. each owner puts optim_chunk_sumsq(c) into slot c of a vector of n_chunks doubles that
 *      is zero elsewhere; the vectors are summed (or gathered) across ranks — adding zeros is
 *      exact, so every rank gets the same per-chunk values whatever N or the reduction order;
 *   2. every rank calls grad_total_sumsq (fixed chunk order), then step_decide;
 *   3. not skipped: owners call optim_step_chunk(c, lr, decision.grad_scale);
 *   4. every rank advances its loss scaler with loss_scaler_next(s, !decision.skip). */
#ifndef WP_DECISION_H
#define WP_DECISION_H

#include <stdbool.h>
#include <stdint.h>


/* Dynamic loss scaler (fp16 gradients in mixed precision): a non-finite step halves the scale
 * (never below 1), `window` clean steps in a row double it (never above 2^24). Dynamic in mixed
 * precision (fp16 compute, whose small gradients would underflow); in bf16 and fp32 the
 * caller passes dynamic = false and the scale stays 1. */
#define WP_LOSS_SCALE_MIN 1.0
#define WP_LOSS_SCALE_MAX 16777216.0

typedef struct {
    double scale;
    int64_t clean_steps; /* finite steps since the scale last changed */
    int64_t window;
    bool dynamic;
} wp_loss_scaler;

wp_loss_scaler loss_scaler_init(bool dynamic, double initial_scale, int64_t window);
wp_loss_scaler loss_scaler_next(wp_loss_scaler s, bool step_was_finite);

typedef struct {
    bool skip;          /* non-finite gradient somewhere: no rank updates, nothing changes */
    double grad_norm;   /* global L2 norm of the true (unscaled) gradient, before clipping */
    double clip_factor; /* min(1, clip / (norm + 1e-6)); 1 when clipping is off or skipped */
    float grad_scale;   /* multiplier for the accumulated gradient: clip_factor / loss_scale */
} wp_step_decision;

/* Sum of per-chunk squared norms in chunk order (so the result is bit-identical on all ranks). */
double grad_total_sumsq(const double *chunk_sumsq, int n_chunks);

/* total_sumsq is the squared norm of the accumulated (loss-scaled) gradient; clip <= 0 turns
 * clipping off. A non-finite total skips the step in every precision: applying it would write
 * NaN into the masters. */
wp_step_decision step_decide(double total_sumsq, double loss_scale, double clip);

#endif
