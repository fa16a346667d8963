/* The job runner (job.h). */
#include "job.h"

#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "clock.h"
#include "local.h"
#include "mpi_boot.h"
#include "notice.h"
#include "ring_warn.h"
#include "sock.h"

int wp_job_check(const wp_job_cfg *cfg, char *err, size_t errlen) {
    const tp_row *k = cfg->transport;
    if (cfg->nranks < 1) {
        snprintf(err, errlen, "--nranks %d: need at least one rank", cfg->nranks);
        return 2;
    }
    if (k->device_memory && !cfg->cuda_backend) {
        snprintf(err, errlen, "--transport %s moves GPU memory: it needs --backend cuda", k->name);
        return 2;
    }
    return k->check ? k->check(cfg, err, errlen) : 0;
}

static int begin(const wp_job_cfg *cfg, void *arg, int first_rank, char *err, size_t errlen) {
    return cfg->process_begin ? cfg->process_begin(arg, first_rank, err, errlen) : 0;
}

static int end(const wp_job_cfg *cfg, void *arg, int first_rank, int rc, char *err, size_t errlen) {
    return cfg->process_end ? cfg->process_end(arg, first_rank, rc, err, errlen) : rc;
}

/* This process is one rank of a job started by a launcher. */
static int run_launched_rank(const wp_job_cfg *cfg, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    if (mpi_boot_env(err, errlen)) return 1;
    wp_boot_info bi;
    if (boot_from_environ(&bi, err, errlen) != 0) return 2;
    if (cfg->nranks_given && bi.world != cfg->nranks) {
        snprintf(err, errlen, "--nranks %d but the launcher (%s) started %d ranks", cfg->nranks, bi.launcher, bi.world);
        return 2;
    }
    if (bi.rank == 0 && !bi.secret[0]) /* once per job: only rank 0 says it */
        ring_warn("the %d ranks of job '%s' (from %s) are not authenticated: any process that reaches %s:%d may "
                  "join; to refuse strangers set WEIPIPE_SECRET to the same value on every rank",
                  bi.world, bi.job_id, bi.job_id_from, bi.master_addr, bi.master_port);
    bi.job_flags = cfg->job_flags;
    if (bi.notice_inherited) notice_adopt(bi.notice_fd); /* watched until the transport is up */
    /* Listeners bind the interface that reaches MASTER_ADDR (loopback when it is loopback),
     * which is then the address the other ranks dial: on a cluster the default --bind
     * (127.0.0.1) would advertise an address no other host can reach. */
    wp_job_cfg routed = *cfg;
    char note[200];
    if (!cfg->net.bind_given) {
        char why[256];
        if (sock_route_addr(bi.master_addr, bi.master_port, routed.net.bind, sizeof routed.net.bind, why, sizeof why)) {
            snprintf(err, errlen, "rank %d: MASTER_ADDR '%s' is unreachable from this host: %s (--bind ADDR picks the "
                     "interface by hand)", bi.rank, bi.master_addr, why);
            return 2;
        }
        snprintf(note, sizeof note, "%.64s, the interface that routes to MASTER_ADDR %.64s", routed.net.bind, bi.master_addr);
    } else {
        snprintf(note, sizeof note, "%.64s (--bind)", cfg->net.bind);
    }
    tp_job_conn c = {0};
    double t0 = wp_now();
    int rc = cfg->transport->open(&bi, &routed, &c, err, errlen);
    notice_watch(false); /* from here a dead peer shows as a closed connection (notice.h) */
    if (rc != 0) return rc;
    wp_rank_ctx ctx = {.rank = bi.rank, .world = bi.world, .local_rank = bi.local_rank, .t = c.t, .ctl = c.ctl};
    /* on rank 0: from listening until the last of the world joined and got the address table */
    snprintf(ctx.addr_note, sizeof ctx.addr_note, "%s; rendezvous of %d ranks in %.3f s", note, bi.world, wp_now() - t0);
    rc = begin(cfg, arg, bi.rank, err, errlen);
    if (rc == 0) {
        rc = fn(&ctx, arg);
        if (rc != 0) {
            /* as the rank wrote it: the launcher labels its lines (our own launcher prefixes
             * "[rank R] ", torchrun and srun --label theirs) */
            snprintf(err, errlen, "%s", ctx.err[0] ? ctx.err : "failed");
        }
        rc = end(cfg, arg, bi.rank, rc, err, errlen);
    }
    if (rc != 0) ctl_abort(c.ctl, err);
    cfg->transport->close(&c);
    return rc;
}

/* A job of one rank runs in this thread, and its failure is reported as the rank wrote it
 * (there is no other rank to tell apart). */
static int run_single(const wp_job_cfg *cfg, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    wp_local_world *w;
    if (local_world_create(1, &cfg->net, &w, err, errlen)) return 1;
    wp_rank_ctx ctx = {.rank = 0, .world = 1, .t = local_transport(w, 0), .ctl = local_control(w, 0)};
    int rc = fn(&ctx, arg);
    if (rc != 0) snprintf(err, errlen, "%s", ctx.err[0] ? ctx.err : "failed");
    local_world_destroy(w);
    return rc;
}

static int run_threads(const wp_job_cfg *cfg, int n, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    int rc = begin(cfg, arg, 0, err, errlen);
    if (rc != 0) return rc;
    rc = n == 1 ? run_single(cfg, fn, arg, err, errlen) : launch_threads(n, &cfg->net, fn, arg, err, errlen);
    return end(cfg, arg, 0, rc, err, errlen);
}

int wp_job_run(const wp_job_cfg *cfg, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    int rc = wp_job_check(cfg, err, errlen);
    if (rc != 0) return rc;
    bool launched = boot_launched();
    if (cfg->transport->meet == TP_MEET_THREADS) {
        if (launched) {
            snprintf(err, errlen, "--transport %s runs all ranks as threads of one process; under a launcher "
                                  "(RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK set) use --transport tcp",
                     cfg->transport->name);
            return 2;
        }
        return run_threads(cfg, cfg->nranks, fn, arg, err, errlen);
    }
    if (launched) return run_launched_rank(cfg, fn, arg, err, errlen);
    if (cfg->nranks == 1) return run_threads(cfg, 1, fn, arg, err, errlen);
    return launch_local(0, NULL, cfg->nranks, cfg->launch_grace, NULL, err, errlen);
}
