/* The job's common trace clock (clock_sync.h). */
#include "clock_sync.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"

int clock_sync_test_skew(int rank, double *skew, char *err, size_t errlen) {
    *skew = 0;
    const char *s = getenv("WEIPIPE_TEST_CLOCK_SKEW");
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || fabs(v) > 1e6) {
        snprintf(err, errlen, "WEIPIPE_TEST_CLOCK_SKEW: '%s' is not a number of seconds (|S| <= 1e6)", s);
        return 2;
    }
    *skew = v * rank;
    return 0;
}

int clock_sync_run(wp_control *c, int rounds, wp_clock_sync *out, char *err, size_t errlen) {
    const int rank = ctl_rank(c);
    *out = (wp_clock_sync){.rounds = rounds};
    int rc = clock_sync_test_skew(rank, &out->skew, err, errlen);
    if (rc) return rc;
    const double skew = out->skew;
    double best_rtt = INFINITY;
    for (int i = 0; i < rounds; i++) {
        double t0 = wp_now() + skew;
        if (ctl_barrier(c, err, errlen)) return 1;
        double t1 = wp_now() + skew; /* meaningful on rank 0: every rank has sent its t0 by now */
        if (ctl_broadcast(c, 0, &t1, sizeof t1, err, errlen)) return 1;
        double t3 = wp_now() + skew;
        if (rank != 0 && t3 - t0 < best_rtt) {
            best_rtt = t3 - t0;
            out->offset = t1 - (t0 + t3) / 2;
            out->residual = best_rtt / 2;
        }
    }
    /* common time 0: rank 0's clock now */
    double origin = wp_now() + skew;
    if (ctl_broadcast(c, 0, &origin, sizeof origin, err, errlen)) return 1;
    /* common = wp_now() + skew + offset - origin = 0  <=>  wp_now() = origin - offset - skew */
    out->zero = origin - out->offset - skew;
    return 0;
}
