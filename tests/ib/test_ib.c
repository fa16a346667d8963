/* The RDMA transport (ring/ibverbs.h over ring/ib_proto.h) driven through transport.h, on the
 * soft fabric (ring/ib_soft.h) or on real verbs where a device exists. Ranks are threads; the
 * local transport carries the connection exchange (as tcp does in a job).
 *
 * usage: test_ib MODE [SLOT_BYTES WR_BYTES]   (modes below; verbs-MODE: over libibverbs)
 *   matrix SLOT WR   every pair and self, channels 0/2/5, sizes 0, 1, 3, slot-1, slot, slot+1,
 *                    3 slot+17 and 1 MiB+5, posted in a seeded shuffled order; every byte, the
 *                    counters, and the fabric's count of chunks, credits and work requests
 *                    (chunking: none larger than WR; one credit per chunk; no staging buffer
 *                    reused before its write completed)
 *   ordering SLOT WR the matrix with send completions held back until after the receiver's
 *                    credit came back (completion ordering), and with writes landing late
 *   credits          a receiver that posts late: exactly two chunks land (the double buffer),
 *                    the sender waits for credits, then everything arrives intact
 *   reuse            300 messages through one slot, sizes up to 2 slots, no barrier at the end
 *                    (a peer closing while our last credits fly is not an error)
 *   timeout          a write that vanishes: the sender fails naming the peer within the
 *                    completion timeout; the receiver learns it through the exchange channel
 *   silence          a receive nobody sends: the wait fails naming the silent peer
 *   errors           a write completing with an error: fails naming the peer and the error
 *   mismatch         sizes that disagree: the receiver names both labels and sizes
 *   gone             a peer that closed: no failure while nothing is pending with it; the
 *                    next write to it fails naming it and the label
 *   config           bad protocol settings are refused by ibv_create with the reason
 *   verbs-MODE       matrix, credits, reuse, silence, mismatch and gone over libibverbs (the
 *                    fabric's counters unchecked): skipped (77) with the reason without a device
 *   job              a launched rank with --transport ibverbs (ibv_job_run_rank): without a
 *                    device exit code 2 and "no RDMA device: ..."; with one a self transfer;
 *                    --ib-port 0 refused with exit code 2 */
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ib_soft.h"
#include "ibverbs.h"
#include "../ring/rt.h"

#define MAX_RANKS 4
#define NCH 3
static const int channels[NCH] = {0, 2, 5};
#define PER_BOX 8

typedef struct ib_test {
    const ib_ops *ops;
    ib_soft_fabric *fab;
    ibp_cfg pc;
    uint64_t seed;
    /* what each rank expects the fabric to have carried for its sends */
    long chunks[MAX_RANKS], wrs[MAX_RANKS];
    size_t max_chunk[MAX_RANKS];
    char msg[MAX_RANKS][700]; /* failure messages the error modes observed */
} ib_test;

static bool is_soft(const ib_test *T) { return T->ops == &ib_soft_ops; }

static int open_ib(wp_rank_ctx *ctx, ib_test *T, wp_transport **t) {
    ib_dev_cfg dc = {.port = 1, .soft_fabric = T->fab, .soft_rank = ctx->rank};
    const char *dev = getenv("WEIPIPE_IB_DEVICE");
    if (dev) snprintf(dc.device, sizeof dc.device, "%s", dev);
    if (ibv_create(T->ops, &dc, &T->pc, 10.0, ctx->t, t, ctx->err, sizeof ctx->err) != 0) return -1;
    ctl_attach(ctx->ctl, *t);
    return 0;
}

static void close_ib(wp_rank_ctx *ctx, wp_transport *t) {
    ctl_attach(ctx->ctl, ctx->t);
    tp_close(t);
}

/* ---- matrix ---- */

static size_t msg_size(const ib_test *T, int src, int dst, int ch, int k) {
    size_t S = T->pc.slot_bytes;
    size_t sizes[PER_BOX] = {0, 1, 3, S - 1, S, S + 1, 3 * S + 17, (1u << 20) + 5};
    size_t s = sizes[(k + src * 5 + dst * 3 + ch) % PER_BOX];
    return s == (1u << 20) + 5 && ch != 0 ? 777 : s;
}

static uint64_t msg_seed(const ib_test *T, int src, int dst, int ch, int k) {
    return rt_mix(T->seed ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 28) ^ ((uint64_t)ch << 16) ^ (uint64_t)k);
}

typedef struct op {
    bool send;
    int peer, ch, k;
    size_t bytes;
    char *buf;
} op;

/* Chunks and work requests a message costs on the fabric (none to oneself). */
static void account(ib_test *T, int me, size_t bytes) {
    size_t S = T->pc.slot_bytes, W = T->pc.wr_bytes, off = 0;
    do {
        size_t len = bytes - off < S ? bytes - off : S;
        T->chunks[me]++;
        T->wrs[me] += (long)((IBP_HDR_BYTES + len + W - 1) / W);
        if (len > T->max_chunk[me]) T->max_chunk[me] = len;
        off += len;
    } while (off < bytes);
}

static int build_ops(ib_test *T, int me, int world, op **out) {
    int nbox = world * NCH * 2, total = nbox * PER_BOX, next[MAX_RANKS * NCH * 2] = {0};
    op *ops = calloc((size_t)total, sizeof *ops);
    if (!ops) return -1;
    uint64_t rng = rt_mix(T->seed + (uint64_t)me);
    for (int i = 0; i < total; i++) {
        int b;
        do {
            rng = rt_mix(rng);
            b = (int)(rng % (uint64_t)nbox);
        } while (next[b] == PER_BOX);
        int k = next[b]++, peer = b / (NCH * 2), ch = channels[(b / 2) % NCH];
        bool send = b % 2 == 0;
        int src = send ? me : peer, dst = send ? peer : me;
        ops[i] = (op){.send = send, .peer = peer, .ch = ch, .k = k, .bytes = msg_size(T, src, dst, ch, k)};
        ops[i].buf = malloc(ops[i].bytes + 1);
        if (!ops[i].buf) return -1;
        if (send) rt_fill(ops[i].buf, ops[i].bytes, msg_seed(T, src, dst, ch, k));
        else memset(ops[i].buf, 0xA5, ops[i].bytes);
        if (send && peer != me) account(T, me, ops[i].bytes);
    }
    *out = ops;
    return total;
}

static int check_ops(wp_rank_ctx *ctx, ib_test *T, op *ops, int n) {
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        if (!o->send) {
            long bad = rt_mismatch(o->buf, o->bytes, msg_seed(T, o->peer, ctx->rank, o->ch, o->k));
            RANK_CHECK(ctx, bad < 0, "message %d from rank %d on channel %d (%zu bytes) differs at byte %ld", o->k,
                       o->peer, o->ch, o->bytes, bad);
        }
        free(o->buf);
    }
    free(ops);
    return 0;
}

static int matrix_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    wp_transport *t;
    RANK_CHECK(ctx, open_ib(ctx, T, &t) == 0, "open: %s", ctx->err);
    op *ops;
    int n = build_ops(T, ctx->rank, ctx->world, &ops);
    RANK_CHECK(ctx, n > 0, "out of memory");
    RANK_CHECK(ctx, tp_connect_ring(t, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    wp_request **reqs = calloc((size_t)n, sizeof *reqs);
    RANK_CHECK(ctx, reqs != NULL, "out of memory");
    uint64_t sent = 0, recvd = 0;
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        char label[WP_LABEL_MAX];
        snprintf(label, sizeof label, "m%d>%d@%d#%d", o->send ? ctx->rank : o->peer, o->send ? o->peer : ctx->rank,
                 o->ch, o->k);
        int rc = o->send ? tp_post_send(t, o->peer, o->ch, o->buf, o->bytes, label, &reqs[i], ctx->err, sizeof ctx->err)
                         : tp_post_recv(t, o->peer, o->ch, o->buf, o->bytes, label, &reqs[i], ctx->err, sizeof ctx->err);
        RANK_CHECK(ctx, rc == 0, "post %s: %s", label, ctx->err);
        *(o->send ? &sent : &recvd) += o->bytes;
    }
    for (int done = 0; done < n; done++) {
        int idx;
        RANK_CHECK(ctx, tp_wait_any(reqs, n, 20.0, &idx, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        RANK_CHECK(ctx, idx >= 0 && reqs[idx] == NULL, "wait_any returned %d", idx);
    }
    free(reqs);
    if (check_ops(ctx, T, ops, n) != 0) return 1;
    wp_transport_stats st;
    tp_stats(t, &st);
    uint64_t msgs = (uint64_t)ctx->world * NCH * PER_BOX;
    RANK_CHECK(ctx, st.payload_sent == sent && st.payload_recv == recvd && st.msgs_sent == msgs && st.msgs_recv == msgs,
               "counters: payload %llu/%llu (expected %llu/%llu), messages %llu/%llu (expected %llu)",
               (unsigned long long)st.payload_sent, (unsigned long long)st.payload_recv, (unsigned long long)sent,
               (unsigned long long)recvd, (unsigned long long)st.msgs_sent, (unsigned long long)st.msgs_recv,
               (unsigned long long)msgs);
    RANK_CHECK(ctx, st.overhead_sent == (uint64_t)T->chunks[ctx->rank] * IBP_HDR_BYTES + (uint64_t)(ctx->world - 1) * IBP_INFO_BYTES,
               "overhead sent %llu, expected %ld chunk headers and the connection info",
               (unsigned long long)st.overhead_sent, T->chunks[ctx->rank]);
    if (ctx->rank == 0)
        printf("rank 0: %d requests, %ld chunks out, payload %llu / %llu B, waited %.3f s\n", n, T->chunks[0],
               (unsigned long long)st.payload_sent, (unsigned long long)st.payload_recv, st.wait_s);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    close_ib(ctx, t);
    return 0;
}

/* The fabric carried exactly what the protocol promises for the matrix's sends. */
static void check_fabric(ib_test *T, int world) {
    ib_soft_stats s;
    ib_soft_stats_get(T->fab, &s);
    long chunks = 0, wrs = 0;
    size_t biggest = 0;
    for (int r = 0; r < world; r++) {
        chunks += T->chunks[r];
        wrs += T->wrs[r];
        if (T->max_chunk[r] > biggest) biggest = T->max_chunk[r];
    }
    size_t want_max = IBP_HDR_BYTES + biggest < T->pc.wr_bytes ? IBP_HDR_BYTES + biggest : T->pc.wr_bytes;
    printf("fabric: %ld writes (%ld with immediate, %ld credits), largest %zu B; expected %ld chunks in %ld work "
           "requests, largest %zu B\n", s.writes, s.imm_writes, s.credit_writes, s.max_write, chunks, wrs, want_max);
    CHECK(s.credit_writes == chunks, "%ld credits for %ld chunks", s.credit_writes, chunks);
    CHECK(s.imm_writes == 2 * chunks, "%ld writes with immediate for %ld chunks (+ as many credits)", s.imm_writes,
             chunks);
    CHECK(s.writes == wrs + chunks, "%ld writes, expected %ld data work requests + %ld credits", s.writes, wrs, chunks);
    CHECK(s.max_write == want_max, "largest work request %zu B, expected %zu (limit %zu)", s.max_write, want_max,
             T->pc.wr_bytes);
    CHECK(s.src_changed == 0, "%ld staging buffers rewritten before their write completed", s.src_changed);
}

/* ---- credits: a late receiver ---- */

#define CREDIT_MSGS 5

static int credits_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    size_t S = T->pc.slot_bytes, bytes = 3 * S + 1; /* four chunks each */
    wp_transport *t;
    RANK_CHECK(ctx, open_ib(ctx, T, &t) == 0, "open: %s", ctx->err);
    int peer = 1 - ctx->rank;
    RANK_CHECK(ctx, tp_connect(t, &peer, 1, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    char *bufs[CREDIT_MSGS];
    wp_request *reqs[CREDIT_MSGS] = {0};
    for (int k = 0; k < CREDIT_MSGS; k++) {
        bufs[k] = malloc(bytes);
        RANK_CHECK(ctx, bufs[k] != NULL, "out of memory");
        if (ctx->rank == 0) rt_fill(bufs[k], bytes, T->seed + (uint64_t)k);
        else memset(bufs[k], 0x5A, bytes);
    }
    if (ctx->rank == 0) {
        for (int k = 0; k < CREDIT_MSGS; k++) {
            char label[32];
            snprintf(label, sizeof label, "late#%d", k);
            RANK_CHECK(ctx, tp_post_send(t, 1, 3, bufs[k], bytes, label, &reqs[k], ctx->err, sizeof ctx->err) == 0,
                       "post: %s", ctx->err);
        }
        usleep(300 * 1000);
        bool done;
        RANK_CHECK(ctx, tp_test(&reqs[0], &done, ctx->err, sizeof ctx->err) == 0 && !done,
                   "a send completed although the receiver posted nothing");
        if (is_soft(T)) {
            ib_soft_stats s;
            ib_soft_stats_get(T->fab, &s);
            RANK_CHECK(ctx, s.imm_writes == IBP_SLOTS && s.credit_writes == 0,
                       "%ld chunks written before the receiver posted (expected exactly the %d free buffers)",
                       s.imm_writes, IBP_SLOTS);
            printf("before the receiver posted: %ld chunks written (the double buffer), no send complete\n",
                   s.imm_writes);
        }
    }
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    for (int k = 0; k < CREDIT_MSGS; k++) {
        if (ctx->rank == 1) {
            RANK_CHECK(ctx, tp_post_recv(t, 0, 3, bufs[k], bytes, "late", &reqs[k], ctx->err, sizeof ctx->err) == 0,
                       "post: %s", ctx->err);
            RANK_CHECK(ctx, tp_wait(&reqs[k], 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
            long bad = rt_mismatch(bufs[k], bytes, T->seed + (uint64_t)k);
            RANK_CHECK(ctx, bad < 0, "message %d differs at byte %ld", k, bad);
            usleep(20 * 1000);
        } else {
            RANK_CHECK(ctx, tp_wait(&reqs[k], 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        }
        free(bufs[k]);
    }
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    close_ib(ctx, t);
    return 0;
}

/* ---- reuse: many messages through one slot ---- */

#define REUSE_MSGS 300

static int reuse_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    wp_transport *t;
    RANK_CHECK(ctx, open_ib(ctx, T, &t) == 0, "open: %s", ctx->err);
    size_t cap = 2 * T->pc.slot_bytes + 1;
    char *buf = malloc(cap);
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    uint64_t rng = T->seed;
    for (int k = 0; k < REUSE_MSGS; k++) {
        rng = rt_mix(rng);
        size_t bytes = (size_t)(rng % cap);
        wp_request *r;
        if (ctx->rank == 0) {
            rt_fill(buf, bytes, T->seed ^ (uint64_t)k);
            RANK_CHECK(ctx, tp_post_send(t, 1, 1, buf, bytes, "reuse", &r, ctx->err, sizeof ctx->err) == 0, "post: %s",
                       ctx->err);
            RANK_CHECK(ctx, tp_wait(&r, 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        } else {
            memset(buf, 0x11, bytes);
            RANK_CHECK(ctx, tp_post_recv(t, 0, 1, buf, bytes, "reuse", &r, ctx->err, sizeof ctx->err) == 0, "post: %s",
                       ctx->err);
            RANK_CHECK(ctx, tp_wait(&r, 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
            long bad = rt_mismatch(buf, bytes, T->seed ^ (uint64_t)k);
            RANK_CHECK(ctx, bad < 0, "message %d (%zu bytes) differs at byte %ld", k, bytes, bad);
        }
    }
    free(buf);
    /* The sender closes as soon as its last write landed, before the receiver's credit. */
    char why[600];
    RANK_CHECK(ctx, !tp_failed(t, why, sizeof why), "transport failed: %s", why);
    close_ib(ctx, t);
    return 0;
}

/* ---- failures ---- */

/* A failure mode's rank: post what the mode says, expect the wait to fail, keep the message. */
typedef struct fail_plan {
    int sender_channel;
    size_t send_bytes, recv_bytes;
    bool sender_posts;
    double wait_s;
} fail_plan;

static fail_plan g_fail;

static int fail_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    wp_transport *t;
    RANK_CHECK(ctx, open_ib(ctx, T, &t) == 0, "open: %s", ctx->err);
    int peer = 1 - ctx->rank;
    RANK_CHECK(ctx, tp_connect(t, &peer, 1, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    const fail_plan *F = &g_fail;
    size_t bytes = ctx->rank == 0 ? F->send_bytes : F->recv_bytes;
    char *buf = calloc(1, bytes + 1);
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    rt_fill(buf, bytes, T->seed);
    wp_request *r = NULL;
    if (ctx->rank == 1)
        RANK_CHECK(ctx, tp_post_recv(t, 0, F->sender_channel, buf, bytes, "want@1", &r, ctx->err, sizeof ctx->err) == 0,
                   "post: %s", ctx->err);
    else if (F->sender_posts)
        RANK_CHECK(ctx, tp_post_send(t, 1, F->sender_channel, buf, bytes, "give@0", &r, ctx->err, sizeof ctx->err) == 0,
                   "post: %s", ctx->err);
    char *msg = T->msg[ctx->rank];
    if (r && tp_wait(&r, F->wait_s, msg, sizeof T->msg[0]) == 0) msg[0] = 0;
    /* A rank whose own wait succeeded (or that waited for nothing) learns of the failure
     * through the exchange channel. */
    for (double end = wp_now() + 3; !msg[0] && wp_now() < end;) {
        if (tp_failed(t, msg, sizeof T->msg[0])) break;
        usleep(10 * 1000);
    }
    free(buf);
    close_ib(ctx, t);
    return 0;
}

static void run_fail(ib_test *T, const char *mode) {
    char err[800];
    wp_net_opts net;
    rt_net(&net, 1);
    CHECK(rt_run_local(2, &net, fail_rank, T, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < 2; r++) printf("%s: rank %d: %s\n", mode, r, T->msg[r]);
}

static void expect_in(const char *msg, const char *part, int rank, const char *mode) {
    CHECK(strstr(msg, part) != NULL, "%s: rank %d's message lacks \"%s\": %s", mode, rank, part, msg);
}

static void mode_timeout(ib_test *T) {
    /* The third write of rank 0 vanishes (and its queue pair stays dead): chunk 2 of 6. */
    ib_soft_set_faults(T->fab, &(ib_soft_faults){.rank = 0, .drop_nth = 3});
    T->pc.timeout = 0.4;
    g_fail = (fail_plan){.sender_channel = 0, .send_bytes = 6 * T->pc.slot_bytes - 3, .recv_bytes = 6 * T->pc.slot_bytes - 3,
                         .sender_posts = true, .wait_s = 20};
    run_fail(T, "timeout");
    /* The completion timeout (0.4 s) fired, not the wait's silence timeout (20 s). */
    expect_in(T->msg[0], "rank 1 (thread) did not confirm the RDMA write of give@0", 0, "timeout");
    expect_in(T->msg[0], "within 0.4 s", 0, "timeout");
    expect_in(T->msg[1], "did not confirm the RDMA write", 1, "timeout");
}

static void mode_silence(ib_test *T) {
    g_fail = (fail_plan){.sender_channel = 4, .send_bytes = 10, .recv_bytes = 10, .sender_posts = false, .wait_s = 0.3};
    run_fail(T, "silence");
    expect_in(T->msg[1], "rank 0 (thread) silent for 0.3 s while rank 1 waited for want@1", 1, "silence");
    expect_in(T->msg[0], "silent for 0.3 s", 0, "silence");
}

static void mode_errors(ib_test *T) {
    ib_soft_set_faults(T->fab, &(ib_soft_faults){.rank = 0, .fail_nth = 2});
    g_fail = (fail_plan){.sender_channel = 6, .send_bytes = 3 * T->pc.slot_bytes, .recv_bytes = 3 * T->pc.slot_bytes,
                         .sender_posts = true, .wait_s = 20};
    run_fail(T, "errors");
    expect_in(T->msg[0], "rank 1 (thread) failed an RDMA data write on channel 6: error injected by the test fabric", 0,
              "errors");
    expect_in(T->msg[1], "failed an RDMA data write on channel 6", 1, "errors");
}

static void mode_mismatch(ib_test *T) {
    g_fail = (fail_plan){.sender_channel = 2, .send_bytes = 100, .recv_bytes = 120, .sender_posts = true, .wait_s = 20};
    run_fail(T, "mismatch");
    expect_in(T->msg[1], "rank 0 sends give@0 (100 bytes) on channel 2 but rank 1 expects want@1 (120 bytes)", 1,
              "mismatch");
    expect_in(T->msg[0], "rank 1 expects want@1 (120 bytes)", 0, "mismatch");
}

/* A peer that closed: quiet while nothing is expected from it, a named failure at the
 * next write to it. */
static int gone_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    wp_transport *t;
    RANK_CHECK(ctx, open_ib(ctx, T, &t) == 0, "open: %s", ctx->err);
    int peer = 1 - ctx->rank;
    RANK_CHECK(ctx, tp_connect(t, &peer, 1, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    if (ctx->rank == 1) close_ib(ctx, t);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    if (ctx->rank == 1) return 0;
    usleep(100 * 1000);
    char why[600];
    RANK_CHECK(ctx, !tp_failed(t, why, sizeof why), "failed although nothing was pending: %s", why);
    char buf[5000];
    rt_fill(buf, sizeof buf, 3);
    wp_request *r;
    RANK_CHECK(ctx, tp_post_send(t, 1, 0, buf, sizeof buf, "late@0", &r, ctx->err, sizeof ctx->err) == 0, "post: %s",
               ctx->err);
    if (tp_wait(&r, 5, T->msg[0], sizeof T->msg[0]) == 0) T->msg[0][0] = 0;
    close_ib(ctx, t);
    return 0;
}

static void mode_gone(ib_test *T) {
    char err[800];
    wp_net_opts net;
    rt_net(&net, 1);
    CHECK(rt_run_local(2, &net, gone_rank, T, err, sizeof err) == 0, "%s", err);
    printf("gone: rank 0: %s\n", T->msg[0]);
    expect_in(T->msg[0], "rank 1 (thread) failed an RDMA data write on channel 0: ", 0, "gone");
    if (is_soft(T)) expect_in(T->msg[0], "remote queue pair gone", 0, "gone");
    expect_in(T->msg[0], "late@0", 0, "gone");
}

static int config_rank(wp_rank_ctx *ctx, void *arg) {
    ib_test *T = arg;
    struct {
        size_t slot, wr;
        double timeout;
        const char *says;
    } bad[] = {{0, 100, 1, "staging buffer of 0 bytes"},
               {4096, 0, 1, "work request of 0 bytes"},
               {1u << 20, 64, 1, "send queue entries per peer"},
               {4096, 4096, 0, "timeout 0 s must be positive"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        T->pc = (ibp_cfg){.slot_bytes = bad[i].slot, .wr_bytes = bad[i].wr, .timeout = bad[i].timeout};
        wp_transport *t = NULL;
        ib_dev_cfg dc = {.port = 1, .soft_fabric = T->fab, .soft_rank = ctx->rank};
        int rc = ibv_create(T->ops, &dc, &T->pc, 1.0, ctx->t, &t, ctx->err, sizeof ctx->err);
        RANK_CHECK(ctx, rc == 1 && !t && strstr(ctx->err, bad[i].says), "case %zu: rc %d, message: %s", i, rc, ctx->err);
        if (ctx->rank == 0) printf("refused: %s\n", ctx->err);
    }
    ctx->err[0] = 0;
    return 0;
}

/* ---- main ---- */

static void run_matrix(ib_test *T, int world, bool check) {
    char err[800];
    wp_net_opts net;
    rt_net(&net, 1);
    int rc = rt_run_local(world, &net, matrix_rank, T, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (check) check_fabric(T, world);
}

/* Switch T to libibverbs: 0, or 77 after saying why not (no device, or not built). */
static int use_verbs(ib_test *T) {
#if WP_HAVE_IBVERBS
    ib_dev_cfg dc = {.port = 1};
    const char *dev = getenv("WEIPIPE_IB_DEVICE");
    if (dev) snprintf(dc.device, sizeof dc.device, "%s", dev);
    ib_dev *d;
    char desc[320], err[400];
    int rc = ib_verbs_ops.open(&dc, &d, desc, sizeof desc, err, sizeof err);
    if (rc == IB_NO_DEVICE) {
        printf("skip: no RDMA device here (%s); the protocol is covered over the soft fabric\n", err);
        return 77;
    }
    CHECK(rc == 0, "opening the RDMA device: %s", err);
    ib_verbs_ops.close(d);
    printf("verbs: %s\n", desc);
    T->ops = &ib_verbs_ops;
    return 0;
#else
    (void)T;
    printf("skip: this build has no libibverbs (meson option ibverbs)\n");
    return 77;
#endif
}

/* ---- job: a launched rank with --transport ibverbs ---- */

#if WP_HAVE_IBVERBS
static int job_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char out[1001], in[1001];
    rt_fill(out, sizeof out, 7);
    wp_request *s, *r;
    RANK_CHECK(ctx, tp_post_recv(ctx->t, 0, 1, in, sizeof in, "in", &r, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    RANK_CHECK(ctx, tp_post_send(ctx->t, 0, 1, out, sizeof out, "out", &s, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    RANK_CHECK(ctx, tp_wait(&s, 5, ctx->err, sizeof ctx->err) == 0 && tp_wait(&r, 5, ctx->err, sizeof ctx->err) == 0,
               "%s", ctx->err);
    RANK_CHECK(ctx, memcmp(in, out, sizeof in) == 0, "self message differs");
    RANK_CHECK(ctx, strcmp(tp_kind(ctx->t), "ibverbs") == 0, "transport %s", tp_kind(ctx->t));
    return 0;
}

static int run_job(const char *const *flags, int nflags, char *err, size_t errlen) {
    char port[16];
    snprintf(port, sizeof port, "%d", rt_free_port());
    CHECK(setenv("RANK", "0", 1) == 0 && setenv("WORLD_SIZE", "1", 1) == 0 && setenv("LOCAL_RANK", "0", 1) == 0 &&
                 setenv("MASTER_ADDR", "127.0.0.1", 1) == 0 && setenv("MASTER_PORT", port, 1) == 0 &&
                 setenv("WEIPIPE_SECRET", RT_SECRET, 1) == 0 && setenv("WEIPIPE_JOB_ID", RT_JOB, 1) == 0,
             "setenv failed");
    char *argv[8] = {"train", "--transport", "ibverbs", "--connect-timeout", "5"};
    for (int i = 0; i < nflags; i++) argv[5 + i] = (char *)flags[i];
    wp_opts o;
    CHECK(cli_parse(5 + nflags, argv, &o, err, errlen) == 0, "flags: %s", err);
    wp_net_opts net;
    CHECK(tp_net_from_opts(&o, &net, err, errlen) == 0, "net: %s", err);
    return ibv_job_run_rank(&o, &net, job_rank, NULL, err, errlen);
}
#endif

/* Without a device: exit code 2 and "no RDMA device: <why>"; with one: a self transfer. Bad
 * flags: exit code 2 naming the flag, device or not. */
static int mode_job(void) {
#if WP_HAVE_IBVERBS
    char err[800];
    ib_dev_cfg dc = {.port = 1};
    ib_dev *d;
    char desc[320], why[400];
    bool have = ib_verbs_ops.open(&dc, &d, desc, sizeof desc, why, sizeof why) == 0;
    if (have) ib_verbs_ops.close(d);
    int rc = run_job(NULL, 0, err, sizeof err);
    printf("job: exit code %d%s%s\n", rc, rc ? ": " : "", rc ? err : "");
    if (have) CHECK(rc == 0, "a self transfer over the device failed: %s", err);
    else CHECK(rc == 2 && strncmp(err, "no RDMA device: ", 16) == 0, "expected exit code 2 and \"no RDMA device\"");
    const char *bad_port[] = {"--ib-port", "0"};
    rc = run_job(bad_port, 2, err, sizeof err);
    printf("job --ib-port 0: exit code %d: %s\n", rc, err);
    CHECK(rc == 2 && strstr(err, "--ib-port 0"), "expected exit code 2 naming --ib-port");
    return 0;
#else
    printf("skip: this build has no libibverbs (meson option ibverbs)\n");
    return 77;
#endif
}

static int run_mode(ib_test *T, const char *mode) {
    char e[800];
    wp_net_opts net;
    rt_net(&net, 1);
    if (strcmp(mode, "matrix") == 0) {
        run_matrix(T, 3, is_soft(T));
    } else if (strcmp(mode, "ordering") == 0) {
        ib_soft_set_faults(T->fab, &(ib_soft_faults){.rank = -1, .send_cqe_delay_s = 0.0003, .write_delay_s = 0.0001});
        run_matrix(T, 3, true);
    } else if (strcmp(mode, "credits") == 0) {
        CHECK(rt_run_local(2, &net, credits_rank, T, e, sizeof e) == 0, "%s", e);
    } else if (strcmp(mode, "reuse") == 0) {
        CHECK(rt_run_local(2, &net, reuse_rank, T, e, sizeof e) == 0, "%s", e);
        ib_soft_stats s;
        ib_soft_stats_get(T->fab, &s);
        CHECK(!is_soft(T) || s.src_changed == 0, "%ld staging buffers rewritten before their write completed",
                 s.src_changed);
    } else if (strcmp(mode, "timeout") == 0) {
        mode_timeout(T);
    } else if (strcmp(mode, "silence") == 0) {
        mode_silence(T);
    } else if (strcmp(mode, "errors") == 0) {
        mode_errors(T);
    } else if (strcmp(mode, "mismatch") == 0) {
        mode_mismatch(T);
    } else if (strcmp(mode, "gone") == 0) {
        mode_gone(T);
    } else if (strcmp(mode, "config") == 0) {
        CHECK(rt_run_local(1, &net, config_rank, T, e, sizeof e) == 0, "%s", e);
    } else if (strcmp(mode, "job") == 0) {
        return mode_job();
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}

/* Modes that need nothing of the soft fabric (no faults, no counters) also run over verbs. */
static bool verbs_mode(const char *mode) {
    const char *ok[] = {"matrix", "credits", "reuse", "silence", "mismatch", "gone"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(mode, ok[i]) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ib [verbs-]matrix|ordering SLOT WR | [verbs-]credits|reuse|silence|mismatch|gone | "
                        "timeout|errors|config|job\n");
        return 2;
    }
    const char *mode = argv[1];
    ib_test *T = calloc(1, sizeof *T);
    char err[400];
    CHECK(T && ib_soft_fabric_create(&T->fab, err, sizeof err) == 0, "fabric: %s", T ? err : "out of memory");
    T->ops = &ib_soft_ops;
    T->seed = 0x1bfab0001;
    T->pc = (ibp_cfg){.slot_bytes = argc > 3 ? (size_t)atol(argv[2]) : 4096,
                      .wr_bytes = argc > 3 ? (size_t)atol(argv[3]) : 4096 + IBP_HDR_BYTES, .timeout = 10};
    int rc = 0;
    if (strncmp(mode, "verbs-", 6) == 0) {
        mode += 6;
        rc = verbs_mode(mode) ? use_verbs(T) : 2;
        if (rc == 2) fprintf(stderr, "mode %s needs the soft fabric (its faults or counters)\n", mode);
    }
    if (rc == 0) rc = run_mode(T, mode);
    if (rc == 0) printf("ok: %s%s\n", mode, is_soft(T) ? "" : " over verbs");
    ib_soft_fabric_destroy(T->fab);
    free(T);
    return rc;
}
