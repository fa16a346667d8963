/* The executor's state, shared by executor.c (actions) and xfer.c (transfers and waits). */
#ifndef WP_RUNTIME_RT_IMPL_H
#define WP_RUNTIME_RT_IMPL_H

#include "bufpool.h"
#include "seq_split.h"
#include "executor.h"
#include "compute_pace.h"
#include "result.h"
#include "streams.h"
#include "replay.h"

/* Activation state of one (chunk, mb), with the token ids it reads in its backward. */
typedef struct {
    bool used;
    int chunk, mb;
    wp_acts *a;
    int32_t *d_tok, *d_tgt; /* backend [b*s] */
} rt_act;

/* A SEND waiting for its buffer to arrive. */
typedef struct {
    wp_buf b;
    int peer, channel;
} rt_deferred;

/* A device action of the step whose timers are still to be read. */
typedef struct {
    const wp_action *x;
    int ai;      /* its index in the list (its timers: tm[2 ai], tm[2 ai + 1]) */
    int ev;      /* its trace event, -1 none */
    double waited; /* host time it spent waiting for peers between its timers */
} rt_timed;

struct wp_rt {
    rt_config c;
    wp_kern *k;
    rt_pool pool;
    int seg_t[WP_MAX_SEGMENTS + 1]; /* sequence segment boundaries (runtime/units.h) */
    int n_acts, cap_acts;
    rt_act *acts;
    int n_def, cap_def;
    rt_deferred *def;
    bool *blocked;          /* [nranks * WP_MAX_CHANNELS], scratch of post_deferred */
    void *scratch_out;      /* compute dtype [T*h]: an output before it is rounded to the wire */
    int32_t *h_tok, *h_tgt; /* host [b*s] */
    /* the current step */
    int64_t step;
    int ai;                 /* action index */
    double loss_sum;
    int64_t tokens;
    wp_step_decision d;
    double lr;
    double wait_s;
    rt_pace pace;           /* --device-tflops: least duration of each compute action */
    int64_t paced_n, over_n; /* compute actions paced, and those whose real work outlasted the budget */
    double over_s;          /* by how much, in all */
    /* measurements */
    double t_origin;
    /* each device action's duration (the backend's timers: the device's clock on a GPU) summed
     * per op and chunk over the steps after the first; the first step's apart (warm-up: cuDNN
     * plans, cuBLAS heuristics, first-touch allocations), used only where no later step ran */
    double op_sum[WP_OP_COUNT][WP_MAX_CHUNKS], op_n[WP_OP_COUNT][WP_MAX_CHUNKS];
    double op_warm[WP_OP_COUNT][WP_MAX_CHUNKS], op_warm_n[WP_OP_COUNT][WP_MAX_CHUNKS];
    wp_kern_replay **rp;    /* --graphs: one per action of the rank's list, made at its first run */
    int n_rp;
    int64_t rp_count[3];    /* rt_replay_counts */
    char rp_why[160];
    int64_t steps_run;      /* rt_step calls that completed */
    /* timers: a pair per device action of the list (made on its first run), read at the step's
     * end; ref marks the step's start at host time ref_s */
    wp_kern_timer **tm;     /* [n_tm = 2 * list length] */
    int n_tm;
    wp_kern_timer *ref;
    double ref_s;
    rt_timed *timed;        /* this step's device actions, in order */
    int n_timed, cap_timed;
    int n_ev, cap_ev;
    rt_event *ev;
    int n_xev, cap_xev;
    rt_xfer_event *xev;
};

/* xfer.c. The int functions of this header but rt_xfer_begin (an index, below) return 0, or 1
 * with one line in err; rt_fail writes that line (rank, step and the action under way before the
 * reason) and returns 1. */
wp_result rt_fail(wp_rt *rt, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Poll every pending request and post the queued sends whose data arrived. */
wp_result rt_progress(wp_rt *rt, char *err, size_t errlen);
/* Wait until e's data is present and, with writable, its sends are all done (queued ones too). */
wp_result rt_wait(wp_rt *rt, rt_entry *e, bool writable, char *err, size_t errlen);
/* Wait until no SEND is queued (before REDUCE: a relay must not wait behind a collective). */
wp_result rt_drain_deferred(wp_rt *rt, char *err, size_t errlen);
/* events.c (cfg.record; otherwise they do nothing): a transfer posted now, its end, and a wait
 * of [t0, t1] (wp_now() times). rt_xfer_begin returns the new event's index, or -1 when nothing
 * was recorded (recording off, or no memory for the event: recording is best effort): a
 * sentinel that rt_xfer_end ignores, not an error code. */
int rt_xfer_begin(wp_rt *rt, rt_xfer_kind kind, const rt_entry *e, int peer, int channel);
void rt_xfer_end(wp_rt *rt, int ev);
void rt_wait_event(wp_rt *rt, const char *what, double t0, double t1);
/* pace.c: until the monotonic time `until`, wait as an idle device (transfers keep moving). */
wp_result rt_pace_hold(wp_rt *rt, double until, char *err, size_t errlen);
wp_result rt_send(wp_rt *rt, const wp_action *a, char *err, size_t errlen);
wp_result rt_recv(wp_rt *rt, const wp_action *a, char *err, size_t errlen);

#endif
