/* One clock for the whole job's traces. Each rank's CLOCK_MONOTONIC starts at its host's boot,
 * so stamps of different hosts cannot be compared; once after rendezvous every rank estimates
 * its offset to rank 0's clock as NTP does, from round trips over the control channel, and
 * stamps trace events as (own clock + offset) - origin, origin being rank 0's clock when the
 * exchange ended: a time axis shared by every rank, to within each rank's residual.
 *
 * One round: rank r reads t0, enters a barrier; rank 0, which leaves the barrier only once every
 * rank arrived, reads t1 and broadcasts it; rank r reads t3 when it arrives. So t1 was read
 * between t0 and t3 (true time), and offset = t1 - (t0 + t3) / 2 is within (t3 - t0) / 2 of the
 * truth: NTP's ((t1-t0) + (t2-t3)) / 2 with t2 = t1. Of several rounds the one with the
 * smallest round trip is kept, and its half round trip is the stated residual (a bound, not an
 * estimate: the error can be anywhere within it). Clock drift over a run is not corrected (a
 * few parts per million of the run's length).
 *
 * WEIPIPE_TEST_CLOCK_SKEW=S (tests only) makes rank r's clock read r * S seconds ahead, as
 * hosts' clocks would: the estimate must remove it. */
#ifndef WP_RING_CLOCK_SYNC_H
#define WP_RING_CLOCK_SYNC_H

#include <stddef.h>

#include "control.h"

typedef struct {
    double offset;   /* rank 0's clock minus this rank's, seconds (0 on rank 0) */
    double residual; /* bound of the offset's error: half the best round trip (0 on rank 0) */
    double skew;     /* injected by WEIPIPE_TEST_CLOCK_SKEW for this rank (0 normally) */
    double zero;     /* the wp_now() reading of this rank at common time 0 */
    int rounds;
} wp_clock_sync;

#define CLOCK_SYNC_ROUNDS 16

/* Collective (every rank calls it, same rounds). Returns 0; 1 when the control channel failed;
 * 2 when WEIPIPE_TEST_CLOCK_SKEW is not a number (err names it). */
int clock_sync_run(wp_control *c, int rounds, wp_clock_sync *out, char *err, size_t errlen);

/* Parse WEIPIPE_TEST_CLOCK_SKEW for rank: 0 and *skew (0 when unset), or 2 with a reason. */
int clock_sync_test_skew(int rank, double *skew, char *err, size_t errlen);

#endif
