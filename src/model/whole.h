/* The whole model on one rank, chunk after chunk: forward through every chunk, then the
 * backward from the last chunk to the first. What `weipipe check`, `weipipe bench` and the
 * model tests run; it exercises the same per-chunk entry points a pipeline schedule calls,
 * with the activations handed from chunk to chunk as a ring would.
 *
 * The functions below that return int return 0, or 1 with the reason in the backend context's
 * sticky error (kern_error of the wp_kern given to whole_create), as model.h's entry points do. */
#ifndef WP_WHOLE_H
#define WP_WHOLE_H

#include "model.h"
#include "result.h"

typedef struct wp_whole wp_whole;

/* gw_dtype: WP_F32 or WP_BF16, the dtype weight gradients accumulate in. NULL with a reason. */
wp_whole *whole_create(const wp_layout *L, wp_kern *k, wp_dtype gw_dtype, char *err, size_t errlen);
void whole_destroy(wp_whole *W);
wp_model *whole_model(const wp_whole *W);

/* Upload total_numel fp32 parameters (layout order, chunks concatenated), rounded to the
 * backend's compute dtype. */
wp_result whole_set_params(wp_whole *W, const float *params);
/* Upload b*s input tokens and b*s targets (host int32, row-major [b,s]). */
wp_result whole_set_tokens(wp_whole *W, const int32_t *inputs, const int32_t *targets);

/* Mean loss over the b*s targets (forward only). */
wp_result whole_forward(wp_whole *W, double *loss_mean);
/* Zero the gradients, run F then the backward of every chunk with dloss = 1/(b*s); split
 * runs B then the W-pass per chunk, otherwise the fused backward. F is the training forward
 * (model_forward_train: the LM head's backward in the same pass). */
wp_result whole_step(wp_whole *W, bool split, double *loss_mean);
/* The parts of whole_step, for timing them apart: zero the gradients; the backward of every
 * chunk after a whole_forward (gradients add up). whole_forward is the plain forward, so
 * these run the head's backward in B (the path an F without dloss takes). */
wp_result whole_zero_grads(wp_whole *W);
wp_result whole_backward(wp_whole *W, bool split);

/* For timing (weipipe bench, train --calibrate): the layout's seeded initial parameters and
 * b*s random input and target tokens; the values do not change the time. 0, or 1 with the
 * reason in err (host memory, or the backend's error). */
wp_result whole_load_random(wp_whole *W, uint64_t seed, char *err, size_t errlen);
/* One step (zeroed gradients, forward, fused backward) with the backend synced around each half,
 * its forward and backward wall times apart; *loss may be NULL. 0, or 1 (backend error). */
wp_result whole_time_step(wp_whole *W, double *fwd_s, double *bwd_s, double *loss);

/* d(mean loss)/d(param) as total_numel fp32 (host), in layout order. */
wp_result whole_get_grads(wp_whole *W, float *grads);
/* The gradient of chunk c's input after whole_step (T*h compute-dtype elements, backend
 * memory; NULL for chunk 0). */
const void *whole_input_grad(const wp_whole *W, int c);

#endif
