/* The ibverbs transport: peers, connection exchange, the progress thread (ib_transport.h; how a
 * job opens it, and its row: ib_job.c). */
#include "ib_transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IBV_OOB_CHANNEL 0
#define IBV_POLL_BATCH 64
#define IBV_IDLE_WAIT_S 0.05     /* sleep while idle; timeouts are checked at least this often */
#define IBV_EXCHANGE_WAIT_S 0.001 /* first poll interval of a running out-of-band exchange; it
                                     doubles while nothing moves, up to IBV_IDLE_WAIT_S (a peer
                                     may post to us much later) */

/* IDLE -> EXCHANGING (our info sent, theirs awaited) -> READYING (queue pair connected and
 * receives posted; "ready" sent, theirs awaited) -> UP (writes may flow). */
enum { PEER_IDLE = 0, PEER_EXCHANGING, PEER_READYING, PEER_UP };

typedef struct rdma_peer {
    int state;
    ibp_link link;
    uint8_t *info;                  /* ours, theirs (IBP_INFO_BYTES each), our ready, theirs */
    wp_request *oob_send, *oob_recv; /* the exchange over the out-of-band transport */
    bool posted;                    /* both are posted */
} rdma_peer;

typedef struct rdma_tp {
    wp_transport base;
    wp_sync sync;
    tp_fail fail;
    const ib_ops *ops;
    ib_dev *dev;
    ibp_cfg pcfg;
    double connect_timeout;
    wp_transport *oob;
    pthread_mutex_t oob_mu; /* serialises calls into oob (its contract: one driving thread) */
    rdma_peer *peers;
    int nexchanging;
    unsigned long exchange_moves; /* exchanges started or advanced a phase (resets the poll interval) */
    pthread_t thread;
    bool thread_started, stop, oob_told;
    tp_self self;   /* sends and receives to this rank */
    char desc[320];
} rdma_tp;

static rdma_tp *rdma_of(wp_transport *t) { return (rdma_tp *)t; }

static void peer_name(wp_transport *t, int peer, char *buf, size_t buflen) {
    tp_peer_name(rdma_of(t)->oob, peer, buf, buflen);
}

/* ---- connecting: exchange the link info over the out-of-band transport ---- */

/* Create the link and post the exchange. Unlocked on entry. */
static wp_result start_exchange(rdma_tp *T, int peer, char *err, size_t errlen) {
    rdma_peer *P = &T->peers[peer];
    pthread_mutex_lock(&T->sync.mu);
    bool start = P->state == PEER_IDLE && !T->fail.failed;
    wp_result rc = WP_OK;
    if (start) {
        P->info = calloc(1, 2 * IBP_INFO_BYTES + 2);
        if (!P->info) {
            snprintf(err, errlen, "rank %d: out of memory connecting to rank %d", T->base.rank, peer);
            rc = WP_FAILED;
        } else if (ibp_link_init(&P->link, &T->base, T->ops, T->dev, peer, &T->pcfg, err, errlen) != 0) {
            rc = WP_FAILED;
        }
        if (rc == 0) {
            ibp_info_encode(&P->link, P->info);
            P->state = PEER_EXCHANGING;
            T->nexchanging++;
            T->exchange_moves++;
        } else {
            tp_fail_locked(&T->base, -1, "%s", err);
        }
    }
    pthread_mutex_unlock(&T->sync.mu);
    if (!start || rc != 0) return rc;
    wp_request *s = NULL, *r = NULL;
    char why[400];
    pthread_mutex_lock(&T->oob_mu);
    int orc = tp_post_send(T->oob, peer, IBV_OOB_CHANNEL, P->info, IBP_INFO_BYTES, "RDMA connection info", &s, why,
                           sizeof why);
    if (orc == 0)
        orc = tp_post_recv(T->oob, peer, IBV_OOB_CHANNEL, P->info + IBP_INFO_BYTES, IBP_INFO_BYTES,
                           "RDMA connection info", &r, why, sizeof why);
    pthread_mutex_unlock(&T->oob_mu);
    pthread_mutex_lock(&T->sync.mu);
    P->oob_send = s;
    P->oob_recv = r;
    P->posted = orc == 0;
    if (orc != 0) {
        snprintf(err, errlen, "rank %d cannot exchange RDMA connection info with rank %d: %s", T->base.rank, peer, why);
        tp_fail_locked(&T->base, peer, "could not exchange RDMA connection info: %s", why);
    }
    T->base.stats.overhead_sent += IBP_INFO_BYTES;
    pthread_mutex_unlock(&T->sync.mu);
    T->ops->wake(T->dev);
    return orc == 0 ? WP_OK : WP_FAILED;
}

static wp_result await_up(rdma_tp *T, int peer, char *err, size_t errlen) {
    rdma_peer *P = &T->peers[peer];
    double deadline = wp_now() + T->connect_timeout;
    wp_result rc = WP_OK;
    pthread_mutex_lock(&T->sync.mu);
    while (P->state != PEER_UP && !T->fail.failed && wp_now() < deadline) wp_sync_wait_until(&T->sync, deadline);
    if (T->fail.failed) {
        snprintf(err, errlen, "rank %d: transport failed while connecting to rank %d: %s", T->base.rank, peer,
                 T->fail.what);
        rc = WP_FAILED;
    } else if (P->state != PEER_UP) {
        snprintf(err, errlen, "rank %d: rank %d did not connect by RDMA within %g s", T->base.rank, peer,
                 T->connect_timeout);
        tp_fail_locked(&T->base, peer, "did not connect by RDMA within %g s", T->connect_timeout);
        rc = WP_FAILED;
    }
    pthread_mutex_unlock(&T->sync.mu);
    return rc;
}

static wp_result rdma_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen) {
    rdma_tp *T = rdma_of(t);
    WP_TRY(start_exchange(T, peer, err, errlen));
    return wait ? await_up(T, peer, err, errlen) : WP_OK;
}

/* Post the "ready" message after our queue pair is connected (sync held; dropped around the
 * out-of-band calls, whose lock the caller holds). */
static int post_ready(rdma_tp *T, rdma_peer *P, int peer, char *why, size_t whylen) {
    uint8_t *mine = P->info + 2 * IBP_INFO_BYTES;
    wp_request *s = NULL, *r = NULL;
    *mine = 1;
    pthread_mutex_unlock(&T->sync.mu);
    int rc = tp_post_send(T->oob, peer, IBV_OOB_CHANNEL, mine, 1, "RDMA ready", &s, why, whylen);
    if (rc == 0) rc = tp_post_recv(T->oob, peer, IBV_OOB_CHANNEL, mine + 1, 1, "RDMA ready", &r, why, whylen);
    pthread_mutex_lock(&T->sync.mu);
    P->oob_send = s;
    P->oob_recv = r;
    return rc;
}

/* Both out-of-band messages of the current phase arrived: connect, or start. */
static void phase_done(rdma_tp *T, rdma_peer *P, int peer) {
    char why[400];
    T->exchange_moves++;
    if (P->state == PEER_EXCHANGING) {
        T->base.stats.overhead_recv += IBP_INFO_BYTES;
        if (ibp_link_connect(&P->link, P->info + IBP_INFO_BYTES, why, sizeof why) != 0) {
            tp_fail_locked(&T->base, peer, "%s", why);
            return;
        }
        P->state = PEER_READYING;
        if (post_ready(T, P, peer, why, sizeof why) != 0)
            tp_fail_locked(&T->base, peer, "could not exchange RDMA ready messages: %s", why);
        return;
    }
    P->state = PEER_UP;
    T->nexchanging--;
    ibp_link_start(&P->link);
    pthread_cond_broadcast(&T->sync.cv);
}

/* The progress thread's turn at the exchanges (sync held on entry and exit; dropped while
 * the out-of-band transport is asked, never waited for: a busy oob lock means next turn). */
static void exchange_step(rdma_tp *T) {
    if (pthread_mutex_trylock(&T->oob_mu) != 0) return;
    for (int p = 0; p < T->base.world && !T->fail.failed; p++) {
        rdma_peer *P = &T->peers[p];
        if ((P->state != PEER_EXCHANGING && P->state != PEER_READYING) || !P->posted) continue;
        wp_request *s = P->oob_send, *r = P->oob_recv;
        pthread_mutex_unlock(&T->sync.mu);
        bool sdone = true, rdone = true;
        char why[400] = "";
        int rc = tp_test(&s, &sdone, why, sizeof why);
        if (rc == 0) rc = tp_test(&r, &rdone, why, sizeof why);
        pthread_mutex_lock(&T->sync.mu);
        P->oob_send = s;
        P->oob_recv = r;
        /* No deadline here: a peer may post to us long after we posted to it. Waits are
         * bounded where someone waits: tp_connect (connect timeout) and the silence clock of
         * every request queued meanwhile. */
        if (rc != 0) tp_fail_locked(&T->base, p, "could not exchange RDMA connection info: %s", why);
        else if (sdone && rdone) phase_done(T, P, p);
    }
    pthread_mutex_unlock(&T->oob_mu);
}

/* ---- the progress thread ---- */

/* Pass our failure to the out-of-band transport (its peers learn it), or take its failure.
 * The progress thread does not block on the out-of-band lock (a tcp connect may hold it for
 * the connect timeout): it tries again next turn. */
static void oob_sync_failure(rdma_tp *T, bool may_block) {
    char why[600];
    if (T->fail.failed) {
        if (T->oob_told) return;
        if (T->fail.peer >= 0) {
            char name[128];
            peer_name(&T->base, T->fail.peer, name, sizeof name);
            snprintf(why, sizeof why, "rank %d: %s %s", T->base.rank, name, T->fail.what);
        } else {
            snprintf(why, sizeof why, "rank %d: %s", T->base.rank, T->fail.what);
        }
        pthread_mutex_unlock(&T->sync.mu);
        bool locked = may_block ? pthread_mutex_lock(&T->oob_mu) == 0 : pthread_mutex_trylock(&T->oob_mu) == 0;
        if (locked) {
            tp_abort(T->oob, why);
            pthread_mutex_unlock(&T->oob_mu);
        }
        pthread_mutex_lock(&T->sync.mu);
        if (locked) T->oob_told = true;
        return;
    }
    pthread_mutex_unlock(&T->sync.mu);
    bool oob_failed = tp_failed(T->oob, why, sizeof why);
    pthread_mutex_lock(&T->sync.mu);
    if (oob_failed) {
        T->oob_told = true;
        tp_fail_locked(&T->base, -1, "%s", why);
    }
}

static int poll_once(rdma_tp *T) {
    ib_wc wc[IBV_POLL_BATCH];
    char why[256];
    int n = T->ops->poll_cq(T->dev, wc, IBV_POLL_BATCH, why, sizeof why);
    if (n < 0) {
        tp_fail_locked(&T->base, -1, "rank %d: polling the RDMA completion queue failed: %s", T->base.rank, why);
        return 0;
    }
    for (int i = 0; i < n; i++) ibp_on_wc(wc[i].qp_ctx, &wc[i]);
    return n;
}

static void check_timeouts(rdma_tp *T) {
    double now = wp_now();
    for (int p = 0; p < T->base.world; p++)
        if (T->peers[p].state == PEER_UP) ibp_check_timeouts(&T->peers[p].link, now);
}

static void *progress_main(void *arg) {
    rdma_tp *T = arg;
    double last_check = wp_now(), exchange_wait = IBV_EXCHANGE_WAIT_S;
    unsigned long moves = 0;
    pthread_mutex_lock(&T->sync.mu);
    while (!T->stop) {
        int n = poll_once(T);
        if (T->nexchanging > 0) exchange_step(T);
        if (T->fail.failed && !T->oob_told) oob_sync_failure(T, false);
        if (wp_now() - last_check >= IBV_IDLE_WAIT_S) {
            check_timeouts(T);
            oob_sync_failure(T, false);
            last_check = wp_now();
        }
        if (n > 0 || T->stop) continue;
        if (T->exchange_moves != moves) exchange_wait = IBV_EXCHANGE_WAIT_S; /* an exchange moved on */
        moves = T->exchange_moves;
        double idle = T->nexchanging > 0 ? exchange_wait : IBV_IDLE_WAIT_S;
        if (T->nexchanging > 0 && exchange_wait < IBV_IDLE_WAIT_S) exchange_wait *= 2;
        pthread_mutex_unlock(&T->sync.mu);
        T->ops->wait(T->dev, idle);
        pthread_mutex_lock(&T->sync.mu);
    }
    pthread_mutex_unlock(&T->sync.mu);
    return NULL;
}

/* ---- posting ---- */

static wp_result rdma_post(wp_transport *t, wp_request *r, char *err, size_t errlen) {
    rdma_tp *T = rdma_of(t);
    if (r->peer == t->rank) {
        tp_post_self_locked(t, &T->self, r);
        return WP_OK;
    }
    rdma_peer *P = &T->peers[r->peer];
    if (P->state == PEER_IDLE) {
        snprintf(err, errlen, "rank %d posted %s to rank %d before connecting to it", t->rank, r->label, r->peer);
        return WP_FAILED;
    }
    ibp_post(&P->link, r); /* to a peer gone meanwhile: taken from what it left, or failed */
    return WP_OK;
}

static void rdma_failed(wp_transport *t) {
    rdma_tp *T = rdma_of(t);
    T->ops->wake(T->dev);
}

/* ---- closing and creation ---- */

static void rdma_close(wp_transport *t) {
    rdma_tp *T = rdma_of(t);
    pthread_mutex_lock(&T->sync.mu);
    T->stop = true;
    pthread_mutex_unlock(&T->sync.mu);
    if (T->thread_started) {
        T->ops->wake(T->dev);
        pthread_join(T->thread, NULL);
    }
    /* A failure the progress thread had no turn to pass on yet. */
    pthread_mutex_lock(&T->sync.mu);
    if (T->fail.failed && !T->oob_told) oob_sync_failure(T, true);
    pthread_mutex_unlock(&T->sync.mu);
    for (int p = 0; T->peers && p < t->world; p++) {
        rdma_peer *P = &T->peers[p];
        ibp_link_free(&P->link);
        /* An exchange still pending holds out-of-band requests that point into P->info: the
         * out-of-band transport may still write there, so it is left to the process. */
        if (!P->oob_send && !P->oob_recv) free(P->info);
    }
    if (T->dev) T->ops->close(T->dev);
    tp_free_requests(t);
    free(T->peers);
    pthread_mutex_destroy(&T->oob_mu);
    wp_sync_destroy(&T->sync);
    free(T);
}

static const tp_ops rdma_tp_ops = {
    .kind = "ibverbs",
    .connect = rdma_connect,
    .post = rdma_post,
    .failed = rdma_failed,
    .peer_name = peer_name,
    .close = rdma_close,
};

int rdma_create(const ib_ops *ops, const ib_dev_cfg *dev, const ibp_cfg *proto, double connect_timeout,
               wp_transport *oob, wp_transport **out, char *err, size_t errlen) {
    *out = NULL;
    int rank = tp_rank(oob), world = tp_world(oob);
    char why[400];
    if (ibp_cfg_check(proto, why, sizeof why) != 0) {
        snprintf(err, errlen, "rank %d: %s", rank, why);
        return 1;
    }
    rdma_tp *T = calloc(1, sizeof *T);
    if (!T || wp_sync_init(&T->sync) != 0) {
        free(T);
        snprintf(err, errlen, "rank %d: cannot create the ibverbs transport", rank);
        return 1;
    }
    if (pthread_mutex_init(&T->oob_mu, NULL) != 0) {
        wp_sync_destroy(&T->sync);
        free(T);
        snprintf(err, errlen, "rank %d: cannot create the ibverbs transport's mutex", rank);
        return 1;
    }
    tp_init(&T->base, &rdma_tp_ops, rank, world, &T->sync, &T->fail);
    T->fail.peer = -1;
    T->ops = ops;
    T->pcfg = *proto;
    T->connect_timeout = connect_timeout;
    T->oob = oob;
    T->peers = calloc((size_t)world, sizeof *T->peers);
    wp_result rc = T->peers ? ops->open(dev, &T->dev, T->desc, sizeof T->desc, why, sizeof why) : WP_FAILED;
    if (!T->peers) snprintf(why, sizeof why, "out of memory for %d peers", world);
    if (rc == IB_NO_DEVICE) {
        snprintf(err, errlen, "no RDMA device: %s", why);
    } else if (rc != 0) {
        snprintf(err, errlen, "rank %d: cannot open the RDMA device: %s", rank, why);
    } else if (pthread_create(&T->thread, NULL, progress_main, T) != 0) {
        snprintf(err, errlen, "rank %d: cannot start the RDMA progress thread", rank);
        rc = WP_FAILED;
    } else {
        T->thread_started = true;
    }
    /* The ring neighbours start their exchange now: a connection needs both sides to post
     * their info, and ranks that each wait for their previous neighbour first
     * (tp_connect_ring) would otherwise wait for each other in a circle. */
    int ring[2] = {(rank + world - 1) % world, (rank + 1) % world};
    for (int i = 0; rc == 0 && i < 2; i++)
        if (ring[i] != rank && start_exchange(T, ring[i], err, errlen) != 0) rc = WP_FAILED;
    if (rc != 0) {
        rdma_close(&T->base);
        return rc == IB_NO_DEVICE ? 2 : 1;
    }
    *out = &T->base;
    return 0;
}

const char *rdma_describe(wp_transport *t) { return rdma_of(t)->desc; }

#if WP_HAVE_IBVERBS
int rdma_open_over(wp_transport *wire, const ib_dev_cfg *dev, const wp_net_opts *net, wp_transport **t, char *err,
                   size_t errlen) {
    *t = NULL;
    ibp_cfg pc;
    ibp_cfg_defaults(&pc);
    pc.timeout = net->timeout;
    int rc = rdma_create(&ib_hw_ops, dev, &pc, net->connect_timeout, wire, t, err, errlen);
    if (rc == 0 && tp_rank(wire) == 0) fprintf(stderr, "weipipe: ibverbs transport: %s\n", rdma_describe(*t));
    return rc;
}
#endif
