/* Compute pacing (--device-tflops X): every compute action (F, B, W, BW) lasts at least its
 * FLOPs / X — the real work, then waiting — so that N ranks sharing a few CPU cores behave like
 * N devices of a known speed, and the simulator, fed the same speed and the same --link-*
 * settings (ring/link_model.h paces the links), predicts the run's step time.
 *
 * The least durations come from the simulator's own cost model (sim.h: costs_from_layout, the
 * layout's FLOP counts, recompute included), so the two can only differ by what really happens:
 * real work longer than its budget, scheduling jitter, a relay delayed by the real work. */
#ifndef WP_RUNTIME_COMPUTE_PACE_H
#define WP_RUNTIME_COMPUTE_PACE_H

#include <stdbool.h>

#include "layout.h"
#include "ir.h"

typedef struct {
    bool on;
    double min_s[4][WP_MAX_CHUNKS]; /* [F, B, W, BW][chunk] seconds */
} rt_pace;

/* tflops <= 0 turns pacing off (every least duration 0). */
void pace_init(rt_pace *p, const wp_layout *L, int nranks, double tflops);
/* Least duration of op on chunk; 0 for a non-compute op or when pacing is off. */
double pace_min_s(const rt_pace *p, int op, int chunk);

#endif
