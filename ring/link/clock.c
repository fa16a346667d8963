/* Monotonic condition variables (see clock.h). */
#include "clock.h"

wp_result wp_sync_init(wp_sync *s) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return WP_FAILED;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&s->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) return WP_FAILED;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->cv);
        return WP_FAILED;
    }
    return WP_OK;
}

void wp_sync_destroy(wp_sync *s) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

void wp_sync_wait_until(wp_sync *s, double deadline) {
    struct timespec ts = wp_timespec(deadline);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}
