/* Monotonic time in seconds, shared by every timeout, pacing decision and counter of ring/.
 * CLOCK_MONOTONIC is system-wide on Linux, so processes on one machine can compare stamps
 * (the link benchmark does). */
#ifndef WP_RING_CLOCK_H
#define WP_RING_CLOCK_H

#include <pthread.h>
#include <time.h>

#include "result.h"

static inline double wp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline struct timespec wp_timespec(double t) {
    if (t < 0) t = 0;
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* A mutex and a condition variable that waits on CLOCK_MONOTONIC deadlines (wall-clock jumps
 * must not stretch or cut a timeout). */
typedef struct wp_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} wp_sync;

/* WP_OK, or WP_FAILED when pthreads refuse (no message: the caller says what it was creating). */
wp_result wp_sync_init(wp_sync *s);
void wp_sync_destroy(wp_sync *s);
/* Wait until woken or until the monotonic time `deadline` (seconds); spurious wake-ups happen. */
void wp_sync_wait_until(wp_sync *s, double deadline);

#endif
