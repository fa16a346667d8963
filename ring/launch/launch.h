/* Starting the ranks of a job on one machine.
 *
 * launch_local: `weipipe train --nranks N` (tcp) starts N copies of this very program with the
 * launcher variables bootstrap.h reads (MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, WEIPIPE_JOB_ID and a random WEIPIPE_SECRET),
 * forwards their output line by line prefixed "[rank R] ", and waits. The port is one the
 * launcher binds and listens on itself (the kernel picks it); rank 0 inherits that socket
 * across exec, its number in WEIPIPE_LISTEN_FD (bootstrap.h), and rendezvouses on it, so no
 * other process can take the port in between. The other ranks do not inherit it, and the
 * launcher closes its own copy once the ranks are started. When one rank exits
 * non-zero or dies from a signal, that first failure is reported; the others get `timeout`
 * seconds to end by themselves (the control channel tells them), then the rest are killed.
 * The children share one process group and die with the launcher (PR_SET_PDEATHSIG);
 * SIGINT / SIGTERM to the launcher are forwarded to them. No process is left behind.
 *
 * launch_threads: `--transport local`: N threads in this process, each with its rank's local
 * transport and control channel; returns the first failure. */
#ifndef WP_RING_LAUNCH_H
#define WP_RING_LAUNCH_H

#include <stddef.h>

#include "control.h"
#include "transport.h"

typedef struct wp_launch_result {
    int first_rank; /* the first rank that failed, -1 if none */
    int exit_code;  /* its exit status, -1 when a signal ended it */
    int signal;     /* the signal that ended it, 0 when it exited */
    int pgid;       /* the children's process group */
    int killed;     /* ranks still running after the grace period, killed */
    int interrupted;/* a signal the launcher got and forwarded (SIGINT, SIGTERM), else 0 */
    char last_words[256]; /* the first failed rank's last line on stderr (its reason, usually) */
} wp_launch_result;

/* argv: the command line to run N times (argv[0] included; NULL: this process's own, from
 * /proc/self/cmdline); the program is /proc/self/exe. Returns 0 when every rank exited 0;
 * otherwise 1 (2 when the first failure exited 2: bad usage is the same on every rank) with
 * a one-line message in err: which rank ended first and how, and its last stderr line (a
 * rank that fails because another aborted names that one there). res may be NULL. */
int launch_local(int argc, char **argv, int nranks, double timeout, wp_launch_result *res, char *err,
                 size_t errlen);

/* The job id the launcher gives its ranks (WEIPIPE_JOB_ID): "local-PID-TIME-" and 16 hex
 * digits from getrandom, so that no one can guess it. 0, or -1 with err. */
int launch_job_id(char *out, size_t outlen, char *err, size_t errlen);

/* What a rank's thread gets. fn returns 0, or non-zero after writing a one-line reason to
 * ctx->err; the launcher then aborts the world so the other ranks' waits fail too. */
typedef struct wp_rank_ctx {
    int rank, world;
    int local_rank; /* the accelerator this rank uses on its host (0 for threads: they share one) */
    wp_transport *t;
    wp_control *ctl;
    char err[1024]; /* room for a failure that names the one it follows (xfer.c: transport_fail) */
    /* A launched rank: the address its listeners bind and advertise and why that one, and how
     * long its rendezvous took, for the command to print once at start ("10.0.0.2, the
     * interface that routes to MASTER_ADDR host1; rendezvous of 6 ranks in 0.012 s"); "" for
     * threads. */
    char addr_note[256];
} wp_rank_ctx;
typedef int (*wp_rank_fn)(wp_rank_ctx *ctx, void *arg);

/* Run fn on nranks threads over one local world. Returns 0, or the first failing rank's
 * return code with "rank R: <its reason>" in err. */
int launch_threads(int nranks, const wp_net_opts *net, wp_rank_fn fn, void *arg, char *err, size_t errlen);

#endif
