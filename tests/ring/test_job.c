/* wp_job_run, the one entry point a command uses: the same rank function (a ring exchange, an
 * allreduce) over --transport local (threads) and --transport tcp, where the process launches
 * copies of itself that rendezvous from the launcher's variables. In 'fail' mode rank 1 fails:
 * the job ends with an error naming it, and no rank hangs.
 * usage: test_job ok|fail train --transport local|tcp --nranks N [flags] */
#include <string.h>

#include "adapters.h"
#include "job.h"
#include "ring_harness.h"

#define BYTES 100003

static int ring_rank(wp_rank_ctx *ctx, void *arg) {
    bool fail = *(bool *)arg;
    char *out = malloc(BYTES), *in = malloc(BYTES), *e = ctx->err;
    size_t el = sizeof ctx->err;
    RANK_CHECK(ctx, out && in, "out of memory");
    int next = (ctx->rank + 1) % ctx->world, prev = (ctx->rank + ctx->world - 1) % ctx->world;
    wp_request *s, *r;
    rh_fill(out, BYTES, (uint64_t)ctx->rank);
    RANK_CHECK(ctx, tp_post_recv(ctx->t, prev, WP_CH_WFWD, in, BYTES, "W[prev]", &r, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, tp_post_send(ctx->t, next, WP_CH_WFWD, out, BYTES, "W[mine]", &s, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, tp_wait(&r, 10, e, el) == 0 && tp_wait(&s, 10, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, rh_mismatch(in, BYTES, (uint64_t)prev) < 0, "ring payload from rank %d differs", prev);
    free(out);
    free(in);
    double sum = ctx->rank;
    RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_SUM, &sum, 1, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, sum == ctx->world * (ctx->world - 1) / 2.0, "allreduce gave %g", sum);
    RANK_CHECK(ctx, !(fail && ctx->rank == 1), "planned failure of rank 1");
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc > 3, "usage: test_job ok|fail train --transport T --nranks N");
    bool fail = strcmp(argv[1], "fail") == 0;
    static wp_opts o;
    char err[600];
    CHECK(cli_parse(argc - 2, argv + 2, &o, err, sizeof err) == 0, "%s", err);
    o.timeout = 10;
    wp_job_cfg cfg;
    CHECK(job_cfg_from_opts(&o, &cfg, err, sizeof err) == 0, "%s", err);
    int rc = wp_job_run(&cfg, ring_rank, &fail, err, sizeof err);
    if (getenv("RANK")) { /* a launched rank: the launcher reports */
        if (rc) fprintf(stderr, "%s\n", err);
        return rc;
    }
    printf("wp_job_run returned %d%s%s\n", rc, rc ? ": " : "", rc ? err : "");
    if (!fail) CHECK(rc == 0, "the job failed");
    else
        CHECK(rc == 1 && strstr(err, "rank") && (strstr(err, "planned failure of rank 1") || strstr(err, "failed first")),
              "a failing rank should fail the job with a message");
    if (fail && o.transport == WP_TRANSPORT_local) CHECK(strstr(err, "rank 1: "), "local: the first failure is rank 1's");
    printf("ok\n");
    return 0;
}
