/* What the transport backends share: the transport and request structs, the failure record
 * and the helpers that complete requests. Not for users of the transport (see transport.h). */
#ifndef WP_RING_TRANSPORT_IMPL_H
#define WP_RING_TRANSPORT_IMPL_H

#include <stdarg.h>

#include "clock.h"
#include "result.h"
#include "transport.h"

enum { TP_SEND = 0, TP_RECV = 1 };

/* The first cause of a transport's failure. peer >= 0 names the culprit; then `what` reads
 * after the peer's name ("closed the connection"); otherwise it is a whole sentence. */
typedef struct tp_fail {
    bool failed;
    bool hearsay; /* the cause is a peer's state seen from here (tp_failed_hearsay) */
    int peer;
    char what[400];
} tp_fail;

typedef struct tp_ops {
    const char *kind;
    /* Every rank is a thread of this process: a peer's buffer pointer is valid here (the staged
     * layer then copies device to device instead of through the host). */
    bool one_process;
    /* Make sure the connection to one peer exists or is on its way. wait: also wait (up to
     * the connect timeout) for a connection the peer opens. Unlocked. */
    wp_result (*connect)(wp_transport *t, int peer, bool wait, char *err, size_t errlen);
    /* Queue a request (its fields are set). Called with the sync held; returns WP_OK, or
     * WP_FAILED with a message (the request is then not queued). */
    wp_result (*post)(wp_transport *t, wp_request *r, char *err, size_t errlen);
    /* The transport just failed (sync held): tell peers, wake helper threads. */
    void (*failed)(wp_transport *t);
    void (*peer_name)(wp_transport *t, int peer, char *buf, size_t buflen);
    /* Stop threads, close connections, free requests and the struct. Unlocked. */
    void (*close)(wp_transport *t);
    /* The size of the backend's own request struct, whose first member is the wp_request (as
     * tcp_req, local_req): tp_post_* allocates that much, zeroed, and the backend reaches its
     * per-request state by a cast. 0: a bare wp_request. */
    size_t request_bytes;
} tp_ops;

struct wp_transport {
    const tp_ops *ops;
    int rank, world;
    wp_sync *sync;  /* guards everything below and the state of every request */
    tp_fail *fail;  /* shared by all ranks of a local world */
    wp_transport_stats stats;
    wp_request *live; /* every request not yet freed (doubly linked) */
};

struct wp_request {
    wp_transport *t;
    wp_request *live_prev, *live_next;
    wp_request *next; /* backend queue link */
    int kind;         /* TP_SEND / TP_RECV */
    int peer, channel;
    char *buf;
    size_t bytes;
    char label[WP_LABEL_MAX];
    uint64_t seq;       /* message number on (direction, peer, channel) */
    size_t moved;       /* bytes delivered so far */
    double progress_at; /* when it was posted or last moved bytes: the silence clock */
    bool done;
    int busy; /* copies into/out of buf running outside the lock */
    /* Framing, for the backends that cut a message into frames (tcp, local, ibverbs); a
     * backend's own per-request state is in its struct around this one (tp_ops.request_bytes). */
    size_t scheduled;    /* bytes cut into frames so far */
    bool all_scheduled;  /* every frame is cut (a 0-byte message is one empty frame) */
    uint32_t frames_out; /* frames cut but not yet written / delivered */
};

int tp_init(wp_transport *t, const tp_ops *ops, int rank, int world, wp_sync *sync, tp_fail *fail);

/* Record the first failure (sync held), run ops->failed, wake every waiter. */
void tp_fail_locked(wp_transport *t, int peer, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Mark r complete (sync held): counters, wake waiters. tp_wait / tp_test free it. */
void tp_complete_locked(wp_request *r);
/* Note that r moved bytes now (sync held). */
static inline void tp_progress_locked(wp_request *r, size_t bytes) {
    r->moved += bytes;
    r->progress_at = wp_now();
}
/* Free every request of t (sync held or no other thread left). */
void tp_free_requests(wp_transport *t);

/* FIFO queue of requests through their `next` link. */
typedef struct tp_queue {
    wp_request *head, *tail;
} tp_queue;
void tp_queue_push(tp_queue *q, wp_request *r);
wp_request *tp_queue_pop(tp_queue *q);
/* Remove r wherever it is in q (linear). */
void tp_queue_remove(tp_queue *q, wp_request *r);

/* Sends and receives a rank posts to itself (tcp, ibverbs): matched FIFO per channel and copied at
 * once, with no wire in between. */
typedef struct tp_self {
    tp_queue sends[WP_MAX_CHANNELS], recvs[WP_MAX_CHANNELS];
} tp_self;
/* Queue r (peer == t->rank) and complete every pair it makes; a size mismatch fails t. Sync held. */
void tp_post_self_locked(wp_transport *t, tp_self *self, wp_request *r);

#endif
