/* Transfers and waits of the executor (ir.h's transfer semantics on top of transport.h).
 *
 * A SEND always goes through a queue: it is posted once its buffer is present and every earlier
 * queued SEND to the same (peer, channel) has been posted, which keeps the FIFO pairing of the
 * IR even when a relay's data is still arriving. Waits service every pending request of the
 * rank (not only the awaited one), so relays keep moving while this rank waits. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "rt_impl.h"

/* The executor posts an action's IR channel (ir.h's WP_SCH_*) as the transport's channel number
 * unchanged: here, where both headers are visible (the IR sits above ring/), the numbers must
 * agree and every IR channel must be one the transport has. */
#define WP_SAME_CHANNEL_(n) ((int)WP_SCH_##n == (int)WP_CH_##n)
static_assert(WP_SAME_CHANNEL_(WFWD) && WP_SAME_CHANNEL_(WBWD) && WP_SAME_CHANNEL_(GRAD) && WP_SAME_CHANNEL_(ACT) &&
                  WP_SAME_CHANNEL_(ACTGRAD),
              "ir.h's channels and ring/transport.h's conventional ones");
#undef WP_SAME_CHANNEL_
static_assert(WP_SCH_COUNT <= WP_MAX_CHANNELS, "every IR channel is a transport channel");

wp_result rt_fail(wp_rt *rt, char *err, size_t errlen, const char *fmt, ...) {
    char what[2048], text[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const wp_rank_prog *p = &rt->c.s->rank[rt->c.rank];
    if (rt->ai >= 0 && rt->ai < p->n)
        snprintf(err, errlen, "rank %d step %lld action %d %s: %s", rt->c.rank, (long long)rt->step, rt->ai,
                 action_text(&p->a[rt->ai], text, sizeof text), what);
    else
        snprintf(err, errlen, "rank %d step %lld: %s", rt->c.rank, (long long)rt->step, what);
    return WP_FAILED;
}

/* Send i of e completed: its event ends, the last pending send takes its place. */
/* The transport failed under this rank. A peer that closed its connection may only be passing on
 * another rank's failure: the control channel relays the first cause (the rank that died) to
 * every rank, but it can arrive a little after the closed socket. Wait for it briefly and name
 * that cause too, so that every rank's error names the rank that failed first. */
#define CAUSE_GRACE_S 0.5
/* A peer's abort on the data connections says for certain that another rank failed, and a peer
 * silent past the timeout may only be blocked by one that died: the rank that failed first may
 * itself still be in its grace, so its cause reaches the control channel up to a grace plus a
 * relay later (seen in CI: the abort of a rank that had timed out on the first failer arrived
 * first). Wait longer for it then; a rank that is the first failer exits that much later. */
#define CAUSE_RELAYED_S 2.0

/* Rank 0's evidence (its status query's silent ranks, control.h: ctl_unanswered, on every rank)
 * names a lost host at once: a rank whose wait timed out names the ranks rank 0 could not hear
 * from, not the peer that went silent first (which may be blocked behind them: issue 42). */
static wp_result transport_fail(wp_rt *rt, char *err, size_t errlen, const char *awaited, const char *why) {
    char cause[1024] = "", silent[512];
    const bool hearsay = tp_failed_hearsay(rt->c.t);
    double until = wp_now() + (hearsay ? CAUSE_RELAYED_S : CAUSE_GRACE_S);
    while (!ctl_failed(rt->c.ctl, cause, sizeof cause) && !(hearsay && ctl_unanswered(rt->c.ctl, NULL, 0)) &&
           wp_now() < until) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000};
        nanosleep(&ts, NULL); /* an interrupted pause only shortens the grace */
    }
    const char *w = awaited ? "while waiting for " : "", *sep = awaited ? ": " : "";
    if (!(cause[0] && strstr(cause, "unanswered")) && !strstr(why, "unanswered") &&
        ctl_unanswered(rt->c.ctl, silent, sizeof silent))
        return rt_fail(rt, err, errlen, "%s%s%s%s; rank 0's status query before it went unanswered by %s", w,
                       awaited ? awaited : "", sep, why, silent);
    if (cause[0] && !strstr(why, cause))
        return rt_fail(rt, err, errlen, "%s%s%s%s (the job was aborted first: %s)", w, awaited ? awaited : "", sep, why,
                       cause);
    return rt_fail(rt, err, errlen, "%s%s%s%s", w, awaited ? awaited : "", sep, why);
}

static void drop_send(wp_rt *rt, rt_entry *e, int i) {
    rt_xfer_end(rt, e->send_ev[i]);
    e->n_sends--;
    e->sends[i] = e->sends[e->n_sends];
    e->send_ev[i] = e->send_ev[e->n_sends];
    e->sends[e->n_sends] = NULL;
}

static void recv_done(wp_rt *rt, rt_entry *e) {
    rt_xfer_end(rt, e->recv_ev);
    e->arrived = true;
    pool_touch(e);
}

static wp_result poll_entry(wp_rt *rt, rt_entry *e, char *err, size_t errlen) {
    char why[300];
    bool done;
    if (e->recv) {
        if (tp_test(&e->recv, &done, why, sizeof why)) return transport_fail(rt, err, errlen, NULL, why);
        if (done) recv_done(rt, e);
    }
    for (int i = e->n_sends - 1; i >= 0; i--) {
        if (tp_test(&e->sends[i], &done, why, sizeof why)) return transport_fail(rt, err, errlen, NULL, why);
        if (done) drop_send(rt, e, i);
    }
    return 0;
}

static wp_result post_send(wp_rt *rt, rt_entry *e, int peer, int channel, char *err, size_t errlen) {
    char label[64], why[300];
    if (e->n_sends == RT_MAX_SENDS)
        return rt_fail(rt, err, errlen, "more than %d sends of %s in flight", RT_MAX_SENDS,
                       buf_name(e->name, label, sizeof label));
    buf_name(e->name, label, sizeof label);
    /* the span starts before the post: a transport may deliver within it (local: a copy), and
     * a receive must never seem to end before its send began (tests/runtime/trace_check.c) */
    e->send_ev[e->n_sends] = rt_xfer_begin(rt, RT_EV_SEND, e, peer, channel);
    if (tp_post_send(rt->c.t, peer, channel, e->data, e->bytes, label, &e->sends[e->n_sends], why, sizeof why))
        return transport_fail(rt, err, errlen, NULL, why);
    e->n_sends++;
    e->n_deferred--;
    return 0;
}

/* Post queued sends in order; one that cannot go blocks the later ones of its (peer, channel). */
static wp_result post_deferred(wp_rt *rt, char *err, size_t errlen) {
    if (rt->n_def == 0) return 0;
    memset(rt->blocked, 0, (size_t)rt->c.s->nranks * WP_MAX_CHANNELS * sizeof *rt->blocked);
    int kept = 0;
    for (int i = 0; i < rt->n_def; i++) {
        rt_deferred d = rt->def[i];
        bool *blk = &rt->blocked[d.peer * WP_MAX_CHANNELS + d.channel];
        rt_entry *e = pool_find(&rt->pool, d.b);
        if (!*blk && e && pool_present(&rt->pool, e) && e->n_sends < RT_MAX_SENDS) {
            if (post_send(rt, e, d.peer, d.channel, err, errlen)) return 1;
            continue;
        }
        *blk = true;
        rt->def[kept++] = d;
    }
    rt->n_def = kept;
    return 0;
}

wp_result rt_progress(wp_rt *rt, char *err, size_t errlen) {
    for (int i = 0; i < rt->pool.n; i++) {
        rt_entry *e = rt->pool.e[i];
        if (e->used && poll_entry(rt, e, err, errlen)) return 1;
    }
    return post_deferred(rt, err, errlen);
}

/* Every pending request of the rank, with where it belongs. */
typedef struct {
    int n, cap;
    wp_request **req;
    rt_entry **owner;
    int *slot; /* -1: the receive, else the index in sends */
} req_set;

static wp_result collect(wp_rt *rt, req_set *rs) {
    rs->n = 0;
    for (int i = 0; i < rt->pool.n; i++) {
        rt_entry *e = rt->pool.e[i];
        if (!e->used) continue;
        int need = rs->n + 1 + e->n_sends;
        if (need > rs->cap) {
            int cap = need * 2;
            wp_request **r = realloc(rs->req, (size_t)cap * sizeof *r);
            if (r) rs->req = r;
            rt_entry **o = realloc(rs->owner, (size_t)cap * sizeof *o);
            if (o) rs->owner = o;
            int *s = realloc(rs->slot, (size_t)cap * sizeof *s);
            if (s) rs->slot = s;
            if (!r || !o || !s) return WP_FAILED;
            rs->cap = cap;
        }
        if (e->recv) {
            rs->req[rs->n] = e->recv;
            rs->owner[rs->n] = e;
            rs->slot[rs->n++] = -1;
        }
        for (int j = 0; j < e->n_sends; j++) {
            rs->req[rs->n] = e->sends[j];
            rs->owner[rs->n] = e;
            rs->slot[rs->n++] = j;
        }
    }
    return 0;
}

static void completed(wp_rt *rt, req_set *rs, int i) {
    rt_entry *e = rs->owner[i];
    if (rs->slot[i] < 0) {
        e->recv = NULL;
        recv_done(rt, e);
    } else {
        drop_send(rt, e, rs->slot[i]);
    }
}

static void set_status(wp_rt *rt, const char *what) {
    char text[96];
    const wp_rank_prog *p = &rt->c.s->rank[rt->c.rank];
    if (rt->ai >= 0 && rt->ai < p->n)
        ctl_set_status(rt->c.ctl, "step %lld action %d %s: waiting for %s", (long long)rt->step, rt->ai,
                       action_text(&p->a[rt->ai], text, sizeof text), what);
    else
        ctl_set_status(rt->c.ctl, "step %lld: waiting for %s", (long long)rt->step, what);
}

/* Block until one pending request completes; fails when none is pending (nothing can change). */
static wp_result wait_one(wp_rt *rt, const char *what, char *err, size_t errlen) {
    req_set rs = {0};
    if (collect(rt, &rs) != 0) {
        free(rs.req), free(rs.owner), free(rs.slot);
        return rt_fail(rt, err, errlen, "out of memory while waiting for %s", what);
    }
    wp_result rc = WP_OK;
    if (rs.n == 0) {
        rc = rt_fail(rt, err, errlen, "waiting for %s, which nothing pending can bring", what);
    } else {
        char why[300];
        int idx = -1;
        set_status(rt, what);
        double t0 = wp_now();
        if (tp_wait_any(rs.req, rs.n, rt->c.timeout, &idx, why, sizeof why))
            rc = transport_fail(rt, err, errlen, what, why);
        else if (idx >= 0)
            completed(rt, &rs, idx);
        double t1 = wp_now();
        rt->wait_s += t1 - t0;
        rt_wait_event(rt, what, t0, t1);
    }
    free(rs.req), free(rs.owner), free(rs.slot);
    return rc;
}

static bool ready(const rt_pool *p, const rt_entry *e, bool writable) {
    return pool_present(p, e) && (!writable || pool_idle(p, e));
}

wp_result rt_wait(wp_rt *rt, rt_entry *e, bool writable, char *err, size_t errlen) {
    char name[64], what[96];
    buf_name(e->name, name, sizeof name);
    for (;;) {
        if (rt_progress(rt, err, errlen)) return 1;
        if (ready(&rt->pool, e, writable)) return 0;
        if (pool_present(&rt->pool, e))
            snprintf(what, sizeof what, "the sends of %s", name);
        else if (e->nslices)
            snprintf(what, sizeof what, "the slices of %s", name);
        else
            snprintf(what, sizeof what, "%s from rank %d", name, e->src);
        if (wait_one(rt, what, err, errlen)) return 1;
    }
}

wp_result rt_drain_deferred(wp_rt *rt, char *err, size_t errlen) {
    for (;;) {
        if (rt_progress(rt, err, errlen)) return 1;
        if (rt->n_def == 0) return 0;
        char name[64];
        if (wait_one(rt, buf_name(rt->def[0].b, name, sizeof name), err, errlen)) return 1;
    }
}

wp_result rt_send(wp_rt *rt, const wp_action *a, char *err, size_t errlen) {
    char name[64];
    rt_entry *e = pool_find(&rt->pool, a->buf);
    if (!e) return rt_fail(rt, err, errlen, "SEND of %s, which this rank does not hold", buf_name(a->buf, name, sizeof name));
    if (!rt->c.t) return rt_fail(rt, err, errlen, "SEND without a transport (one rank)");
    if (rt->n_def == rt->cap_def) {
        int cap = rt->cap_def ? 2 * rt->cap_def : 16;
        rt_deferred *d = realloc(rt->def, (size_t)cap * sizeof *d);
        if (!d) return rt_fail(rt, err, errlen, "out of memory queueing a send");
        rt->def = d;
        rt->cap_def = cap;
    }
    rt->def[rt->n_def++] = (rt_deferred){.b = a->buf, .peer = a->peer, .channel = a->channel};
    e->n_deferred++;
    return post_deferred(rt, err, errlen);
}

wp_result rt_recv(wp_rt *rt, const wp_action *a, char *err, size_t errlen) {
    char why[300], name[64];
    if (!rt->c.t) return rt_fail(rt, err, errlen, "RECV without a transport (one rank)");
    rt_entry *e = pool_create(&rt->pool, a->buf, why, sizeof why);
    if (!e) return rt_fail(rt, err, errlen, "%s", why);
    buf_name(a->buf, name, sizeof name);
    e->src = a->peer;
    e->recv_ev = rt_xfer_begin(rt, RT_EV_RECV, e, a->peer, a->channel); /* before the post, as a send's */
    if (tp_post_recv(rt->c.t, a->peer, a->channel, e->data, e->bytes, name, &e->recv, why, sizeof why))
        return transport_fail(rt, err, errlen, NULL, why);
    return 0;
}
