/* Validation loss during training (--eval-every): the val split's first sequences, read in
 * order, flow forward through the chunks' owners (each forwards the chunks it owns with its
 * current masters, rounded through the weight wire dtype as training does), on a channel of
 * their own between steps; the last chunk's owner sums the loss and counts the targets (all
 * tokens, or the unmasked ones with target masks) and every rank gets the mean over them.
 * Sliced weights (ZeRO-3, ir.h) are gathered whole on s->owner[c] (rank 0) chunk by chunk. */
#ifndef WP_RUNTIME_EVALUATE_H
#define WP_RUNTIME_EVALUATE_H

#include "loader.h"
#include "model.h"
#include "optim.h"
#include "control.h"
#include "transport.h"
#include "ir.h"
#include "result.h"

#define WP_EVAL_CHANNEL 7 /* unused by the schedules (ir.h's channels stop at 5) */

typedef struct rt_eval rt_eval;

/* data: the val split (opened by the caller, b = micro-batch size). batches: micro-batches per
 * evaluation. Returns 0, or 1 with a reason. */
wp_result eval_create(rt_eval **out, const wp_schedule *s, int rank, wp_model *m, wp_optim *o, wp_transport *t,
                wp_control *ctl, wp_loader *data, int batches, double timeout, char *err, size_t errlen);
void eval_destroy(rt_eval *e);
/* Collective: every rank calls it at the same step boundary. */
wp_result eval_run(rt_eval *e, double *mean_loss, char *err, size_t errlen);

#endif
