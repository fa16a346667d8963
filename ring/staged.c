/* The staged transport (staged.h): device buffers through pinned host slots over an inner
 * host-memory transport, driven by a progress thread. */
#include "staged.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams.h"
#include "transport_impl.h"

/* How long the progress thread sleeps between polls: while device copies are in flight, well
 * under a weight transfer's copy; while only inner transfers are (they take as long as the
 * peers do), longer, so that waiting for a slow peer does not spin a core; idle (woken by
 * posts), a safety net only. */
#define ST_POLL_COPY_S 50e-6
#define ST_POLL_INNER_S 200e-6
#define ST_IDLE_S 0.05

typedef enum { ST_START, ST_COPY, ST_INNER, ST_LAND } st_phase;

typedef struct st_slot {
    size_t bytes;
    void *host;
} st_slot;

/* Direct mode: the handover of one message between two ranks' threads. The receiver copies
 * from the sender's buffer on its transfer stream, after the sender's compute event; the
 * sender completes once `copied`. Two references (sender, receiver); a message whose
 * receiver never took it (a failed job) is not freed. */
typedef struct st_direct {
    const void *src;
    size_t bytes;
    char label[WP_LABEL_MAX];
    wp_kern_event *ready;
    atomic_bool copied;
    atomic_int refs;
} st_direct;

static void direct_drop(st_direct *m) {
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) free(m);
}

/* The staging state of one outer request, in post order. */
typedef struct st_req {
    struct st_req *next;
    wp_request *outer;
    st_phase phase;
    wp_kern_event *ready; /* the compute work queued before the post (recorded by the poster) */
    wp_kern_event *moved; /* the device <-> pinned copy */
    st_slot slot;
    wp_request *inner;
    st_direct *msg;  /* direct mode */
    uint64_t handle; /* direct mode: what the inner transport carries (the st_direct's address) */
} st_req;

typedef struct st_tp {
    wp_transport base;
    wp_sync sync;
    tp_fail fail;
    wp_transport *inner;
    wp_kern *compute, *xfer; /* xfer: the transfer stream, used only by the progress thread */
    bool direct;             /* device to device between threads (WP_STAGE_DIRECT) */
    st_req *head, *tail;
    int n_free, cap_free;
    st_slot *free;          /* pinned slots not in use */
    bool *blocked;          /* [world * WP_MAX_CHANNELS], scratch of advance_all */
    pthread_t thread;
    bool started, stop;
} st_tp;

static st_tp *st_of(wp_transport *t) { return (st_tp *)t; }

/* ---- pinned slots ---- */

static int slot_take(st_tp *s, size_t bytes, st_slot *out) {
    for (int i = 0; i < s->n_free; i++)
        if (s->free[i].bytes == bytes) {
            *out = s->free[i];
            s->free[i] = s->free[--s->n_free];
            return 0;
        }
    out->bytes = bytes;
    out->host = kern_host_alloc(s->xfer, bytes);
    return out->host ? 0 : -1;
}

static void slot_give(st_tp *s, st_slot *slot) {
    if (!slot->host) return;
    if (s->n_free == s->cap_free) {
        int cap = s->cap_free ? 2 * s->cap_free : 16;
        st_slot *f = realloc(s->free, (size_t)cap * sizeof *f);
        if (!f) { /* cannot keep it for reuse: give it back instead */
            kern_host_free(s->xfer, slot->host);
            slot->host = NULL;
            return;
        }
        s->free = f;
        s->cap_free = cap;
    }
    s->free[s->n_free++] = *slot;
    slot->host = NULL;
}

/* ---- one request's steps (sync held) ---- */

static void req_free(st_tp *s, st_req *q) {
    slot_give(s, &q->slot);
    /* Events are plain device objects: the transfer context may destroy the ones the
     * compute context created (the compute context belongs to the executor's thread). */
    kern_event_destroy(s->xfer, q->ready);
    kern_event_destroy(s->xfer, q->moved);
    direct_drop(q->msg);
    free(q);
}

static int xfer_failed(st_tp *s, const st_req *q) {
    const char *why = kern_error(s->xfer);
    if (!why) return 0;
    tp_fail_locked(&s->base, -1, "rank %d: staging %s through host memory failed: %s", s->base.rank,
                   q->outer->label, why);
    return -1;
}

/* The inner transport failed a call with `why`: keep its root cause (a dead or silent peer),
 * not the wrapped message of the call that ran into it. */
static void inner_failed(st_tp *s, const char *why) {
    char cause[400];
    if (tp_failed(s->inner, cause, sizeof cause)) tp_fail_locked(&s->base, -1, "%s", cause);
    else tp_fail_locked(&s->base, -1, "%s", why);
}

/* The inner request moved bytes: that counts as progress of the outer one (silence clock). */
static void inherit_progress(st_tp *s, st_req *q) {
    pthread_mutex_lock(&s->inner->sync->mu);
    double at = q->inner ? q->inner->progress_at : 0;
    pthread_mutex_unlock(&s->inner->sync->mu);
    if (at > q->outer->progress_at) q->outer->progress_at = at;
}

/* Test the inner request; 1 when it completed, 0 pending, -1 failed (the transport too). */
static int inner_done(st_tp *s, st_req *q) {
    char why[400];
    bool done;
    inherit_progress(s, q);
    if (tp_test(&q->inner, &done, why, sizeof why)) {
        inner_failed(s, why);
        return -1;
    }
    return done ? 1 : 0;
}

static int post_inner(st_tp *s, st_req *q) {
    char why[400];
    wp_request *r = q->outer;
    int rc = r->kind == TP_SEND
                 ? tp_post_send(s->inner, r->peer, r->channel, q->slot.host, r->bytes, r->label, &q->inner, why, sizeof why)
                 : tp_post_recv(s->inner, r->peer, r->channel, q->slot.host, r->bytes, r->label, &q->inner, why, sizeof why);
    if (rc) inner_failed(s, why);
    return rc ? -1 : 0;
}

/* Queue the device -> pinned copy of a send behind the compute work it depends on. */
static int start_send(st_tp *s, st_req *q) {
    wp_request *r = q->outer;
    if (slot_take(s, r->bytes, &q->slot) || !(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    kern_event_wait(s->xfer, q->ready);
    kern_to_host_async(s->xfer, q->slot.host, r->buf, r->bytes);
    kern_event_record(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    q->phase = ST_COPY;
    return 0;
}

static int start_recv(st_tp *s, st_req *q) {
    if (slot_take(s, q->outer->bytes, &q->slot) || !(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    /* The buffer may be a pool slot whose previous contents compute work queued before this
     * post still reads: the copy into it waits for that work. */
    kern_event_wait(s->xfer, q->ready);
    if (xfer_failed(s, q) || post_inner(s, q)) return -1;
    q->phase = ST_INNER;
    return 0;
}

/* ---- direct mode ---- */

static int post_handle(st_tp *s, st_req *q) {
    char why[400];
    wp_request *r = q->outer;
    int rc = r->kind == TP_SEND
                 ? tp_post_send(s->inner, r->peer, r->channel, &q->handle, sizeof q->handle, r->label, &q->inner, why, sizeof why)
                 : tp_post_recv(s->inner, r->peer, r->channel, &q->handle, sizeof q->handle, r->label, &q->inner, why, sizeof why);
    if (rc) inner_failed(s, why);
    return rc ? -1 : 0;
}

static int direct_start(st_tp *s, st_req *q) {
    wp_request *r = q->outer;
    if (!(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    if (r->kind == TP_SEND) {
        st_direct *m = calloc(1, sizeof *m);
        if (!m) {
            tp_fail_locked(&s->base, -1, "rank %d: out of memory sending %s", s->base.rank, r->label);
            return -1;
        }
        m->src = r->buf;
        m->bytes = r->bytes;
        snprintf(m->label, sizeof m->label, "%s", r->label);
        m->ready = q->ready;
        atomic_init(&m->copied, false);
        atomic_init(&m->refs, 2);
        q->msg = m;
        q->handle = (uint64_t)(uintptr_t)m;
    }
    if (post_handle(s, q)) return -1;
    q->phase = ST_INNER;
    return 0;
}

/* The sender's handle arrived: copy from its buffer once both ranks' earlier compute is done. */
static int direct_copy(st_tp *s, st_req *q) {
    wp_request *r = q->outer;
    st_direct *m = (st_direct *)(uintptr_t)q->handle;
    q->msg = m;
    if (m->bytes != r->bytes) {
        tp_fail_locked(&s->base, -1, "rank %d sends %s (%zu bytes) on channel %d but rank %d expects %s (%zu bytes)",
                       r->peer, m->label, m->bytes, r->channel, s->base.rank, r->label, r->bytes);
        return -1;
    }
    kern_event_wait(s->xfer, q->ready);
    kern_event_wait(s->xfer, m->ready);
    kern_copy(s->xfer, r->buf, m->src, r->bytes);
    kern_event_record(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    q->phase = ST_LAND;
    return 0;
}

static int direct_advance(st_tp *s, st_req *q) {
    bool send = q->outer->kind == TP_SEND;
    if (q->phase == ST_START && direct_start(s, q)) return -1;
    if (q->phase == ST_INNER) {
        int d = inner_done(s, q);
        if (d <= 0) return d;
        if (send) q->phase = ST_LAND;
        else if (direct_copy(s, q)) return -1;
    }
    if (send) return atomic_load(&q->msg->copied) ? 1 : 0;
    bool landed = kern_event_done(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    if (landed) atomic_store(&q->msg->copied, true);
    return landed ? 1 : 0;
}

/* Advance q as far as it goes now; 1 when it completed, 0 when it waits, -1 on failure.
 * *blk: this send must not pass to the inner transport yet (an earlier one of its key waits). */
static int advance(st_tp *s, st_req *q, bool *blk) {
    if (s->direct) return direct_advance(s, q);
    bool send = q->outer->kind == TP_SEND;
    if (q->phase == ST_START && (send ? start_send(s, q) : start_recv(s, q))) return -1;
    if (q->phase == ST_COPY) {
        bool copied = kern_event_done(s->xfer, q->moved);
        if (xfer_failed(s, q)) return -1;
        if (!copied || *blk) return 0;
        if (post_inner(s, q)) return -1;
        q->phase = ST_INNER;
    }
    if (q->phase == ST_INNER) {
        int d = inner_done(s, q);
        if (d <= 0) return d;
        if (send) return 1;
        kern_to_device_async(s->xfer, q->outer->buf, q->slot.host, q->outer->bytes);
        kern_event_record(s->xfer, q->moved);
        if (xfer_failed(s, q)) return -1;
        q->phase = ST_LAND;
    }
    bool landed = kern_event_done(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    return landed ? 1 : 0;
}

/* How long to sleep before the next pass, given what is still in flight. */
static double poll_interval(const st_tp *s) {
    double dt = ST_IDLE_S;
    for (const st_req *q = s->head; q; q = q->next) {
        if (q->phase == ST_COPY || q->phase == ST_LAND) return ST_POLL_COPY_S;
        dt = ST_POLL_INNER_S;
    }
    return dt;
}

/* One pass over every request in post order. */
static void advance_all(st_tp *s) {
    memset(s->blocked, 0, (size_t)s->base.world * WP_MAX_CHANNELS * sizeof *s->blocked);
    st_req *prev = NULL, *q = s->head;
    while (q && !s->fail.failed) {
        wp_request *r = q->outer;
        bool *blk = &s->blocked[r->peer * WP_MAX_CHANNELS + r->channel];
        int rc = advance(s, q, blk);
        if (rc < 0) break;
        if (r->kind == TP_SEND && q->phase < ST_INNER) *blk = true;
        if (rc == 0) {
            prev = q;
            q = q->next;
            continue;
        }
        tp_progress_locked(r, r->bytes - r->moved);
        tp_complete_locked(r);
        st_req *next = q->next;
        if (prev) prev->next = next;
        else s->head = next;
        if (s->tail == q) s->tail = prev;
        req_free(s, q);
        q = next;
    }
}

/* What the inner transport spends beyond the payload (frame headers, handshakes; in direct
 * mode the handles it carries) shows in this transport's counters, so that a report through
 * it sees the whole wire. */
static void mirror_overhead(st_tp *s) {
    wp_transport_stats in;
    tp_stats(s->inner, &in);
    s->base.stats.overhead_sent = in.overhead_sent + (s->direct ? in.payload_sent : 0);
    s->base.stats.overhead_recv = in.overhead_recv + (s->direct ? in.payload_recv : 0);
    s->base.stats.rejected = in.rejected;
}

static void *progress_main(void *arg) {
    st_tp *s = arg;
    char why[400];
    pthread_mutex_lock(&s->sync.mu);
    while (!s->stop) {
        if (!s->fail.failed && tp_failed(s->inner, why, sizeof why)) tp_fail_locked(&s->base, -1, "%s", why);
        if (!s->fail.failed) advance_all(s);
        mirror_overhead(s);
        wp_sync_wait_until(&s->sync, wp_now() + (s->fail.failed ? ST_IDLE_S : poll_interval(s)));
    }
    pthread_mutex_unlock(&s->sync.mu);
    return NULL;
}

/* ---- tp_ops ---- */

static int st_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen) {
    wp_transport *in = st_of(t)->inner;
    return in->ops->connect(in, peer, wait, err, errlen);
}

/* Runs on the poster's thread (the one driving the compute context), sync held. */
static int st_post(wp_transport *t, wp_request *r, char *err, size_t errlen) {
    st_tp *s = st_of(t);
    st_req *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "rank %d: out of memory staging %s", t->rank, r->label);
        return -1;
    }
    q->outer = r;
    /* A send reads what the compute work queued so far writes; a receive overwrites what it
     * may still read (a reused pool slot): both wait for it, on the device. */
    q->ready = kern_event_after_queued(s->compute);
    if (!q->ready) {
        snprintf(err, errlen, "rank %d: ordering the transfer of %s after the compute queued before it: %s", t->rank,
                 r->label, kern_error(s->compute));
        free(q);
        return -1;
    }
    if (s->tail) s->tail->next = q;
    else s->head = q;
    s->tail = q;
    pthread_cond_broadcast(&s->sync.cv); /* the progress thread */
    return 0;
}

/* Peers learn of a failure here (a timeout, an abort) through the inner transport. */
static void st_failed(wp_transport *t) {
    st_tp *s = st_of(t);
    char reason[600];
    if (s->fail.peer >= 0) {
        char name[128];
        s->inner->ops->peer_name(s->inner, s->fail.peer, name, sizeof name);
        snprintf(reason, sizeof reason, "%s %s", name, s->fail.what);
    } else {
        snprintf(reason, sizeof reason, "%s", s->fail.what);
    }
    tp_abort(s->inner, reason);
}

static void st_peer_name(wp_transport *t, int peer, char *buf, size_t buflen) {
    wp_transport *in = st_of(t)->inner;
    in->ops->peer_name(in, peer, buf, buflen);
}

/* After the progress thread stopped. Inner requests still pending (a failed job) are aborted
 * and awaited, so that no inner thread writes a slot after it is freed. */
static void drain(st_tp *s) {
    char why[400];
    bool aborted = false;
    for (st_req *q = s->head, *next; q; q = next) {
        next = q->next;
        if (q->inner && !aborted) {
            tp_abort(s->inner, "the staged transport closed with transfers pending");
            aborted = true;
        }
        if (q->inner) (void)tp_wait(&q->inner, 5.0, why, sizeof why);
        req_free(s, q);
    }
    s->head = s->tail = NULL;
}

static void st_close(wp_transport *t) {
    st_tp *s = st_of(t);
    if (s->started) {
        pthread_mutex_lock(&s->sync.mu);
        s->stop = true;
        pthread_cond_broadcast(&s->sync.cv);
        pthread_mutex_unlock(&s->sync.mu);
        pthread_join(s->thread, NULL);
    }
    kern_sync(s->xfer); /* no copy still reads or writes a slot */
    drain(s);
    for (int i = 0; i < s->n_free; i++) kern_host_free(s->xfer, s->free[i].host);
    tp_free_requests(t);
    kern_destroy(s->xfer);
    wp_sync_destroy(&s->sync);
    free(s->free);
    free(s->blocked);
    free(s);
}

static const tp_ops staged_ops = {
    .kind = "staged",
    .connect = st_connect,
    .post = st_post,
    .failed = st_failed,
    .peer_name = st_peer_name,
    .close = st_close,
};

bool tp_is_staged(const wp_transport *t) { return t && t->ops == &staged_ops; }

int tp_staged_open(wp_transport *inner, wp_kern *compute, wp_stage_mode mode, wp_transport **out, char *err,
                   size_t errlen) {
    *out = NULL;
    bool local = strcmp(tp_kind(inner), "local") == 0;
    if (mode == WP_STAGE_DIRECT && !local) {
        snprintf(err, errlen, "rank %d: device-to-device staging needs the local transport (ranks as threads), not %s",
                 tp_rank(inner), tp_kind(inner));
        return 1;
    }
    st_tp *s = calloc(1, sizeof *s);
    if (!s || wp_sync_init(&s->sync) != 0) {
        free(s);
        snprintf(err, errlen, "rank %d: out of memory for the staged transport", tp_rank(inner));
        return 1;
    }
    tp_init(&s->base, &staged_ops, tp_rank(inner), tp_world(inner), &s->sync, &s->fail);
    s->inner = inner;
    s->compute = compute;
    s->direct = mode == WP_STAGE_DIRECT || (mode == WP_STAGE_AUTO && local);
    s->fail.peer = -1;
    char why[512];
    s->blocked = calloc((size_t)tp_world(inner) * WP_MAX_CHANNELS, sizeof *s->blocked);
    s->xfer = s->blocked ? kern_create_sibling(compute, why, sizeof why) : NULL;
    int rc = s->xfer ? pthread_create(&s->thread, NULL, progress_main, s) : -1;
    s->started = rc == 0;
    if (!s->started) {
        snprintf(err, errlen, "rank %d: staged transport: %s", tp_rank(inner),
                 !s->blocked ? "out of memory" : !s->xfer ? why : "cannot start its progress thread");
        st_close(&s->base);
        return 1;
    }
    *out = &s->base;
    return 0;
}
