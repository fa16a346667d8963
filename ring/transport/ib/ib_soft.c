/* The software RDMA fabric (see ib_soft.h). One mutex guards the whole fabric; the wire
 * thread carries out writes in posting order. */
#include "ib_soft.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

enum { SOFT_OK = 0, SOFT_INJECTED, SOFT_REMOTE_GONE, SOFT_REMOTE_ACCESS, SOFT_RNR, SOFT_NSTATUS };

struct ib_mr {
    ib_dev *dev;
    char *addr;
    size_t len;
    uint32_t rkey;
    ib_mr *next;
};

struct ib_qp {
    ib_dev *dev;
    void *ctx;
    uint32_t qpn, remote_qpn;
    bool connected;
    bool stalled;             /* a write vanished: every later one does too (a dead link) */
    long recvs_posted;        /* receives posted and not yet consumed */
    uint64_t *recv_ids;       /* their wr_ids, FIFO ring of rq_depth */
    int rq_depth, recv_head;
    ib_qp *next;
};

typedef struct soft_cq {
    ib_wc *wc;
    int cap, head, n;
} soft_cq;

struct ib_dev {
    ib_soft_fabric *fab;
    int rank;
    soft_cq cq;
    bool woken;
    long writes; /* for the fault counters */
    ib_dev *next;
};

/* A write on the wire, or a send completion held back. */
typedef struct soft_op {
    struct soft_op *next;
    ib_qp *qp;
    uint64_t wr_id;
    const char *src;
    size_t len;
    uint64_t raddr;
    uint32_t rkey, imm;
    bool with_imm, drop, fail;
    uint64_t src_hash; /* of the source bytes when posted: they must not change before completion */
    double at;      /* not before */
    bool cqe_only;  /* a held-back send completion */
    int status;
} soft_op;

struct ib_soft_fabric {
    wp_sync sync;
    pthread_t wire;
    bool stop;
    soft_op *head, *tail;   /* writes, posting order */
    soft_op *chead, *ctail; /* held-back send completions, in order */
    ib_dev *devs;
    ib_qp *qps;
    ib_mr *mrs;
    uint32_t next_qpn, next_rkey;
    ib_soft_faults faults;
    ib_soft_stats stats;
};

static const char *soft_status_str(int status) {
    static const char *names[SOFT_NSTATUS] = {"success", "error injected by the test fabric",
                                              "remote queue pair gone (transport retry exceeded)",
                                              "remote access error (bad rkey or address)",
                                              "no receive posted (receiver not ready)"};
    return status >= 0 && status < SOFT_NSTATUS ? names[status] : "unknown status";
}

static void push_op(soft_op **head, soft_op **tail, soft_op *o) {
    o->next = NULL;
    if (*tail) (*tail)->next = o;
    else *head = o;
    *tail = o;
}

/* Completion into a device's queue (fabric lock held). The ring grows as needed (real
 * queues have a fixed size, which the protocol's accounting respects); when memory runs out
 * the completion is lost, which the protocol's completion timeout then reports. */
static void cq_push(ib_dev *d, const ib_wc *wc) {
    soft_cq *q = &d->cq;
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 256;
        ib_wc *w = malloc((size_t)cap * sizeof *w);
        if (!w) return;
        for (int i = 0; i < q->n; i++) w[i] = q->wc[(q->head + i) % q->cap];
        free(q->wc);
        q->wc = w;
        q->cap = cap;
        q->head = 0;
    }
    q->wc[(q->head + q->n) % q->cap] = *wc;
    q->n++;
    pthread_cond_broadcast(&d->fab->sync.cv);
}

/* A fingerprint of the bytes, eight at a time (every write is hashed twice: keep it cheap). */
static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* The sender's completion: the source must still hold what was posted (the protocol may
 * reuse a staging buffer only after this completion). */
static void complete_send(ib_soft_fabric *F, soft_op *o) {
    if (o->len && hash_bytes(o->src, o->len) != o->src_hash) F->stats.src_changed++;
    cq_push(o->qp->dev, &(ib_wc){.wr_id = o->wr_id, .qp_ctx = o->qp->ctx, .opcode = IB_WC_WRITE, .status = o->status});
    free(o);
}

static ib_qp *find_qp(ib_soft_fabric *F, uint32_t qpn) {
    for (ib_qp *q = F->qps; q; q = q->next)
        if (q->qpn == qpn) return q;
    return NULL;
}

static ib_mr *find_mr(ib_dev *d, uint32_t rkey, uint64_t addr, size_t len) {
    for (ib_mr *m = d->fab->mrs; m; m = m->next)
        if (m->dev == d && m->rkey == rkey && addr >= (uint64_t)(uintptr_t)m->addr &&
            addr + len <= (uint64_t)(uintptr_t)m->addr + m->len)
            return m;
    return NULL;
}

/* Carry out one write: data into the remote region, a receive completion there, then the
 * sender's completion (now or held back). */
static void execute(ib_soft_fabric *F, soft_op *o) {
    ib_qp *rq = find_qp(F, o->qp->remote_qpn);
    int status = SOFT_OK;
    if (o->drop) {
        free(o);
        return;
    }
    if (o->fail) status = SOFT_INJECTED;
    else if (!rq || !rq->connected) status = SOFT_REMOTE_GONE;
    else if (o->len && !find_mr(rq->dev, o->rkey, o->raddr, o->len)) status = SOFT_REMOTE_ACCESS;
    else if (o->with_imm && rq->recvs_posted == 0) status = SOFT_RNR;
    if (status == SOFT_OK) {
        if (o->len) memcpy((char *)(uintptr_t)o->raddr, o->src, o->len);
        if (o->with_imm) {
            uint64_t id = rq->recv_ids[rq->recv_head];
            rq->recv_head = (rq->recv_head + 1) % rq->rq_depth;
            rq->recvs_posted--;
            cq_push(rq->dev, &(ib_wc){.wr_id = id, .qp_ctx = rq->ctx, .opcode = IB_WC_RECV_IMM, .imm = o->imm});
        }
    }
    o->status = status;
    if (F->faults.send_cqe_delay_s > 0 && status == SOFT_OK) {
        o->cqe_only = true;
        o->at = wp_now() + F->faults.send_cqe_delay_s;
        push_op(&F->chead, &F->ctail, o);
        return;
    }
    complete_send(F, o);
}

static void *wire_main(void *arg) {
    ib_soft_fabric *F = arg;
    pthread_mutex_lock(&F->sync.mu);
    while (!F->stop) {
        double now = wp_now(), next = now + 1.0;
        if (F->chead && F->chead->at <= now) {
            soft_op *o = F->chead;
            F->chead = o->next;
            if (!F->chead) F->ctail = NULL;
            complete_send(F, o);
            continue;
        }
        if (F->head && F->head->at <= now) {
            soft_op *o = F->head;
            F->head = o->next;
            if (!F->head) F->tail = NULL;
            execute(F, o);
            continue;
        }
        if (F->chead && F->chead->at < next) next = F->chead->at;
        if (F->head && F->head->at < next) next = F->head->at;
        wp_sync_wait_until(&F->sync, next);
    }
    pthread_mutex_unlock(&F->sync.mu);
    return NULL;
}

wp_result ib_soft_fabric_create(ib_soft_fabric **out, char *err, size_t errlen) {
    ib_soft_fabric *F = calloc(1, sizeof *F);
    if (!F || wp_sync_init(&F->sync) != 0) {
        free(F);
        snprintf(err, errlen, "soft RDMA fabric: out of memory");
        return WP_FAILED;
    }
    F->faults.rank = -1;
    F->next_qpn = 0x100;
    F->next_rkey = 0x1000;
    if (pthread_create(&F->wire, NULL, wire_main, F) != 0) {
        wp_sync_destroy(&F->sync);
        free(F);
        snprintf(err, errlen, "soft RDMA fabric: cannot start the wire thread");
        return WP_FAILED;
    }
    *out = F;
    return WP_OK;
}

void ib_soft_set_faults(ib_soft_fabric *F, const ib_soft_faults *faults) {
    pthread_mutex_lock(&F->sync.mu);
    F->faults = *faults;
    for (ib_dev *d = F->devs; d; d = d->next) d->writes = 0;
    pthread_mutex_unlock(&F->sync.mu);
}

void ib_soft_stats_get(ib_soft_fabric *F, ib_soft_stats *s) {
    pthread_mutex_lock(&F->sync.mu);
    *s = F->stats;
    pthread_mutex_unlock(&F->sync.mu);
}

static void free_ops(soft_op *o) {
    while (o) {
        soft_op *n = o->next;
        free(o);
        o = n;
    }
}

void ib_soft_fabric_destroy(ib_soft_fabric *F) {
    if (!F) return;
    pthread_mutex_lock(&F->sync.mu);
    F->stop = true;
    pthread_cond_broadcast(&F->sync.cv);
    pthread_mutex_unlock(&F->sync.mu);
    pthread_join(F->wire, NULL);
    free_ops(F->head);
    free_ops(F->chead);
    wp_sync_destroy(&F->sync);
    free(F);
}

/* ---- the ops ---- */

static wp_result soft_open(const ib_dev_cfg *cfg, ib_dev **out, char *desc, size_t desclen, char *err, size_t errlen) {
    ib_soft_fabric *F = cfg->soft_fabric;
    if (!F) {
        snprintf(err, errlen, "no soft RDMA fabric given");
        return IB_NO_DEVICE;
    }
    ib_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    d->fab = F;
    d->rank = cfg->soft_rank;
    pthread_mutex_lock(&F->sync.mu);
    d->next = F->devs;
    F->devs = d;
    pthread_mutex_unlock(&F->sync.mu);
    snprintf(desc, desclen, "soft RDMA fabric (in-process test layer), device of rank %d, host memory", d->rank);
    *out = d;
    return WP_OK;
}

static void soft_close(ib_dev *d) {
    ib_soft_fabric *F = d->fab;
    pthread_mutex_lock(&F->sync.mu);
    for (ib_dev **p = &F->devs; *p; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            break;
        }
    pthread_mutex_unlock(&F->sync.mu);
    free(d->cq.wc);
    free(d);
}

static wp_result soft_reg_mr(ib_dev *d, void *addr, size_t len, ib_mr **out, uint32_t *rkey, char *err, size_t errlen) {
    ib_mr *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    ib_soft_fabric *F = d->fab;
    pthread_mutex_lock(&F->sync.mu);
    *m = (ib_mr){.dev = d, .addr = addr, .len = len, .rkey = F->next_rkey++, .next = F->mrs};
    F->mrs = m;
    *rkey = m->rkey;
    pthread_mutex_unlock(&F->sync.mu);
    *out = m;
    return WP_OK;
}

static void soft_dereg_mr(ib_mr *m) {
    ib_soft_fabric *F = m->dev->fab;
    pthread_mutex_lock(&F->sync.mu);
    for (ib_mr **p = &F->mrs; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    pthread_mutex_unlock(&F->sync.mu);
    free(m);
}

static wp_result soft_create_qp(ib_dev *d, void *ctx, int sq_depth, int rq_depth, ib_qp **out, ib_addr *local, char *err,
                                size_t errlen) {
    (void)sq_depth;
    ib_qp *q = calloc(1, sizeof *q);
    uint64_t *ids = calloc((size_t)rq_depth, sizeof *ids);
    if (!q || !ids) {
        free(q);
        free(ids);
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    ib_soft_fabric *F = d->fab;
    pthread_mutex_lock(&F->sync.mu);
    *q = (ib_qp){.dev = d, .ctx = ctx, .qpn = F->next_qpn++, .recv_ids = ids, .rq_depth = rq_depth, .next = F->qps};
    F->qps = q;
    pthread_mutex_unlock(&F->sync.mu);
    *local = (ib_addr){.qpn = q->qpn, .psn = 0, .lid = (uint16_t)d->rank, .port = 1};
    *out = q;
    return WP_OK;
}

static wp_result soft_connect_qp(ib_qp *q, const ib_addr *remote, char *err, size_t errlen) {
    ib_soft_fabric *F = q->dev->fab;
    pthread_mutex_lock(&F->sync.mu);
    bool known = find_qp(F, remote->qpn) != NULL;
    if (known) {
        q->remote_qpn = remote->qpn;
        q->connected = true;
    }
    pthread_mutex_unlock(&F->sync.mu);
    if (!known) snprintf(err, errlen, "no queue pair 0x%x on the fabric", remote->qpn);
    return known ? 0 : -1;
}

/* Drop the queue pair's writes still on the wire (its memory goes away with it). */
static void forget_ops(soft_op **head, soft_op **tail, ib_qp *q) {
    soft_op *prev = NULL;
    for (soft_op *o = *head; o;) {
        soft_op *next = o->next;
        if (o->qp == q) {
            if (prev) prev->next = next;
            else *head = next;
            if (*tail == o) *tail = prev;
            free(o);
        } else {
            prev = o;
        }
        o = next;
    }
}

static void soft_destroy_qp(ib_qp *q) {
    ib_soft_fabric *F = q->dev->fab;
    pthread_mutex_lock(&F->sync.mu);
    forget_ops(&F->head, &F->tail, q);
    forget_ops(&F->chead, &F->ctail, q);
    for (ib_qp **p = &F->qps; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    pthread_mutex_unlock(&F->sync.mu);
    free(q->recv_ids);
    free(q);
}

static bool fault_applies(const ib_soft_faults *x, const ib_dev *d) { return x->rank < 0 || x->rank == d->rank; }

static wp_result soft_post_write(ib_qp *q, uint64_t wr_id, ib_mr *mr, const void *src, size_t len, uint64_t raddr,
                                 uint32_t rkey, bool with_imm, uint32_t imm, char *err, size_t errlen) {
    if (len && (mr->dev != q->dev || (const char *)src < mr->addr || (const char *)src + len > mr->addr + mr->len)) {
        snprintf(err, errlen, "local protection error: source not inside the registered region");
        return WP_FAILED;
    }
    soft_op *o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    ib_soft_fabric *F = q->dev->fab;
    pthread_mutex_lock(&F->sync.mu);
    wp_result rc = WP_OK;
    if (!q->connected) {
        snprintf(err, errlen, "queue pair 0x%x is not connected", q->qpn);
        rc = WP_FAILED;
        free(o);
    } else {
        *o = (soft_op){.qp = q, .wr_id = wr_id, .src = src, .len = len, .raddr = raddr, .rkey = rkey, .imm = imm,
                       .with_imm = with_imm, .at = wp_now() + F->faults.write_delay_s};
        if (fault_applies(&F->faults, q->dev)) {
            long n = ++q->dev->writes;
            o->drop = n == F->faults.drop_nth || q->stalled;
            o->fail = n == F->faults.fail_nth;
            /* Reliable connection: after a lost or failed write nothing more gets through. */
            q->stalled |= o->drop || o->fail;
        }
        if (len) o->src_hash = hash_bytes(src, len);
        F->stats.writes++;
        F->stats.imm_writes += with_imm;
        F->stats.credit_writes += with_imm && len == 0;
        if (len > F->stats.max_write) F->stats.max_write = len;
        push_op(&F->head, &F->tail, o);
        pthread_cond_broadcast(&F->sync.cv);
    }
    pthread_mutex_unlock(&F->sync.mu);
    return rc;
}

static wp_result soft_post_recv(ib_qp *q, uint64_t wr_id, char *err, size_t errlen) {
    ib_soft_fabric *F = q->dev->fab;
    pthread_mutex_lock(&F->sync.mu);
    wp_result rc = WP_OK;
    if (q->recvs_posted >= q->rq_depth) {
        snprintf(err, errlen, "receive queue of %d entries is full", q->rq_depth);
        rc = WP_FAILED;
    } else {
        q->recv_ids[(q->recv_head + q->recvs_posted) % q->rq_depth] = wr_id;
        q->recvs_posted++;
    }
    pthread_mutex_unlock(&F->sync.mu);
    return rc;
}

static int soft_poll_cq(ib_dev *d, ib_wc *wc, int max, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    pthread_mutex_lock(&d->fab->sync.mu);
    int n = 0;
    soft_cq *q = &d->cq;
    while (n < max && q->n > 0) {
        wc[n++] = q->wc[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
    }
    pthread_mutex_unlock(&d->fab->sync.mu);
    return n;
}

static void soft_wait(ib_dev *d, double timeout_s) {
    ib_soft_fabric *F = d->fab;
    double deadline = wp_now() + timeout_s;
    pthread_mutex_lock(&F->sync.mu);
    while (d->cq.n == 0 && !d->woken && wp_now() < deadline) wp_sync_wait_until(&F->sync, deadline);
    d->woken = false;
    pthread_mutex_unlock(&F->sync.mu);
}

static void soft_wake(ib_dev *d) {
    pthread_mutex_lock(&d->fab->sync.mu);
    d->woken = true;
    pthread_cond_broadcast(&d->fab->sync.cv);
    pthread_mutex_unlock(&d->fab->sync.mu);
}

const ib_ops ib_soft_ops = {
    .name = "soft",
    .open = soft_open,
    .close = soft_close,
    .reg_mr = soft_reg_mr,
    .dereg_mr = soft_dereg_mr,
    .create_qp = soft_create_qp,
    .connect_qp = soft_connect_qp,
    .destroy_qp = soft_destroy_qp,
    .post_write = soft_post_write,
    .post_recv = soft_post_recv,
    .poll_cq = soft_poll_cq,
    .wait = soft_wait,
    .wake = soft_wake,
    .status_str = soft_status_str,
};
