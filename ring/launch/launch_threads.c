/* launch_threads: ranks as threads over one local world (see launch.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "local.h"

typedef struct thread_job {
    wp_rank_fn fn;
    void *arg;
    pthread_mutex_t mu;
    int first_rank, first_rc; /* first failure, in the order ranks returned */
    char first_err[1100];
} thread_job;

typedef struct thread_arg {
    wp_rank_ctx ctx;
    thread_job *job;
} thread_arg;

static void *rank_main(void *p) {
    thread_arg *a = p;
    wp_rank_ctx *ctx = &a->ctx;
    int rc = a->job->fn(ctx, a->job->arg);
    if (rc == 0) return NULL;
    if (!ctx->err[0]) snprintf(ctx->err, sizeof ctx->err, "failed with code %d", rc);
    pthread_mutex_lock(&a->job->mu);
    if (a->job->first_rank < 0) {
        a->job->first_rank = ctx->rank;
        a->job->first_rc = rc;
        snprintf(a->job->first_err, sizeof a->job->first_err, "rank %d: %s", ctx->rank, ctx->err);
    }
    pthread_mutex_unlock(&a->job->mu);
    ctl_abort(ctx->ctl, ctx->err); /* wake the others */
    return NULL;
}

int launch_threads(int nranks, const wp_net_opts *net, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    wp_local_world *w;
    if (local_world_create(nranks, net, &w, err, errlen) != 0) return 1;
    thread_job job = {.fn = fn, .arg = arg, .first_rank = -1};
    thread_arg *args = calloc((size_t)nranks, sizeof *args);
    pthread_t *threads = calloc((size_t)nranks, sizeof *threads);
    if (!args || !threads || pthread_mutex_init(&job.mu, NULL) != 0) {
        free(args);
        free(threads);
        local_world_destroy(w);
        snprintf(err, errlen, "launch_threads: out of memory for %d ranks", nranks);
        return 1;
    }
    int started = 0;
    for (int r = 0; r < nranks; r++) {
        args[r].ctx = (wp_rank_ctx){.rank = r, .world = nranks, .t = local_transport(w, r), .ctl = local_control(w, r)};
        args[r].job = &job;
        ctl_attach(args[r].ctx.ctl, args[r].ctx.t);
        if (pthread_create(&threads[r], NULL, rank_main, &args[r]) != 0) {
            char why[96];
            snprintf(why, sizeof why, "launch_threads: cannot start the thread of rank %d", r);
            pthread_mutex_lock(&job.mu);
            if (job.first_rank < 0) {
                job.first_rank = r;
                job.first_rc = 1;
                snprintf(job.first_err, sizeof job.first_err, "%s", why);
            }
            pthread_mutex_unlock(&job.mu);
            ctl_abort(args[r].ctx.ctl, why);
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
    int rc = 0;
    if (job.first_rank >= 0) {
        snprintf(err, errlen, "%s", job.first_err);
        rc = job.first_rc;
    }
    pthread_mutex_destroy(&job.mu);
    free(args);
    free(threads);
    local_world_destroy(w);
    return rc;
}
