/* The RDMA transport's own protocol, above the thin verbs layer (ib_ops.h) and below the
 * transport contract (transport.h). One ibp_link per peer:
 *
 *  - Registered double buffers per slot. A slot is (peer, channel, direction); each has two
 *    staging buffers of IBP_HDR_BYTES + slot_bytes on both sides, carved out of one
 *    registered region per link. A message is cut into chunks of at most slot_bytes; each
 *    chunk goes with a small header (message number, total size, offset, label) as one RDMA
 *    WRITE WITH IMMEDIATE straight into the receiver's free buffer; the immediate says which
 *    (channel, buffer) just filled, and the receiver copies the chunk into the posted
 *    receive. The two buffers alternate, so one chunk is on the wire while the receiver
 *    copies the other out (the double buffering of the WeiPipe ring: a weight chunk streams
 *    in while the previous one is used).
 *  - Credits: the sender starts with one credit per buffer and spends one per chunk; the
 *    receiver returns the credit (a zero-byte write with an immediate) only once it copied
 *    the buffer out, so a sender never overwrites a buffer the receiver still reads. A
 *    receive not posted yet simply holds the credit back: memory stays bounded and a slow
 *    receiver slows its sender, nothing more.
 *  - Large chunks are split into work requests of at most wr_bytes; only the last carries
 *    the immediate (a queue pair writes in order, so when it lands all of the chunk has).
 *  - Completions: a chunk's staging buffer is reused only after its last write completed
 *    (send completions may come after the credit); a send request completes when the last
 *    of its chunks is confirmed; a receive when its last byte is copied. A failed
 *    completion fails the transport naming the peer, and a write that is not confirmed
 *    within the timeout does too (ibp_check_timeouts), so no wait spins forever.
 *
 * Every function here runs with the transport's sync held. */
#ifndef WP_RING_IB_PROTO_H
#define WP_RING_IB_PROTO_H

#include "ib_ops.h"
#include "transport_impl.h"

#define IBP_SLOTS 2        /* staging buffers per (peer, channel, direction) */
#define IBP_HDR_BYTES 128  /* chunk header at the start of each staging buffer */
#define IBP_INFO_BYTES 96  /* the connection info exchanged through the rendezvous */
#define IBP_MAX_WRS 4096   /* send queue depth limit per link */
#define IBP_RQ_DEPTH (WP_MAX_CHANNELS * IBP_SLOTS * 2) /* data + credit immediates in flight */

typedef struct ibp_cfg {
    size_t slot_bytes; /* payload bytes per staging buffer */
    size_t wr_bytes;   /* largest work request */
    double timeout;    /* a write not confirmed within this many seconds fails the transport */
} ibp_cfg;

/* Defaults: 512 KiB buffers (header included; 16 MiB registered per peer), 128 KiB work
 * requests. */
void ibp_cfg_defaults(ibp_cfg *c);
/* Bounds (slot 1 byte .. 1 GiB, work request 1 byte .. slot + header, send queue depth under
 * IBP_MAX_WRS). Returns WP_OK, or WP_FAILED with a message. */
wp_result ibp_cfg_check(const ibp_cfg *c, char *err, size_t errlen);

/* One chunk or credit in flight, for the timeout check. */
typedef struct ibp_flight {
    wp_request *req; /* NULL: slot free */
    size_t offset, len;
    double posted_at;
} ibp_flight;

typedef struct ibp_chan {
    /* sending */
    tp_queue sends;                 /* posted; the head is being cut into chunks */
    uint64_t send_seq;
    bool credit[IBP_SLOTS];         /* the peer's buffer b is free to write */
    ibp_flight flight[IBP_SLOTS];   /* our staging buffer b: a chunk whose write is unconfirmed */
    int send_next;                  /* buffers are used in turn: 0, 1, 0, ... */
    /* receiving */
    tp_queue recvs;                 /* posted, not complete */
    uint64_t recv_seq;
    int full[IBP_SLOTS], nfull;     /* buffers holding a chunk not yet copied out, in order */
    int recv_next;                  /* the buffer the next chunk must land in */
} ibp_chan;

typedef struct ibp_link {
    wp_transport *t;
    const ib_ops *ops;
    ib_dev *dev;
    int peer;
    ibp_cfg cfg;
    size_t stride;   /* bytes per staging buffer (header + slot, aligned) */
    char *region;    /* recv buffers, then send buffers: [dir][channel][buffer] */
    size_t region_bytes;
    ib_mr *mr;
    uint32_t rkey;
    ib_qp *qp;
    ib_addr local;
    uint64_t remote_base; /* the peer's receive buffers for us */
    uint32_t remote_rkey;
    bool connected;
    bool gone;        /* the peer's queue pair went away (it closed, or died) */
    int sq_depth, sq_used;
    int pending;      /* requests with this peer not complete */
    ibp_chan ch[WP_MAX_CHANNELS];
} ibp_link;

/* Allocate and register the staging region, create the queue pair. Returns WP_OK, or
 * WP_FAILED with a message. */
wp_result ibp_link_init(ibp_link *L, wp_transport *t, const ib_ops *ops, ib_dev *dev, int peer, const ibp_cfg *cfg,
                        char *err, size_t errlen);
void ibp_link_free(ibp_link *L);
/* What the peer needs: our queue pair's address, the receive buffers' base address, rkey,
 * slot size. Encoded little-endian into IBP_INFO_BYTES. */
void ibp_info_encode(const ibp_link *L, uint8_t *out);
/* Connect to the peer's info (refused by name when its slot size or format differ) and post
 * the receives. Returns WP_OK, or WP_FAILED with a message that reads after the peer's name. */
wp_result ibp_link_connect(ibp_link *L, const uint8_t *info, char *err, size_t errlen);
/* Both sides are connected (the peer said so): start the requests queued meanwhile. Writing
 * earlier could reach a queue pair not yet ready to receive. */
void ibp_link_start(ibp_link *L);

/* Queue a request on the link (its seq is set here) and start what can start. */
void ibp_post(ibp_link *L, wp_request *r);
/* Handle one completion of this link. */
void ibp_on_wc(ibp_link *L, const ib_wc *wc);
/* Fail the transport when a write of this link waits for its confirmation longer than the
 * timeout. */
void ibp_check_timeouts(ibp_link *L, double now);

/* The immediate: bit 8 credit (else data), bits 1..3 channel, bit 0 buffer. */
static inline uint32_t ibp_imm(bool credit, int channel, int buf) {
    return (credit ? 1u << 8 : 0u) | (uint32_t)channel << 1 | (uint32_t)buf;
}

#endif
