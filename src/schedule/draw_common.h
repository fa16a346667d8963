/* Shared by the drawings: colours, letters and the time window of one step. */
#ifndef WP_SCHEDULE_DRAW_COMMON_H
#define WP_SCHEDULE_DRAW_COMMON_H

#include "draw.h"

const char *draw_op_color(int op);
const char *draw_channel_color(int ch);
/* The sub-row of a rank's row that a channel's transfers use (0..2). */
int draw_channel_lane(int ch);
/* First start and last end among the step's events; false when it has none. */
bool draw_window(const wp_run *run, int step, double *t0, double *t1);

#endif
