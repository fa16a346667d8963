/* Learning-rate schedule: linear warm-up, then constant, linear or cosine decay to --min-lr.
 *
 * Steps count from 0. Warm-up step k < W uses lr * (k+1) / W (as llm.c: the first step already
 * moves). After it, progress p = (k - W) / (S - W) in [0, 1] (S = --steps) decays
 *   constant: lr
 *   linear:   min + (lr - min) * (1 - p)
 *   cosine:   min + (lr - min) * (1 + cos(pi p)) / 2
 * reaching min-lr at k = S (one past the last step) and staying there beyond it. */
#ifndef WP_LR_SCHEDULE_H
#define WP_LR_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { WP_LR_CONSTANT = 0, WP_LR_LINEAR, WP_LR_COSINE } wp_lr_decay;

typedef struct {
    double lr, min_lr;
    int64_t warmup_steps, total_steps;
    wp_lr_decay decay;
} wp_lr_schedule;


double lr_at(const wp_lr_schedule *s, int64_t step);

#endif
