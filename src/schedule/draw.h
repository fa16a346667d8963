/* Drawings of a run's timeline (the event lists that engine_run records), one step of it:
 * SVG (ranks as rows, time across, F/B/W/BW blocks coloured and labelled chunk/micro-batch, the
 * transfers each rank sends as thin bars under its row, one sub-row per channel), a text timeline
 * for the terminal (one row per rank, one column per time unit), and a Chrome trace (trace.h:
 * one process per rank, a compute track and a track per channel). */
#ifndef WP_SCHEDULE_DRAW_H
#define WP_SCHEDULE_DRAW_H

#include <stdio.h>

#include "engine.h"
#include "trace.h"

typedef struct {
    const char *title;  /* first line of the drawing */
    bool unit_time;     /* times are abstract units (the unit model), not seconds */
    int step;           /* which step of the run to draw */
} wp_draw_opts;

/* Like the printers of print.h these only write to f: the caller, which opened f and knows its
 * name, checks ferror(f) and fclose(f) and reports a failed write. */
void draw_svg(FILE *f, const wp_schedule *s, const wp_run *run, const wp_draw_opts *o);
/* width: at most this many columns of 3 characters per row. */
void draw_text(FILE *f, const wp_schedule *s, const wp_run *run, const wp_draw_opts *o, int width);
/* Processes pid_base + rank, named "<prefix>rank R"; events of every step; a time unit of the run
 * lasts `seconds` (1 for simulated seconds, 1e-3 to show the unit model in milliseconds). */
void draw_trace(wp_trace *t, const wp_schedule *s, const wp_run *run, int pid_base, const char *prefix, double seconds);

#endif
