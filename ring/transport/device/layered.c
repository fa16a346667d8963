/* The layer under the staged and nccl transports (layered_impl.h): what a transport over an
 * inner transport with a progress thread needs, whatever moves its bytes. */
#include "layered_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static tp_layer *layer_of(wp_transport *t) { return (tp_layer *)t; }

/* The backend's ops begin with the tp_ops the transport points to. */
static const tp_layer_ops *ops_of(const tp_layer *l) { return (const tp_layer_ops *)l->base.ops; }

/* ---- failures ---- */

void tp_layer_fail(tp_layer *l, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tp_fail_locked(&l->base, -1, "rank %d: %s", l->base.rank, what);
}

void tp_layer_inner_failed(tp_layer *l, const char *why) {
    char cause[400];
    if (tp_failed(l->inner, cause, sizeof cause)) tp_fail_locked(&l->base, -1, "%s", cause);
    else tp_fail_locked(&l->base, -1, "%s", why);
}

/* Peers learn of a failure here (a timeout, an abort, the backend's own) through the inner
 * transport, after the backend had its say. */
void tp_layer_failed(wp_transport *t) {
    tp_layer *l = layer_of(t);
    if (ops_of(l)->failed) ops_of(l)->failed(l);
    char reason[600];
    if (l->fail.peer >= 0) {
        char name[128];
        l->inner->ops->peer_name(l->inner, l->fail.peer, name, sizeof name);
        snprintf(reason, sizeof reason, "%s %s", name, l->fail.what);
    } else {
        snprintf(reason, sizeof reason, "%s", l->fail.what);
    }
    tp_abort(l->inner, reason);
}

/* ---- the inner transport ---- */

wp_result tp_layer_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen) {
    wp_transport *in = layer_of(t)->inner;
    return in->ops->connect(in, peer, wait, err, errlen);
}

void tp_layer_peer_name(wp_transport *t, int peer, char *buf, size_t buflen) {
    wp_transport *in = layer_of(t)->inner;
    in->ops->peer_name(in, peer, buf, buflen);
}

wp_result tp_layer_post_inner(tp_layer *l, int kind, int peer, int channel, void *buf, size_t bytes, const char *label,
                              wp_request **req) {
    char why[400];
    wp_result rc = kind == TP_SEND ? tp_post_send(l->inner, peer, channel, buf, bytes, label, req, why, sizeof why)
                             : tp_post_recv(l->inner, peer, channel, buf, bytes, label, req, why, sizeof why);
    if (rc) tp_layer_inner_failed(l, why);
    return rc;
}

int tp_layer_test_inner(tp_layer *l, wp_request **req) {
    char why[400];
    bool done;
    if (!*req) return 1;
    if (tp_test(req, &done, why, sizeof why)) {
        tp_layer_inner_failed(l, why);
        return -1;
    }
    return done ? 1 : 0;
}

/* ---- posting ---- */

/* On the poster's thread (the one driving the compute context), sync held. */
wp_result tp_layer_post(wp_transport *t, wp_request *r, char *err, size_t errlen) {
    tp_layer *l = layer_of(t);
    const tp_layer_ops *ops = ops_of(l);
    if (ops->admit && ops->admit(l, r, err, errlen)) return WP_FAILED;
    tp_layer_req *q = calloc(1, ops->req_bytes);
    if (!q) {
        snprintf(err, errlen, "rank %d: out of memory %s %s", t->rank, ops->post_verb, r->label);
        return WP_FAILED;
    }
    q->outer = r;
    q->ready = kern_event_after_queued(l->compute);
    if (!q->ready) {
        snprintf(err, errlen, "rank %d: ordering the transfer of %s after the compute queued before it: %s", t->rank,
                 r->label, kern_error(l->compute));
        free(q);
        return WP_FAILED;
    }
    if (l->tail) l->tail->next = q;
    else l->head = q;
    l->tail = q;
    pthread_cond_broadcast(&l->sync.cv); /* the progress thread */
    return WP_OK;
}

/* ---- the progress thread ---- */

/* One pass: the backend's turn around every request's steps, in post order; completed
 * requests leave the queue. */
static void turn(tp_layer *l) {
    const tp_layer_ops *ops = ops_of(l);
    if (ops->turn_begin) ops->turn_begin(l);
    tp_layer_req *prev = NULL;
    for (tp_layer_req *q = l->head, *next; q && !l->fail.failed; q = next) {
        next = q->next;
        int rc = ops->advance(l, q);
        if (rc < 0) break;
        if (rc == 0) {
            prev = q;
            continue;
        }
        wp_request *r = q->outer;
        tp_progress_locked(r, r->bytes - r->moved);
        tp_complete_locked(r);
        if (prev) prev->next = next;
        else l->head = next;
        if (l->tail == q) l->tail = prev;
        ops->release(l, q);
        free(q);
    }
    if (!l->fail.failed && ops->turn_end) ops->turn_end(l);
}

/* How long to sleep before the next turn, given what is still in flight. */
static double poll_interval(const tp_layer *l) {
    double dt = TP_LAYER_IDLE_S;
    for (const tp_layer_req *q = l->head; q; q = q->next) {
        if (ops_of(l)->device_busy(q)) return TP_LAYER_POLL_DEVICE_S;
        dt = TP_LAYER_POLL_INNER_S;
    }
    return dt;
}

/* What the inner transport spends beyond this transport's payload (frame headers,
 * handshakes, and the control messages it carries when its payload is not the data) shows in
 * this transport's counters, so that a report through it sees the whole wire. */
static void mirror_overhead(tp_layer *l) {
    wp_transport_stats in;
    tp_stats(l->inner, &in);
    l->base.stats.overhead_sent = in.overhead_sent + (l->inner_payload_is_overhead ? in.payload_sent : 0);
    l->base.stats.overhead_recv = in.overhead_recv + (l->inner_payload_is_overhead ? in.payload_recv : 0);
    l->base.stats.rejected = in.rejected;
}

static void *progress_main(void *arg) {
    tp_layer *l = arg;
    char why[400];
    pthread_mutex_lock(&l->sync.mu);
    if (ops_of(l)->thread_init) ops_of(l)->thread_init(l);
    while (!l->stop) {
        /* A dead inner transport fails this one even while nothing of it is awaited. */
        if (!l->fail.failed && tp_failed(l->inner, why, sizeof why)) tp_layer_inner_failed(l, why);
        if (!l->fail.failed) turn(l);
        mirror_overhead(l);
        wp_sync_wait_until(&l->sync, wp_now() + (l->fail.failed ? TP_LAYER_IDLE_S : poll_interval(l)));
    }
    pthread_mutex_unlock(&l->sync.mu);
    return NULL;
}

/* ---- life cycle ---- */

wp_result tp_layer_init(tp_layer *l, const tp_layer_ops *ops, wp_transport *inner, wp_kern *compute) {
    if (wp_sync_init(&l->sync) != 0) return WP_FAILED;
    tp_init(&l->base, &ops->tp, tp_rank(inner), tp_world(inner), &l->sync, &l->fail);
    l->fail.peer = -1;
    l->inner = inner;
    l->compute = compute;
    return WP_OK;
}

wp_result tp_layer_start(tp_layer *l) {
    l->started = pthread_create(&l->thread, NULL, progress_main, l) == 0;
    return l->started ? WP_OK : WP_FAILED;
}

void tp_layer_close(wp_transport *t) {
    tp_layer *l = layer_of(t);
    const tp_layer_ops *ops = ops_of(l);
    if (l->started) {
        pthread_mutex_lock(&l->sync.mu);
        l->stop = true;
        pthread_cond_broadcast(&l->sync.cv);
        pthread_mutex_unlock(&l->sync.mu);
        pthread_join(l->thread, NULL);
    }
    ops->drain(l);
    for (tp_layer_req *q = l->head, *next; q; q = next) {
        next = q->next;
        ops->release(l, q);
        free(q);
    }
    l->head = l->tail = NULL;
    ops->destroy(l);
    tp_free_requests(t);
    wp_sync_destroy(&l->sync);
    free(l);
}
