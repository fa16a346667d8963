/* The tcp transport's internal state, shared by tcp.c (posting, connecting, closing) and
 * tcp_progress.c (the progress thread). One mutex (base.sync) guards all of it; the progress
 * thread drops it only while it sleeps in ppoll. */
#ifndef WP_RING_TCP_IMPL_H
#define WP_RING_TCP_IMPL_H

#include "handshake.h"
#include "link_model.h"
#include "tcp.h"
#include "transport_impl.h"
#include "wire.h"

#define TCP_SMALL_PAYLOAD 512 /* largest clear-to-send / abort payload */

/* A frame queued on a stream. */
/* A request of the tcp transport (tp_ops.request_bytes): the wp_request, then tcp's own state. */
typedef struct tcp_req {
    wp_request base;
    bool cts; /* send: the receiver is ready; receive: its clear-to-send is queued */
} tcp_req;
static inline tcp_req *tcp_req_of(wp_request *r) { return (tcp_req *)r; } /* base is the first member */

typedef struct tcp_out {
    struct tcp_out *next;
    uint8_t hdr[WIRE_FRAME_BYTES];
    const char *payload;
    size_t len;
    char *own;       /* payload owned by the frame (labels, abort reasons) */
    wp_request *req; /* the send a data frame belongs to */
    double release;  /* not written before (pacing) */
    size_t written;  /* bytes of header + payload written */
} tcp_out;

typedef struct tcp_peer tcp_peer;

typedef struct tcp_stream {
    int fd; /* -1: not connected (yet) */
    int index;
    tcp_peer *peer;
    bool broken; /* a data frame was cut off by a failure: nothing more goes out here */
    /* receiving: a header, then its payload */
    uint8_t hdr[WIRE_FRAME_BYTES];
    size_t hdr_got;
    bool in_payload;
    wire_frame f;
    uint32_t crc;
    char *dst;
    size_t pay_got;
    wp_request *rreq;
    char small[TCP_SMALL_PAYLOAD + 1];
    /* sending: control frames first (at a frame boundary), then data frames */
    tcp_out *ctl_head, *ctl_tail;
    tcp_out *data_head, *data_tail;
    tcp_out *cur;
} tcp_stream;

/* A clear-to-send that arrived before the matching send was posted. */
typedef struct tcp_cts {
    struct tcp_cts *next;
    uint64_t seq;
    uint64_t bytes;
    char label[WP_LABEL_MAX];
} tcp_cts;

struct tcp_peer {
    int rank;
    char addr[SOCK_ADDR_MAX];
    tcp_stream *streams; /* nstreams */
    int nconnected;
    bool connected;  /* every stream is up */
    bool connecting; /* this rank is opening the streams */
    bool closing;    /* one of its streams ended: the peer is finishing */
    bool closed;     /* every stream ended in an orderly way */
    int pending_sends, pending_recvs; /* posted requests with this peer not yet complete */
    uint64_t send_seq[WP_MAX_CHANNELS], recv_seq[WP_MAX_CHANNELS];
    tp_queue sends[WP_MAX_CHANNELS]; /* not yet cut into frames, FIFO */
    tp_queue recvs[WP_MAX_CHANNELS]; /* not yet complete */
    tcp_cts *cts_head[WP_MAX_CHANNELS], *cts_tail[WP_MAX_CHANNELS];
    wp_link link; /* this rank -> peer */
    int rr_chan, rr_stream;
    int frames_queued; /* data frames cut but not fully written */
};

typedef struct tcp_tp {
    wp_transport base;
    wp_sync sync;
    tp_fail fail;
    wp_net_opts net;
    char job[WIRE_NAME_MAX], secret[WIRE_NAME_MAX];
    int listen_fd;
    char listen_addr[SOCK_ADDR_MAX];
    bool peers_set;
    tcp_peer *peers;
    int rr_peer;     /* the peer build_poll cuts a frame for first: peers take turns */
    wp_link nic_out; /* with NICs (tp_net_nic): this process's egress, shared by its peers */
    hs_pending pending[HS_MAX_PENDING];
    int npending;
    int wake_fd; /* eventfd: posts and failures wake the progress thread */
    pthread_t thread;
    bool thread_started, stop;
    double flush_deadline; /* after a failure: time left to send abort frames */
    bool shut;             /* after a failure: every socket is shut down */
    tp_self self;   /* sends and receives to this rank */
} tcp_tp;

static inline tcp_tp *tcp_of(wp_transport *t) { return (tcp_tp *)t; }

void tcp_wake(tcp_tp *T);
void *tcp_progress_main(void *arg);

/* Queue a control frame (clear-to-send, abort) on a peer's first usable stream. WP_FAILED
 * (no message) when no stream is usable or memory ran out. */
wp_result tcp_queue_ctl(tcp_tp *T, tcp_peer *P, int type, int channel, uint64_t seq, uint64_t a, const char *payload,
                        size_t len);
/* A stream of peer P came up (sync held): once all are up, send the pending clear-to-sends. */
void tcp_stream_up(tcp_tp *T, tcp_peer *P, int index, int fd);
/* A clear-to-send from P (sync held). */
void tcp_got_cts(tcp_tp *T, tcp_peer *P, int channel, uint64_t seq, uint64_t bytes, const char *label);
void tcp_free_out(tcp_out *o);

#endif
