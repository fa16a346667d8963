/* Channels of one peer pair progress independently.
 *  unmatched: a big send on the gradient channel whose receive is not posted yet does not hold
 *    back a small message on the weight channel (the small one completes first).
 *  in-flight: over an emulated 10 MB/s link, a small message posted while an 8 MiB transfer
 *    on another channel is on its way arrives while the big one is still incomplete (frames
 *    of the channels take turns; the big one needs ~0.8 s, the small one two frames).
 * usage: test_channels local|tcp */
#include <string.h>
#include <time.h>

#include "ring_harness.h"

#define BIG (8u << 20)
#define SMALL 1000u

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int check_buf(wp_rank_ctx *ctx, const char *buf, size_t n, uint64_t seed, const char *what) {
    long bad = rh_mismatch(buf, n, seed);
    RANK_CHECK(ctx, bad < 0, "%s differs at byte %ld", what, bad);
    return 0;
}

static int unmatched_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char *big = malloc(BIG), small[SMALL];
    wp_request *rb = NULL, *rs = NULL;
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    RANK_CHECK(ctx, big != NULL, "out of memory");
    if (ctx->rank == 0) {
        rh_fill(big, BIG, 11);
        rh_fill(small, SMALL, 12);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 1, WP_CH_GRAD, big, BIG, "GW[0]", &rb, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 1, WP_CH_WFWD, small, SMALL, "W[1]@0", &rs, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&rs, 5, e, el) == 0, "small send: %s", e);
        RANK_CHECK(ctx, tp_wait(&rb, 5, e, el) == 0, "big send: %s", e);
    } else {
        RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, WP_CH_WFWD, small, SMALL, "W[1]@0", &rs, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&rs, 5, e, el) == 0, "small receive behind an unmatched big send: %s", e);
        if (check_buf(ctx, small, SMALL, 12, "small message")) return 1;
        RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, WP_CH_GRAD, big, BIG, "GW[0]", &rb, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&rb, 5, e, el) == 0, "big receive: %s", e);
        if (check_buf(ctx, big, BIG, 11, "big message")) return 1;
    }
    free(big);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    return 0;
}

static int inflight_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char *big = malloc(BIG), small[SMALL];
    wp_request *rb = NULL, *rs = NULL;
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    RANK_CHECK(ctx, big != NULL, "out of memory");
    if (ctx->rank == 1)
        RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, WP_CH_GRAD, big, BIG, "GW[0]", &rb, e, el) == 0, "%s", e);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    if (ctx->rank == 0) {
        rh_fill(big, BIG, 21);
        rh_fill(small, SMALL, 22);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 1, WP_CH_GRAD, big, BIG, "GW[0]", &rb, e, el) == 0, "%s", e);
        nap(0.1);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 1, WP_CH_WFWD, small, SMALL, "W[1]@0", &rs, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&rs, 5, e, el) == 0, "small send: %s", e);
        RANK_CHECK(ctx, tp_wait(&rb, 5, e, el) == 0, "big send: %s", e);
    } else {
        RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, WP_CH_WFWD, small, SMALL, "W[1]@0", &rs, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&rs, 5, e, el) == 0, "small receive: %s", e);
        bool big_done;
        RANK_CHECK(ctx, tp_test(&rb, &big_done, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, !big_done, "the 8 MiB transfer finished before the small message: channels did not interleave");
        RANK_CHECK(ctx, tp_wait(&rb, 5, e, el) == 0, "big receive: %s", e);
        if (check_buf(ctx, small, SMALL, 22, "small message") || check_buf(ctx, big, BIG, 21, "big message")) return 1;
    }
    free(big);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    return 0;
}

static void run(bool tcp, const wp_net_opts *net, wp_rank_fn fn, const char *name) {
    char err[600];
    if (tcp) {
        int exits[2];
        pid_t pgid;
        CHECK(rh_run_tcp(2, net, fn, NULL, 30, exits, NULL, &pgid) == 0, "%s: ranks hung", name);
        CHECK(exits[0] == 0 && exits[1] == 0, "%s: ranks exited %d, %d", name, exits[0], exits[1]);
        CHECK(rh_group_gone(pgid), "%s: processes left behind", name);
    } else {
        CHECK(rh_run_local(2, net, fn, NULL, err, sizeof err) == 0, "%s: %s", name, err);
    }
    printf("ok: %s over %s\n", name, tcp ? "tcp" : "local");
}

int main(int argc, char **argv) {
    bool tcp = argc > 1 && strcmp(argv[1], "tcp") == 0;
    wp_net_opts net;
    rh_net(&net, 2);
    run(tcp, &net, unmatched_rank, "unmatched big send");
    net.link_bandwidth = 10e6;
    net.link_latency = 0.001;
    run(tcp, &net, inflight_rank, "in-flight big transfer");
    return 0;
}
