/* The backend-independent half of the transport: argument checks, request handles, waiting
 * with a silence deadline, failure messages, counters (see transport.h). */
#include "transport_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void tp_net_defaults(wp_net_opts *n) {
    memset(n, 0, sizeof *n);
    n->tcp_streams = 1;
    snprintf(n->bind, sizeof n->bind, "127.0.0.1");
    n->connect_timeout = 30;
    n->timeout = 60;
    n->frame_bytes = WP_DEFAULT_FRAME_BYTES;
}

void tp_net_link(const wp_net_opts *n, int src, int dst, double *bytes_per_s, double *latency_s) {
    bool same_node = n->ranks_per_node > 0 && src / n->ranks_per_node == dst / n->ranks_per_node;
    *bytes_per_s = same_node ? n->node_link_bandwidth : n->link_bandwidth;
    *latency_s = same_node ? n->node_link_latency : n->link_latency;
}

bool tp_net_nic(const wp_net_opts *n, int world, int src, int dst) {
    int per = n->ranks_per_node;
    return per > 0 && world > per && src / per != dst / per && n->link_bandwidth > 0;
}

int tp_init(wp_transport *t, const tp_ops *ops, int rank, int world, wp_sync *sync, tp_fail *fail) {
    memset(t, 0, sizeof *t);
    t->ops = ops;
    t->rank = rank;
    t->world = world;
    t->sync = sync;
    t->fail = fail;
    return 0;
}

int tp_rank(const wp_transport *t) { return t->rank; }
int tp_world(const wp_transport *t) { return t->world; }
const char *tp_kind(const wp_transport *t) { return t->ops->kind; }
bool tp_one_process(const wp_transport *t) { return t->ops->one_process; }

void tp_peer_name(wp_transport *t, int peer, char *buf, size_t buflen) { t->ops->peer_name(t, peer, buf, buflen); }

void tp_fail_locked(wp_transport *t, int peer, const char *fmt, ...) {
    if (t->fail->failed) return;
    t->fail->failed = true;
    t->fail->peer = peer;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->fail->what, sizeof t->fail->what, fmt, ap);
    va_end(ap);
    if (t->ops->failed) t->ops->failed(t);
    pthread_cond_broadcast(&t->sync->cv);
}

static void unlink_live(wp_request *r) {
    wp_transport *t = r->t;
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else t->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
}

static void free_request(wp_request *r) {
    unlink_live(r);
    free(r);
}

void tp_free_requests(wp_transport *t) {
    while (t->live) free_request(t->live);
}

void tp_complete_locked(wp_request *r) {
    wp_transport *t = r->t;
    r->done = true;
    r->progress_at = wp_now();
    if (r->kind == TP_SEND) {
        t->stats.payload_sent += r->bytes;
        t->stats.msgs_sent++;
    } else {
        t->stats.payload_recv += r->bytes;
        t->stats.msgs_recv++;
    }
    pthread_cond_broadcast(&t->sync->cv);
}

/* "<cause> while rank R waited for LABEL [from rank P]" from the failure record. */
static void fail_message(wp_transport *t, const wp_request *r, const char *verb, char *err, size_t errlen) {
    const tp_fail *f = t->fail;
    char other[48] = "";
    if (f->peer != r->peer)
        snprintf(other, sizeof other, " %s rank %d", r->kind == TP_RECV ? "from" : "to", r->peer);
    if (f->peer >= 0) {
        char name[128];
        t->ops->peer_name(t, f->peer, name, sizeof name);
        snprintf(err, errlen, "%s %s while rank %d %s %s%s", name, f->what, t->rank, verb, r->label, other);
    } else {
        snprintf(err, errlen, "%s (rank %d %s %s%s)", f->what, t->rank, verb, r->label, other);
    }
}

static const char *wait_verb(const wp_request *r) { return r->kind == TP_RECV ? "waited for" : "waited to send"; }

static int post(wp_transport *t, int kind, int peer, int channel, void *buf, size_t bytes, const char *label,
                wp_request **req, char *err, size_t errlen) {
    *req = NULL;
    const char *what = label ? label : "?";
    if (peer < 0 || peer >= t->world) {
        snprintf(err, errlen, "rank %d: peer %d of %s is not a rank (world size %d)", t->rank, peer, what, t->world);
        return 1;
    }
    if (channel < 0 || channel >= WP_MAX_CHANNELS) {
        snprintf(err, errlen, "rank %d: channel %d of %s is not 0..%d", t->rank, channel, what, WP_MAX_CHANNELS - 1);
        return 1;
    }
    if (!buf && bytes > 0) {
        snprintf(err, errlen, "rank %d: %s has no buffer", t->rank, what);
        return 1;
    }
    wp_request *r = calloc(1, t->ops->request_bytes ? t->ops->request_bytes : sizeof *r);
    if (!r) {
        snprintf(err, errlen, "rank %d: out of memory posting %s", t->rank, what);
        return 1;
    }
    r->t = t;
    r->kind = kind;
    r->peer = peer;
    r->channel = channel;
    r->buf = buf;
    r->bytes = bytes;
    snprintf(r->label, sizeof r->label, "%s", what);
    const char *verb = kind == TP_RECV ? "posted a receive of" : "posted a send of";
    if (peer != t->rank && t->ops->connect(t, peer, false, err, errlen) != 0) {
        pthread_mutex_lock(&t->sync->mu);
        if (t->fail->failed) fail_message(t, r, verb, err, errlen); /* the root cause, not the symptom */
        pthread_mutex_unlock(&t->sync->mu);
        free(r);
        return 1;
    }
    pthread_mutex_lock(&t->sync->mu);
    r->progress_at = wp_now();
    r->live_next = t->live;
    if (t->live) t->live->live_prev = r;
    t->live = r;
    int rc = 0;
    if (t->fail->failed) {
        fail_message(t, r, verb, err, errlen);
        rc = 1;
    } else if (t->ops->post(t, r, err, errlen) != 0) {
        rc = 1;
    }
    if (rc) free_request(r);
    else *req = r;
    pthread_mutex_unlock(&t->sync->mu);
    return rc;
}

int tp_post_send(wp_transport *t, int peer, int channel, const void *buf, size_t bytes, const char *label,
                 wp_request **req, char *err, size_t errlen) {
    /* The buffer is only read; the request type is shared with receives. */
    return post(t, TP_SEND, peer, channel, (void *)(uintptr_t)buf, bytes, label, req, err, errlen);
}

int tp_post_recv(wp_transport *t, int peer, int channel, void *buf, size_t bytes, const char *label,
                 wp_request **req, char *err, size_t errlen) {
    return post(t, TP_RECV, peer, channel, buf, bytes, label, req, err, errlen);
}

int tp_test(wp_request **req, bool *done, char *err, size_t errlen) {
    *done = false;
    wp_request *r = *req;
    if (!r) {
        *done = true;
        return 0;
    }
    wp_transport *t = r->t;
    int rc = 0;
    pthread_mutex_lock(&t->sync->mu);
    if (r->done) {
        free_request(r);
        *req = NULL;
        *done = true;
    } else if (t->fail->failed && !r->busy) {
        fail_message(t, r, wait_verb(r), err, errlen);
        rc = 1;
    }
    pthread_mutex_unlock(&t->sync->mu);
    return rc;
}

/* Index of the first completed request, -1 if none; *pending: some are still pending. */
static int first_done(wp_request **reqs, int n, bool *pending, bool *busy, double *last_progress) {
    *pending = false;
    *busy = false;
    *last_progress = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!reqs[i]) continue;
        if (reqs[i]->done) return i;
        *pending = true;
        *busy |= reqs[i]->busy > 0;
        if (reqs[i]->progress_at > *last_progress) *last_progress = reqs[i]->progress_at;
    }
    return -1;
}

static int first_pending(wp_request **reqs, int n) {
    for (int i = 0; i < n; i++)
        if (reqs[i]) return i;
    return -1;
}

int tp_wait_any(wp_request **reqs, int n, double timeout_s, int *index, char *err, size_t errlen) {
    *index = -1;
    int first = first_pending(reqs, n);
    if (first < 0) return 0;
    wp_transport *t = reqs[first]->t;
    int rc = 0;
    pthread_mutex_lock(&t->sync->mu);
    double start = wp_now();
    for (;;) {
        bool pending, busy;
        double last;
        int i = first_done(reqs, n, &pending, &busy, &last);
        if (i >= 0) {
            free_request(reqs[i]);
            reqs[i] = NULL;
            *index = i;
            break;
        }
        wp_request *culprit = reqs[first];
        if (t->fail->failed) {
            if (!busy) {
                fail_message(t, culprit, wait_verb(culprit), err, errlen);
                rc = 1;
                break;
            }
            wp_sync_wait_until(t->sync, wp_now() + 0.01);
            continue;
        }
        double since = last > start ? last : start;
        if (wp_now() - since >= timeout_s) {
            if (!t->fail->failed) t->fail->hearsay = true;
            tp_fail_locked(t, culprit->peer, "silent for %g s", timeout_s);
            continue;
        }
        wp_sync_wait_until(t->sync, since + timeout_s);
    }
    t->stats.wait_s += wp_now() - start;
    pthread_mutex_unlock(&t->sync->mu);
    return rc;
}

int tp_wait(wp_request **req, double timeout_s, char *err, size_t errlen) {
    int index;
    return tp_wait_any(req, 1, timeout_s, &index, err, errlen);
}

void tp_abort(wp_transport *t, const char *reason) {
    pthread_mutex_lock(&t->sync->mu);
    tp_fail_locked(t, -1, "%s", reason);
    pthread_mutex_unlock(&t->sync->mu);
}

bool tp_failed_hearsay(wp_transport *t) {
    pthread_mutex_lock(&t->sync->mu);
    bool h = t->fail->failed && t->fail->hearsay;
    pthread_mutex_unlock(&t->sync->mu);
    return h;
}

bool tp_failed(wp_transport *t, char *why, size_t whylen) {
    pthread_mutex_lock(&t->sync->mu);
    bool failed = t->fail->failed;
    if (failed && why) {
        if (t->fail->peer >= 0) {
            char name[128];
            t->ops->peer_name(t, t->fail->peer, name, sizeof name);
            snprintf(why, whylen, "%s %s", name, t->fail->what);
        } else {
            snprintf(why, whylen, "%s", t->fail->what);
        }
    }
    pthread_mutex_unlock(&t->sync->mu);
    return failed;
}

void tp_stats(wp_transport *t, wp_transport_stats *s) {
    pthread_mutex_lock(&t->sync->mu);
    *s = t->stats;
    pthread_mutex_unlock(&t->sync->mu);
}

int tp_connect(wp_transport *t, const int *peers, int npeers, char *err, size_t errlen) {
    for (int i = 0; i < npeers; i++) {
        if (peers[i] < 0 || peers[i] >= t->world) {
            snprintf(err, errlen, "rank %d: cannot connect to rank %d (world size %d)", t->rank, peers[i], t->world);
            return 1;
        }
        if (peers[i] != t->rank && t->ops->connect(t, peers[i], true, err, errlen) != 0) return 1;
    }
    return 0;
}

int tp_connect_ring(wp_transport *t, char *err, size_t errlen) {
    int peers[2] = {(t->rank + t->world - 1) % t->world, (t->rank + 1) % t->world};
    return tp_connect(t, peers, 2, err, errlen);
}

void tp_close(wp_transport *t) {
    if (t) t->ops->close(t);
}

void tp_queue_push(tp_queue *q, wp_request *r) {
    r->next = NULL;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
}

wp_request *tp_queue_pop(tp_queue *q) {
    wp_request *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        r->next = NULL;
    }
    return r;
}

void tp_queue_remove(tp_queue *q, wp_request *r) {
    wp_request *prev = NULL;
    for (wp_request *it = q->head; it; prev = it, it = it->next) {
        if (it != r) continue;
        if (prev) prev->next = it->next;
        else q->head = it->next;
        if (q->tail == it) q->tail = prev;
        it->next = NULL;
        return;
    }
}

void tp_post_self_locked(wp_transport *t, tp_self *self, wp_request *r) {
    int c = r->channel;
    tp_queue_push(r->kind == TP_SEND ? &self->sends[c] : &self->recvs[c], r);
    while (self->sends[c].head && self->recvs[c].head) {
        wp_request *s = tp_queue_pop(&self->sends[c]), *q = tp_queue_pop(&self->recvs[c]);
        if (s->bytes != q->bytes) {
            tp_fail_locked(t, -1, "rank %d sends %s (%zu bytes) on channel %d to itself but expects %s (%zu bytes)",
                           t->rank, s->label, s->bytes, c, q->label, q->bytes);
            return;
        }
        if (s->bytes) memcpy(q->buf, s->buf, s->bytes);
        tp_progress_locked(s, s->bytes);
        tp_progress_locked(q, q->bytes);
        tp_complete_locked(s);
        tp_complete_locked(q);
    }
}
