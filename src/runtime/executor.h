/* The one executor: runs a rank's action list (schedule/ir.h) for one optimizer step, exactly
 * with the IR's semantics, whatever the strategy. Every strategy-specific decision is in the
 * lists; nothing here branches on the strategy.
 *
 * Transfers: SEND/RECV are posted through the transport with the buffer's name as label and the
 * action's channel. A SEND of a buffer still arriving (a relay) is queued and posted as soon as
 * its receive completes; the queue keeps FIFO order per (peer, channel), as the IR requires.
 * Pending requests are polled (tp_test) between actions and serviced inside every wait, so a
 * relay is delayed at most by the one compute action running when its receive completes.
 * Every wait sets the rank's status note first and fails after --timeout without progress. */
#ifndef WP_RUNTIME_EXECUTOR_H
#define WP_RUNTIME_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "decision.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "control.h"
#include "transport.h"
#include "ir.h"
#include "result.h"

typedef struct wp_rt wp_rt;

typedef struct {
    int rank;
    const wp_schedule *s;
    const wp_layout *L;
    wp_model *m;        /* its kern is the rank's backend */
    wp_optim *o;        /* the chunks this rank owns (s->owner) */
    wp_transport *t;    /* NULL only for N = 1 */
    wp_control *ctl;    /* never NULL (a world of one for N = 1) */
    wp_loader *data;    /* train split */
    double timeout;     /* seconds without progress before a wait fails */
    double clip;        /* global-norm clip; <= 0 off */
    wp_loss_scaler scaler;
    bool record;        /* keep compute events for a trace */
    double t_origin;    /* wp_now() that event times count from (0: rt_create's time) */
    double device_tflops; /* > 0: each compute action lasts at least its FLOPs / this (compute_pace.h) */
    bool graphs;        /* --graphs: compute actions' model calls through replays (kernels/replay.h) */
} rt_config;

typedef struct {
    double loss;            /* the step's loss: the sum over its targets (all micro-batches, all ranks) over their count */
    int64_t tokens;         /* tokens the step read (all ranks' samples) */
    int64_t targets;        /* of them, those that carried a loss (fewer with target masks; 0: loss NaN) */
    bool masked;            /* the data has target masks */
    wp_step_decision d;
    double loss_scale;      /* the scale this step ran with */
    double step_s, compute_s, wait_s;
    /* Launch-boundness (issue 38: measure before reaching for CUDA graphs): issue_s is the host's
     * time inside the device actions' calls, before their sync (kernel launches and the host
     * work between them, peers' waits excluded); device_s the device's busy time of the same
     * actions (its timers). On a GPU, issue_s near device_s means the device waited for the
     * host: the step is launch-bound. On the CPU backend both are the same work. */
    double issue_s, device_s;
    uint64_t sent, recv;    /* payload bytes this step (tp_stats) */
} rt_step_stats;

typedef struct {
    wp_action a;
    int index;     /* its position in the list */
    int64_t step;
    double t0, t1; /* seconds since cfg.t_origin: on the host, from the action's call to its sync */
    bool device;   /* d0, d1 hold the span on the device's clock (kern_timer_on_device) */
    double d0, d1; /* the same origin: when the device started and finished the action's work */
} rt_event;

/* A transfer or a wait of the run (cfg.record). A send lasts from its post to the poll that saw
 * it complete, a receive from its post to the poll that saw its data (polls run between
 * actions, during paced holds and inside waits, so an end is late by at most the real work of
 * one device action); a wait from blocking to waking. */
typedef enum { RT_EV_SEND = 0, RT_EV_RECV, RT_EV_WAIT, RT_EV_SAVE } rt_xfer_kind;

typedef struct {
    rt_xfer_kind kind;
    wp_buf buf;      /* SEND, RECV: the buffer as named when posted */
    int peer, channel;
    size_t bytes;
    int64_t step;
    double t0, t1;   /* seconds since cfg.t_origin; t1 < t0: never completed */
    char what[80];   /* WAIT: what the rank waited for */
} rt_xfer_event;

/* A checkpoint shard's write from t0 to t1 (wp_now() times), recorded as an event (cfg.record)
 * of kind RT_EV_SAVE: the trace shows it as a SAVE span on the compute track. */
void rt_save_event(wp_rt *rt, double t0, double t1);

/* Returns 0, or 1 with a reason (out of memory). */
wp_result rt_create(wp_rt **out, const rt_config *cfg, char *err, size_t errlen);
void rt_destroy(wp_rt *rt);

/* Owners create the carried weights from their masters (LOAD), before the first step. */
wp_result rt_load_carry(wp_rt *rt, char *err, size_t errlen);

/* Run the rank's list once as optimizer step `step` with learning rate lr. Returns 0, or 1 with
 * one line naming the step, the action and what failed. */
wp_result rt_step(wp_rt *rt, int64_t step, double lr, rt_step_stats *st, char *err, size_t errlen);

wp_loss_scaler rt_scaler(const wp_rt *rt);
/* Measured seconds of each device op per chunk so far, summed, and how many ran:
 * sum_s[op * WP_MAX_CHUNKS + c] and count[...] for every op < WP_OP_COUNT (zero for the ops that
 * do not run on the device). Compute ops include their paced hold (compute_pace.h). */
void rt_op_times(const wp_rt *rt, double *sum_s, double *count);
/* Recorded compute and optimizer actions (cfg.record). */
const rt_event *rt_events(const wp_rt *rt, int *n);
/* Pacing (cfg.device_tflops): compute actions paced so far, how many of them took longer than
 * their budget for real (the machine is slower than the speed asked for), and by how much. */
void rt_pace_overrun(const wp_rt *rt, int64_t *paced, int64_t *over, double *over_s);
/* Recorded transfers and waits (cfg.record). */
const rt_xfer_event *rt_xfer_events(const wp_rt *rt, int *n);
/* --graphs: compute actions so far that replayed a recording, were recorded (and launched), ran
 * eagerly (wp_replay_how's order); why the first eager run after the first step was eager ("" none). */
void rt_replay_counts(const wp_rt *rt, int64_t counts[3], const char **why);
/* Most buffers of each kind held at once so far. */
void rt_peak_buffers(const wp_rt *rt, int peak[WP_BUF_KINDS]);

#endif
