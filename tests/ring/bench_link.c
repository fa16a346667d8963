/* Emulated slow link: how long a transfer of X bytes takes over --link-bandwidth and
 * --link-latency, against X / bandwidth + latency. A benchmark, not a test (it reports
 * times; nothing is asserted).
 * usage: bench_link local|tcp BYTES BANDWIDTH LATENCY [STREAMS] [REPEATS]
 *   e.g. bench_link tcp 64M 1Gbit 20ms 2 3 */
#include <string.h>

#include "cli.h"
#include "clock.h"
#include "ring_harness.h"

typedef struct bench {
    size_t bytes;
    int repeats;
    double expect;
} bench;

static int bench_rank(wp_rank_ctx *ctx, void *arg) {
    const bench *b = arg;
    char *buf = malloc(b->bytes ? b->bytes : 1), *e = ctx->err;
    size_t el = sizeof ctx->err;
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    rh_fill(buf, b->bytes, 9);
    RANK_CHECK(ctx, tp_connect_ring(ctx->t, e, el) == 0, "%s", e);
    for (int i = 0; i < b->repeats; i++) {
        wp_request *r;
        /* The receiver posts first, as a prefetching executor does; the clock starts when the
         * sender posts. */
        if (ctx->rank == 1) RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, WP_CH_WFWD, buf, b->bytes, "X", &r, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
        double t[2] = {0, 0};
        if (ctx->rank == 0) {
            t[0] = wp_now();
            RANK_CHECK(ctx, tp_post_send(ctx->t, 1, WP_CH_WFWD, buf, b->bytes, "X", &r, e, el) == 0, "%s", e);
        }
        RANK_CHECK(ctx, tp_wait(&r, 600, e, el) == 0, "%s", e);
        if (ctx->rank == 1) t[1] = wp_now();
        RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_MAX, t, 2, e, el) == 0, "%s", e);
        if (ctx->rank == 1) {
            double took = t[1] - t[0];
            printf("%-5s %10zu bytes: %8.4f s, expected %8.4f s (X/B + latency), ratio %.3f\n", tp_kind(ctx->t), b->bytes,
                   took, b->expect, took / b->expect);
            fflush(stdout);
        }
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_link local|tcp BYTES BANDWIDTH LATENCY [STREAMS] [REPEATS]\n");
        return 2;
    }
    int64_t bytes;
    double bw, lat;
    if (!cli_parse_size(argv[2], &bytes) || !cli_parse_rate(argv[3], &bw) || !cli_parse_time(argv[4], &lat) ||
        bytes < 0) {
        fprintf(stderr, "bench_link: cannot read '%s %s %s' as bytes, bandwidth, latency\n", argv[2], argv[3], argv[4]);
        return 2;
    }
    wp_net_opts net;
    rh_net(&net, argc > 5 ? atoi(argv[5]) : 1);
    net.frame_bytes = WP_DEFAULT_FRAME_BYTES;
    net.timeout = 600;
    net.link_bandwidth = bw;
    net.link_latency = lat;
    bench b = {.bytes = (size_t)bytes, .repeats = argc > 6 ? atoi(argv[6]) : 3};
    b.expect = (bw > 0 ? (double)bytes / bw : 0) + lat;
    printf("link %s (%.4g bytes/s), latency %s, %d stream(s), %zu-byte frames\n", argv[3], bw, argv[4], net.tcp_streams,
           net.frame_bytes);
    if (strcmp(argv[1], "tcp") == 0) {
        int exits[2];
        if (rh_run_tcp(2, &net, bench_rank, &b, 3600, exits, NULL, NULL) != 0 || exits[0] || exits[1]) return 1;
    } else {
        char err[600];
        if (rh_run_local(2, &net, bench_rank, &b, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    return 0;
}
