/* Inside the schedule engine (engine.h): its state, shared by the IR's semantics (engine.c: checks
 * and the main loop; engine_bufs.c: buffers; engine_actions.c: matching and actions) and engine_links.c (the link and
 * time model). */
#ifndef WP_SCHEDULE_ENGINE_IMPL_H
#define WP_SCHEDULE_ENGINE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bufmap.h"
#include "engine.h"
#include "seq_split.h"
#include "result.h"

#define MAX_STEPS 4

enum { DONE = 0, BLOCKED = 1, ERROR = 2 };
enum { X_WAIT, X_SERIAL, X_FLIGHT };
enum { WHY_NONE, WHY_ARRIVE, WHY_SEND, WHY_REDUCE };

typedef struct inst {
    wp_buf b;       /* W: absolute version */
    bool present;   /* arrived, or created here */
    int sends;      /* posted SENDs not yet left */
    int gstep;      /* GW: step its contributions belong to, -1 when empty */
    uint64_t *mbs;  /* GW: contributions */
    int born, born_step;
    size_t bytes;
    int pos;        /* its index in its rank's held[] */
} inst;

typedef struct {
    int pc;
    bool done;
    double busy_until;
    bool arrived[MAX_STEPS], passed[MAX_STEPS];
    double reduce_t0[MAX_STEPS];
    inst **held;
    int n_held, cap_held;
    wp_bufmap by_name; /* name -> inst *: held[] without a scan */
    wp_bufmap wholes;  /* whole_of(name) -> how many held instances of it (slices and the whole) */
    wp_bufmap freed;   /* name -> where it was last freed, step << 32 | action (for error messages) */
    int why;         /* what the rank waits for (WHY_*), formatted only for a deadlock message */
    wp_buf why_buf;  /* relative to why_step */
    const inst *why_in; /* WHY_ARRIVE, WHY_SEND: the instance, held here, the action blocked on */
    int why_step;
    int n_kind[WP_BUF_KINDS], n_acts;
    size_t acts_bytes, bytes;
    /* the runtime's pool (bufpool.h) keeps a freed buffer's memory for the next buffer of
     * exactly its size: its bytes are, per size, the most buffers of that size held at once */
    /* slots by exact size; held_v / peak_v: of them, holding what compute may read (not GW or T:
     * bufpool.c gives those the slots without a compute-dtype view); viewed: compute read one */
    struct eng_slot { size_t bytes; int kind, held, peak, held_v, peak_v; bool viewed; } *slots;
    int n_slots, cap_slots;
} rstate;

typedef struct {
    int rank, step, index;
    wp_buf b;
    inst *in;
} post;

typedef struct xfer {
    int src, dst, ch, step, s_index, r_index;
    wp_buf b;
    size_t bytes;
    inst *from, *to;
    int gstep;
    uint64_t *mbs;
    double remaining, t0, t_arrive;
    double rate; /* bytes/s over the current interval when its link is a NIC's (engine_links.c) */
    int state;
} xfer;

typedef struct {
    int src, dst, ch;
    post *sends, *recvs;
    int s_head, s_n, s_cap, r_head, r_n, r_cap;
    xfer **q;
    int q_head, q_n, q_cap;
    xfer *busy;
} chan;

typedef struct {
    xfer **x;
    int n, cap;
    bool listed; /* in eng.busy_links */
    bool nic;    /* between nodes with --ranks-per-node: limited by the two nodes' NICs, not per pair */
    double bw, lat;
} link;

typedef struct {
    int *f_rank, *b_rank, *w_rank, *f_idx, *b_idx, *w_idx; /* [C*M] */
    uint64_t *acc;                                          /* [C*SL*words] */
    int *updated;                                           /* [C*SL]: per (chunk, slice) */
    int tie_in[WP_MAX_CHUNKS];  /* T.w pieces taken in by each head slice k this step (tie.c) */
    int tie_gin[WP_MAX_CHUNKS]; /* T.g pieces taken in by each embedding slice j this step */
    int arrived;
    double arrive_max, done_at;
    bool scheduled, done;
} stepst;

typedef struct {
    const wp_schedule *s;
    const wp_sizes *sz;
    wp_costs costs;
    int N, M, C, steps, words;
    int S, SL;      /* the schedule's nslices; SL = slices per master (1 when unsliced) */
    double now;
    rstate *r;
    chan **ch;      /* [N*N*WP_SCH_COUNT] */
    chan **chans;   /* the ones in use */
    int n_chans, cap_chans;
    link *ln;       /* [N*N] */
    int *busy_links; /* indices into ln of links with transfers on them */
    int n_busy_links;
    /* NIC sharing (elink_share): per node, egress [0, nodes) then ingress [nodes, 2 nodes) */
    double *nic_cap;
    int *nic_cnt;
    xfer **flight;
    int n_flight, cap_flight;
    stepst st[MAX_STEPS];
    int *master;    /* [C*SL]: version of each (chunk, slice) master */
    int tie_expect[WP_MAX_CHUNKS];   /* T.w pieces every step brings to head slice k (tied schedules) */
    int tie_expect_g[WP_MAX_CHUNKS]; /* T.g pieces every step brings to embedding slice j */
    /* costs.host (engine_host.c): when each rank's CPU share and host link directions are next
     * free, when its last ACC's add ends, when each (chunk, slice) master's last UPDATE ends, and
     * the buffers waiting for the link: a LOAD's (arrives) or an ACC's (leaves) */
    struct ehost_rank { double cpu, up, down, acc; bool window[MAX_STEPS]; } *hr; /* [N] */
    double *master_at;                                    /* [C*SL] */
    struct ehost_ev { double t; inst *in; bool arrive; } *hev;
    int n_hev, cap_hev;
    int K;          /* sequence segments per micro-batch (1: none) */
    int seg_t[WP_MAX_SEGMENTS + 1]; /* their boundaries (seq_split.h) */
    wp_run *run;
    char *err;
    size_t errlen;
    int failed;     /* 0, or 1 once a rule broke or memory ran out (err says which) */
    bool progress;
} eng;

/* engine_bufs.c: grow *p to hold need elements; engine_actions.c: the channel src -> dst, ch */
wp_result engine_grow(void **p, int *cap, int need, size_t elem);
chan *engine_get_chan(eng *e, int src, int dst, int ch);

/* engine_bufs.c: the buffers a rank holds (instances), errors that name their action */
int eng_oom(eng *e);
const char *eng_step_note(const eng *e, int step);
/* "rank R, action I (TEXT): message"; ERROR. */
int eng_fail_at(eng *e, int rank, int step, int idx, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int eng_fail_plain(eng *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *eng_rel_name(wp_buf b, int step, char *out, size_t len);
inst *eng_find(rstate *R, wp_buf b);
int eng_expand(const eng *e, wp_buf b, wp_buf *out);
int eng_bad_slicing(eng *e, int r, int step, int idx, wp_buf b);
/* R waits (WHY_*) for b, or for instance in (NULL: not for one instance) */
void eng_wait_for(rstate *R, int why, const inst *in, wp_buf b, int step);
const char *eng_freed_note(const eng *e, const rstate *R, wp_buf b, int step, char *out, size_t len);
size_t eng_acts_bytes_of(const eng *e, int c, int mb, bool kept);
void eng_note_peaks(eng *e, int r);
inst *eng_create(eng *e, int r, wp_buf b, bool present, int step, int idx);
/* Compute read in on rank r: its slot size keeps a compute-dtype view (engine_bufs.c). */
void eng_mark_read(eng *e, int r, const inst *in);
wp_result eng_destroy(eng *e, int r, inst *in, int step, int idx);
int eng_first_common(const uint64_t *a, const uint64_t *b, int n);
/* A buffer an action reads or writes: DONE with *out, BLOCKED while it arrives, ERROR. */
int eng_need_one(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out);
int eng_need_all(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out, int *n);
int eng_need(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out);

/* engine_actions.c: what each action does (transfers posted and matched, computes, the
 * optimizer's pieces); run rank r's list as far as it can go at e->now. */
void eng_advance_rank(eng *e, int r);

/* One (chunk, micro-batch) entry of a per-chunk-and-micro-batch table of st (a step's state). */
#define AT(arr, c, mb) (st->arr[(c) * e->M + (mb)])

/* Small questions about names (ir.h: a sliced schedule holds W and GW as slices). */
static inline wp_buf absolute(wp_buf b, int step) {
    if (b.kind == WP_BUF_W) b.idx += step;
    return b;
}
static inline bool sliceable(wp_buf b) { return b.kind == WP_BUF_W || b.kind == WP_BUF_GW; }
static inline wp_buf whole_of(wp_buf b) { return buf_slice(b, 0, 0); }
static inline int slice_of(wp_buf b) { return b.nslices ? b.slice : 0; }
static inline bool bit(const uint64_t *s, int i) { return s[i / 64] >> (i % 64) & 1; }
static inline void set_bit(uint64_t *s, int i) { s[i / 64] |= 1ull << (i % 64); }

/* engine_links.c: the link and time model */
/* Bandwidth and latency of the link src -> dst (node link or the link between nodes). */
void elink_params(const eng *e, int src, int dst, double *bw, double *lat);
/* Whether src -> dst crosses nodes through the NICs: --ranks-per-node G given, N > G, and the
 * two ranks on different nodes. Such a link's bw is its NIC's, shared by all of a node's flows. */
bool elink_nic(const eng *e, int src, int dst);
/* Put the channel's next matched transfer on its link once its buffer is there; -1 out of memory. */
wp_result elink_start(eng *e, chan *c);
wp_result elink_start_all(eng *e);
/* The time of the next event after e->now (INFINITY when none); first shares the NICs among
 * the flows between nodes (their rates hold until that event). */
double elink_next_time(eng *e);
/* Move to time t: bytes on every busy link, last bytes left, arrivals, step decisions; -1 out of memory. */
wp_result elink_advance_time(eng *e, double t);

/* engine_host.c: costs.host's side of LOAD, ACC and UPDATE (engine.h); scale is the share of a
 * chunk the action covers (run_for's: 1/S for a slice). ehost_load: the n instances a LOAD
 * created, absent until their copy up ends; ehost_acc: the n a ACC drains, not to be written
 * until their copy down ends; ehost_update: master (c, k)'s next version. ehost_wait: DONE when
 * t has come, else BLOCKED with the rank idle until t (REDUCE, TOUT, TIN). */
wp_result ehost_setup(eng *e);
void ehost_teardown(eng *e);
wp_result ehost_load(eng *e, int r, int step, const wp_action *a, inst **in, int n, double scale);
wp_result ehost_acc(eng *e, int r, int step, const wp_action *a, inst **in, int n, double scale);
void ehost_update(eng *e, int r, int step, int c, int k, double scale);
int ehost_wait(eng *e, int r, double t);
/* REDUCE on rank r: the fp32 gradient windows of its to_master W-passes go down first (once a
 * step); then DONE once its accumulators are complete, else BLOCKED. */
int ehost_reduce(eng *e, int r, int step);
double ehost_next_time(const eng *e);
void ehost_advance_time(eng *e, double t, double tol);

#endif
