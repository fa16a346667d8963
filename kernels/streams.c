/* streams.h for every backend: argument checks and the sticky error, then the backend's op,
 * or the synchronous meaning where the backend has none (the CPU: every call has completed
 * when it returns, so an event is complete the moment it is recorded). */
#include "streams.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "replay_impl.h"

/* The CPU's events carry no state: one shared, never-freed token stands for all of them. */
static char sync_event_token;

static bool live(wp_kern *k) { return k && !k->error[0]; }

/* Events, timers and async copies tie a span to the host or to another queue: while a replay
 * records (replay.h) they end the recording, and are then made as usual. */
static bool in_replay(wp_kern *k, const char *call) {
    if (k->rp_mode) rp_break(k, call);
    return false;
}

wp_kern *kern_create_sibling(wp_kern *k, char *err, size_t errlen) {
    if (!k) {
        snprintf(err, errlen, "kern_create_sibling: NULL context");
        return NULL;
    }
    wp_kern_opts opts = {.kind = k->kind, .compute = k->compute, .threads = 1, .device = kern_device(k)};
    return kern_create(&opts, err, errlen);
}

int kern_device(const wp_kern *k) { return k && k->ops->device ? k->ops->device(k) : 0; }

wp_kern_event *kern_event_create(wp_kern *k) {
    if (!live(k)) return NULL;
    if (!k->ops->event_create) return (wp_kern_event *)&sync_event_token;
    return k->ops->event_create(k);
}

void kern_event_destroy(wp_kern *k, wp_kern_event *e) {
    if (!k || !e || (void *)e == (void *)&sync_event_token) return;
    if (k->ops->event_destroy) k->ops->event_destroy(k, e);
}

void kern_event_record(wp_kern *k, wp_kern_event *e) {
    if (!live(k)) return;
    if (!e) {
        kern_set_error(k, "kern_event_record: event is NULL");
        return;
    }
    if (in_replay(k, "kern_event_record")) return;
    if (k->ops->event_record) k->ops->event_record(k, e);
}

wp_kern_event *kern_event_after_queued(wp_kern *k) {
    wp_kern_event *e = kern_event_create(k);
    if (!e) return NULL;
    kern_event_record(k, e);
    if (!kern_error(k)) return e;
    kern_event_destroy(k, e);
    return NULL;
}

bool kern_event_done(wp_kern *k, wp_kern_event *e) {
    if (!live(k)) return false;
    if (!e) {
        kern_set_error(k, "kern_event_done: event is NULL");
        return false;
    }
    if (in_replay(k, "kern_event_done")) return false;
    return k->ops->event_done ? k->ops->event_done(k, e) : true;
}

void kern_event_wait(wp_kern *k, wp_kern_event *e) {
    if (!live(k)) return;
    if (!e) {
        kern_set_error(k, "kern_event_wait: event is NULL");
        return;
    }
    if (in_replay(k, "kern_event_wait")) return;
    if (k->ops->event_wait) k->ops->event_wait(k, e);
}

/* A timer: the backend's event, or (no event: the CPU) the host's clock at the record. */
struct wp_kern_timer {
    void *ev;
    double host_s;
    bool recorded;
};

wp_kern_timer *kern_timer_create(wp_kern *k) {
    if (!live(k)) return NULL;
    wp_kern_timer *t = calloc(1, sizeof *t);
    if (!t) {
        kern_set_error(k, "kern_timer_create: out of memory");
        return NULL;
    }
    if (k->ops->timer_create && !(t->ev = k->ops->timer_create(k))) {
        free(t);
        return NULL;
    }
    return t;
}

void kern_timer_destroy(wp_kern *k, wp_kern_timer *t) {
    if (!k || !t) return;
    if (t->ev && k->ops->event_destroy) k->ops->event_destroy(k, t->ev);
    free(t);
}

void kern_timer_record(wp_kern *k, wp_kern_timer *t) {
    if (!live(k)) return;
    if (!t) {
        kern_set_error(k, "kern_timer_record: timer is NULL");
        return;
    }
    if (in_replay(k, "kern_timer_record")) return;
    if (t->ev) {
        k->ops->event_record(k, t->ev);
    } else {
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
            kern_set_error(k, "kern_timer_record: clock_gettime failed");
            return;
        }
        t->host_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    t->recorded = true;
}

double kern_timer_elapsed(wp_kern *k, const wp_kern_timer *a, const wp_kern_timer *b) {
    if (!live(k)) return -1;
    if (!a || !b || !a->recorded || !b->recorded) {
        kern_set_error(k, "kern_timer_elapsed: a timer is %s", !a || !b ? "NULL" : "not recorded");
        return -1;
    }
    if (!a->ev) return b->host_s - a->host_s;
    double s = 0;
    return k->ops->timer_elapsed(k, a->ev, b->ev, &s) ? -1 : s;
}

bool kern_timer_on_device(const wp_kern *k) { return k && k->ops->timer_create; }

void *kern_host_alloc(wp_kern *k, size_t bytes) {
    if (!live(k)) return NULL;
    if (k->ops->host_alloc) return k->ops->host_alloc(k, bytes);
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) kern_set_error(k, "kern_host_alloc: out of memory for %zu bytes", bytes);
    return p;
}

void kern_host_free(wp_kern *k, void *p) {
    if (!k || !p) return;
    if (k->ops->host_free) k->ops->host_free(k, p);
    else free(p);
}

void kern_to_device_async(wp_kern *k, void *dst, const void *host_src, size_t bytes) {
    if (!live(k) || bytes == 0) return;
    if (!dst || !host_src) {
        kern_set_error(k, "kern_to_device_async: %s is NULL", dst ? "host_src" : "dst");
        return;
    }
    if (in_replay(k, "kern_to_device_async")) return;
    if (k->ops->to_device_async) k->ops->to_device_async(k, dst, host_src, bytes);
    else k->ops->to_device(k, dst, host_src, bytes);
}

void kern_to_host_async(wp_kern *k, void *host_dst, const void *src, size_t bytes) {
    if (!live(k) || bytes == 0) return;
    if (!host_dst || !src) {
        kern_set_error(k, "kern_to_host_async: %s is NULL", host_dst ? "src" : "host_dst");
        return;
    }
    if (in_replay(k, "kern_to_host_async")) return;
    if (k->ops->to_host_async) k->ops->to_host_async(k, host_dst, src, bytes);
    else k->ops->to_host(k, host_dst, src, bytes);
}
