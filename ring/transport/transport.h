/* The transport interface: how ranks pass buffers to each other.
 *
 * Semantics (what the executor relies on, and what the schedule validator and simulator
 * assume):
 *  - tp_post_send / tp_post_recv never wait for the peer: they queue a request and return a
 *    handle. Matching is FIFO per (src, dst, channel): the k-th send from a to b on channel c
 *    fills the k-th receive b posted from a on c. Sizes must agree (a mismatch fails the job,
 *    naming both labels).
 *  - A transfer progresses once both sides posted it (rendezvous: nothing is buffered on the
 *    way, so memory stays bounded), in the background, while the caller computes.
 *  - Channels of a peer progress independently: a large gradient on one channel does not
 *    hold back a weight transfer on another (frames of channels take turns on the link).
 *  - tp_wait returns when the request completed: a receive's buffer holds the data, a send's
 *    buffer may be reused. It fails, with one line naming the peer rank and the label, when
 *    the transport failed (a peer died, closed, sent a bad frame, aborted) or when the
 *    awaited request made no progress for timeout_s seconds ("silent"). Every blocking call
 *    has a deadline.
 *  - Any failure is fatal to the transport: every later call fails with the same cause.
 *  - A transport is driven by one thread (the rank's executor); tp_abort may come from any.
 *
 * Backends (one table of them: transport_table.h): local.h (ranks as threads of one process),
 * tcp.h (processes on one or many machines), ib_transport.h (RDMA over libibverbs, or the soft fabric
 * of the tests), and two layers over another transport for device memory: staged.h (pinned
 * host slots or device-to-device copies) and nccl_transport.h (NCCL send/recv on the GPU buffers).
 *
 * The ring layer (this folder) sits on kernels/ only and includes nothing of src/: its callers
 * hand it plain structs (wp_net_opts, ib_dev_cfg, wp_job_cfg), never flags. */
#ifndef WP_RING_TRANSPORT_H
#define WP_RING_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WP_MAX_CHANNELS 8
#define WP_LABEL_MAX 48
#define WP_DEFAULT_FRAME_BYTES (1u << 20)

/* Conventional channel numbers (any 0 .. WP_MAX_CHANNELS-1 may be used). */
enum { WP_CH_WFWD = 0, WP_CH_WBWD = 1, WP_CH_GRAD = 2, WP_CH_ACT = 3, WP_CH_ACTGRAD = 4 };

/* Network options (the command line's: net_cfg_from_opts in src/cli/adapters.h). */
typedef struct wp_net_opts {
    int tcp_streams;          /* sockets per peer that large buffers are striped over */
    char bind[256];           /* interface the data listeners bind to */
    bool bind_given;          /* --bind was given; else a launched rank binds the interface that routes to MASTER_ADDR */
    double connect_timeout;   /* seconds */
    double timeout;           /* a peer silent this long while awaited is declared dead */
    double link_bandwidth;    /* bytes/s per direction between nodes; 0 = unpaced */
    double link_latency;      /* seconds */
    int ranks_per_node;       /* 0 = every rank on one node */
    double node_link_bandwidth, node_link_latency; /* inside a node */
    size_t frame_bytes;       /* largest frame on the wire (and pacing granularity) */
} wp_net_opts;

void tp_net_defaults(wp_net_opts *n);
/* Bandwidth (bytes/s, 0 = unlimited) and latency of the emulated link src -> dst: the
 * node link when both ranks sit on one node of ranks_per_node ranks, the link otherwise. */
void tp_net_link(const wp_net_opts *n, int src, int dst, double *bytes_per_s, double *latency_s);
/* Whether the hop src -> dst of a world of `world` ranks goes through the nodes' NICs (one per
 * direction per node, link_bandwidth each, shared by the node's flows: ring/link_model.h):
 * ranks_per_node G > 0, world > G, the two ranks on different nodes, and a bandwidth to share.
 * Then tp_net_link's bandwidth is the NIC's, not the pair's. */
bool tp_net_nic(const wp_net_opts *n, int world, int src, int dst);

typedef struct wp_transport wp_transport;
typedef struct wp_request wp_request;

typedef struct wp_transport_stats {
    uint64_t payload_sent, payload_recv;   /* bytes of completed sends / receives */
    uint64_t overhead_sent, overhead_recv; /* frame headers, clear-to-send and handshakes */
    uint64_t msgs_sent, msgs_recv;         /* completed requests */
    uint64_t rejected;                     /* refused incoming connections (bad handshake...) */
    double wait_s;                         /* time spent blocked in tp_wait / tp_wait_any */
} wp_transport_stats;

int tp_rank(const wp_transport *t);
int tp_world(const wp_transport *t);
const char *tp_kind(const wp_transport *t); /* "local", "tcp", "ibverbs", "staged" or "nccl" */
bool tp_one_process(const wp_transport *t);  /* every rank a thread of this process (local) */

/* Open the connections to these peers now (blocking, bounded by --connect-timeout), so that
 * later posts never wait. Posting to a peer not connected yet connects on demand. */
int tp_connect(wp_transport *t, const int *peers, int npeers, char *err, size_t errlen);
/* Both ring neighbours, rank-1 and rank+1 (mod world). */
int tp_connect_ring(wp_transport *t, char *err, size_t errlen);

/* label (at most WP_LABEL_MAX-1 characters are kept) names the buffer in every error, e.g.
 * "W[3]@2". buf must stay valid (and, for a send, unchanged) until the request completes. */
int tp_post_send(wp_transport *t, int peer, int channel, const void *buf, size_t bytes,
                 const char *label, wp_request **req, char *err, size_t errlen);
int tp_post_recv(wp_transport *t, int peer, int channel, void *buf, size_t bytes,
                 const char *label, wp_request **req, char *err, size_t errlen);

/* Completed? On completion the handle is released and *req set to NULL. Never blocks.
 * Returns 0 (see *done), or 1 with a message when the transport failed. */
int tp_test(wp_request **req, bool *done, char *err, size_t errlen);
/* Block until *req completes (then release it, *req = NULL) or fail as described above.
 * timeout_s (> 0, normally --timeout) bounds the silence, not the whole transfer: the wait
 * fails only when the request moved no byte for that long since the wait began. A NULL *req
 * returns 0 at once. Returns 0 or 1. */
int tp_wait(wp_request **req, double timeout_s, char *err, size_t errlen);
/* Block until one of reqs[0..n) (all of one transport) completes; sets *index, releases it,
 * reqs[*index] = NULL. Progress on any of them counts against the silence timeout. NULL
 * entries are skipped (all NULL: returns 0 with *index = -1). */
int tp_wait_any(wp_request **reqs, int n, double timeout_s, int *index, char *err, size_t errlen);

/* Fail the transport: every waiter wakes with `reason`; peers are told (tcp: an abort frame
 * to each connected peer; local: every rank of the process). Keeps the first cause. */
void tp_abort(wp_transport *t, const char *reason);
/* Whether the transport failed, and why (the one-line cause). */
bool tp_failed(wp_transport *t, char *why, size_t whylen);
/* Whether its failure is hearsay: a peer's abort, or a peer silent past the timeout (which may
 * itself wait on a dead rank), so the first cause lies with some rank, maybe another. */
bool tp_failed_hearsay(wp_transport *t);

void tp_stats(wp_transport *t, wp_transport_stats *s);
/* "rank 2 (127.0.0.1:41234)" or "rank 2 (thread)". */
void tp_peer_name(wp_transport *t, int peer, char *buf, size_t buflen);

/* Orderly close: pending requests are failed, connections shut down, memory freed (local
 * transports are freed with their world, see local.h). */
void tp_close(wp_transport *t);

#endif
