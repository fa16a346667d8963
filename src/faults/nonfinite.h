/* Non-finite gradients: the test hook that injects them, and the bound on how many steps in a
 * row may be skipped because of them.
 *
 * A skipped step (decision.h: a non-finite gradient norm anywhere) changes nothing but the
 * loss scale, which halves. Overflow at a too-large scale heals within a few halvings; a
 * gradient that stays non-finite (NaN in the data path, a diverged model, fp32/bf16 where the
 * scale is 1) would skip forever while the job looks alive, so after --max-skipped-steps
 * skips in a row every rank stops with the same message (the decision is global, so all
 * ranks count alike and stop at the same step). */
#ifndef WP_RUNTIME_NONFINITE_H
#define WP_RUNTIME_NONFINITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optim.h"
#include "result.h"

/* The test hook, read from the environment in this one place:
 *   WEIPIPE_INJECT_NONFINITE=RANK,STEP[,COUNT]
 * makes RANK's accumulated gradient of its first owned chunk NaN just before the REDUCE of
 * steps STEP .. STEP+COUNT-1 (0-based; COUNT 1 by default, -1 = every step from STEP on).
 * Unset or malformed: never (a malformed value is ignored after one warning on stderr).
 * Returns whether it poisoned a gradient. */
bool nonfinite_inject(wp_optim *o, int n_chunks, int rank, int64_t step);

/* Counts skipped steps in a row in *run; returns 0, or 1 with a message once more than
 * max_skips (> 0; 0 turns the bound off) steps in a row were skipped. */
wp_result nonfinite_bound(int64_t *run, bool skipped, int64_t max_skips, int64_t step, double loss_scale, char *err,
                    size_t errlen);

#endif
