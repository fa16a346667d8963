/* Learning-rate schedule (closed forms in lr_schedule.h). */
#include "lr_schedule.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

int lr_schedule_from_opts(const wp_opts *o, wp_lr_schedule *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (!(o->lr >= 0 && isfinite(o->lr))) return fail(err, errlen, "--lr: %g must be a finite non-negative number", o->lr);
    if (!(o->min_lr >= 0 && isfinite(o->min_lr)))
        return fail(err, errlen, "--min-lr: %g must be a finite non-negative number", o->min_lr);
    if (o->warmup_steps < 0) return fail(err, errlen, "--warmup-steps: %lld must not be negative", (long long)o->warmup_steps);
    if (o->steps < 1) return fail(err, errlen, "--steps: %lld must be at least 1", (long long)o->steps);
    if (strcmp(o->lr_decay_style, "constant") == 0) s->decay = WP_LR_CONSTANT;
    else if (strcmp(o->lr_decay_style, "linear") == 0) s->decay = WP_LR_LINEAR;
    else if (strcmp(o->lr_decay_style, "cosine") == 0) s->decay = WP_LR_COSINE;
    else return fail(err, errlen, "--lr-decay-style: '%s' is not one of constant|linear|cosine", o->lr_decay_style);
    s->lr = o->lr;
    s->min_lr = o->min_lr;
    s->warmup_steps = o->warmup_steps;
    s->total_steps = o->steps;
    return 0;
}

double lr_at(const wp_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->decay == WP_LR_CONSTANT) return s->lr;
    if (s->total_steps <= s->warmup_steps) return s->min_lr; /* no room to decay: already at the end */
    double p = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    if (p > 1) p = 1;
    double shape = s->decay == WP_LR_LINEAR ? 1.0 - p : 0.5 * (1.0 + cos(M_PI * p));
    return s->min_lr + (s->lr - s->min_lr) * shape;
}
