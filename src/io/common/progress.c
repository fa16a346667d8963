/* The byte meter (progress.h). */
#include "progress.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    bool failed, tty;
    int users; /* ranks of one process share the meter: their totals add up */
    char what[256];
    uint64_t total, done;
    double t0, drawn;
} meter = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mb(uint64_t b) { return (double)b / 1e6; }

void io_progress_begin(const char *what, uint64_t total) {
    pthread_mutex_lock(&meter.mu);
    if (meter.users++ > 0) {
        meter.total += total;
        pthread_mutex_unlock(&meter.mu);
        return;
    }
    meter.tty = isatty(STDERR_FILENO) == 1; /* a log gets the time line only */
    snprintf(meter.what, sizeof meter.what, "%s", what);
    meter.total = total;
    meter.done = 0;
    meter.t0 = meter.drawn = now();
    pthread_mutex_unlock(&meter.mu);
}

void io_progress_add(uint64_t bytes) {
    pthread_mutex_lock(&meter.mu);
    if (meter.users > 0) {
        meter.done += bytes;
        double t = now();
        if (meter.tty && meter.total >= IO_PROGRESS_MIN_BYTES && t - meter.drawn >= 0.2) { /* 5 redraws a second at most */
            meter.drawn = t;
            fprintf(stderr, "\r\033[Kweipipe: %s: %.0f / %.0f MB (%.0f MB/s)", meter.what, mb(meter.done), mb(meter.total),
                    mb(meter.done) / (t - meter.t0 > 1e-9 ? t - meter.t0 : 1e-9));
        }
    }
    pthread_mutex_unlock(&meter.mu);
}

void io_progress_end(int ok) {
    pthread_mutex_lock(&meter.mu);
    if (meter.users > 0 && !ok) meter.failed = true;
    if (meter.users > 0 && --meter.users == 0 && meter.total >= IO_PROGRESS_MIN_BYTES) {
        ok = !meter.failed;
        double dt = now() - meter.t0;
        if (meter.tty) fputs("\r\033[K", stderr);
        if (ok)
            fprintf(stderr, "weipipe: %s: %.0f MB in %.1f s (%.0f MB/s)\n", meter.what, mb(meter.done), dt,
                    mb(meter.done) / (dt > 1e-9 ? dt : 1e-9));
    }
    if (meter.users == 0) meter.failed = false;
    pthread_mutex_unlock(&meter.mu);
}
