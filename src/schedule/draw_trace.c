/* A run as a Chrome trace (trace.h): one process per rank, the compute track and one track per
 * channel with the transfers the rank sends. */
#include "draw.h"

void draw_trace(wp_trace *t, const wp_schedule *s, const wp_run *run, int pid_base, const char *prefix, double seconds) {
    char name[96], args[160];
    for (int r = 0; r < s->nranks; r++) {
        snprintf(name, sizeof name, "%srank %d", prefix ? prefix : "", r);
        trace_process(t, pid_base + r, name);
        trace_thread(t, pid_base + r, WP_TRACK_COMPUTE, "compute");
        for (int ch = 0; ch < WP_SCH_COUNT; ch++) {
            snprintf(name, sizeof name, "send %s", channel_name(ch));
            if (ch <= WP_SCH_GRADRET) trace_thread(t, pid_base + r, trace_track_of_channel(ch), name);
        }
    }
    for (int i = 0; i < run->n_comp; i++) {
        const wp_comp_event *c = &run->comp[i];
        wp_action a = {.op = c->op, .chunk = c->chunk, .mb = c->mb};
        action_text(&a, name, sizeof name);
        snprintf(args, sizeof args, "\"chunk\":%d,\"mb\":%d,\"step\":%d,\"action\":%d", c->chunk, c->mb, c->step, c->index);
        trace_span(t, pid_base + c->rank, WP_TRACK_COMPUTE, name, op_is_compute(c->op) ? "compute" : "optimizer",
                   c->t0 * seconds, (c->t1 - c->t0) * seconds, args);
    }
    for (int i = 0; i < run->n_xfer; i++) {
        const wp_xfer_event *x = &run->xfer[i];
        char nm[48];
        snprintf(name, sizeof name, "%s ->%d", buf_name(x->buf, nm, sizeof nm), x->dst);
        snprintf(args, sizeof args, "\"bytes\":%zu,\"dst\":%d,\"step\":%d", x->bytes, x->dst, x->step);
        trace_span(t, pid_base + x->src, trace_track_of_channel(x->channel), name, channel_name(x->channel),
                   x->t0 * seconds, (x->t1 - x->t0) * seconds, args);
    }
}
