/* weipipe bench's second table: the parts of an optimizer step that are not the model (weight
 * load, AdamW, gradient zeroing and accumulation, checkpoint save), each beside the time a plain
 * copy of the same bytes takes in the same run (bench_phases.c). */
#ifndef WP_BENCH_PHASES_H
#define WP_BENCH_PHASES_H

#include <stdio.h>

#include "cli.h"
#include "layout.h"
#include "kernels.h"

enum { BENCH_PHASES = 5 };

typedef struct {
    const char *name;
    double bytes;   /* read + written per run (save: written to the file) */
    double min_s, med_s;       /* the phase: best and median of the repeats */
    double bound_min_s, bound_med_s; /* its bound: a copy of `bytes` (save: write + fsync of them) */
    int threads, bound_threads;      /* threads the phase ran on; its bound's fastest repeat's */
} bench_phase;

/* Runs each phase on the whole model (one rank owning every chunk) `reps` times, each time right
 * after its bound; 0, or 1 with err set. Writes the save phase's files under a temporary folder of
 * $TMPDIR (else /tmp), removed after. */
wp_result bench_phases_run(const wp_opts *o, const wp_layout *L, wp_kern *k, int reps, bench_phase out[BENCH_PHASES],
                     char *err, size_t errlen);
/* The table (text) or a JSON array (json, no newline). */
void bench_phases_print(FILE *f, const bench_phase *p, bool json);

#endif
