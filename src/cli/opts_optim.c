/* Flags of the optimizer and the learning-rate schedule (adapters.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"

wp_result adamw_hparams_from_opts(const wp_opts *o, wp_adamw_hparams *hp, char *err, size_t errlen) {
    if (!(o->adam_beta1 >= 0 && o->adam_beta1 < 1)) return wp_fail(WP_BAD_INPUT, err, errlen, "--adam-beta1: %g must be in [0, 1)", o->adam_beta1);
    if (!(o->adam_beta2 >= 0 && o->adam_beta2 < 1)) return wp_fail(WP_BAD_INPUT, err, errlen, "--adam-beta2: %g must be in [0, 1)", o->adam_beta2);
    if (!(o->adam_eps > 0)) return wp_fail(WP_BAD_INPUT, err, errlen, "--adam-eps: %g must be positive", o->adam_eps);
    if (!(o->weight_decay >= 0)) return wp_fail(WP_BAD_INPUT, err, errlen, "--weight-decay: %g must not be negative", o->weight_decay);
    hp->beta1 = o->adam_beta1;
    hp->beta2 = o->adam_beta2;
    hp->eps = o->adam_eps;
    hp->weight_decay = o->weight_decay;
    return 0;
}

void optim_place_from_opts(const wp_opts *o, int threads, wp_optim_place *p) {
    *p = (wp_optim_place){.memory = o->optimizer_memory, .threads = threads};
}

wp_result lr_schedule_from_opts(const wp_opts *o, wp_lr_schedule *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (!(o->lr >= 0 && isfinite(o->lr))) return wp_fail(WP_BAD_INPUT, err, errlen, "--lr: %g must be a finite non-negative number", o->lr);
    /* -1 (the default) follows --lr, so a lower --lr never makes the "decay" climb to a fixed
     * floor above it; an explicit floor above the peak would do just that and is refused. */
    double min_lr = o->min_lr == -1 ? 0.1 * o->lr : o->min_lr;
    if (!(min_lr >= 0 && isfinite(min_lr)))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--min-lr: %g must be a finite non-negative number (or -1: 0.1 x --lr)", o->min_lr);
    if (min_lr > o->lr)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--min-lr: %g is above --lr %g: the decay would raise the rate", min_lr, o->lr);
    if (o->warmup_steps < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--warmup-steps: %lld must not be negative", (long long)o->warmup_steps);
    if (o->steps < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "--steps: %lld must be at least 1", (long long)o->steps);
    s->decay = o->lr_decay_style; /* parsed by cli_set (choices.h) */
    s->lr = o->lr;
    s->min_lr = min_lr;
    s->warmup_steps = o->warmup_steps;
    s->total_steps = o->steps;
    return 0;
}
