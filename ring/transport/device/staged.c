/* The staged transport (staged.h): device buffers through pinned host slots over an inner
 * host-memory transport, or device to device between threads; the layer (layered_impl.h)
 * runs the progress thread, the queue and the failures. */
#include "staged.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layered_impl.h"
#include "streams.h"

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

/* The staging state of one outer request (base.ready: the compute work queued before the
 * post, which the transfer stream waits for). */
typedef struct st_req {
    tp_layer_req base;
    st_phase phase;
    wp_kern_event *moved; /* the device <-> pinned copy */
    st_slot slot;
    wp_request *inner;
    st_direct *msg;  /* direct mode */
    uint64_t handle; /* direct mode: what the inner transport carries (the st_direct's address) */
} st_req;

typedef struct st_tp {
    tp_layer l;
    wp_kern *xfer; /* the transfer stream, used only by the progress thread */
    bool direct;   /* device to device between threads (WP_STAGE_DIRECT) */
    int n_free, cap_free;
    st_slot *free; /* pinned slots not in use */
    bool *blocked; /* [world * WP_MAX_CHANNELS], scratch of a turn */
} st_tp;

static st_tp *st_of(tp_layer *l) { return (st_tp *)l; }
static st_req *req_of(tp_layer_req *q) { return (st_req *)q; }

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

static int xfer_failed(st_tp *s, const st_req *q) {
    const char *why = kern_error(s->xfer);
    if (!why) return 0;
    tp_layer_fail(&s->l, "staging %s through host memory failed: %s", q->base.outer->label, why);
    return -1;
}

/* The inner request moved bytes: that counts as progress of the outer one (silence clock). */
static void inherit_progress(st_tp *s, st_req *q) {
    pthread_mutex_lock(&s->l.inner->sync->mu);
    double at = q->inner ? q->inner->progress_at : 0;
    pthread_mutex_unlock(&s->l.inner->sync->mu);
    if (at > q->base.outer->progress_at) q->base.outer->progress_at = at;
}

/* Test the inner request; 1 when it completed, 0 pending, -1 failed (the transport too). */
static int inner_done(st_tp *s, st_req *q) {
    inherit_progress(s, q);
    return tp_layer_test_inner(&s->l, &q->inner);
}

/* The outer request's direction, peer and channel on the inner transport, for `bytes` at buf
 * (a pinned slot; in direct mode the handle). */
static wp_result post_inner(st_tp *s, st_req *q, void *buf, size_t bytes) {
    wp_request *r = q->base.outer;
    return tp_layer_post_inner(&s->l, r->kind, r->peer, r->channel, buf, bytes, r->label, &q->inner);
}

/* Queue the device -> pinned copy of a send behind the compute work it depends on. */
static int start_send(st_tp *s, st_req *q) {
    wp_request *r = q->base.outer;
    if (slot_take(s, r->bytes, &q->slot) || !(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    kern_event_wait(s->xfer, q->base.ready);
    kern_to_host_async(s->xfer, q->slot.host, r->buf, r->bytes);
    kern_event_record(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    q->phase = ST_COPY;
    return 0;
}

static int start_recv(st_tp *s, st_req *q) {
    wp_request *r = q->base.outer;
    if (slot_take(s, r->bytes, &q->slot) || !(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    /* The buffer may be a pool slot whose previous contents compute work queued before this
     * post still reads: the copy into it waits for that work. */
    kern_event_wait(s->xfer, q->base.ready);
    if (xfer_failed(s, q) || post_inner(s, q, q->slot.host, r->bytes)) return -1;
    q->phase = ST_INNER;
    return 0;
}

/* ---- direct mode ---- */

static int direct_start(st_tp *s, st_req *q) {
    wp_request *r = q->base.outer;
    if (!(q->moved = kern_event_create(s->xfer))) return xfer_failed(s, q);
    if (r->kind == TP_SEND) {
        st_direct *m = calloc(1, sizeof *m);
        if (!m) {
            tp_layer_fail(&s->l, "out of memory sending %s", r->label);
            return -1;
        }
        m->src = r->buf;
        m->bytes = r->bytes;
        snprintf(m->label, sizeof m->label, "%s", r->label);
        m->ready = q->base.ready;
        atomic_init(&m->copied, false);
        atomic_init(&m->refs, 2);
        q->msg = m;
        q->handle = (uint64_t)(uintptr_t)m;
    }
    if (post_inner(s, q, &q->handle, sizeof q->handle)) return -1;
    q->phase = ST_INNER;
    return 0;
}

/* The sender's handle arrived: copy from its buffer once both ranks' earlier compute is done. */
static int direct_copy(st_tp *s, st_req *q) {
    wp_request *r = q->base.outer;
    st_direct *m = (st_direct *)(uintptr_t)q->handle;
    q->msg = m;
    if (m->bytes != r->bytes) {
        tp_fail_locked(&s->l.base, -1, "rank %d sends %s (%zu bytes) on channel %d but rank %d expects %s (%zu bytes)",
                       r->peer, m->label, m->bytes, r->channel, s->l.base.rank, r->label, r->bytes);
        return -1;
    }
    kern_event_wait(s->xfer, q->base.ready);
    kern_event_wait(s->xfer, m->ready);
    kern_copy(s->xfer, r->buf, m->src, r->bytes);
    kern_event_record(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    q->phase = ST_LAND;
    return 0;
}

static int direct_advance(st_tp *s, st_req *q) {
    bool send = q->base.outer->kind == TP_SEND;
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

/* ---- the layer's ops ---- */

/* A turn starts with no (peer, channel) blocked. */
static void st_turn_begin(tp_layer *l) {
    st_tp *s = st_of(l);
    memset(s->blocked, 0, (size_t)l->base.world * WP_MAX_CHANNELS * sizeof *s->blocked);
}

/* Host mode keeps FIFO order per (peer, channel) on the inner transport: a send passes to it
 * only when no earlier send of its key of this turn is still short of it (*blk). */
static int host_advance(st_tp *s, st_req *q, bool *blk) {
    wp_request *r = q->base.outer;
    bool send = r->kind == TP_SEND;
    if (q->phase == ST_START && (send ? start_send(s, q) : start_recv(s, q))) return -1;
    if (q->phase == ST_COPY) {
        bool copied = kern_event_done(s->xfer, q->moved);
        if (xfer_failed(s, q)) return -1;
        if (!copied || *blk) return 0;
        if (post_inner(s, q, q->slot.host, r->bytes)) return -1;
        q->phase = ST_INNER;
    }
    if (q->phase == ST_INNER) {
        int d = inner_done(s, q);
        if (d <= 0) return d;
        if (send) return 1;
        kern_to_device_async(s->xfer, r->buf, q->slot.host, r->bytes);
        kern_event_record(s->xfer, q->moved);
        if (xfer_failed(s, q)) return -1;
        q->phase = ST_LAND;
    }
    bool landed = kern_event_done(s->xfer, q->moved);
    if (xfer_failed(s, q)) return -1;
    return landed ? 1 : 0;
}

static int st_advance(tp_layer *l, tp_layer_req *lq) {
    st_tp *s = st_of(l);
    st_req *q = req_of(lq);
    wp_request *r = lq->outer;
    bool *blk = &s->blocked[r->peer * WP_MAX_CHANNELS + r->channel];
    int rc = s->direct ? direct_advance(s, q) : host_advance(s, q, blk);
    if (rc >= 0 && r->kind == TP_SEND && q->phase < ST_INNER) *blk = true;
    return rc;
}

/* Device copies in flight: the pinned copy of a send, the landing of a receive. */
static bool st_device_busy(const tp_layer_req *lq) {
    const st_req *q = (const st_req *)lq;
    return q->phase == ST_COPY || q->phase == ST_LAND;
}

/* Inner requests still pending (a failed job) are aborted and awaited, so that no inner
 * thread writes a slot after it is freed; no device copy still reads or writes one either. */
static void st_drain(tp_layer *l) {
    st_tp *s = st_of(l);
    char why[400];
    kern_sync(s->xfer);
    bool aborted = false;
    for (tp_layer_req *lq = l->head; lq; lq = lq->next) {
        st_req *q = req_of(lq);
        if (q->inner && !aborted) {
            tp_abort(l->inner, "the staged transport closed with transfers pending");
            aborted = true;
        }
        if (q->inner) (void)tp_wait(&q->inner, 5.0, why, sizeof why);
    }
}

static void st_release(tp_layer *l, tp_layer_req *lq) {
    st_tp *s = st_of(l);
    st_req *q = req_of(lq);
    slot_give(s, &q->slot);
    /* Events are plain device objects: the transfer context may destroy the ones the
     * compute context created (the compute context belongs to the executor's thread). */
    kern_event_destroy(s->xfer, lq->ready);
    kern_event_destroy(s->xfer, q->moved);
    direct_drop(q->msg);
}

static void st_destroy(tp_layer *l) {
    st_tp *s = st_of(l);
    for (int i = 0; i < s->n_free; i++) kern_host_free(s->xfer, s->free[i].host);
    kern_destroy(s->xfer);
    free(s->free);
    free(s->blocked);
}

static const tp_layer_ops staged_ops = {
    .tp = TP_LAYER_TP_OPS("staged"),
    .req_bytes = sizeof(st_req),
    .post_verb = "staging",
    .turn_begin = st_turn_begin,
    .advance = st_advance,
    .device_busy = st_device_busy,
    .drain = st_drain,
    .release = st_release,
    .destroy = st_destroy,
};

bool tp_is_staged(const wp_transport *t) { return t && t->ops == &staged_ops.tp; }

int tp_staged_open(wp_transport *inner, wp_kern *compute, wp_stage_mode mode, wp_transport **out, char *err,
                   size_t errlen) {
    *out = NULL;
    bool local = tp_one_process(inner);
    if (mode == WP_STAGE_DIRECT && !local) {
        snprintf(err, errlen, "rank %d: device-to-device staging needs the local transport (ranks as threads), not %s",
                 tp_rank(inner), tp_kind(inner));
        return 1;
    }
    st_tp *s = calloc(1, sizeof *s);
    if (!s || tp_layer_init(&s->l, &staged_ops, inner, compute) != 0) {
        free(s);
        snprintf(err, errlen, "rank %d: out of memory for the staged transport", tp_rank(inner));
        return 1;
    }
    s->direct = mode == WP_STAGE_DIRECT || (mode == WP_STAGE_AUTO && local);
    /* In direct mode the inner transport carries only the handles. */
    s->l.inner_payload_is_overhead = s->direct;
    char why[512];
    s->blocked = calloc((size_t)tp_world(inner) * WP_MAX_CHANNELS, sizeof *s->blocked);
    s->xfer = s->blocked ? kern_create_sibling(compute, why, sizeof why) : NULL;
    if (!s->xfer || tp_layer_start(&s->l) != 0) {
        snprintf(err, errlen, "rank %d: staged transport: %s", tp_rank(inner),
                 !s->blocked ? "out of memory" : !s->xfer ? why : "cannot start its progress thread");
        tp_layer_close(&s->l.base);
        return 1;
    }
    *out = &s->l.base;
    return 0;
}
