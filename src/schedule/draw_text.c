/* Text timeline for the terminal: one row per rank, one 3-character column per time unit; a cell
 * shows the op that fills most of it: F forward, b input gradient, w W-pass, B fused backward,
 * a ACC, f FOLD, U UPDATE, r waiting in REDUCE, followed by the chunk; "." is idle. */
#include <math.h>

#include "draw_common.h"

static char letter(int op) {
    switch (op) {
    case WP_OP_F: return 'F';
    case WP_OP_B: return 'b';
    case WP_OP_W: return 'w';
    case WP_OP_BW: return 'B';
    case WP_OP_ACC: return 'a';
    case WP_OP_FOLD: return 'f';
    case WP_OP_UPDATE: return 'U';
    case WP_OP_REDUCE: return 'r';
    default: return 0;
    }
}

/* The smallest forward time in the step: one column each, unless that makes too many. */
static double column_unit(const wp_run *run, int step, double span, int width) {
    double u = INFINITY;
    for (int i = 0; i < run->n_comp; i++) {
        const wp_comp_event *c = &run->comp[i];
        if (c->step == step && c->op == WP_OP_F && c->t1 > c->t0 && c->t1 - c->t0 < u) u = c->t1 - c->t0;
    }
    if (!isfinite(u) || span / u > width) u = span / width;
    return u;
}

static void row(FILE *f, const wp_run *run, int step, int rank, double t0, double u, int cols) {
    fprintf(f, "r%-3d|", rank);
    for (int k = 0; k < cols; k++) {
        double a = t0 + k * u, b = a + u, best = 0.25 * u;
        const wp_comp_event *pick = NULL;
        for (int i = 0; i < run->n_comp; i++) {
            const wp_comp_event *c = &run->comp[i];
            if (c->step != step || c->rank != rank || !letter(c->op)) continue;
            double over = fmin(b, c->t1) - fmax(a, c->t0);
            if (over > best) best = over, pick = c;
        }
        if (!pick) fputs(" . ", f);
        else if (pick->op == WP_OP_REDUCE) fputs(" r ", f);
        else fprintf(f, "%c%-2d", letter(pick->op), pick->chunk);
    }
    fputs("|\n", f);
}

void draw_text(FILE *f, const wp_schedule *s, const wp_run *run, const wp_draw_opts *o, int width) {
    double t0 = 0, t1 = 1;
    if (!draw_window(run, o->step, &t0, &t1) || t1 <= t0) t1 = t0 + 1;
    double u = column_unit(run, o->step, t1 - t0, width > 0 ? width : 1);
    int cols = (int)ceil((t1 - t0) / u - 1e-9);
    fprintf(f, "%s\n", o->title ? o->title : strategy_name(s->strategy));
    fprintf(f, "one column = %g%s; F forward, b input gradient, w W-pass, B fused backward, a ACC, f FOLD, "
               "U UPDATE, r REDUCE wait; the number is the chunk\n", u, o->unit_time ? " (F = 1)" : " s");
    for (int r = 0; r < s->nranks; r++) row(f, run, o->step, r, t0, u, cols);
}
