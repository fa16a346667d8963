/* The schedule engine, one for the validator and the simulator: it runs every rank's list at once under the
 * transfer semantics of ir.h, checks every invariant on the way, and (given costs) keeps time.
 * With zero costs it is the symbolic validator; with costs it is the discrete-event simulator.
 * Because every wait in ir.h is monotone (a buffer that arrived stays until its own rank frees
 * it), whether the lists deadlock does not depend on timing, and neither do the buffer counts:
 * they change only at a rank's own actions, so peaks are properties of the lists. */
#ifndef WP_SCHEDULE_ENGINE_H
#define WP_SCHEDULE_ENGINE_H

#include "ir.h"
#include "result.h"

/* The machine. Durations in seconds (any unit works, as long as all agree). */
typedef struct {
    double op_s[WP_OP_COUNT][WP_MAX_CHUNKS]; /* F, B, W, BW, LOAD, ZERO, ACC, UPDATE per chunk */
    /* Links: rank r sits on node r / ranks_per_node (0 = one node). Each ordered pair (src, dst)
     * is one link per direction; the transfers in progress on it share its bandwidth equally
     * (one per channel, since a channel is FIFO), and each arrives latency after its last byte
     * left. Bandwidth 0 = unlimited. */
    int ranks_per_node;
    double link_bw, link_lat; /* between nodes: bytes/s, s */
    double node_bw, node_lat; /* inside a node */
    double reduce_s;          /* REDUCE: after the last rank arrives */
    /* --optimizer-memory host (engine_host.c): the owners' masters, moments and accumulators
     * live in host memory, and LOAD, ACC and UPDATE run beside the device stream, each rank on
     * its own share of its host's CPU and host link, in list order: LOAD = the CPU writes the
     * wire copy (host_s), then it goes up (link_s), and the buffer is there when the copy ends;
     * ACC = the gradient comes down (link_s; the buffer may be written again once it has left),
     * then the CPU adds it into the accumulator (host_s); UPDATE = the CPU's AdamW (host_s),
     * after which the next LOAD of that master may start. A W/BW into the owner's accumulator
     * (to_master) adds into an fp32 window of the chunk on the device, which REDUCE first copies
     * down (link_s[WP_OP_W], once a step per such chunk), then waits for the rank's ACCs; a
     * TOUT/TIN waits for the host's work queued before it. op_s of LOAD, ACC, UPDATE is unused. */
    bool host;
    double host_s[WP_OP_COUNT][WP_MAX_CHUNKS], link_s[WP_OP_COUNT][WP_MAX_CHUNKS];
} wp_costs;

/* What the engine needs to know about sizes; all zero counts buffers without bytes. */
typedef struct {
    const wp_layout *L;                   /* NULL: no bytes */
    size_t acts_bytes[WP_MAX_CHUNKS];     /* one activation state of chunk c as F leaves it */
    size_t kept_bytes[WP_MAX_CHUNKS];     /* what a separate B adds to it until the W-pass */
    size_t owner_bytes[WP_MAX_CHUNKS];    /* fp32 master + Adam moments + fp32 accumulator */
} wp_sizes;

typedef struct {
    int peak_n[WP_BUF_KINDS]; /* most buffers of each kind held at once (slot pool sizes) */
    int peak_acts;            /* most activation states held at once */
    size_t peak_acts_bytes;
    size_t peak_bytes;        /* most bytes of buffers + activation states at once */
    size_t owner_bytes;       /* constant: optimizer state of the chunks it owns */
    size_t pool_bytes[WP_BUF_KINDS]; /* the runtime pool's memory (slots reused per exact size), by the
                                        kind that first took each size */
    size_t viewed_bytes[WP_BUF_KINDS]; /* of pool_bytes, the slots of a size that compute reads (F/B/W
                                          inputs): the runtime keeps a compute-dtype view beside each */
    size_t sent[WP_BUF_KINDS], recv[WP_BUF_KINDS]; /* bytes in the last step run */
    int n_sent, n_recv;       /* transfers in the last step run */
    double busy;              /* F/B/W/BW time in the last step run */
    double other;             /* LOAD/ZERO/ACC/UPDATE time in the last step run */
    double host, up, down;    /* costs.host: the CPU's and the host link's time in the last step run */
} wp_rank_report;

typedef struct {
    int rank, step, index;
    uint8_t op;
    int16_t chunk;
    int32_t mb;
    double t0, t1;
} wp_comp_event;

typedef struct {
    int src, dst, channel, step;
    wp_buf buf; /* version relative to `step` */
    size_t bytes;
    double t0, t1; /* first byte leaves, last byte arrives */
} wp_xfer_event;

typedef struct {
    int nranks, steps;
    wp_rank_report *rank;   /* [nranks] */
    double *step_end;       /* [steps]: when the last rank finished each step's list */
    double *reduce_at;      /* [steps]: when each step's REDUCE completed */
    bool record;            /* keep the event lists below */
    int n_comp, cap_comp, n_xfer, cap_xfer;
    wp_comp_event *comp;
    wp_xfer_event *xfer;
} wp_run;

/* Run the lists `steps` times in a row (1..4) from the carried state. costs may be NULL (zero).
 * Returns 0, or 1 with a one-line reason in err: the lists break an invariant (naming rank,
 * action and what broke; the lists are the program's own output, so this is an internal
 * failure, not bad input), the schedule's shape is out of range, or memory ran out.
 * run->record chooses whether events are kept; free with run_free. */
wp_result engine_run(const wp_schedule *s, const wp_sizes *sz, const wp_costs *costs, int steps, bool record, wp_run *run,
             char *err, size_t errlen);
void run_free(wp_run *run);

/* Sizes for a layout: buffer bytes, model_acts_bytes per chunk (after F; and, when the backward is
 * split, what B keeps for the W-pass, held from B to W as the runtime does), 16 bytes per owned
 * parameter. */
void sizes_from_layout(wp_sizes *sz, const wp_layout *L, bool split_backward);

#endif
