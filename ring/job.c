/* wp_job_run: one entry point for every job layout (see job.h). */
#include "job.h"

#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "cli/cli.h"

/* This process is one rank of a tcp job started by a launcher. */
static int run_launched_rank(const wp_opts *o, const wp_net_opts *net, wp_rank_fn fn, void *arg, char *err,
                             size_t errlen) {
    wp_boot_info bi;
    int rc = boot_from_environ(&bi, err, errlen);
    if (rc != 0) return 2;
    if (o->set[FLAG_nranks] && o->nranks != bi.world) {
        snprintf(err, errlen, "--nranks %lld but the launcher (%s) started %d ranks", (long long)o->nranks, bi.launcher,
                 bi.world);
        return 2;
    }
    wp_rank_ctx ctx = {.rank = bi.rank, .world = bi.world};
    if (wp_job_open_tcp(&bi, net, &ctx.t, &ctx.ctl, err, errlen) != 0) return 1;
    rc = fn(&ctx, arg);
    if (rc != 0) {
        if (!ctx.err[0]) snprintf(ctx.err, sizeof ctx.err, "failed with code %d", rc);
        ctl_abort(ctx.ctl, ctx.err);
        snprintf(err, errlen, "rank %d: %s", bi.rank, ctx.err);
    }
    wp_job_close(ctx.t, ctx.ctl);
    return rc;
}

int wp_job_run(const wp_opts *o, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    wp_net_opts net;
    int rc = tp_net_from_opts(o, &net, err, errlen);
    if (rc != 0) return rc;
    if (cli_check_choice(FLAG_transport, o->transport, err, errlen) != 0) return 2;
    if (o->nranks < 1) {
        snprintf(err, errlen, "--nranks %lld: need at least one rank", (long long)o->nranks);
        return 2;
    }
    bool launched = boot_launched();
    if (strcmp(o->transport, "local") == 0) {
        if (launched) {
            snprintf(err, errlen, "--transport local runs all ranks as threads of one process; under a launcher "
                                  "(RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK set) use --transport tcp");
            return 2;
        }
        return launch_threads((int)o->nranks, &net, fn, arg, err, errlen) ? 1 : 0;
    }
    if (strcmp(o->transport, "tcp") != 0) {
        snprintf(err, errlen, "--transport %s is not built into this weipipe (use tcp or local)", o->transport);
        return 2;
    }
    if (launched) return run_launched_rank(o, &net, fn, arg, err, errlen);
    if (o->nranks == 1) return launch_threads(1, &net, fn, arg, err, errlen) ? 1 : 0;
    return launch_local(0, NULL, (int)o->nranks, o->timeout, NULL, err, errlen);
}
