/* Clip factor, skip and loss-scale state machine: pure functions of scalars every rank has. */
#include "decision.h"

#include <math.h>

wp_loss_scaler loss_scaler_init(bool dynamic, double initial_scale, int64_t window) {
    wp_loss_scaler s = {.scale = 1.0, .clean_steps = 0, .window = window, .dynamic = dynamic};
    if (s.dynamic) s.scale = fmin(fmax(initial_scale, WP_LOSS_SCALE_MIN), WP_LOSS_SCALE_MAX);
    return s;
}

wp_loss_scaler loss_scaler_next(wp_loss_scaler s, bool step_was_finite) {
    if (!s.dynamic) return s;
    if (!step_was_finite) {
        /* overflow in fp16: back off so the next step's gradients fit */
        s.scale = fmax(s.scale / 2, WP_LOSS_SCALE_MIN);
        s.clean_steps = 0;
        return s;
    }
    if (++s.clean_steps >= s.window && s.window > 0) {
        /* a long clean run: try a larger scale to keep small gradients out of fp16 underflow */
        s.scale = fmin(s.scale * 2, WP_LOSS_SCALE_MAX);
        s.clean_steps = 0;
    }
    return s;
}

double grad_total_sumsq(const double *chunk_sumsq, int n_chunks) {
    double total = 0;
    for (int c = 0; c < n_chunks; c++) total += chunk_sumsq[c];
    return total;
}

wp_step_decision step_decide(double total_sumsq, double loss_scale, double clip) {
    wp_step_decision d = {.skip = false, .grad_norm = 0, .clip_factor = 1, .grad_scale = 0};
    if (!isfinite(total_sumsq) || !(loss_scale > 0)) {
        d.skip = true;
        d.grad_norm = total_sumsq;
        return d;
    }
    d.grad_norm = sqrt(total_sumsq) / loss_scale;
    if (clip > 0) d.clip_factor = fmin(1.0, clip / (d.grad_norm + 1e-6));
    d.grad_scale = (float)(d.clip_factor / loss_scale);
    return d;
}
