/* The NCCL transport (nccl_transport.h): descriptors and go messages over tcp, data with
 * ncclSend/ncclRecv on one 2-rank communicator per direction; the layer (layered_impl.h) runs
 * the progress thread, the queue and the failures. Every NCCL and CUDA call here runs with
 * the transport's lock held, so none races another. */
#include "nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "layered_impl.h"
#include "streams.h"

/* A send's announcement; the receiver checks the size and learns the communicator. */
typedef struct nc_desc {
    uint64_t bytes;
    ncclUniqueId id;
    char label[WP_LABEL_MAX];
} nc_desc;

/* The receiver's answer: it issued the receive of the oldest announced send on `channel`. */
typedef struct nc_go {
    uint32_t channel, magic;
} nc_go;
#define NC_GO_MAGIC 0x6e63676fu

/* One direction with one peer. */
typedef struct nc_comm {
    ncclComm_t comm;
    cudaStream_t stream;
    bool ready;
    bool engaged; /* the peer is known to be setting it up too: the set-up deadline runs */
    double since; /* when the deadline started */
    int enqueuing;      /* requests of its last group that NCCL has not finished enqueuing */
    double enq_since;   /* when that group ended */
} nc_comm;

/* NC_ENQUEUE: in a group that ncclGroupEnd returned from, on a non-blocking communicator that
 * is still enqueuing it (the first transfer of a direction also connects it, which needs the
 * peer's matching call): polled once per progress turn, never waited for while the layer's
 * lock is held, so this rank's progress thread goes on serving the tcp messages (the go of a
 * receive) that the peer's matching call is waiting for (docs/transports.md, "NCCL"). */
typedef enum { NC_START, NC_DESC, NC_ISSUE, NC_ENQUEUE, NC_FLIGHT } nc_phase;

/* One outer request (base.ready: the compute work queued before the post, which its stream
 * waits for). */
typedef struct nc_req {
    tp_layer_req base;
    struct nc_req *go_next;
    nc_phase phase;
    bool desc_done;       /* the descriptor's tcp transfer completed */
    bool go;              /* send: its go arrived (it sits in the peer's go queue) */
    nc_desc desc;
    wp_request *desc_req; /* the descriptor on tcp */
    nc_go go_msg;
    wp_request *go_req;   /* receive: its go on tcp */
    cudaEvent_t done;     /* the NCCL operation */
} nc_req;

/* A go message being received. One is posted per announced send, so that as many arrive as
 * are awaited and none is left pending at an orderly close; they belong to the peer, not to a
 * send (go messages come in the receiver's order, not in the order they were posted). */
typedef struct nc_gobuf {
    struct nc_gobuf *next;
    nc_go msg;
    wp_request *req;
} nc_gobuf;

typedef struct nc_peer {
    nc_comm out, in;
    bool have_id;
    ncclUniqueId id;           /* of `out`, made by this rank */
    nc_gobuf *gb_head, *gb_tail; /* go receives in post order (tcp fills them in that order) */
    nc_req *go_head, *go_tail; /* sends whose go arrived, in go order: issue order */
} nc_peer;

typedef struct nc_tp {
    tp_layer l;
    int device;
    double connect_timeout;
    nc_peer *peers;
    nc_req **issue;
    int n_issue, cap_issue;
    /* The communicators end by abort, not by an orderly finalize: the transport failed (they
     * were aborted then) or it closed with transfers pending. */
    bool abort_comms;
} nc_tp;

static nc_tp *nc_of(tp_layer *l) { return (nc_tp *)l; }
static nc_req *req_of(tp_layer_req *q) { return (nc_req *)q; }

/* ---- failures ---- */

static int cuda_ok(nc_tp *s, cudaError_t e, const char *call) {
    if (e == cudaSuccess) return 0;
    tp_layer_fail(&s->l, "cuda: %s failed: %s", call, cudaGetErrorString(e));
    return -1;
}

static int nccl_ok(nc_tp *s, ncclResult_t r, ncclComm_t comm, const char *call, int peer) {
    if (r == ncclSuccess || r == ncclInProgress) return 0;
    const char *last = comm ? ncclGetLastError(comm) : "";
    tp_layer_fail(&s->l, "nccl: %s with rank %d failed: %s%s%s", call, peer, ncclGetErrorString(r),
                  last && last[0] ? ": " : "", last ? last : "");
    return -1;
}

/* ---- communicators ---- */

/* engaged: the peer already joined (a receiver learns the id from the sender, who began
 * first); a sender's communicator is engaged by the first go (sent once the receiver's side
 * is up), so a receiver that takes long to post its first receive is not a set-up timeout. */
static int comm_begin(nc_tp *s, nc_comm *c, ncclUniqueId id, int my_rank, int peer, bool engaged) {
    if (cuda_ok(s, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return -1;
    /* Non-blocking: the set-up runs in the background, so a peer that never joins is a
     * timeout we report, not a progress thread stuck inside NCCL. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    c->since = wp_now();
    c->engaged = engaged;
    return nccl_ok(s, ncclCommInitRankConfig(&c->comm, 2, id, my_rank, &cfg), c->comm, "ncclCommInitRankConfig", peer);
}

/* Whether c is usable; fails the transport on an error or a set-up past the deadline. */
static bool comm_ready(nc_tp *s, nc_comm *c, int peer) {
    if (c->ready) return true;
    if (!c->comm) return false;
    ncclResult_t st;
    if (nccl_ok(s, ncclCommGetAsyncError(c->comm, &st), c->comm, "ncclCommGetAsyncError", peer) ||
        nccl_ok(s, st, c->comm, "setting up the communicator", peer))
        return false;
    if (st == ncclSuccess) return c->ready = true;
    if (c->engaged && wp_now() - c->since > s->connect_timeout)
        tp_layer_fail(&s->l, "nccl: the communicator with rank %d did not come up within %g s (--connect-timeout)",
                      peer, s->connect_timeout);
    return false;
}

/* A ready communicator with no error so far (polled every turn: a dead peer shows here). */
static void comm_check(nc_tp *s, nc_comm *c, int peer) {
    if (!c->ready) {
        (void)comm_ready(s, c, peer);
        return;
    }
    ncclResult_t st;
    if (!nccl_ok(s, ncclCommGetAsyncError(c->comm, &st), c->comm, "ncclCommGetAsyncError", peer))
        (void)nccl_ok(s, st, c->comm, "a transfer", peer);
}

/* After a group on a non-blocking communicator: 1 when NCCL has enqueued its operations on the
 * stream (only then may events be recorded behind them), 0 while it still works on it (asked
 * again next turn: no waiting here), -1 on an error or past --connect-timeout (the first
 * transfer of a direction also connects it: as long as a set-up may take). */
static int comm_enqueued(nc_tp *s, nc_comm *c, int peer) {
    ncclResult_t st;
    if (nccl_ok(s, ncclCommGetAsyncError(c->comm, &st), c->comm, "ncclCommGetAsyncError", peer) ||
        nccl_ok(s, st, c->comm, "enqueueing a transfer", peer))
        return -1;
    if (st == ncclSuccess) return 1;
    if (wp_now() - c->enq_since > s->connect_timeout) {
        tp_layer_fail(&s->l, "nccl: enqueueing a transfer with rank %d took over %g s (--connect-timeout)", peer,
                      s->connect_timeout);
        return -1;
    }
    return 0;
}

static void comm_abort(nc_comm *c) {
    if (c->comm) (void)ncclCommAbort(c->comm); /* failure path: nothing left to report to */
    c->comm = NULL;
    c->ready = false;
}

/* Orderly end after every operation completed; aborts when that does not finish in time. */
static void comm_end(nc_tp *s, nc_comm *c) {
    if (!c->comm) return;
    bool ok = cudaStreamSynchronize(c->stream) == cudaSuccess;
    if (ok) {
        ncclResult_t f = ncclCommFinalize(c->comm);
        ok = f == ncclSuccess || f == ncclInProgress; /* non-blocking: finishes in the background */
    }
    double t0 = wp_now();
    ncclResult_t st = ncclInProgress;
    while (ok && st == ncclInProgress && wp_now() - t0 < s->connect_timeout) {
        if (ncclCommGetAsyncError(c->comm, &st) != ncclSuccess) ok = false;
        if (st == ncclInProgress) usleep(100);
    }
    if (ok && st == ncclSuccess) {
        (void)ncclCommDestroy(c->comm);
        c->comm = NULL;
    } else {
        comm_abort(c);
    }
}

/* ---- requests ---- */

static int post_go_recv(nc_tp *s, int peer) {
    nc_peer *p = &s->peers[peer];
    nc_gobuf *g = calloc(1, sizeof *g);
    if (!g) {
        tp_layer_fail(&s->l, "out of memory for a go message");
        return -1;
    }
    if (tp_layer_post_inner(&s->l, TP_RECV, peer, WP_NCCL_GO_CHANNEL, &g->msg, sizeof g->msg, "nccl go", &g->req)) {
        free(g);
        return -1;
    }
    if (p->gb_tail) p->gb_tail->next = g;
    else p->gb_head = g;
    p->gb_tail = g;
    return 0;
}

/* First send to a peer: its communicator's id and set-up. */
static int send_setup(nc_tp *s, int peer) {
    nc_peer *p = &s->peers[peer];
    if (p->have_id) return 0;
    if (nccl_ok(s, ncclGetUniqueId(&p->id), NULL, "ncclGetUniqueId", peer)) return -1;
    p->have_id = true;
    return comm_begin(s, &p->out, p->id, 0, peer, false);
}

static int start(nc_tp *s, nc_req *q) {
    wp_request *r = q->base.outer;
    if (cuda_ok(s, cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming), "cudaEventCreateWithFlags")) return -1;
    if (r->kind == TP_SEND) {
        if (send_setup(s, r->peer)) return -1;
        q->desc.bytes = r->bytes;
        q->desc.id = s->peers[r->peer].id;
        snprintf(q->desc.label, sizeof q->desc.label, "%s", r->label);
    }
    /* A send announces itself; a receive awaits the announcement. */
    if (tp_layer_post_inner(&s->l, r->kind, r->peer, r->channel, &q->desc, sizeof q->desc, r->label, &q->desc_req))
        return -1;
    if (r->kind == TP_SEND && post_go_recv(s, r->peer)) return -1;
    q->phase = NC_DESC;
    return 0;
}

/* A receive's descriptor arrived: sizes must agree; the first one brings the communicator. */
static int recv_announced(nc_tp *s, nc_req *q) {
    wp_request *r = q->base.outer;
    q->desc.label[WP_LABEL_MAX - 1] = '\0';
    if (q->desc.bytes != r->bytes) {
        tp_layer_fail(&s->l, "rank %d sends %s (%llu bytes) on channel %d but rank %d expects %s (%zu bytes)", r->peer,
                      q->desc.label, (unsigned long long)q->desc.bytes, r->channel, s->l.base.rank, r->label, r->bytes);
        return -1;
    }
    nc_comm *in = &s->peers[r->peer].in;
    if (!in->comm && comm_begin(s, in, q->desc.id, 1, r->peer, true)) return -1;
    q->phase = NC_ISSUE;
    return 0;
}

/* A go from `peer`: the oldest announced send on its channel without a go gets it. */
static int go_arrived(nc_tp *s, int peer, nc_go g) {
    nc_peer *p = &s->peers[peer];
    if (g.magic != NC_GO_MAGIC || g.channel >= WP_NCCL_GO_CHANNEL) {
        tp_layer_fail(&s->l, "rank %d sent a malformed go message (channel %u)", peer, g.channel);
        return -1;
    }
    nc_req *q = NULL;
    for (tp_layer_req *lq = s->l.head; lq && !q; lq = lq->next) {
        const wp_request *r = lq->outer;
        if (r->kind == TP_SEND && r->peer == peer && r->channel == (int)g.channel && req_of(lq)->phase == NC_DESC &&
            !req_of(lq)->go)
            q = req_of(lq);
    }
    if (!q) {
        tp_layer_fail(&s->l, "rank %d answered a send on channel %u that this rank never announced", peer, g.channel);
        return -1;
    }
    if (!p->out.engaged) {
        p->out.engaged = true;
        p->out.since = wp_now();
    }
    q->go = true;
    q->go_next = NULL;
    if (p->go_tail) p->go_tail->go_next = q;
    else p->go_head = q;
    p->go_tail = q;
    return 0;
}

/* The go messages that arrived from `peer`, in arrival order. */
static void take_gos(nc_tp *s, int peer) {
    nc_peer *p = &s->peers[peer];
    while (p->gb_head && !s->l.fail.failed) {
        nc_gobuf *g = p->gb_head;
        if (tp_layer_test_inner(&s->l, &g->req) != 1 || go_arrived(s, peer, g->msg)) return;
        p->gb_head = g->next;
        if (!p->gb_head) p->gb_tail = NULL;
        free(g);
    }
}

static int queue_issue(nc_tp *s, nc_req *q) {
    if (s->n_issue == s->cap_issue) {
        int cap = s->cap_issue ? 2 * s->cap_issue : 16;
        nc_req **v = realloc(s->issue, (size_t)cap * sizeof *v);
        if (!v) {
            tp_layer_fail(&s->l, "out of memory issuing transfers");
            return -1;
        }
        s->issue = v;
        s->cap_issue = cap;
    }
    s->issue[s->n_issue++] = q;
    return 0;
}

/* Receives ready to go (descriptor in, communicator up), in post order: their go messages
 * leave now, in the order their ncclRecv will be issued. */
static int collect_recvs(nc_tp *s) {
    for (tp_layer_req *lq = s->l.head; lq; lq = lq->next) {
        nc_req *q = req_of(lq);
        wp_request *r = lq->outer;
        /* (a communicator still enqueuing its last group takes no new operation until done) */
        if (r->kind != TP_RECV || q->phase != NC_ISSUE || !comm_ready(s, &s->peers[r->peer].in, r->peer) ||
            s->peers[r->peer].in.enqueuing)
            continue;
        if (cuda_ok(s, cudaStreamWaitEvent(s->peers[r->peer].in.stream, kern_cuda_event(lq->ready), 0),
                    "cudaStreamWaitEvent"))
            return -1;
        q->go_msg = (nc_go){.channel = (uint32_t)r->channel, .magic = NC_GO_MAGIC};
        if (tp_layer_post_inner(&s->l, TP_SEND, r->peer, WP_NCCL_GO_CHANNEL, &q->go_msg, sizeof q->go_msg, "nccl go",
                                &q->go_req))
            return -1;
        if (queue_issue(s, q)) return -1;
    }
    return 0;
}

/* Sends whose go arrived, per peer in go order, once the communicator is up. */
static int collect_sends(nc_tp *s) {
    for (int p = 0; p < s->l.base.world; p++) {
        nc_peer *pe = &s->peers[p];
        if (!pe->go_head || !comm_ready(s, &pe->out, p) || pe->out.enqueuing) continue;
        for (nc_req *q = pe->go_head; q; q = q->go_next) {
            if (cuda_ok(s, cudaStreamWaitEvent(pe->out.stream, kern_cuda_event(q->base.ready), 0),
                        "cudaStreamWaitEvent"))
                return -1;
            if (queue_issue(s, q)) return -1;
        }
        pe->go_head = pe->go_tail = NULL;
    }
    return 0;
}

/* Requests whose group NCCL has finished enqueuing: an event behind each, in flight. Asks each
 * communicator once; what is still enqueuing waits for the next turn. */
static int finish_enqueues(nc_tp *s) {
    for (tp_layer_req *lq = s->l.head; lq; lq = lq->next) {
        nc_req *q = req_of(lq);
        wp_request *r = lq->outer;
        if (q->phase != NC_ENQUEUE) continue;
        nc_comm *c = r->kind == TP_SEND ? &s->peers[r->peer].out : &s->peers[r->peer].in;
        int e = comm_enqueued(s, c, r->peer);
        if (e < 0) return -1;
        if (e == 0) continue;
        if (cuda_ok(s, cudaEventRecord(q->done, c->stream), "cudaEventRecord")) return -1;
        q->phase = NC_FLIGHT;
        c->enqueuing--;
        tp_progress_locked(r, 0);
    }
    return 0;
}

/* One group for everything ready this turn; then an event behind each operation once NCCL has
 * enqueued it (finish_enqueues, this turn or a later one). */
static int issue_all(nc_tp *s) {
    s->n_issue = 0;
    if (collect_recvs(s) || collect_sends(s)) return -1;
    if (s->n_issue == 0) return 0;
    int rc = nccl_ok(s, ncclGroupStart(), NULL, "ncclGroupStart", -1);
    for (int i = 0; !rc && i < s->n_issue; i++) {
        wp_request *r = s->issue[i]->base.outer;
        nc_peer *p = &s->peers[r->peer];
        if (r->kind == TP_SEND)
            rc = nccl_ok(s, ncclSend(r->buf, r->bytes, ncclUint8, 1, p->out.comm, p->out.stream), p->out.comm, "ncclSend", r->peer);
        else
            rc = nccl_ok(s, ncclRecv(r->buf, r->bytes, ncclUint8, 0, p->in.comm, p->in.stream), p->in.comm, "ncclRecv", r->peer);
    }
    ncclResult_t end = ncclGroupEnd(); /* always closes the group opened above */
    if (rc || nccl_ok(s, end, NULL, "ncclGroupEnd", -1)) return -1;
    double now = wp_now();
    for (int i = 0; i < s->n_issue; i++) {
        nc_req *q = s->issue[i];
        wp_request *r = q->base.outer;
        nc_comm *c = r->kind == TP_SEND ? &s->peers[r->peer].out : &s->peers[r->peer].in;
        q->phase = NC_ENQUEUE;
        c->enqueuing++;
        c->enq_since = now;
    }
    return finish_enqueues(s);
}

/* ---- the layer's ops ---- */

/* On the compute context's thread, sync held. */
static int nc_admit(tp_layer *l, const wp_request *r, char *err, size_t errlen) {
    if (r->channel == WP_NCCL_GO_CHANNEL) {
        snprintf(err, errlen, "rank %d: %s: channel %d is reserved by the nccl transport", l->base.rank, r->label,
                 r->channel);
        return -1;
    }
    if (r->peer == l->base.rank) {
        snprintf(err, errlen, "rank %d: %s: the nccl transport does not send to its own rank", l->base.rank, r->label);
        return -1;
    }
    return 0;
}

/* The progress thread issues CUDA calls on the compute context's device. */
static void nc_thread_init(tp_layer *l) {
    nc_tp *s = nc_of(l);
    if (cudaSetDevice(s->device) != cudaSuccess)
        tp_layer_fail(l, "cuda: cudaSetDevice(%d) failed in the progress thread", s->device);
}

/* Before the requests' steps: the go messages that arrived, and every communicator's health. */
static void nc_turn_begin(tp_layer *l) {
    nc_tp *s = nc_of(l);
    for (int p = 0; p < l->base.world && !l->fail.failed; p++) {
        nc_peer *pe = &s->peers[p];
        take_gos(s, p);
        if (pe->out.comm) comm_check(s, &pe->out, p);
        if (pe->in.comm) comm_check(s, &pe->in, p);
    }
    if (!l->fail.failed) (void)finish_enqueues(s);
}

/* q's own steps this turn; 1 when complete. */
static int nc_advance(tp_layer *l, tp_layer_req *lq) {
    nc_tp *s = nc_of(l);
    nc_req *q = req_of(lq);
    if (q->phase == NC_START && start(s, q)) return -1;
    if (!q->desc_done) {
        int d = tp_layer_test_inner(l, &q->desc_req);
        if (d < 0) return -1;
        q->desc_done = d == 1;
        if (q->desc_done && lq->outer->kind == TP_RECV && recv_announced(s, q)) return -1;
    }
    if (q->phase != NC_FLIGHT || !q->desc_done) return 0;
    int g = tp_layer_test_inner(l, &q->go_req);
    if (g <= 0) return g;
    cudaError_t e = cudaEventQuery(q->done);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    return cuda_ok(s, e, "cudaEventQuery (a transfer)") ? -1 : 1;
}

/* After the requests' steps: issue what became ready. */
static void nc_turn_end(tp_layer *l) { (void)issue_all(nc_of(l)); }

static bool nc_device_busy(const tp_layer_req *lq) {
    nc_phase ph = ((const nc_req *)lq)->phase;
    return ph == NC_ENQUEUE || ph == NC_FLIGHT; /* NCCL holds the buffer from the group on */
}

/* Any failure: abort every communicator, so that no kernel stays blocked on a dead peer (the
 * layer then tells the peers through tcp). */
static void nc_failed(tp_layer *l) {
    nc_tp *s = nc_of(l);
    for (int p = 0; p < l->base.world; p++) {
        comm_abort(&s->peers[p].out);
        comm_abort(&s->peers[p].in);
    }
    s->abort_comms = true;
}

static void drain_tcp(wp_request **r) {
    char why[400];
    if (*r) (void)tp_wait(r, 5.0, why, sizeof why);
}

/* Outstanding tcp messages point into this transport's structs: fail them before freeing. */
static void nc_drain(tp_layer *l) {
    nc_tp *s = nc_of(l);
    char why[400];
    bool pending = l->head != NULL;
    for (int p = 0; p < l->base.world && s->peers; p++)
        for (nc_gobuf *g = s->peers[p].gb_head; g; g = g->next) {
            bool done;
            pending |= tp_test(&g->req, &done, why, sizeof why) != 0 || !done;
        }
    if (pending) {
        tp_abort(l->inner, "the nccl transport closed with transfers pending");
        s->abort_comms = true;
    }
    for (tp_layer_req *lq = l->head; lq; lq = lq->next) {
        drain_tcp(&req_of(lq)->desc_req);
        drain_tcp(&req_of(lq)->go_req);
    }
}

/* Teardown of plain CUDA objects: nothing to report a failure to. The ready event came from
 * the compute context, whose thread is busy elsewhere: destroyed here as the CUDA event it is. */
static void nc_release(tp_layer *l, tp_layer_req *lq) {
    (void)l;
    nc_req *q = req_of(lq);
    if (q->done) (void)cudaEventDestroy(q->done);
    if (lq->ready) (void)cudaEventDestroy(kern_cuda_event(lq->ready));
}

static void nc_destroy(tp_layer *l) {
    nc_tp *s = nc_of(l);
    for (int p = 0; p < l->base.world && s->peers; p++) {
        nc_peer *pe = &s->peers[p];
        for (nc_gobuf *g = pe->gb_head, *next; g; g = next) {
            next = g->next;
            drain_tcp(&g->req);
            free(g);
        }
        if (s->abort_comms) {
            comm_abort(&pe->out);
            comm_abort(&pe->in);
        } else {
            comm_end(s, &pe->out);
            comm_end(s, &pe->in);
        }
        if (pe->out.stream) (void)cudaStreamDestroy(pe->out.stream);
        if (pe->in.stream) (void)cudaStreamDestroy(pe->in.stream);
    }
    free(s->peers);
    free(s->issue);
}

static const tp_layer_ops nccl_ops = {
    .tp = TP_LAYER_TP_OPS("nccl"),
    .req_bytes = sizeof(nc_req),
    .post_verb = "posting",
    .admit = nc_admit,
    .thread_init = nc_thread_init,
    .turn_begin = nc_turn_begin,
    .advance = nc_advance,
    .turn_end = nc_turn_end,
    .device_busy = nc_device_busy,
    .failed = nc_failed,
    .drain = nc_drain,
    .release = nc_release,
    .destroy = nc_destroy,
};

bool tp_is_nccl(const wp_transport *t) { return t && t->ops == &nccl_ops.tp; }

/* ---- opening: one GPU per rank ---- */

typedef struct {
    char host[64];
    unsigned char uuid[16];
    int device;
    char name[64];
} nc_gpu;

static int my_gpu(int device, nc_gpu *g, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cuda: cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
        return 1;
    }
    if (gethostname(g->host, sizeof g->host - 1) != 0) snprintf(g->host, sizeof g->host, "?");
    memcpy(g->uuid, p.uuid.bytes, sizeof g->uuid);
    g->device = device;
    snprintf(g->name, sizeof g->name, "%.63s", p.name);
    return 0;
}

/* Every rank learns every rank's GPU (one broadcast per rank) and all refuse a shared one. */
static int check_gpus(wp_control *ctl, int rank, int world, int device, char *err, size_t errlen) {
    nc_gpu mine;
    if (my_gpu(device, &mine, err, errlen)) return 1;
    nc_gpu *all = calloc((size_t)world, sizeof *all);
    if (!all) return snprintf(err, errlen, "rank %d: out of memory", rank), 1;
    int rc = 0;
    for (int r = 0; r < world && !rc; r++) {
        if (r == rank) all[r] = mine;
        rc = ctl_broadcast(ctl, r, &all[r], sizeof all[r], err, errlen);
    }
    for (int a = 0; a < world && !rc; a++)
        for (int b = a + 1; b < world && !rc; b++)
            if (strcmp(all[a].host, all[b].host) == 0 && memcmp(all[a].uuid, all[b].uuid, 16) == 0) {
                snprintf(err, errlen,
                         "--transport nccl: ranks %d and %d both use GPU %d (%s) of %s, and NCCL cannot put two ranks on "
                         "one GPU; give each rank its own GPU, or use --transport local to run the ranks as threads "
                         "sharing it",
                         a, b, all[a].device, all[a].name, all[a].host);
                rc = 2;
            }
    free(all);
    return rc;
}

int tp_nccl_open(wp_transport *wire, wp_control *ctl, wp_kern *compute, double connect_timeout, wp_transport **out,
                 char *err, size_t errlen) {
    *out = NULL;
    int rank = tp_rank(wire), world = tp_world(wire);
    if (kern_kind(compute) != WP_BACKEND_CUDA) {
        snprintf(err, errlen, "--transport nccl needs --backend cuda");
        return 2;
    }
    int rc = check_gpus(ctl, rank, world, kern_device(compute), err, errlen);
    if (rc) return rc;
    nc_tp *s = calloc(1, sizeof *s);
    if (!s || tp_layer_init(&s->l, &nccl_ops, wire, compute) != 0) {
        free(s);
        return snprintf(err, errlen, "rank %d: out of memory for the nccl transport", rank), 1;
    }
    s->l.inner_payload_is_overhead = true; /* tcp carries the descriptors and go messages */
    s->device = kern_device(compute);
    s->connect_timeout = connect_timeout;
    s->peers = calloc((size_t)world, sizeof *s->peers);
    if (!s->peers || tp_layer_start(&s->l) != 0) {
        snprintf(err, errlen, "rank %d: nccl transport: %s", rank, s->peers ? "cannot start its progress thread" : "out of memory");
        tp_layer_close(&s->l.base);
        return 1;
    }
    *out = &s->l.base;
    return 0;
}
