/* The executor's transfer and wait events for --trace (executor.h: rt_xfer_event). Recording is
 * best effort: when memory runs out the run goes on with fewer events. */
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "rt_impl.h"

static rt_xfer_event *grow(wp_rt *rt) {
    if (rt->n_xev == rt->cap_xev) {
        int cap = rt->cap_xev ? 2 * rt->cap_xev : 256;
        rt_xfer_event *n = realloc(rt->xev, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        rt->xev = n;
        rt->cap_xev = cap;
    }
    return &rt->xev[rt->n_xev++];
}

int rt_xfer_begin(wp_rt *rt, rt_xfer_kind kind, const rt_entry *e, int peer, int channel) {
    if (!rt->c.record) return -1;
    rt_xfer_event *x = grow(rt);
    if (!x) return -1;
    double now = wp_now() - rt->t_origin;
    *x = (rt_xfer_event){.kind = kind, .buf = e->name, .peer = peer, .channel = channel, .bytes = e->bytes,
                         .step = rt->step, .t0 = now, .t1 = now - 1};
    return rt->n_xev - 1;
}

void rt_xfer_end(wp_rt *rt, int ev) {
    if (ev >= 0 && ev < rt->n_xev) rt->xev[ev].t1 = wp_now() - rt->t_origin;
}

void rt_wait_event(wp_rt *rt, const char *what, double t0, double t1) {
    if (!rt->c.record) return;
    rt_xfer_event *x = grow(rt);
    if (!x) return;
    *x = (rt_xfer_event){.kind = RT_EV_WAIT, .peer = -1, .channel = -1, .step = rt->step, .t0 = t0 - rt->t_origin,
                         .t1 = t1 - rt->t_origin};
    snprintf(x->what, sizeof x->what, "%s", what);
}

void rt_save_event(wp_rt *rt, double t0, double t1) {
    if (!rt || !rt->c.record) return; /* a save before the executor exists records nothing */
    rt_xfer_event *x = grow(rt);
    if (!x) return;
    *x = (rt_xfer_event){.kind = RT_EV_SAVE, .peer = -1, .channel = -1, .step = rt->step, .t0 = t0 - rt->t_origin,
                         .t1 = t1 - rt->t_origin};
    snprintf(x->what, sizeof x->what, "SAVE");
}

const rt_xfer_event *rt_xfer_events(const wp_rt *rt, int *n) {
    *n = rt->n_xev;
    return rt->xev;
}
