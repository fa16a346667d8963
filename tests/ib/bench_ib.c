/* Throughput of one stream of messages rank 0 -> rank 1 (two in flight), for comparing the
 * RDMA transport with tcp where an RDMA device (or Soft-RoCE) exists. Reported, not asserted.
 *
 * usage: bench_ib verbs|soft|tcp|local SIZE_BYTES REPS
 *   verbs  the ibverbs transport over libibverbs (ranks as threads; exit 77 without a device)
 *   soft   the ibverbs transport over the in-process soft fabric: the protocol's own cost
 *          (staging copies, chunking, credits), not a network
 *   tcp    the tcp transport over loopback (ranks as processes)
 *   local  the local transport (one memcpy per message): the ceiling of this machine */
#include <string.h>

#include "ib_soft.h"
#include "ib_transport.h"
#include "ring_harness.h"

typedef struct bench {
    const ib_ops *ops; /* NULL: use the rank's own transport (tcp, local) */
    ib_soft_fabric *fab;
    size_t bytes;
    int reps;
} bench;

static int stream(wp_rank_ctx *ctx, wp_transport *t, const bench *B) {
    char *buf[2] = {malloc(B->bytes), malloc(B->bytes)};
    RANK_CHECK(ctx, buf[0] && buf[1], "out of memory");
    rh_fill(buf[0], B->bytes, 1);
    rh_fill(buf[1], B->bytes, 2);
    int peer = 1 - ctx->rank;
    RANK_CHECK(ctx, tp_connect(t, &peer, 1, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    wp_request *req[2] = {0};
    double t0 = wp_now();
    for (int k = 0; k < B->reps; k++) {
        int i = k % 2;
        RANK_CHECK(ctx, tp_wait(&req[i], 30, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        int rc = ctx->rank == 0 ? tp_post_send(t, 1, 0, buf[i], B->bytes, "bench", &req[i], ctx->err, sizeof ctx->err)
                                : tp_post_recv(t, 0, 0, buf[i], B->bytes, "bench", &req[i], ctx->err, sizeof ctx->err);
        RANK_CHECK(ctx, rc == 0, "post: %s", ctx->err);
    }
    for (int i = 0; i < 2; i++)
        RANK_CHECK(ctx, tp_wait(&req[i], 30, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
    double s = wp_now() - t0;
    if (ctx->rank == 1) {
        long bad = rh_mismatch(buf[(B->reps - 1) % 2], B->bytes, (uint64_t)((B->reps - 1) % 2 + 1));
        RANK_CHECK(ctx, bad < 0, "last message differs at byte %ld", bad);
        printf("%s: %d x %zu B in %.3f s = %.2f GB/s\n", tp_kind(t), B->reps, B->bytes, s,
               (double)B->bytes * B->reps / s / 1e9);
        fflush(stdout);
    }
    free(buf[0]);
    free(buf[1]);
    return ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0 ? 0 : 1;
}

static int bench_rank(wp_rank_ctx *ctx, void *arg) {
    const bench *B = arg;
    if (!B->ops) return stream(ctx, ctx->t, B);
    ib_dev_cfg dc = {.port = 1, .soft_fabric = B->fab, .soft_rank = ctx->rank};
    const char *dev = getenv("WEIPIPE_IB_DEVICE");
    if (dev) snprintf(dc.device, sizeof dc.device, "%s", dev);
    ibp_cfg pc;
    ibp_cfg_defaults(&pc);
    wp_transport *t;
    RANK_CHECK(ctx, rdma_create(B->ops, &dc, &pc, 10, ctx->t, &t, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    if (ctx->rank == 0) printf("%s\n", rdma_describe(t));
    ctl_attach(ctx->ctl, t);
    int rc = stream(ctx, t, B);
    ctl_attach(ctx->ctl, ctx->t);
    tp_close(t);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_ib verbs|soft|tcp|local SIZE_BYTES REPS\n");
        return 2;
    }
    bench B = {.bytes = (size_t)atol(argv[2]), .reps = atoi(argv[3])};
    const char *mode = argv[1];
    wp_net_opts net;
    rh_net(&net, 1);
    net.frame_bytes = WP_DEFAULT_FRAME_BYTES;
    char err[800];
    if (strcmp(mode, "tcp") == 0) {
        int exits[2];
        pid_t pgid;
        CHECK(rh_run_tcp(2, &net, bench_rank, &B, 120, exits, NULL, &pgid) == 0, "tcp ranks hung");
        CHECK(exits[0] == 0 && exits[1] == 0, "ranks exited %d, %d", exits[0], exits[1]);
        return 0;
    }
    if (strcmp(mode, "soft") == 0) {
        B.ops = &ib_soft_ops;
        CHECK(ib_soft_fabric_create(&B.fab, err, sizeof err) == 0, "%s", err);
    } else if (strcmp(mode, "verbs") == 0) {
#if WP_HAVE_IBVERBS
        ib_dev_cfg dc = {.port = 1};
        ib_dev *d;
        char desc[320];
        int rc = ib_hw_ops.open(&dc, &d, desc, sizeof desc, err, sizeof err);
        if (rc == IB_NO_DEVICE) {
            printf("skip: no RDMA device here (%s)\n", err);
            return 77;
        }
        CHECK(rc == 0, "%s", err);
        ib_hw_ops.close(d);
        B.ops = &ib_hw_ops;
#else
        printf("skip: this build has no libibverbs\n");
        return 77;
#endif
    } else if (strcmp(mode, "local") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    CHECK(rh_run_local(2, &net, bench_rank, &B, err, sizeof err) == 0, "%s", err);
    if (B.fab) ib_soft_fabric_destroy(B.fab);
    return 0;
}
