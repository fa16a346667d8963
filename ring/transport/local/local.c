/* The local transport: ranks as threads of one process (see local.h). */
#include "local_world.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wp_local_world *world_of(wp_transport *t) { return ((local_tp *)t)->w; }

static size_t box_index(const wp_local_world *w, int src, int dst, int channel) {
    return ((size_t)src * (size_t)w->n + (size_t)dst) * WP_MAX_CHANNELS + (size_t)channel;
}

static void local_peer_name(wp_transport *t, int peer, char *buf, size_t buflen) {
    (void)t;
    snprintf(buf, buflen, "rank %d (thread)", peer);
}

static wp_result local_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen) {
    (void)t, (void)peer, (void)wait, (void)err, (void)errlen;
    return WP_OK;
}

/* Both sides posted and no pacing: one copy by this thread, outside the lock (both requests
 * are marked busy, so neither owner returns from a failed wait while the copy runs). */
static void copy_now(wp_local_world *w, wp_request *s, wp_request *q) {
    s->busy++;
    q->busy++;
    pthread_mutex_unlock(&w->sync.mu);
    if (s->bytes) memcpy(q->buf, s->buf, s->bytes);
    pthread_mutex_lock(&w->sync.mu);
    s->busy--;
    q->busy--;
    tp_progress_locked(s, s->bytes);
    tp_progress_locked(q, q->bytes);
    tp_complete_locked(s);
    tp_complete_locked(q);
}

/* Pair the heads of a mailbox (FIFO per (src, dst, channel)) while both sides have one. */
static void match(wp_local_world *w, int src, int dst, int channel) {
    size_t box = box_index(w, src, dst, channel);
    while (!w->fail.failed && w->sends[box].head && w->recvs[box].head) {
        wp_request *s = tp_queue_pop(&w->sends[box]);
        wp_request *q = tp_queue_pop(&w->recvs[box]);
        if (s->bytes != q->bytes) {
            tp_fail_locked(&w->tps[src].base, -1,
                           "rank %d sends %s (%zu bytes) on channel %d but rank %d expects %s (%zu bytes)", src,
                           s->label, s->bytes, channel, dst, q->label, q->bytes);
            return;
        }
        local_req_of(s)->peer = q;
        local_req_of(q)->peer = s;
        s->progress_at = q->progress_at = wp_now();
        if (w->paced && src != dst) {
            tp_queue_push(&w->links[(size_t)src * (size_t)w->n + (size_t)dst].chans[channel], s);
            pthread_cond_broadcast(&w->sync.cv); /* the pacer */
        } else {
            copy_now(w, s, q);
        }
    }
}

static wp_result local_post(wp_transport *t, wp_request *r, char *err, size_t errlen) {
    (void)err, (void)errlen;
    wp_local_world *w = world_of(t);
    int src = r->kind == TP_SEND ? t->rank : r->peer;
    int dst = r->kind == TP_SEND ? r->peer : t->rank;
    size_t box = box_index(w, src, dst, r->channel);
    tp_queue_push(r->kind == TP_SEND ? &w->sends[box] : &w->recvs[box], r);
    match(w, src, dst, r->channel);
    return WP_OK;
}

/* A failure anywhere fails the whole world: the control channels learn it too. */
static void local_failed(wp_transport *t) {
    wp_local_world *w = world_of(t);
    char why[sizeof w->fail.what + 64];
    snprintf(why, sizeof why, "%s", w->fail.what);
    if (w->fail.peer >= 0) snprintf(why, sizeof why, "rank %d (thread) %s", w->fail.peer, w->fail.what);
    for (int r = 0; r < w->n; r++) {
        wp_control *c = &w->ctls[r].base;
        pthread_mutex_lock(&c->mu);
        if (!c->failed) {
            c->failed = true;
            snprintf(c->why, sizeof c->why, "%s", why);
        }
        pthread_mutex_unlock(&c->mu);
    }
}

static void local_close(wp_transport *t) { (void)t; }

static const tp_ops local_ops = {
    .kind = "local",
    .one_process = true,
    .connect = local_connect,
    .post = local_post,
    .failed = local_failed,
    .peer_name = local_peer_name,
    .close = local_close,
    .request_bytes = sizeof(local_req),
};

/* ---- the pacer: cuts matched transfers into frames no faster than each link allows ---- */

/* Channels take turns; the turn passes only when a frame is really cut (take = true). */
static wp_request *next_source(local_link *L, bool take) {
    for (int k = 0; k < WP_MAX_CHANNELS; k++) {
        int c = (L->rr + k) % WP_MAX_CHANNELS;
        if (L->chans[c].head) {
            if (take) L->rr = (c + 1) % WP_MAX_CHANNELS;
            return L->chans[c].head;
        }
    }
    return NULL;
}

/* Cut one frame if the link (and its NICs) can take it now (*cut); returns when it next can (or
 * INFINITY: nothing to cut, or just cut, then the caller asks again). */
static double schedule_link(wp_local_world *w, local_link *L, double now, bool *cut) {
    size_t fb = w->net.frame_bytes;
    *cut = false;
    if (next_source(L, false) == NULL) return INFINITY;
    double ready = wp_link_ready_at(&L->link, fb);
    if (ready > now) return ready;
    wp_request *s = next_source(L, true);
    local_frame *f = malloc(sizeof *f);
    if (!f) {
        tp_fail_locked(s->t, -1, "rank %d: out of memory pacing %s", s->t->rank, s->label);
        return INFINITY;
    }
    size_t len = s->bytes - s->scheduled < fb ? s->bytes - s->scheduled : fb;
    *f = (local_frame){.send = s, .off = s->scheduled, .len = len};
    f->arrive = wp_link_reserve(&L->link, now, len);
    if (L->ftail) L->ftail->next = f;
    else L->fhead = f;
    L->ftail = f;
    s->scheduled += len;
    s->frames_out++;
    if (s->scheduled == s->bytes) {
        s->all_scheduled = true;
        tp_queue_remove(&L->chans[s->channel], s);
    }
    *cut = true;
    return INFINITY;
}

/* Copy the frames that have arrived; returns when the next one arrives (or INFINITY). */
static double deliver_link(wp_local_world *w, local_link *L, double now) {
    while (L->fhead && L->fhead->arrive <= now) {
        local_frame *f = L->fhead;
        L->fhead = f->next;
        if (!L->fhead) L->ftail = NULL;
        wp_request *s = f->send, *q = local_req_of(s)->peer;
        if (!w->fail.failed) {
            if (f->len) memcpy(q->buf + f->off, s->buf + f->off, f->len);
            tp_progress_locked(s, f->len);
            tp_progress_locked(q, f->len);
            if (--s->frames_out == 0 && s->all_scheduled) {
                tp_complete_locked(s);
                tp_complete_locked(q);
            }
        }
        free(f);
    }
    return L->fhead ? L->fhead->arrive : INFINITY;
}

/* Links take turns frame by frame (one frame each per round, the first one rotating), so the
 * links that share a NIC share it evenly instead of the first in line taking all of it. */
static void *pacer_main(void *arg) {
    wp_local_world *w = arg;
    const size_t nn = (size_t)w->n * (size_t)w->n;
    pthread_mutex_lock(&w->sync.mu);
    while (!w->stop) {
        double now = wp_now(), next = now + 1.0;
        for (bool any = !w->fail.failed; any;) {
            any = false;
            for (size_t k = 0; k < nn; k++) {
                bool cut;
                double a = schedule_link(w, &w->links[(w->rr_link + k) % nn], now, &cut);
                any = any || cut;
                if (a < next) next = a;
            }
        }
        w->rr_link = (w->rr_link + 1) % nn;
        for (size_t i = 0; i < nn; i++) {
            double b = deliver_link(w, &w->links[i], now);
            if (b < next) next = b;
        }
        wp_sync_wait_until(&w->sync, next);
    }
    pthread_mutex_unlock(&w->sync.mu);
    return NULL;
}

/* ---- world ---- */

static int alloc_world(wp_local_world *w, char *err, size_t errlen) {
    size_t n = (size_t)w->n, boxes = n * n * WP_MAX_CHANNELS;
    w->tps = calloc(n, sizeof *w->tps);
    w->ctls = calloc(n, sizeof *w->ctls);
    w->sends = calloc(boxes, sizeof *w->sends);
    w->recvs = calloc(boxes, sizeof *w->recvs);
    w->links = calloc(n * n, sizeof *w->links);
    w->contrib = calloc(n, sizeof *w->contrib);
    w->contrib_bytes = calloc(n, sizeof *w->contrib_bytes);
    if (!w->tps || !w->ctls || !w->sends || !w->recvs || !w->links || !w->contrib || !w->contrib_bytes) {
        snprintf(err, errlen, "local transport: out of memory for %d ranks", w->n);
        return -1;
    }
    return 0;
}

/* Pairs inside a node: a link each. Between nodes with NICs (tp_net_nic): the pair keeps its
 * latency and books the two NICs it crosses, shared with the other threads' pairs. */
static int init_links(wp_local_world *w, char *err, size_t errlen) {
    int per = w->net.ranks_per_node, nodes = per > 0 ? (w->n + per - 1) / per : 0;
    for (int s = 0; s < w->n; s++)
        for (int d = 0; d < w->n; d++) {
            double bw, lat;
            tp_net_link(&w->net, s, d, &bw, &lat);
            wp_link *l = &w->links[(size_t)s * (size_t)w->n + (size_t)d].link;
            bool nic = tp_net_nic(&w->net, w->n, s, d);
            if (nic && !w->nics) {
                if (!(w->nics = calloc(2 * (size_t)nodes, sizeof *w->nics))) {
                    snprintf(err, errlen, "local transport: out of memory for %d NICs", 2 * nodes);
                    return -1;
                }
                for (int k = 0; k < 2 * nodes; k++) wp_link_init(&w->nics[k], w->net.link_bandwidth, 0);
            }
            wp_link_init(l, nic ? 0 : bw, lat);
            if (nic) l->nic[0] = &w->nics[s / per], l->nic[1] = &w->nics[nodes + d / per];
            if (s != d && wp_link_paced(l)) w->paced = true;
        }
    return 0;
}

int local_world_create(int nranks, const wp_net_opts *net, wp_local_world **out, char *err, size_t errlen) {
    *out = NULL;
    if (nranks < 1) {
        snprintf(err, errlen, "local transport: %d ranks (need at least 1)", nranks);
        return 1;
    }
    wp_local_world *w = calloc(1, sizeof *w);
    if (!w || wp_sync_init(&w->sync) != 0) {
        free(w);
        snprintf(err, errlen, "local transport: cannot create its lock");
        return 1;
    }
    w->n = nranks;
    w->net = *net;
    if (w->net.frame_bytes == 0) w->net.frame_bytes = WP_DEFAULT_FRAME_BYTES;
    w->fail.peer = -1;
    int rc = alloc_world(w, err, errlen);
    for (int r = 0; rc == 0 && r < nranks; r++) {
        tp_init(&w->tps[r].base, &local_ops, r, nranks, &w->sync, &w->fail);
        w->tps[r].w = w;
        rc = local_ctl_init(w, r, err, errlen);
    }
    if (rc == 0) rc = init_links(w, err, errlen);
    if (rc == 0) {
        if (w->paced) {
            if (pthread_create(&w->pacer, NULL, pacer_main, w) != 0) {
                snprintf(err, errlen, "local transport: cannot start the pacer thread");
                rc = -1;
            } else {
                w->pacer_started = true;
            }
        }
    }
    if (rc != 0) {
        local_world_destroy(w);
        return 1;
    }
    *out = w;
    return 0;
}

wp_transport *local_transport(wp_local_world *w, int rank) { return &w->tps[rank].base; }
wp_control *local_control(wp_local_world *w, int rank) { return &w->ctls[rank].base; }

void local_world_destroy(wp_local_world *w) {
    if (!w) return;
    if (w->pacer_started) {
        pthread_mutex_lock(&w->sync.mu);
        w->stop = true;
        pthread_cond_broadcast(&w->sync.cv);
        pthread_mutex_unlock(&w->sync.mu);
        pthread_join(w->pacer, NULL);
    }
    for (size_t i = 0; w->links && i < (size_t)w->n * (size_t)w->n; i++)
        while (w->links[i].fhead) {
            local_frame *f = w->links[i].fhead;
            w->links[i].fhead = f->next;
            free(f);
        }
    for (int r = 0; w->tps && r < w->n; r++)
        if (w->tps[r].w) tp_free_requests(&w->tps[r].base);
    if (w->ctls) local_ctl_free_state(w);
    free(w->tps);
    free(w->ctls);
    free(w->sends);
    free(w->recvs);
    free(w->links);
    free(w->nics);
    free(w->contrib);
    free(w->contrib_bytes);
    wp_sync_destroy(&w->sync);
    free(w);
}
