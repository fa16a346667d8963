/* The stall watcher (stall.h): a thread per rank that prints the ring's status grid when rank
 * 0 stops making progress or when SIGUSR1 arrives. */
#include "stall.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "result.h"

#define STALL_FRACTION (1.0 / 3) /* of --timeout without a new note before the report */
#define STALL_TICK_NS 100000000L

struct stall_watch {
    wp_control *ctl;
    double threshold;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    double reported_note_at; /* status_at of the note last reported (one report per stall) */
    double seen_note_at;     /* status_at at the previous tick */
    double longest_healthy;  /* the longest a note of rank 0 lasted before the next one came */
};

static atomic_int usr1_pending;
static pthread_once_t usr1_once = PTHREAD_ONCE_INIT;
static int usr1_rc;

static void on_usr1(int sig) {
    (void)sig;
    atomic_store(&usr1_pending, 1);
}

static void install_usr1(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    if (sigemptyset(&sa.sa_mask) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0) usr1_rc = errno ? errno : EINVAL;
}

static void print_grid(stall_watch *w, const char *why) {
    char *grid = NULL, err[300];
    if (ctl_status_grid(w->ctl, &grid, err, sizeof err) != 0) {
        fprintf(stderr, "stall report (%s): %s\n", why, err);
        return;
    }
    fprintf(stderr, "stall report (%s): where every rank stands\n%s%s", why, grid,
            grid[0] && grid[strlen(grid) - 1] == '\n' ? "" : "\n");
    fflush(stderr);
    free(grid);
}

/* Rank 0's own note unchanged for the threshold, and for twice the longest any note lasted
 * so far and then moved on (a run whose healthy steps are slow waits that long every step:
 * no report for those): report once for this note. */
static void check_progress(stall_watch *w) {
    if (ctl_rank(w->ctl) != 0) return;
    double at = ctl_status_at(w->ctl), idle = wp_now() - at;
    if (at != w->seen_note_at) {
        if (w->seen_note_at > 0 && at - w->seen_note_at > w->longest_healthy) w->longest_healthy = at - w->seen_note_at;
        w->seen_note_at = at;
    }
    if (idle < w->threshold || idle < 2 * w->longest_healthy || at == w->reported_note_at) return;
    w->reported_note_at = at;
    char why[128];
    snprintf(why, sizeof why, "rank 0 made no progress for %.1f s (the longest healthy wait so far: %.1f s)", idle,
             w->longest_healthy);
    print_grid(w, why);
}

static bool sleep_tick(stall_watch *w) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += STALL_TICK_NS;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT) {}
    bool stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    return stop;
}

static void *watch(void *arg) {
    stall_watch *w = arg;
    while (!sleep_tick(w)) {
        if (atomic_exchange(&usr1_pending, 0)) print_grid(w, "SIGUSR1");
        check_progress(w);
    }
    return NULL;
}

static wp_result init_sync(stall_watch *w) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return WP_FAILED;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return WP_FAILED;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        pthread_cond_destroy(&w->cv);
        return WP_FAILED;
    }
    return 0;
}

stall_watch *stall_start(wp_control *ctl, double timeout, char *err, size_t errlen) {
    pthread_once(&usr1_once, install_usr1);
    if (usr1_rc) {
        snprintf(err, errlen, "stall report: cannot handle SIGUSR1: %s", strerror(usr1_rc));
        return NULL;
    }
    stall_watch *w = calloc(1, sizeof *w);
    if (!w || init_sync(w) != 0) {
        free(w);
        snprintf(err, errlen, "stall report: out of memory or threads");
        return NULL;
    }
    w->ctl = ctl;
    w->threshold = timeout * STALL_FRACTION;
    w->reported_note_at = -1;
    int rc = pthread_create(&w->thread, NULL, watch, w);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        snprintf(err, errlen, "stall report: cannot start its thread: %s", strerror(rc));
        return NULL;
    }
    return w;
}

void stall_stop(stall_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
