/* Shared by the drawings (draw_common.h). The colours follow the paper's figures: green forward,
 * blue backward (input gradient), purple W-pass. */
#include "draw_common.h"

const char *draw_op_color(int op) {
    switch (op) {
    case WP_OP_F: return "#43a047";
    case WP_OP_B: return "#1e88e5";
    case WP_OP_W: return "#8e24aa";
    case WP_OP_BW: return "#3949ab";
    case WP_OP_ACC: return "#ffb300";
    case WP_OP_FOLD: return "#fdd835"; /* a reduce-scatter hop: a gradient add, like ACC */
    case WP_OP_UPDATE: return "#fb8c00";
    case WP_OP_REDUCE: return "#e53935";
    default: return "#9e9e9e";
    }
}

const char *draw_channel_color(int ch) {
    switch (ch) {
    case WP_SCH_WFWD: return "#66bb6a";
    case WP_SCH_WBWD: return "#42a5f5";
    case WP_SCH_GRAD: return "#ab47bc";
    case WP_SCH_ACT: return "#26a69a";
    case WP_SCH_ACTGRAD: return "#ef5350";
    default: return "#ce93d8";
    }
}

int draw_channel_lane(int ch) {
    if (ch == WP_SCH_WFWD || ch == WP_SCH_ACT) return 0;
    if (ch == WP_SCH_WBWD || ch == WP_SCH_ACTGRAD) return 1;
    return 2;
}

bool draw_window(const wp_run *run, int step, double *t0, double *t1) {
    bool any = false;
    for (int i = 0; i < run->n_comp; i++) {
        const wp_comp_event *c = &run->comp[i];
        if (c->step != step) continue;
        if (!any || c->t0 < *t0) *t0 = c->t0;
        if (!any || c->t1 > *t1) *t1 = c->t1;
        any = true;
    }
    for (int i = 0; i < run->n_xfer; i++) {
        const wp_xfer_event *x = &run->xfer[i];
        if (x->step != step) continue;
        if (!any || x->t0 < *t0) *t0 = x->t0;
        if (!any || x->t1 > *t1) *t1 = x->t1;
        any = true;
    }
    return any;
}
