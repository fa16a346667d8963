/* The control channel: small collective operations and job-wide aborts, next to the data
 * transport. Over tcp it is the set of rendezvous connections (every rank to rank 0, a star);
 * the local transport provides the same calls in memory.
 *
 * Collectives (allreduce, broadcast, barrier) must be called by every rank in the same
 * order; a rank that calls a different collective, or does not arrive within --timeout,
 * fails the job naming it. Results are computed once, by rank 0, in rank order, so every rank
 * gets bit-identical values (a loss or a gradient norm compares equal everywhere).
 *
 * Aborts reach every rank: a rank that fails calls ctl_abort, rank 0 relays it to all, and
 * each rank aborts its attached data transport so that no executor stays blocked in a wait.
 * A rank whose control connection drops without an orderly goodbye counts as failed.
 *
 * Status: each rank keeps a one-line note of what it is doing (its executor sets it before
 * every blocking wait); ctl_status_grid gathers every rank's note through rank 0 without the
 * other executors' help (a helper thread answers), so it works exactly when ranks are stuck:
 * the "where is everyone" report printed before a timeout ends the job. */
#ifndef WP_RING_CONTROL_H
#define WP_RING_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "transport.h"

typedef struct wp_control wp_control;

typedef enum { CTL_SUM = 0, CTL_MAX = 1, CTL_MIN = 2 } ctl_op;

#define CTL_STATUS_MAX 200    /* characters of one rank's status note */
#define CTL_MAX_VALUES 4096   /* doubles in one allreduce */
#define CTL_MAX_BCAST (1 << 20)

int ctl_rank(const wp_control *c);
int ctl_world(const wp_control *c);

/* vals[0..n) in place: the sum / max / min over all ranks (sums added in rank order; NaN
 * propagates). Returns 0, or 1 with a message. */
int ctl_allreduce(wp_control *c, ctl_op op, double *vals, int n, char *err, size_t errlen);
/* Every rank's buf[0..bytes) becomes root's (bytes equal on all ranks, at most CTL_MAX_BCAST). */
int ctl_broadcast(wp_control *c, int root, void *buf, size_t bytes, char *err, size_t errlen);
int ctl_barrier(wp_control *c, char *err, size_t errlen);

/* This rank's status note (printf-style; truncated to CTL_STATUS_MAX). Cheap, never blocks
 * on other ranks. */
void ctl_set_status(wp_control *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* When this rank's note was last set (wp_now() seconds; 0 before the first). */
double ctl_status_at(wp_control *c);
/* One line per rank, "rank R: <note> [for 12.3 s]", or "(no answer within 2 s: stopped or
 * dead?)" for a rank that did not reply. *grid is malloc'd (caller frees). Any rank may call
 * it at any time. Returns 0, or 1 with a message. */
int ctl_status_grid(wp_control *c, char **grid, char *err, size_t errlen);

/* Fail the whole job: every rank's control calls and attached transport fail with
 * "rank R failed: <reason>". Safe from any thread; keeps the first cause. */
void ctl_abort(wp_control *c, const char *reason);
bool ctl_failed(wp_control *c, char *why, size_t whylen);
/* The ranks that did not answer rank 0's last status query (the stall report's "no answer"),
 * named with their addresses and the ranks sharing their host; false when every rank answered.
 * On every rank: rank 0 sends them to all (tcp: a rank silent 1 s into the query counts, and the
 * query's end corrects it). A peer that times out may only be waiting for a dead one itself:
 * these name the dead, from rank 0's evidence. */
bool ctl_unanswered(wp_control *c, char *out, size_t outlen);

/* Every rank's memory as of a step (resident and allocated bytes, world entries each: the
 * step's exchange carries them): a rank that vanishes is named with its last figure, and as the
 * OOM killer's when this cgroup's oom_kill count (ring/oom.h) rose since the channel opened. */
void ctl_note_memory(wp_control *c, const double *resident, const double *allocated, long long step);

/* Aborts reaching this rank also abort t (tp_abort); NULL detaches. Close the control
 * channel (or detach) before closing t. */
void ctl_attach(wp_control *c, wp_transport *t);

/* Orderly goodbye (rank 0 lingers up to --timeout for the others' goodbyes, so that aborts
 * still travel while they finish), then free. Local controls are freed with their world. */
void ctl_close(wp_control *c);

#endif
