/* The control channel, in memory (local) and over tcp (4 processes):
 *  - allreduce sum / max / min of seeded values whose magnitudes differ by 1e16, so that only
 *    a sum in rank order gives the expected bits; every rank must get identical bits;
 *  - NaN on one rank propagates through max;
 *  - broadcast of random bytes from the last rank; a run of barriers and allreduces;
 *  - the status grid gathers every rank's note (asked by the last rank);
 *  - a rank that calls a different collective fails the job on every rank, named.
 * usage: test_control local|tcp */
#include <math.h>
#include <string.h>

#include "ring_harness.h"

#define NV 6

static double value(int rank, int i) {
    uint64_t h = rh_mix((uint64_t)rank * 131 + (uint64_t)i);
    double mag = (i % 2) ? 1e16 : 1.0;
    return mag * ((double)(h >> 11) / 9007199254740992.0 - 0.5) * (rank + 1);
}

static int reduce_checks(wp_rank_ctx *ctx) {
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    for (int op = CTL_SUM; op <= CTL_MIN; op++) {
        double v[NV], want[NV];
        for (int i = 0; i < NV; i++) {
            v[i] = value(ctx->rank, i);
            want[i] = value(0, i);
            for (int r = 1; r < ctx->world; r++) {
                double x = value(r, i);
                want[i] = op == CTL_SUM ? want[i] + x : op == CTL_MAX ? fmax(want[i], x) : fmin(want[i], x);
            }
        }
        RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, (ctl_op)op, v, NV, e, el) == 0, "allreduce: %s", e);
        RANK_CHECK(ctx, memcmp(v, want, sizeof v) == 0, "allreduce op %d differs from the rank-order result", op);
        /* every rank got the same bits: reduce them again with max and min */
        double hi[NV], lo[NV];
        memcpy(hi, v, sizeof v);
        memcpy(lo, v, sizeof v);
        RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_MAX, hi, NV, e, el) == 0 && ctl_allreduce(ctx->ctl, CTL_MIN, lo, NV, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, memcmp(hi, v, sizeof v) == 0 && memcmp(lo, v, sizeof v) == 0, "ranks got different results");
    }
    double flag[2] = {ctx->rank == 2 ? NAN : 1.0, (double)ctx->rank};
    RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_MAX, flag, 2, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, isnan(flag[0]) && flag[1] == ctx->world - 1, "max should propagate NaN: %g %g", flag[0], flag[1]);
    return 0;
}

static int bcast_and_barriers(wp_rank_ctx *ctx) {
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    char buf[1001];
    int root = ctx->world - 1;
    if (ctx->rank == root) rh_fill(buf, sizeof buf, 77);
    else memset(buf, 0, sizeof buf);
    RANK_CHECK(ctx, ctl_broadcast(ctx->ctl, root, buf, sizeof buf, e, el) == 0, "broadcast: %s", e);
    RANK_CHECK(ctx, rh_mismatch(buf, sizeof buf, 77) < 0, "broadcast payload differs");
    for (int i = 0; i < 20; i++) {
        double x = i;
        RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "barrier %d: %s", i, e);
        RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_SUM, &x, 1, e, el) == 0 && x == (double)i * ctx->world, "allreduce %d", i);
    }
    return 0;
}

static int status_check(wp_rank_ctx *ctx) {
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    ctl_set_status(ctx->ctl, "action %d: RECV W[%d]@1 from rank %d", 10 + ctx->rank, ctx->rank, (ctx->rank + 1) % ctx->world);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    if (ctx->rank == ctx->world - 1) {
        char *grid;
        RANK_CHECK(ctx, ctl_status_grid(ctx->ctl, &grid, e, el) == 0, "grid: %s", e);
        printf("status grid:\n%s", grid);
        int lines = 0;
        for (const char *p = grid; *p; p++) lines += *p == '\n';
        RANK_CHECK(ctx, lines == ctx->world, "grid has %d lines for %d ranks", lines, ctx->world);
        for (int r = 0; r < ctx->world; r++) {
            char want[96];
            snprintf(want, sizeof want, "rank %d: action %d: RECV W[%d]@1 from rank %d [for ", r, 10 + r, r, (r + 1) % ctx->world);
            RANK_CHECK(ctx, strstr(grid, want), "grid lacks '%s'", want);
        }
        free(grid);
    }
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    return 0;
}

static int good_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    return reduce_checks(ctx) || bcast_and_barriers(ctx) || status_check(ctx);
}

/* Rank 1 calls a barrier while the others call an allreduce: all must fail, naming rank 1. */
static int mismatch_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    double x = 1;
    char e[600];
    int rc = ctx->rank == 1 ? ctl_barrier(ctx->ctl, e, sizeof e) : ctl_allreduce(ctx->ctl, CTL_SUM, &x, 1, e, sizeof e);
    RANK_CHECK(ctx, rc != 0, "a mismatched collective succeeded on rank %d", ctx->rank);
    RANK_CHECK(ctx, strstr(e, "rank 1 called barrier while rank 0 called allreduce(sum of 1 values)"),
               "rank %d: unexpected message: %s", ctx->rank, e);
    if (ctx->rank == 0) printf("mismatch: %s\n", e);
    return 0;
}

static void run(bool tcp, wp_rank_fn fn, const char *name) {
    wp_net_opts net;
    rh_net(&net, 1);
    const int n = 4;
    if (tcp) {
        int exits[4];
        pid_t pgid;
        CHECK(rh_run_tcp(n, &net, fn, NULL, 30, exits, NULL, &pgid) == 0, "%s: ranks hung", name);
        for (int r = 0; r < n; r++) CHECK(exits[r] == 0, "%s: rank %d exited with %d", name, r, exits[r]);
        CHECK(rh_group_gone(pgid), "%s: processes left behind", name);
    } else {
        char err[600];
        CHECK(rh_run_local(n, &net, fn, NULL, err, sizeof err) == 0, "%s: %s", name, err);
    }
    printf("ok: %s over %s\n", name, tcp ? "tcp" : "local");
}

int main(int argc, char **argv) {
    bool tcp = argc > 1 && strcmp(argv[1], "tcp") == 0;
    run(tcp, good_rank, "collectives and status");
    run(tcp, mismatch_rank, "mismatched collective");
    return 0;
}
