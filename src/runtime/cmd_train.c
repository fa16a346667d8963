/* weipipe train: prepare the job once, then run its ranks: one rank in this thread (N = 1),
 * N threads over the local transport (--transport local), or N processes over tcp (started by
 * our own launcher, or by torchrun / srun / mpirun, which bootstrap.h recognises). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "wp_config.h"
#include "io/stop.h"
#include "log.h"
#include "mpi_boot.h"
#include "ring/bootstrap.h"
#include "ring/device_tp.h"
#include "ring/rdma.h"
#include "ring/launch.h"
#include "ring/local.h"
#include "train.h"

static void trace_path(const train_job *j, int rank, char *path, size_t len) {
    if (rank > 0)
        snprintf(path, len, "%s.rank-%d", j->o.trace, rank);
    else
        snprintf(path, len, "%s", j->o.trace);
}

static int open_trace(train_job *j, int rank, char *err, size_t errlen) {
    if (!j->o.trace[0]) return 0;
    char path[WP_PATH_MAX + 32];
    trace_path(j, rank, path, sizeof path);
    j->trace = trace_open(path, err, errlen);
    return j->trace ? 0 : 1;
}

/* A run that failed leaves no half-written trace (not valid JSON, and a bad-input run must
 * leave no output file at all). */
static int close_trace(train_job *j, int rank, int rc, char *err, size_t errlen) {
    if (!j->trace) return rc;
    wp_trace *t = j->trace;
    j->trace = NULL;
    if (rc == 0) return trace_close(t, err, errlen);
    char why[256], path[WP_PATH_MAX + 32];
    trace_close(t, why, sizeof why);
    trace_path(j, rank, path, sizeof path);
    unlink(path);
    return rc;
}

static int rank_thread(wp_rank_ctx *ctx, void *arg) {
    return train_rank(arg, ctx->rank, 0, ctx->t, ctx->ctl, ctx->err, sizeof ctx->err);
}

static int run_single(train_job *j, char *err, size_t errlen) {
    wp_local_world *w;
    if (local_world_create(1, &j->net, &w, err, errlen)) return 1;
    int rc = train_rank(j, 0, 0, local_transport(w, 0), local_control(w, 0), err, errlen);
    local_world_destroy(w);
    return rc;
}

/* The rank's transport: tcp (nccl is opened over it later), or RDMA over libibverbs whose
 * connection set-up and control channel ride on the tcp rendezvous (oob). */
static int open_rank_transport(train_job *j, const wp_boot_info *bi, wp_transport **t, wp_transport **oob,
                               wp_control **ctl, char *err, size_t errlen) {
    if (strcmp(j->o.transport, "ibverbs") != 0)
        return wp_job_open_tcp(bi, &j->net, t, ctl, err, errlen) ? 1 : 0;
#if WP_HAVE_IBVERBS
    return rdma_job_open(bi, &j->net, &j->o, t, oob, ctl, err, errlen);
#else
    (void)oob;
    snprintf(err, errlen, "--transport ibverbs: not built into this weipipe (configure with -Dibverbs=enabled and libibverbs-dev)");
    return 2;
#endif
}

static void close_rank_transport(wp_transport *t, wp_transport *oob, wp_control *ctl) {
#if WP_HAVE_IBVERBS
    if (oob) {
        rdma_job_close(t, oob, ctl);
        return;
    }
#else
    (void)oob;
#endif
    ctl_close(ctl);
    tp_close(t);
}

/* A rank of a launched job: rendezvous over tcp, train, and on failure abort the job. */
static int run_tcp_rank(train_job *j, char *err, size_t errlen) {
    wp_boot_info bi;
    if (mpi_boot_env(err, errlen)) return 1;
    int rc = boot_from_environ(&bi, err, errlen);
    if (rc) return 2;
    if (bi.world != j->nranks)
        return snprintf(err, errlen, "--nranks %d but the launcher started %d ranks", j->nranks, bi.world), 2;
    wp_transport *t, *oob = NULL;
    wp_control *ctl;
    rc = open_rank_transport(j, &bi, &t, &oob, &ctl, err, errlen);
    if (rc) return rc;
    rc = open_trace(j, bi.rank, err, errlen);
    if (!rc) rc = train_rank(j, bi.rank, bi.local_rank, t, ctl, err, errlen);
    if (rc) ctl_abort(ctl, err);
    close_rank_transport(t, oob, ctl);
    return close_trace(j, bi.rank, rc, err, errlen);
}

static int run_ranks(train_job *j, char *err, size_t errlen) {
    const char *tr = j->o.transport;
    int rc = tp_device_check(&j->o, err, errlen);
    if (rc) return rc;
    /* nccl and ibverbs: opened over the tcp rendezvous */
    bool over_tcp = strcmp(tr, "tcp") == 0 || strcmp(tr, "nccl") == 0 || strcmp(tr, "ibverbs") == 0;
    if (over_tcp && boot_launched()) return run_tcp_rank(j, err, errlen);
    if (j->nranks == 1 || strcmp(tr, "local") == 0) {
        rc = open_trace(j, 0, err, errlen);
        if (!rc) rc = j->nranks == 1 ? run_single(j, err, errlen) : launch_threads(j->nranks, &j->net, rank_thread, j, err, errlen);
        return close_trace(j, 0, rc, err, errlen);
    }
    if (over_tcp) return launch_local(0, NULL, j->nranks, j->o.timeout, NULL, err, errlen);
    snprintf(err, errlen, "--transport %s: not built into this weipipe (local and tcp are)", tr);
    return 2;
}

int cmd_train(const wp_opts *o) {
    static train_job j; /* holds a copy of the options: large */
    char err[2048];
    if (o->nargs != 0) {
        wp_error("train: takes no positional arguments, got '%s'", o->args[0]);
        return 2;
    }
    if (stop_install(err, sizeof err)) {
        wp_error("%s", err);
        return 1;
    }
    int rc = train_job_prepare(&j, o, err, sizeof err);
    if (!rc) rc = run_ranks(&j, err, sizeof err);
    if (rc) wp_error("%s", err);
    train_job_free(&j);
    return rc;
}
