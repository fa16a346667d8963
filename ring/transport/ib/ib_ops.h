/* The thin hardware layer under the RDMA transport: the few verbs the protocol (ib_proto.h)
 * needs, as a table of functions. Two implementations: ib_hw.c (libibverbs: RC queue
 * pairs, registered memory, one completion queue per device) and ib_soft.c (threads and
 * memcpy in one process, with injectable delays, drops and errors: the unit tests' fabric).
 * Keeping the protocol's own logic (credits, chunking, slot reuse, completions, timeouts)
 * above this table is what lets it be tested on machines without an RDMA device.
 *
 * Semantics both implementations keep (those of a reliable-connected queue pair):
 *  - writes posted on one queue pair land in the remote memory in posting order, and a
 *    write's immediate completes a receive on the remote side only after its data (and
 *    every earlier write's data) is in place;
 *  - the send completions of one queue pair come back in posting order;
 *  - a write with an immediate consumes one posted receive; none posted is an error.
 * Functions return WP_OK or WP_FAILED with a one-line message (result.h); poll_cq returns the
 * number of completions, or -1 with a message. */
#ifndef WP_RING_IB_OPS_H
#define WP_RING_IB_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"
#include "wp_config.h"

typedef struct ib_dev ib_dev; /* an opened device (port) with one completion queue */
typedef struct ib_qp ib_qp;   /* a reliable-connected queue pair to one peer */
typedef struct ib_mr ib_mr;   /* a registered memory region */

/* What a peer needs to connect its queue pair to ours (exchanged through the rendezvous). */
typedef struct ib_addr {
    uint32_t qpn, psn;
    uint16_t lid;
    uint8_t port;
    uint8_t mtu;     /* active MTU enum of the port (verbs), 0 for soft */
    uint8_t gid[16]; /* RoCE / global routing; all zero when the port uses LIDs only */
} ib_addr;

enum { IB_WC_WRITE = 0, IB_WC_RECV_IMM = 1 };

typedef struct ib_wc {
    uint64_t wr_id;
    void *qp_ctx; /* the ctx given to create_qp */
    int opcode;   /* IB_WC_WRITE (a send completion) or IB_WC_RECV_IMM */
    int status;   /* 0 = success; otherwise see ops->status_str */
    uint32_t imm;
} ib_wc;

/* Device choice (flags --ib-device, --ib-port, --ib-gid-index). */
typedef struct ib_dev_cfg {
    char device[64]; /* "" = the first device */
    int port;
    int gid_index;
    void *soft_fabric; /* ib_soft only: the in-process fabric (ib_soft.h) */
    int soft_rank;     /* ib_soft only: who this device belongs to */
} ib_dev_cfg;

#define IB_NO_DEVICE WP_BAD_INPUT /* open's return when there is no RDMA device at all (exit 2) */

typedef struct ib_ops {
    const char *name; /* "verbs" or "soft" */
    /* Returns WP_OK, IB_NO_DEVICE (message says why) or WP_FAILED. desc: one line naming the
     * device, port and memory path, printed at start-up. */
    wp_result (*open)(const ib_dev_cfg *cfg, ib_dev **dev, char *desc, size_t desclen, char *err, size_t errlen);
    void (*close)(ib_dev *dev);
    wp_result (*reg_mr)(ib_dev *dev, void *addr, size_t len, ib_mr **mr, uint32_t *rkey, char *err, size_t errlen);
    void (*dereg_mr)(ib_mr *mr);
    /* A queue pair with room for sq_depth outstanding writes and rq_depth posted receives;
     * its completions carry qp_ctx. *local: what the peer needs to connect to it. */
    wp_result (*create_qp)(ib_dev *dev, void *qp_ctx, int sq_depth, int rq_depth, ib_qp **qp, ib_addr *local, char *err,
                           size_t errlen);
    wp_result (*connect_qp)(ib_qp *qp, const ib_addr *remote, char *err, size_t errlen);
    void (*destroy_qp)(ib_qp *qp);
    /* RDMA WRITE of len bytes at src (inside mr; len may be 0) to raddr/rkey; with_imm: WRITE
     * WITH IMMEDIATE carrying imm. Always signalled. */
    wp_result (*post_write)(ib_qp *qp, uint64_t wr_id, ib_mr *mr, const void *src, size_t len, uint64_t raddr,
                            uint32_t rkey, bool with_imm, uint32_t imm, char *err, size_t errlen);
    wp_result (*post_recv)(ib_qp *qp, uint64_t wr_id, char *err, size_t errlen);
    int (*poll_cq)(ib_dev *dev, ib_wc *wc, int max, char *err, size_t errlen);
    /* Sleep until a completion may be waiting, wake() is called, or timeout_s passes. Never
     * misses a completion that arrived since the last empty poll_cq. */
    void (*wait)(ib_dev *dev, double timeout_s);
    void (*wake)(ib_dev *dev);
    const char *(*status_str)(int status);
} ib_ops;

extern const ib_ops ib_soft_ops;
#if WP_HAVE_IBVERBS
extern const ib_ops ib_hw_ops;
#endif

#endif
