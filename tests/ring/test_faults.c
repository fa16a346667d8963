/* Faults over tcp with real processes.
 *  kill:  rank 1 is SIGKILLed in the middle of a paced 32 MiB transfer to rank 2: rank 2's
 *         wait fails at once naming rank 1 and the label (first-hand: not tp_failed_hearsay);
 *         rank 0, which waits for something else, is told through the control channel. Nobody
 *         waits for the timeout.
 *  stop:  rank 1 is SIGSTOPped mid-transfer: rank 2's wait fails after the 1.5 s timeout
 *         ("silent", hearsay), the status grid shows rank 1 as not answering, rank 0's evidence
 *         (the ranks its status query did not hear from) reaches rank 2, and rank 2's abort
 *         reaches rank 0.
 *  abort: in a 4-rank job rank 2 calls ctl_abort; the other three, blocked in waits with a 30 s
 *         timeout, all wake with rank 2's reason.
 * Every case also checks that no process of the job is left. usage: test_faults kill|stop|abort */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring_harness.h"

#define BIG (32u << 20)

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Everyone learns everyone's pid (an allreduce of a one-hot vector). */
static int share_pids(wp_rank_ctx *ctx, double *pids) {
    for (int r = 0; r < ctx->world; r++) pids[r] = r == ctx->rank ? (double)getpid() : 0;
    return ctl_allreduce(ctx->ctl, CTL_SUM, pids, ctx->world, ctx->err, sizeof ctx->err);
}

static bool has(const char *s, const char *what) { return strstr(s, what) != NULL; }

/* Wait for a message that never comes, until the failure reaches this rank (possibly already
 * when it posts). */
static int wait_for_news(wp_rank_ctx *ctx, const char *must_name, int peer) {
    static char buf[16];
    wp_request *r;
    char e[600];
    int rc = tp_post_recv(ctx->t, peer, WP_CH_ACT, buf, sizeof buf, "A[0][0]", &r, e, sizeof e);
    if (rc == 0) rc = tp_wait(&r, 30, e, sizeof e);
    RANK_CHECK(ctx, rc != 0, "rank %d's wait should have failed", ctx->rank);
    RANK_CHECK(ctx, has(e, must_name) && has(e, "A[0][0]"), "rank %d's error does not name %s and its label: %s",
               ctx->rank, must_name, e);
    printf("rank %d got: %s\n", ctx->rank, e);
    return 0;
}

static int kill_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char *buf = malloc(BIG), e[600];
    wp_request *r;
    double pids[3];
    RANK_CHECK(ctx, buf && share_pids(ctx, pids) == 0, "setup: %s", ctx->err);
    if (ctx->rank == 0) {
        free(buf);
        return wait_for_news(ctx, "rank 1", 1);
    }
    if (ctx->rank == 1) {
        rh_fill(buf, BIG, 1);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 2, WP_CH_WFWD, buf, BIG, "W[3]@2", &r, e, sizeof e) == 0, "%s", e);
        nap(0.3);
        raise(SIGKILL);
    }
    RANK_CHECK(ctx, tp_post_recv(ctx->t, 1, WP_CH_WFWD, buf, BIG, "W[3]@2", &r, e, sizeof e) == 0, "%s", e);
    RANK_CHECK(ctx, tp_wait(&r, 10, e, sizeof e) != 0, "the wait should fail");
    RANK_CHECK(ctx, has(e, "rank 1 (127.0.0.1:") && has(e, "W[3]@2") && (has(e, "closed") || has(e, "reset")),
               "rank 2's error should name rank 1, its address and W[3]@2 and say it closed: %s", e);
    RANK_CHECK(ctx, !tp_failed_hearsay(ctx->t), "a closed connection is seen first-hand, not hearsay: %s", e);
    printf("rank 2 got: %s\n", e);
    free(buf);
    return 0;
}

static int stop_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char *buf = malloc(BIG), e[600];
    wp_request *r;
    double pids[3];
    RANK_CHECK(ctx, buf && share_pids(ctx, pids) == 0, "setup: %s", ctx->err);
    if (ctx->rank == 0) {
        free(buf);
        /* Rank 0 hears of rank 1's silence from rank 2 (its abort frame, or the control
         * channel), then stays up for rank 2's status request until rank 2 aborts the job. */
        ctl_set_status(ctx->ctl, "idle: waiting for A[0][0] from rank 1");
        if (wait_for_news(ctx, "rank 1 (127.0.0.1:", 1)) return 1;
        for (int i = 0; i < 1000 && !ctl_failed(ctx->ctl, NULL, 0); i++) nap(0.01);
        RANK_CHECK(ctx, ctl_failed(ctx->ctl, NULL, 0), "rank 2's abort did not reach rank 0");
        return 0;
    }
    if (ctx->rank == 1) {
        rh_fill(buf, BIG, 1);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 2, WP_CH_WFWD, buf, BIG, "W[3]@2", &r, e, sizeof e) == 0, "%s", e);
        nap(0.3);
        raise(SIGSTOP);
        return 0; /* only if someone continues it */
    }
    ctl_set_status(ctx->ctl, "action 7: RECV W[3]@2 from rank 1");
    RANK_CHECK(ctx, tp_post_recv(ctx->t, 1, WP_CH_WFWD, buf, BIG, "W[3]@2", &r, e, sizeof e) == 0, "%s", e);
    RANK_CHECK(ctx, tp_wait(&r, 1.5, e, sizeof e) != 0, "the wait should time out");
    RANK_CHECK(ctx, has(e, "rank 1 (127.0.0.1:") && has(e, "silent for 1.5 s") && has(e, "W[3]@2"),
               "rank 2's error should say rank 1 was silent while it waited for W[3]@2: %s", e);
    RANK_CHECK(ctx, tp_failed_hearsay(ctx->t), "a silent peer may wait on another: its failure is hearsay");
    printf("rank 2 got: %s\n", e);
    char *grid;
    RANK_CHECK(ctx, ctl_status_grid(ctx->ctl, &grid, ctx->err, sizeof ctx->err) == 0, "grid: %s", ctx->err);
    printf("status grid:\n%s", grid);
    RANK_CHECK(ctx, has(grid, "rank 0: idle: waiting for A[0][0] from rank 1") && has(grid, "rank 1: (no answer") &&
                        has(grid, "rank 2: action 7: RECV W[3]@2 from rank 1"),
               "unexpected status grid:\n%s", grid);
    free(grid);
    /* rank 0's evidence reaches every rank (issue 42): a rank whose wait times out names the
     * ranks rank 0 could not hear from, not the peer it waited for (which may be blocked) */
    char silent[512] = "";
    RANK_CHECK(ctx, ctl_unanswered(ctx->ctl, silent, sizeof silent) && has(silent, "rank 1 (127.0.0.1:") &&
                        !has(silent, "rank 2"),
               "rank 0's silent ranks did not reach rank 2: '%s'", silent);
    printf("rank 0's evidence on rank 2: its status query went unanswered by %s\n", silent);
    ctl_abort(ctx->ctl, e);
    kill((pid_t)pids[1], SIGKILL);
    free(buf);
    return 0;
}

static int abort_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    if (ctx->rank == 2) {
        ctl_abort(ctx->ctl, "boom from rank 2");
        return 0;
    }
    /* Each waits for a rank other than 2 (0 <- 1 <- 3 <- 0): only the control channel can
     * bring the news. */
    static const int from[4] = {1, 3, -1, 0};
    if (wait_for_news(ctx, "rank 2 failed: boom from rank 2", from[ctx->rank])) return 1;
    char why[512] = "";
    for (int i = 0; i < 500 && !ctl_failed(ctx->ctl, why, sizeof why); i++) nap(0.01); /* data aborts may be faster */
    RANK_CHECK(ctx, strstr(why, "boom from rank 2"),
               "rank %d's control channel should have failed with rank 2's reason", ctx->rank);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    wp_net_opts net;
    rh_net(&net, 2);
    int n = 3, exits[4], want[4] = {0, 0, 0, 0};
    wp_rank_fn fn;
    if (strcmp(mode, "kill") == 0) {
        fn = kill_rank;
        net.link_bandwidth = 20e6; /* the transfer takes 1.6 s: rank 1 dies in the middle */
        want[1] = 128 + SIGKILL;
    } else if (strcmp(mode, "stop") == 0) {
        fn = stop_rank;
        net.link_bandwidth = 20e6;
        net.timeout = 1.5;
        want[1] = 128 + SIGKILL;
    } else if (strcmp(mode, "abort") == 0) {
        fn = abort_rank;
        net.timeout = 30;
        n = 4;
    } else {
        fprintf(stderr, "usage: test_faults kill|stop|abort\n");
        return 2;
    }
    pid_t pgid;
    CHECK(rh_run_tcp(n, &net, fn, NULL, 20, exits, NULL, &pgid) == 0, "%s: the job hung", mode);
    for (int r = 0; r < n; r++) CHECK(exits[r] == want[r], "%s: rank %d exited with %d, expected %d", mode, r, exits[r], want[r]);
    CHECK(rh_group_gone(pgid), "%s: processes left behind", mode);
    printf("ok: %s\n", mode);
    return 0;
}
