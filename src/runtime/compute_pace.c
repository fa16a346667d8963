/* Compute pacing (compute_pace.h) and the executor's paced hold, which keeps transfers moving. */
#include "compute_pace.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "rt_impl.h"
#include "sim.h"

void pace_init(rt_pace *p, const wp_layout *L, int nranks, double tflops) {
    memset(p, 0, sizeof *p);
    if (tflops <= 0) return;
    wp_machine m = {.flops = tflops * 1e12};
    wp_costs c;
    costs_from_layout(&c, L, nranks, &m);
    for (int op = WP_OP_F; op <= WP_OP_BW; op++)
        for (int k = 0; k < L->cfg.n_chunks && k < WP_MAX_CHUNKS; k++) p->min_s[op][k] = c.op_s[op][k];
    p->on = true;
}

double pace_min_s(const rt_pace *p, int op, int chunk) {
    if (!p->on || !op_is_compute(op) || chunk < 0 || chunk >= WP_MAX_CHUNKS) return 0;
    return p->min_s[op][chunk];
}

/* While the rank waits out its budget it is an idle device: arriving buffers are taken in and
 * relays forwarded at once, as the simulator assumes, instead of after the wait. The poll
 * period bounds that delay. */
#define PACE_POLL_S 200e-6

void rt_pace_overrun(const wp_rt *rt, int64_t *paced, int64_t *over, double *over_s) {
    *paced = rt->paced_n;
    *over = rt->over_n;
    *over_s = rt->over_s;
}

wp_result rt_pace_hold(wp_rt *rt, double until, char *err, size_t errlen) {
    double late = wp_now() - until;
    rt->paced_n++;
    if (late > 0) {
        rt->over_n++;
        rt->over_s += late;
    }
    for (double now = wp_now(); now < until; now = wp_now()) {
        if (rt->c.t && rt_progress(rt, err, errlen)) return 1;
        double next = until - now > PACE_POLL_S ? now + PACE_POLL_S : until;
        struct timespec ts = wp_timespec(next);
        int rc;
        while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR) {
        }
        if (rc) return rt_fail(rt, err, errlen, "pacing: clock_nanosleep failed: %s", strerror(rc));
    }
    return 0;
}
