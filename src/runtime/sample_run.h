/* --sample-every: a short greedy sample from the current weights during training (llm.c style).
 * The masters are spread over the chunks' owners (and sliced under ZeRO-3), so rank 0 gathers
 * every chunk's working copy, the weights training computes with (rounded through the weight
 * wire dtype): slices go to the chunk's owner as for --eval-every (evaluate.c), then each owner
 * sends its whole chunks to rank 0 on a channel of their own, between steps. Rank 0 then runs
 * the KV-cache decoder (src/model/decode.h) from token 0, greedily (no randomness: the sample
 * at a step depends only on the weights). */
#ifndef WP_RUNTIME_SAMPLE_RUN_H
#define WP_RUNTIME_SAMPLE_RUN_H

#include "control.h"
#include "ir.h"
#include "model.h"
#include "optim.h"
#include "transport.h"
#include "result.h"

#define WP_SAMPLE_CHANNEL 6 /* unused by the schedules (ir.h's stop at 5) and by evaluation (7) */

typedef struct rt_sample rt_sample;

/* tokens: generated per sample (at most the model's positions - 1); each sample starts at token
 * bos and stops after eos (-1: none). 0, or 1 with a reason. */
wp_result sample_create(rt_sample **out, const wp_schedule *s, int rank, const wp_layout *L, wp_kern *k, wp_optim *o,
                  wp_transport *t, wp_control *ctl, int tokens, int32_t bos, int32_t eos, double timeout, char *err,
                  size_t errlen);
void sample_destroy(rt_sample *S);
/* Collective: every rank calls it at the same step boundary. On rank 0, ids[0..*n) are the
 * generated ids (ids holds tokens); other ranks get *n = 0. 0, or 1 with a reason. */
wp_result sample_run(rt_sample *S, int32_t *ids, int *n, char *err, size_t errlen);

#endif
