/* The thin layer over libibverbs (ib_ops.h): one device context, protection domain,
 * completion channel and completion queue per transport; reliable-connected queue pairs
 * brought to RTS from the peer's address (LID, or GID for RoCE / global routing). Memory is
 * registered host memory (the staging buffers of ib_proto.h). Nothing here knows about
 * chunks, credits or requests. */
#include "ib_ops.h"

#if WP_HAVE_IBVERBS

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define VERBS_CQ_DEPTH 16384

struct ib_mr {
    struct ibv_mr *mr;
};

struct ib_qp {
    ib_dev *dev;
    struct ibv_qp *qp;
    void *ctx;
    int depth;
    ib_qp *next;
};

struct ib_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    int wake_fd;
    int port, gid_index;
    struct ibv_port_attr port_attr;
    union ibv_gid gid;
    bool use_gid;
    ib_qp *qps; /* to map a completion's qp_num to its queue pair */
    int cq_depth; /* the completion queue's size (at most VERBS_CQ_DEPTH, or the device's limit) */
    int cq_used;  /* entries the queue pairs can have outstanding together */
    bool armed;
};

static const char *verbs_status_str(int status) { return ibv_wc_status_str((enum ibv_wc_status)status); }

/* The device named cfg->device, or the first. IB_NO_DEVICE when there is none: a kernel
 * without RDMA support answers ENOSYS, a machine without cards an empty list. */
static wp_result pick_device(const ib_dev_cfg *cfg, struct ibv_context **out, char *err, size_t errlen) {
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        snprintf(err, errlen, "ibv_get_device_list: %s (no RDMA device or no kernel support for one)",
                 errno ? strerror(errno) : "no devices");
        return IB_NO_DEVICE;
    }
    struct ibv_device *dev = NULL;
    char names[256] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (used + strlen(name) + 3 < sizeof names) used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", name);
        if (!dev && (!cfg->device[0] || strcmp(cfg->device, name) == 0)) dev = list[i];
    }
    wp_result rc = WP_OK;
    if (n == 0) {
        snprintf(err, errlen, "ibv_get_device_list found no RDMA device");
        rc = IB_NO_DEVICE;
    } else if (!dev) {
        snprintf(err, errlen, "--ib-device %s: no such RDMA device (there are: %s)", cfg->device, names);
        rc = IB_NO_DEVICE;
    } else if (!(*out = ibv_open_device(dev))) {
        snprintf(err, errlen, "ibv_open_device %s: %s", ibv_get_device_name(dev), strerror(errno));
        rc = WP_FAILED;
    }
    ibv_free_device_list(list);
    return rc;
}

static wp_result query_port(ib_dev *d, const ib_dev_cfg *cfg, char *err, size_t errlen) {
    d->port = cfg->port;
    d->gid_index = cfg->gid_index;
    if (ibv_query_port(d->ctx, (uint8_t)cfg->port, &d->port_attr) != 0) {
        snprintf(err, errlen, "--ib-port %d: ibv_query_port: %s", cfg->port, strerror(errno));
        return WP_FAILED;
    }
    if (d->port_attr.state != IBV_PORT_ACTIVE) {
        snprintf(err, errlen, "--ib-port %d is %s, not active", cfg->port, ibv_port_state_str(d->port_attr.state));
        return WP_FAILED;
    }
    /* RoCE has no LIDs: addressing is by GID. On InfiniBand a GID is used when given. */
    d->use_gid = d->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || cfg->gid_index > 0;
    if (d->use_gid && ibv_query_gid(d->ctx, (uint8_t)cfg->port, cfg->gid_index, &d->gid) != 0) {
        snprintf(err, errlen, "--ib-gid-index %d: ibv_query_gid: %s", cfg->gid_index, strerror(errno));
        return WP_FAILED;
    }
    return WP_OK;
}

static wp_result make_queues(ib_dev *d, char *err, size_t errlen) {
    if (!(d->pd = ibv_alloc_pd(d->ctx))) {
        snprintf(err, errlen, "ibv_alloc_pd: %s", strerror(errno));
        return WP_FAILED;
    }
    if (!(d->channel = ibv_create_comp_channel(d->ctx))) {
        snprintf(err, errlen, "ibv_create_comp_channel: %s", strerror(errno));
        return WP_FAILED;
    }
    int flags = fcntl(d->channel->fd, F_GETFL);
    if (flags < 0 || fcntl(d->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "fcntl on the completion channel: %s", strerror(errno));
        return WP_FAILED;
    }
    struct ibv_device_attr attr;
    if (ibv_query_device(d->ctx, &attr) != 0) {
        snprintf(err, errlen, "ibv_query_device: %s", strerror(errno));
        return WP_FAILED;
    }
    d->cq_depth = attr.max_cqe < VERBS_CQ_DEPTH ? attr.max_cqe : VERBS_CQ_DEPTH;
    if (!(d->cq = ibv_create_cq(d->ctx, d->cq_depth, NULL, d->channel, 0))) {
        snprintf(err, errlen, "ibv_create_cq (%d entries): %s", d->cq_depth, strerror(errno));
        return WP_FAILED;
    }
    if ((d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        return WP_FAILED;
    }
    return WP_OK;
}

static void verbs_close(ib_dev *d) {
    if (d->cq) ibv_destroy_cq(d->cq);
    if (d->channel) ibv_destroy_comp_channel(d->channel);
    if (d->pd) ibv_dealloc_pd(d->pd);
    if (d->ctx) ibv_close_device(d->ctx);
    if (d->wake_fd >= 0) close(d->wake_fd);
    free(d);
}

static wp_result verbs_open(const ib_dev_cfg *cfg, ib_dev **out, char *desc, size_t desclen, char *err, size_t errlen) {
    ib_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    d->wake_fd = -1;
    wp_result rc = pick_device(cfg, &d->ctx, err, errlen);
    if (rc == 0 && (query_port(d, cfg, err, errlen) != 0 || make_queues(d, err, errlen) != 0)) rc = WP_FAILED;
    if (rc != 0) {
        verbs_close(d);
        return rc;
    }
    const char *layer = d->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
    char where[64];
    if (d->use_gid) snprintf(where, sizeof where, "GID index %d", d->gid_index);
    else snprintf(where, sizeof where, "LID %u", d->port_attr.lid);
    snprintf(desc, desclen, "device %s port %d (%s, %s, MTU %d), registered pinned host staging buffers "
             "(no dma-buf registration of GPU memory: GPU buffers arrive through host staging)",
             ibv_get_device_name(d->ctx->device), d->port, layer, where, 128 << d->port_attr.active_mtu);
    *out = d;
    return WP_OK;
}

static wp_result verbs_reg_mr(ib_dev *d, void *addr, size_t len, ib_mr **out, uint32_t *rkey, char *err, size_t errlen) {
    ib_mr *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    m->mr = ibv_reg_mr(d->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!m->mr) {
        snprintf(err, errlen, "ibv_reg_mr of %zu bytes: %s (locked-memory limit: ulimit -l)", len, strerror(errno));
        free(m);
        return WP_FAILED;
    }
    *rkey = m->mr->rkey;
    *out = m;
    return WP_OK;
}

static void verbs_dereg_mr(ib_mr *m) {
    ibv_dereg_mr(m->mr);
    free(m);
}

static wp_result verbs_create_qp(ib_dev *d, void *ctx, int sq_depth, int rq_depth, ib_qp **out, ib_addr *local, char *err,
                                 size_t errlen) {
    if (d->cq_used + sq_depth + rq_depth > d->cq_depth) {
        snprintf(err, errlen, "the completion queue (%d entries) cannot serve another queue pair of %d", d->cq_depth,
                 sq_depth + rq_depth);
        return WP_FAILED;
    }
    ib_qp *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "out of memory");
        return WP_FAILED;
    }
    struct ibv_qp_init_attr init = {.send_cq = d->cq, .recv_cq = d->cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = (uint32_t)sq_depth, .max_recv_wr = (uint32_t)rq_depth,
                                            .max_send_sge = 1, .max_recv_sge = 1}};
    if (!(q->qp = ibv_create_qp(d->pd, &init))) {
        snprintf(err, errlen, "ibv_create_qp (%d send, %d receive entries): %s", sq_depth, rq_depth, strerror(errno));
        free(q);
        return WP_FAILED;
    }
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)d->port,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    if (ibv_modify_qp(q->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        snprintf(err, errlen, "ibv_modify_qp to INIT: %s", strerror(errno));
        ibv_destroy_qp(q->qp);
        free(q);
        return WP_FAILED;
    }
    q->dev = d;
    q->ctx = ctx;
    q->depth = sq_depth + rq_depth;
    d->cq_used += q->depth;
    q->next = d->qps;
    d->qps = q;
    *local = (ib_addr){.qpn = q->qp->qp_num, .psn = q->qp->qp_num & 0xffffff, .lid = d->port_attr.lid,
                       .port = (uint8_t)d->port, .mtu = (uint8_t)d->port_attr.active_mtu};
    if (d->use_gid) memcpy(local->gid, d->gid.raw, 16);
    *out = q;
    return WP_OK;
}

static bool gid_set(const uint8_t *gid) {
    for (int i = 0; i < 16; i++)
        if (gid[i]) return true;
    return false;
}

static wp_result verbs_connect_qp(ib_qp *q, const ib_addr *r, char *err, size_t errlen) {
    ib_dev *d = q->dev;
    enum ibv_mtu mtu = r->mtu < d->port_attr.active_mtu ? (enum ibv_mtu)r->mtu : d->port_attr.active_mtu;
    struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = r->qpn, .rq_psn = r->psn,
                              .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
                              .ah_attr = {.dlid = r->lid, .sl = 0, .src_path_bits = 0, .port_num = (uint8_t)d->port}};
    if (d->use_gid || gid_set(r->gid)) {
        rtr.ah_attr.is_global = 1;
        memcpy(rtr.ah_attr.grh.dgid.raw, r->gid, 16);
        rtr.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        rtr.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(q->qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        snprintf(err, errlen, "ibv_modify_qp to RTR (remote queue pair 0x%x, LID %u): %s", r->qpn, r->lid,
                 strerror(errno));
        return WP_FAILED;
    }
    /* timeout 14 (~67 ms) x retry_cnt 7: a dead peer surfaces as an error completion within
     * about half a second of retries; rnr_retry 7 = retry forever on "receiver not ready". */
    struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                              .sq_psn = q->qp->qp_num & 0xffffff, .max_rd_atomic = 1};
    if (ibv_modify_qp(q->qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                       IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        snprintf(err, errlen, "ibv_modify_qp to RTS: %s", strerror(errno));
        return WP_FAILED;
    }
    return WP_OK;
}

static void verbs_destroy_qp(ib_qp *q) {
    for (ib_qp **p = &q->dev->qps; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    q->dev->cq_used -= q->depth;
    ibv_destroy_qp(q->qp);
    free(q);
}

static wp_result verbs_post_write(ib_qp *q, uint64_t wr_id, ib_mr *mr, const void *src, size_t len, uint64_t raddr,
                                  uint32_t rkey, bool with_imm, uint32_t imm, char *err, size_t errlen) {
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = (uint32_t)len, .lkey = mr->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0,
                             .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm),
                             .wr = {.rdma = {.remote_addr = raddr, .rkey = rkey}}};
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc != 0) {
        snprintf(err, errlen, "ibv_post_send (RDMA write of %zu bytes): %s", len, strerror(rc));
        return WP_FAILED;
    }
    return WP_OK;
}

static wp_result verbs_post_recv(ib_qp *q, uint64_t wr_id, char *err, size_t errlen) {
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = NULL, .num_sge = 0}, *bad = NULL;
    int rc = ibv_post_recv(q->qp, &wr, &bad);
    if (rc != 0) {
        snprintf(err, errlen, "ibv_post_recv: %s", strerror(rc));
        return WP_FAILED;
    }
    return WP_OK;
}

static void *qp_ctx_of(ib_dev *d, uint32_t qp_num) {
    for (ib_qp *q = d->qps; q; q = q->next)
        if (q->qp->qp_num == qp_num) return q->ctx;
    return NULL;
}

static int verbs_poll_cq(ib_dev *d, ib_wc *out, int max, char *err, size_t errlen) {
    struct ibv_wc wc[64];
    if (max > 64) max = 64;
    int n = ibv_poll_cq(d->cq, max, wc);
    if (n < 0) {
        snprintf(err, errlen, "ibv_poll_cq returned %d", n);
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        void *ctx = qp_ctx_of(d, wc[i].qp_num);
        if (!ctx) continue; /* a queue pair destroyed meanwhile */
        /* A failed completion's opcode is undefined: the protocol tells by its wr_id. */
        bool recv = wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
        out[k++] = (ib_wc){.wr_id = wc[i].wr_id, .qp_ctx = ctx, .opcode = recv ? IB_WC_RECV_IMM : IB_WC_WRITE,
                           .status = (int)wc[i].status, .imm = recv ? ntohl(wc[i].imm_data) : 0};
    }
    return k;
}

/* Arm the queue, then sleep on the completion channel and the wake eventfd. A completion
 * that came between the caller's last empty poll and the arming is caught by one more poll
 * (ibv_req_notify_cq only reports completions added after it). */
static void verbs_wait(ib_dev *d, double timeout_s) {
    if (!d->armed) {
        if (ibv_req_notify_cq(d->cq, 0) != 0) return;
        d->armed = true;
        return; /* the caller polls once more before it sleeps here */
    }
    struct pollfd pf[2] = {{.fd = d->channel->fd, .events = POLLIN}, {.fd = d->wake_fd, .events = POLLIN}};
    int ms = (int)(timeout_s * 1000) + 1;
    if (poll(pf, 2, ms) <= 0) return;
    if (pf[0].revents & POLLIN) {
        struct ibv_cq *cq;
        void *ctx;
        if (ibv_get_cq_event(d->channel, &cq, &ctx) == 0) {
            ibv_ack_cq_events(cq, 1);
            d->armed = false;
        }
    }
    if (pf[1].revents & POLLIN) {
        uint64_t v;
        if (read(d->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN) return;
    }
}

static void verbs_wake(ib_dev *d) {
    uint64_t one = 1;
    if (write(d->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN) return;
}

const ib_ops ib_hw_ops = {
    .name = "verbs",
    .open = verbs_open,
    .close = verbs_close,
    .reg_mr = verbs_reg_mr,
    .dereg_mr = verbs_dereg_mr,
    .create_qp = verbs_create_qp,
    .connect_qp = verbs_connect_qp,
    .destroy_qp = verbs_destroy_qp,
    .post_write = verbs_post_write,
    .post_recv = verbs_post_recv,
    .poll_cq = verbs_poll_cq,
    .wait = verbs_wait,
    .wake = verbs_wake,
    .status_str = verbs_status_str,
};

#endif
