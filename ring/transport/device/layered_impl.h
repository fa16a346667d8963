/* What the transports layered on an inner transport share (staged.c over local or tcp,
 * nccl_transport.c over tcp): the struct head, connect and peer names passed through to the inner
 * transport, the failure record and how peers learn of it, the queue of posted requests with
 * the compute event each waits for, the progress thread (its loop, poll intervals and
 * wake-ups) and the orderly stop. A backend keeps only how it moves bytes, plugged in through
 * tp_layer_ops; everything here runs with the layer's sync held unless it says otherwise.
 * Not for users of the transports (see staged.h, nccl_transport.h). */
#ifndef WP_RING_LAYERED_IMPL_H
#define WP_RING_LAYERED_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernels.h"
#include "streams.h"
#include "transport_impl.h"

/* How long the progress thread sleeps between turns: while device work of the layer (a copy,
 * an NCCL operation) is in flight, well under a weight transfer's duration; while only inner
 * transfers or set-ups are outstanding (they take as long as the peers do), longer, so that
 * waiting for a slow peer does not spin a core; idle (woken by posts) or failed, a safety net
 * only. */
#define TP_LAYER_POLL_DEVICE_S 50e-6
#define TP_LAYER_POLL_INNER_S 200e-6
#define TP_LAYER_IDLE_S 0.05

/* The head of a backend's request (its struct begins with one): one outer request in post
 * order. */
typedef struct tp_layer_req {
    struct tp_layer_req *next;
    wp_request *outer;
    /* The compute work queued before the post, recorded on the poster's thread: a send reads
     * what that work writes, a receive overwrites what it may still read (a reused pool slot),
     * so the backend's device work for the transfer waits for it. Destroyed by ops->release
     * (which context may destroy it is the backend's to say). */
    wp_kern_event *ready;
} tp_layer_req;

typedef struct tp_layer tp_layer;

typedef struct tp_layer_ops {
    /* First member: the transport's ops point here (TP_LAYER_TP_OPS fills it), which is how
     * the layer finds the rest and how tp_is_<kind> recognizes its transports. */
    tp_ops tp;
    size_t req_bytes;      /* the backend's request struct, zeroed at post */
    const char *post_verb; /* "out of memory <post_verb> <label>" when a post cannot allocate */
    /* Optional: refuse a post the backend cannot carry (err set, -1). Poster's thread. */
    int (*admit)(tp_layer *l, const wp_request *r, char *err, size_t errlen);
    /* Optional: once at the start of the progress thread (a per-thread device, say). */
    void (*thread_init)(tp_layer *l);
    /* Optional: a turn's work before the pass over the requests (the transport did not fail). */
    void (*turn_begin)(tp_layer *l);
    /* Advance q as far as it goes now: 1 when it completed (the layer completes the outer
     * request and releases q), 0 when it waits, -1 when it failed the transport. */
    int (*advance)(tp_layer *l, tp_layer_req *q);
    /* Optional: a turn's work after the pass, when the transport has not failed. */
    void (*turn_end)(tp_layer *l);
    /* Whether q has device work in flight (the short poll interval applies). */
    bool (*device_busy)(const tp_layer_req *q);
    /* Optional: the transport just failed, before the peers are told through the inner one
     * (e.g. abort what could keep a kernel waiting on a dead peer). */
    void (*failed)(tp_layer *l);
    /* At close, after the progress thread stopped and before the queued requests are
     * released: make sure no inner transfer or device work still touches them. Unlocked. */
    void (*drain)(tp_layer *l);
    /* Free q's backend state and its ready event, not q itself. */
    void (*release)(tp_layer *l, tp_layer_req *q);
    /* At close, after every request was released: the backend's own resources, not the
     * struct (the layer frees it). Also runs on a transport whose open failed half-way. */
    void (*destroy)(tp_layer *l);
} tp_layer_ops;

/* The head of a backend's transport struct (which begins with one). */
struct tp_layer {
    wp_transport base; /* first: tp_* calls take &base */
    wp_sync sync;
    tp_fail fail;
    wp_transport *inner; /* the caller's: closed after this transport */
    wp_kern *compute;    /* the poster's context: what sends and receives wait for */
    /* Whether the inner transport's payload counts as this transport's overhead: it carries
     * control messages (descriptors, handles), not the data. */
    bool inner_payload_is_overhead;
    tp_layer_req *head, *tail; /* posted and not yet complete, in post order */
    pthread_t thread;
    bool started, stop;
};

/* The tp_ops entry points of every layered transport; TP_LAYER_TP_OPS(kind) fills a tp_ops. */
wp_result tp_layer_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen);
wp_result tp_layer_post(wp_transport *t, wp_request *r, char *err, size_t errlen);
void tp_layer_failed(wp_transport *t);
void tp_layer_peer_name(wp_transport *t, int peer, char *buf, size_t buflen);
void tp_layer_close(wp_transport *t);
#define TP_LAYER_TP_OPS(kind_)                                                                              \
    {                                                                                                       \
        .kind = (kind_), .connect = tp_layer_connect, .post = tp_layer_post, .failed = tp_layer_failed,     \
        .peer_name = tp_layer_peer_name, .close = tp_layer_close,                                           \
    }

/* Set up l, the head of a zeroed backend struct, over inner (same rank and world). Returns
 * WP_OK, or WP_FAILED when its sync cannot be made (then free the struct: nothing else to undo). */
wp_result tp_layer_init(tp_layer *l, const tp_layer_ops *ops, wp_transport *inner, wp_kern *compute);
/* Start the progress thread once the backend's state is ready. Returns WP_OK or WP_FAILED;
 * either way tp_layer_close(&l->base) tears the transport down. */
wp_result tp_layer_start(tp_layer *l);

/* Fail the transport with "rank R: <what>" (no culprit peer). */
void tp_layer_fail(tp_layer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The inner transport failed a call with `why`: fail with its root cause (a dead or silent
 * peer) when it has one, not the wrapped message of the call that ran into it. */
void tp_layer_inner_failed(tp_layer *l, const char *why);
/* Post on the inner transport (kind TP_SEND / TP_RECV); WP_FAILED after failing the transport. */
wp_result tp_layer_post_inner(tp_layer *l, int kind, int peer, int channel, void *buf, size_t bytes, const char *label,
                              wp_request **req);
/* Test an inner request: 1 done (*req released, NULL) or none, 0 pending, -1 failed (the
 * transport too). */
int tp_layer_test_inner(tp_layer *l, wp_request **req);

#endif
