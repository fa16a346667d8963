/* What `weipipe schedule` and `weipipe simulate` share: reading the pipeline shape, the model
 * layout and the machine from the options. Each returns 0, or 2 with a one-line reason. */
#ifndef WP_SCHEDULE_CMD_COMMON_H
#define WP_SCHEDULE_CMD_COMMON_H

#include "cli/cli.h"
#include "schedule.h"
#include "sim.h"

typedef struct {
    int nranks, nmb;
    wp_gen_opts gen;
} wp_pipe_shape;

int pipe_shape_from_opts(const wp_opts *o, wp_pipe_shape *p, char *err, size_t errlen);

/* The model and its layout with default_chunks chunks (strategy_default_chunks) unless
 * --num-chunks/--chunk-layers say otherwise. When the model's size was left at its default (no
 * --num-layers, --chunk-layers or config file line) and has fewer layers than chunks, the layers
 * are raised to one per chunk and *raised says so; a model given explicitly is never changed.
 * Caller frees with layout_free. */
int layout_from_opts(const wp_opts *o, int nranks, int default_chunks, wp_layout *L, bool *raised, char *err,
                     size_t errlen);

/* Links, device speed and memory bandwidth. */
int machine_from_opts(const wp_opts *o, wp_machine *m, char *err, size_t errlen);

#endif
