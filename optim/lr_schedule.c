/* Learning-rate schedule (closed forms in lr_schedule.h). */
#include "lr_schedule.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


double lr_at(const wp_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->decay == WP_LR_CONSTANT) return s->lr;
    if (s->total_steps <= s->warmup_steps) return s->min_lr; /* no room to decay: already at the end */
    double p = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    if (p > 1) p = 1;
    double shape = s->decay == WP_LR_LINEAR ? 1.0 - p : 0.5 * (1.0 + cos(M_PI * p));
    return s->min_lr + (s->lr - s->min_lr) * shape;
}
