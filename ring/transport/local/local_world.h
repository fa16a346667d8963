/* The shared state of a local world (local.c: transport and pacer; control_local.c: control
 * channel). One mutex and condition variable guard all of it. */
#ifndef WP_RING_LOCAL_WORLD_H
#define WP_RING_LOCAL_WORLD_H

#include "control_impl.h"
#include "local.h"
#include "link_model.h"
#include "transport_impl.h"

/* A frame of a paced transfer on its way: delivered (copied) at `arrive`. */
/* A request of the local transport (tp_ops.request_bytes): the wp_request, then local's own state. */
typedef struct local_req {
    wp_request base;
    wp_request *peer; /* the matching request on the other side, once paired */
} local_req;
static inline local_req *local_req_of(wp_request *r) { return (local_req *)r; } /* base is the first member */

typedef struct local_frame {
    struct local_frame *next;
    wp_request *send;
    size_t off, len;
    double arrive;
} local_frame;

/* One direction src -> dst of an emulated link: matched transfers waiting to be cut into
 * frames, per channel (taking turns), and the frames in flight, in arrival order. */
typedef struct local_link {
    wp_link link;
    tp_queue chans[WP_MAX_CHANNELS];
    int rr;
    local_frame *fhead, *ftail;
} local_link;

typedef struct local_tp {
    wp_transport base;
    wp_local_world *w;
} local_tp;

typedef struct local_ctl {
    wp_control base;
    wp_local_world *w;
} local_ctl;

struct wp_local_world {
    int n;
    wp_net_opts net;
    wp_sync sync;
    tp_fail fail;
    local_tp *tps;
    local_ctl *ctls;
    tp_queue *sends, *recvs; /* mailboxes [(src * n + dst) * WP_MAX_CHANNELS + channel] */
    local_link *links;       /* [src * n + dst] */
    wp_link *nics;           /* with NICs (tp_net_nic): egress of node k at k, ingress at nodes + k */
    size_t rr_link;          /* the link the pacer looks at first: links sharing a NIC take turns */
    bool paced;
    bool pacer_started, stop;
    pthread_t pacer;
    /* collectives: contributions of the current one, the last result */
    void **contrib;
    size_t *contrib_bytes;
    int narrived;
    uint64_t coll_gen;
    void *result;
    size_t result_bytes;
    char result_err[512]; /* non-empty: the last collective failed */
};

int local_ctl_init(wp_local_world *w, int rank, char *err, size_t errlen);
void local_ctl_free_state(wp_local_world *w);

#endif
