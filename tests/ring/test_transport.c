/* Both transports move random payloads of many sizes (0, 1, odd, around the frame size,
 * several MiB) between every pair of ranks in both directions and to themselves, on several
 * channels, with sends and receives posted in a shuffled order. Checked: every byte (so FIFO
 * order per (src, dst, channel) too: each message has its own content), exact payload and
 * message counters, and that wait_any hands back each request once.
 *
 * usage: test_transport local|local-paced|tcp STREAMS [FRAME_BYTES] */
#include <string.h>

#include "rt.h"

#define NCH 3
static const int channels[NCH] = {WP_CH_WFWD, WP_CH_GRAD, WP_CH_ACT};
#define PER_BOX 9
#define BIG ((3u << 20) + 5)

typedef struct plan {
    size_t frame;
    uint64_t seed;
} plan;

static size_t msg_size(const plan *p, int src, int dst, int ch, int k) {
    size_t F = p->frame;
    size_t sizes[PER_BOX] = {0, 1, 3, 4097, F - 1, F, F + 1, 3 * F + 17, BIG};
    size_t s = sizes[(k + src * 7 + dst * 3 + ch) % PER_BOX];
    return s == BIG && ch != 0 ? 777 : s; /* the several-MiB messages only on channel 0 */
}

static uint64_t msg_seed(const plan *p, int src, int dst, int ch, int k) {
    return rt_mix(p->seed ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 28) ^ ((uint64_t)ch << 16) ^ (uint64_t)k);
}

typedef struct op {
    bool send;
    int peer, ch, k;
    size_t bytes;
    char *buf;
    wp_request *req;
} op;

/* A rank's operations: for every box (peer, channel, direction) its PER_BOX messages, merged
 * in a seeded random order that keeps each box's own order. */
static int build_ops(const plan *p, int me, int world, op **out) {
    int nbox = world * NCH * 2, total = nbox * PER_BOX, *next = calloc((size_t)nbox, sizeof *next);
    op *ops = calloc((size_t)total, sizeof *ops);
    if (!ops || !next) return -1;
    uint64_t rng = rt_mix(p->seed + (uint64_t)me);
    for (int i = 0; i < total; i++) {
        int b;
        do {
            rng = rt_mix(rng);
            b = (int)(rng % (uint64_t)nbox);
        } while (next[b] == PER_BOX);
        int k = next[b]++, peer = b / (NCH * 2), ch = channels[(b / 2) % NCH];
        bool send = b % 2 == 0;
        int src = send ? me : peer, dst = send ? peer : me;
        ops[i] = (op){.send = send, .peer = peer, .ch = ch, .k = k, .bytes = msg_size(p, src, dst, ch, k)};
        ops[i].buf = malloc(ops[i].bytes + 1);
        if (!ops[i].buf) return -1;
        if (send) rt_fill(ops[i].buf, ops[i].bytes, msg_seed(p, src, dst, ch, k));
        else memset(ops[i].buf, 0xA5, ops[i].bytes);
    }
    free(next);
    *out = ops;
    return total;
}

static int matrix_rank(wp_rank_ctx *ctx, void *arg) {
    const plan *p = arg;
    int me = ctx->rank;
    op *ops;
    int n = build_ops(p, me, ctx->world, &ops);
    RANK_CHECK(ctx, n > 0, "out of memory");
    RANK_CHECK(ctx, tp_connect_ring(ctx->t, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    uint64_t sent = 0, recvd = 0;
    wp_request **reqs = calloc((size_t)n, sizeof *reqs);
    RANK_CHECK(ctx, reqs != NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        char label[WP_LABEL_MAX];
        snprintf(label, sizeof label, "m%d>%d@%d#%d", o->send ? me : o->peer, o->send ? o->peer : me, o->ch, o->k);
        int rc = o->send ? tp_post_send(ctx->t, o->peer, o->ch, o->buf, o->bytes, label, &reqs[i], ctx->err, sizeof ctx->err)
                         : tp_post_recv(ctx->t, o->peer, o->ch, o->buf, o->bytes, label, &reqs[i], ctx->err, sizeof ctx->err);
        RANK_CHECK(ctx, rc == 0, "post %s: %s", label, ctx->err);
        if (o->send) sent += o->bytes;
        else recvd += o->bytes;
    }
    for (int done = 0; done < n; done++) {
        int idx;
        RANK_CHECK(ctx, tp_wait_any(reqs, n, 10.0, &idx, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        RANK_CHECK(ctx, idx >= 0 && reqs[idx] == NULL, "wait_any returned %d", idx);
    }
    int idx;
    RANK_CHECK(ctx, tp_wait_any(reqs, n, 1.0, &idx, ctx->err, sizeof ctx->err) == 0 && idx == -1,
               "wait_any on no request should return -1");
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        if (!o->send) {
            long bad = rt_mismatch(o->buf, o->bytes, msg_seed(p, o->peer, me, o->ch, o->k));
            RANK_CHECK(ctx, bad < 0, "rank %d: message %d from rank %d on channel %d (%zu bytes) differs at byte %ld", me,
                       o->k, o->peer, o->ch, o->bytes, bad);
        }
        free(o->buf);
    }
    wp_transport_stats st;
    tp_stats(ctx->t, &st);
    RANK_CHECK(ctx, st.payload_sent == sent && st.payload_recv == recvd,
               "payload counters %llu/%llu, expected %llu/%llu", (unsigned long long)st.payload_sent,
               (unsigned long long)st.payload_recv, (unsigned long long)sent, (unsigned long long)recvd);
    uint64_t msgs = (uint64_t)ctx->world * NCH * PER_BOX;
    RANK_CHECK(ctx, st.msgs_sent == msgs && st.msgs_recv == msgs, "message counters %llu/%llu, expected %llu",
               (unsigned long long)st.msgs_sent, (unsigned long long)st.msgs_recv, (unsigned long long)msgs);
    bool tcp = strcmp(tp_kind(ctx->t), "tcp") == 0;
    RANK_CHECK(ctx, tcp ? st.overhead_sent > 0 && st.overhead_recv > 0 : st.overhead_sent == 0,
               "overhead counters %llu/%llu", (unsigned long long)st.overhead_sent, (unsigned long long)st.overhead_recv);
    if (me == 0)
        printf("rank 0: %d requests, payload %llu B sent / %llu B received, overhead %llu / %llu B, waited %.3f s\n", n,
               (unsigned long long)st.payload_sent, (unsigned long long)st.payload_recv,
               (unsigned long long)st.overhead_sent, (unsigned long long)st.overhead_recv, st.wait_s);
    free(ops);
    free(reqs);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_transport local|local-paced|tcp [STREAMS] [FRAME_BYTES]\n");
        return 2;
    }
    wp_net_opts net;
    rt_net(&net, argc > 2 ? atoi(argv[2]) : 1);
    if (argc > 3) net.frame_bytes = (size_t)atol(argv[3]);
    plan p = {.frame = net.frame_bytes, .seed = 0x5eed0001};
    const int world = 4;
    char err[600];
    if (strcmp(argv[1], "local") == 0 || strcmp(argv[1], "local-paced") == 0) {
        if (strcmp(argv[1], "local-paced") == 0) {
            /* fast enough to finish quickly, but every byte goes through the pacer's frames */
            net.link_bandwidth = 2e9;
            net.link_latency = 1e-4;
        }
        int rc = rt_run_local(world, &net, matrix_rank, &p, err, sizeof err);
        CHECK(rc == 0, "%s", err);
    } else {
        int exits[4];
        pid_t pgid;
        CHECK(rt_run_tcp(world, &net, matrix_rank, &p, 60, exits, NULL, &pgid) == 0, "tcp ranks hung");
        for (int r = 0; r < world; r++) CHECK(exits[r] == 0, "rank %d exited with %d", r, exits[r]);
        CHECK(rt_group_gone(pgid), "processes left behind");
    }
    printf("ok: %s, %d ranks, %d streams, %zu-byte frames\n", argv[1], world, net.tcp_streams, net.frame_bytes);
    return 0;
}
