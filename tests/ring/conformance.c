/* The transport conformance suite (see conformance.h): the cases, and the table of
 * transports with the openers of local and tcp (the RDMA ones are in conformance_ib.c). */
#include "conformance.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"

/* ---- the transports ---- */

static int run_local(conf_transport *X, int n, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    return rh_run_local(n, &X->net, fn, arg, err, errlen);
}

/* Forked ranks: each prints its own reason on stderr; here the exit codes, and that no
 * process is left behind. */
static int run_tcp(conf_transport *X, int n, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    int exits[CONF_MAX_RANKS];
    pid_t pgid;
    if (rh_run_tcp(n, &X->net, fn, arg, 60, exits, NULL, &pgid) != 0)
        return snprintf(err, errlen, "tcp ranks still running after 60 s (killed)"), 1;
    for (int r = 0; r < n; r++)
        if (exits[r] != 0) return snprintf(err, errlen, "rank %d exited with %d (its reason is on stderr)", r, exits[r]), 1;
    if (!rh_group_gone(pgid)) return snprintf(err, errlen, "tcp ranks left processes behind"), 1;
    return 0;
}

static void local_like(conf_transport *X, int streams) {
    rh_net(&X->net, streams);
    X->unit = X->net.frame_bytes;
}

static int open_local(conf_transport *X) {
    local_like(X, 1);
    X->run = run_local;
    X->threads = true;
    X->tells_culprit = true; /* one failure for the whole world */
    X->gone_says = "silent for"; /* a local peer that closed just never matches */
    return 0;
}

/* Every byte through the link emulation's frames (fast enough to finish quickly). */
static int open_local_paced(conf_transport *X) {
    open_local(X);
    X->net.link_bandwidth = 2e9;
    X->net.link_latency = 1e-4;
    return 0;
}

static int open_tcp_with(conf_transport *X, int streams, size_t frame_bytes) {
    local_like(X, streams);
    if (frame_bytes) X->net.frame_bytes = X->unit = frame_bytes;
    X->run = run_tcp;
    X->framed = true;
    X->gone_says = "closed the connection";
    return 0;
}
static int open_tcp(conf_transport *X) { return open_tcp_with(X, 1, 0); }
static int open_tcp_4streams(conf_transport *X) { return open_tcp_with(X, 4, 0); }
static int open_tcp_1mib_frames(conf_transport *X) { return open_tcp_with(X, 2, 1u << 20); }
static int open_ib_soft(conf_transport *X) { return conf_open_ib(X, true); }
static int open_ib_verbs(conf_transport *X) { return conf_open_ib(X, false); }

static const struct {
    const char *name, *about;
    int (*open)(conf_transport *X); /* 0, or 77 after printing why it cannot run here */
} transports[] = {
    {"local", "ranks as threads, buffers copied between them", open_local},
    {"local-paced", "local through the link emulation (2 GB/s, 0.1 ms)", open_local_paced},
    {"tcp", "forked ranks, the real rendezvous, 1 stream per peer, 64 KiB frames", open_tcp},
    {"tcp-4streams", "tcp striping over 4 streams per peer", open_tcp_4streams},
    {"tcp-1mib-frames", "tcp with 2 streams and 1 MiB frames", open_tcp_1mib_frames},
    {"ib-soft", "the RDMA transport over the soft fabric (threads; local carries the exchange)", open_ib_soft},
    {"ib-verbs", "the RDMA transport over libibverbs (skipped without a device)", open_ib_verbs},
};

int conf_open(conf_transport *X, const char *name) {
    for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
        if (strcmp(name, transports[i].name) != 0) continue;
        memset(X, 0, sizeof *X);
        X->name = transports[i].name;
        return transports[i].open(X);
    }
    fprintf(stderr, "unknown transport %s; the table:\n", name);
    for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++)
        fprintf(stderr, "  %-16s %s\n", transports[i].name, transports[i].about);
    return 2;
}

void conf_close(conf_transport *X) {
    if (X->done) X->done(X);
}

void conf_close_rank(wp_rank_ctx *ctx) {
    ctl_attach(ctx->ctl, NULL);
    tp_close(ctx->t);
    ctx->t = NULL;
}

/* Run fn over X on n ranks, then the transport's own expectations. */
static void run_case(conf_transport *X, const char *name, int n, wp_rank_fn fn, void *arg, const conf_report *R) {
    char err[800];
    CHECK(X->run(X, n, fn, arg, err, sizeof err) == 0, "%s over %s: %s", name, X->name, err);
    conf_report plain = {.name = name};
    if (X->after_case) CHECK(X->after_case(X, R ? R : &plain, err, sizeof err) == 0, "%s over %s: %s", name, X->name, err);
}

static int connect_pair(wp_rank_ctx *ctx) {
    int peer = 1 - ctx->rank;
    RANK_CHECK(ctx, tp_connect(ctx->t, &peer, 1, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    return 0;
}

static int barrier(wp_rank_ctx *ctx) {
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, ctx->err, sizeof ctx->err) == 0, "barrier: %s", ctx->err);
    return 0;
}

static void nap(double s) { usleep((useconds_t)(s * 1e6)); }

/* ---- matrix: every pair and self, many sizes, shuffled posts ---- */

const int conf_channels[CONF_NCH] = {WP_CH_WFWD, WP_CH_GRAD, 5};
#define BIG ((3u << 20) + 5)

/* 0, 1, odd, around the unit, several units, and several MiB (channel 0 only). */
size_t conf_matrix_size(const conf_matrix *M, int src, int dst, int ch, int k) {
    size_t U = M->unit;
    size_t sizes[CONF_PER_BOX] = {0, 1, 3, 4097, U - 1, U, U + 1, 3 * U + 17, BIG};
    size_t s = sizes[(k + src * 7 + dst * 3 + ch) % CONF_PER_BOX];
    return s == BIG && ch != conf_channels[0] ? 777 : s;
}

static uint64_t msg_seed(const conf_matrix *M, int src, int dst, int ch, int k) {
    return rh_mix(M->seed ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 28) ^ ((uint64_t)ch << 16) ^ (uint64_t)k);
}

typedef struct op {
    bool send;
    int peer, ch, k;
    size_t bytes;
    char *buf;
} op;

/* A rank's operations: for every box (peer, channel, direction) its messages, merged in a
 * seeded random order that keeps each box's own order. */
static int build_ops(const conf_matrix *M, int me, op **out) {
    int nbox = M->world * CONF_NCH * 2, total = nbox * CONF_PER_BOX, next[CONF_MAX_RANKS * CONF_NCH * 2] = {0};
    op *ops = calloc((size_t)total, sizeof *ops);
    if (!ops) return -1;
    uint64_t rng = rh_mix(M->seed + (uint64_t)me);
    for (int i = 0; i < total; i++) {
        int b;
        do {
            rng = rh_mix(rng);
            b = (int)(rng % (uint64_t)nbox);
        } while (next[b] == CONF_PER_BOX);
        int k = next[b]++, peer = b / (CONF_NCH * 2), ch = conf_channels[(b / 2) % CONF_NCH];
        bool send = b % 2 == 0;
        int src = send ? me : peer, dst = send ? peer : me;
        ops[i] = (op){.send = send, .peer = peer, .ch = ch, .k = k, .bytes = conf_matrix_size(M, src, dst, ch, k)};
        ops[i].buf = malloc(ops[i].bytes + 1);
        if (!ops[i].buf) return -1;
        if (send) rh_fill(ops[i].buf, ops[i].bytes, msg_seed(M, src, dst, ch, k));
        else memset(ops[i].buf, 0xA5, ops[i].bytes);
    }
    *out = ops;
    return total;
}

typedef struct matrix_run {
    conf_matrix M;
    bool framed;
} matrix_run;

static int matrix_rank(wp_rank_ctx *ctx, void *arg) {
    const matrix_run *R = arg;
    const conf_matrix *M = &R->M;
    int me = ctx->rank;
    wp_transport *t = ctx->t;
    op *ops;
    int n = build_ops(M, me, &ops);
    RANK_CHECK(ctx, n > 0, "out of memory");
    RANK_CHECK(ctx, tp_connect_ring(t, ctx->err, sizeof ctx->err) == 0, "connect: %s", ctx->err);
    uint64_t sent = 0, recvd = 0;
    wp_request **reqs = calloc((size_t)n, sizeof *reqs);
    RANK_CHECK(ctx, reqs != NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        char label[WP_LABEL_MAX];
        snprintf(label, sizeof label, "m%d>%d@%d#%d", o->send ? me : o->peer, o->send ? o->peer : me, o->ch, o->k);
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
    int idx;
    RANK_CHECK(ctx, tp_wait_any(reqs, n, 1.0, &idx, ctx->err, sizeof ctx->err) == 0 && idx == -1,
               "wait_any on no request should return -1");
    free(reqs);
    for (int i = 0; i < n; i++) {
        op *o = &ops[i];
        if (!o->send) {
            long bad = rh_mismatch(o->buf, o->bytes, msg_seed(M, o->peer, me, o->ch, o->k));
            RANK_CHECK(ctx, bad < 0, "rank %d: message %d from rank %d on channel %d (%zu bytes) differs at byte %ld", me,
                       o->k, o->peer, o->ch, o->bytes, bad);
        }
        free(o->buf);
    }
    free(ops);
    wp_transport_stats st;
    tp_stats(t, &st);
    RANK_CHECK(ctx, st.payload_sent == sent && st.payload_recv == recvd,
               "payload counters %llu/%llu, expected %llu/%llu", (unsigned long long)st.payload_sent,
               (unsigned long long)st.payload_recv, (unsigned long long)sent, (unsigned long long)recvd);
    uint64_t msgs = (uint64_t)M->world * CONF_NCH * CONF_PER_BOX;
    RANK_CHECK(ctx, st.msgs_sent == msgs && st.msgs_recv == msgs, "message counters %llu/%llu, expected %llu",
               (unsigned long long)st.msgs_sent, (unsigned long long)st.msgs_recv, (unsigned long long)msgs);
    RANK_CHECK(ctx, R->framed ? st.overhead_sent > 0 && st.overhead_recv > 0 : st.overhead_sent == 0 && st.overhead_recv == 0,
               "overhead counters %llu/%llu (%s)", (unsigned long long)st.overhead_sent,
               (unsigned long long)st.overhead_recv, R->framed ? "headers both ways" : "none");
    if (M->stats) M->stats[me] = st;
    if (me == 0)
        printf("rank 0: %d requests, payload %llu B sent / %llu B received, overhead %llu / %llu B, waited %.3f s\n", n,
               (unsigned long long)st.payload_sent, (unsigned long long)st.payload_recv,
               (unsigned long long)st.overhead_sent, (unsigned long long)st.overhead_recv, st.wait_s);
    return barrier(ctx);
}

static void case_matrix(conf_transport *X) {
    wp_transport_stats stats[CONF_MAX_RANKS];
    matrix_run R = {.M = {.world = 4, .unit = X->unit, .seed = 0x5eed0001, .stats = X->threads ? stats : NULL},
                    .framed = X->framed};
    conf_report rep = {.name = "matrix", .matrix = &R.M};
    run_case(X, "matrix", R.M.world, matrix_rank, &R, &rep);
}

/* ---- late: a receiver that posts long after the sender ---- */

#define LATE_MSGS 5

typedef struct late_run {
    conf_transport *X;
    size_t bytes;
    uint64_t seed;
} late_run;

static int late_rank(wp_rank_ctx *ctx, void *arg) {
    const late_run *R = arg;
    wp_transport *t = ctx->t;
    if (connect_pair(ctx)) return 1;
    char *bufs[LATE_MSGS];
    wp_request *reqs[LATE_MSGS] = {0};
    for (int k = 0; k < LATE_MSGS; k++) {
        bufs[k] = malloc(R->bytes);
        RANK_CHECK(ctx, bufs[k] != NULL, "out of memory");
        if (ctx->rank == 0) rh_fill(bufs[k], R->bytes, R->seed + (uint64_t)k);
        else memset(bufs[k], 0x5A, R->bytes);
    }
    if (ctx->rank == 0) {
        for (int k = 0; k < LATE_MSGS; k++) {
            char label[32];
            snprintf(label, sizeof label, "late#%d", k);
            RANK_CHECK(ctx, tp_post_send(t, 1, 3, bufs[k], R->bytes, label, &reqs[k], ctx->err, sizeof ctx->err) == 0,
                       "post: %s", ctx->err);
        }
        nap(0.3);
        bool done;
        RANK_CHECK(ctx, tp_test(&reqs[0], &done, ctx->err, sizeof ctx->err) == 0 && !done,
                   "a send completed although the receiver posted nothing");
        conf_transport *X = R->X;
        if (X->sender_held) RANK_CHECK(ctx, X->sender_held(X, ctx->err, sizeof ctx->err) == 0, "%s", ctx->err);
    }
    if (barrier(ctx)) return 1;
    for (int k = 0; k < LATE_MSGS; k++) {
        if (ctx->rank == 1) {
            RANK_CHECK(ctx, tp_post_recv(t, 0, 3, bufs[k], R->bytes, "late", &reqs[k], ctx->err, sizeof ctx->err) == 0,
                       "post: %s", ctx->err);
            RANK_CHECK(ctx, tp_wait(&reqs[k], 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
            long bad = rh_mismatch(bufs[k], R->bytes, R->seed + (uint64_t)k);
            RANK_CHECK(ctx, bad < 0, "message %d differs at byte %ld", k, bad);
            nap(0.02);
        } else {
            RANK_CHECK(ctx, tp_wait(&reqs[k], 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        }
        free(bufs[k]);
    }
    return barrier(ctx);
}

static void case_late(conf_transport *X) {
    late_run R = {.X = X, .bytes = 3 * X->unit + 1, .seed = 0x1a7e0001};
    run_case(X, "late", 2, late_rank, &R, NULL);
}

/* ---- reuse: many messages one after the other through one channel ---- */

#define REUSE_MSGS 300
#define REUSE_SEED 0x1bfab0001ull

/* arg: the largest message + 1 */
static int reuse_rank(wp_rank_ctx *ctx, void *arg) {
    const size_t cap = *(const size_t *)arg;
    wp_transport *t = ctx->t;
    char *buf = malloc(cap);
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    uint64_t rng = REUSE_SEED;
    for (int k = 0; k < REUSE_MSGS; k++) {
        rng = rh_mix(rng);
        size_t bytes = (size_t)(rng % cap);
        wp_request *r;
        if (ctx->rank == 0) {
            rh_fill(buf, bytes, REUSE_SEED ^ (uint64_t)k);
            RANK_CHECK(ctx, tp_post_send(t, 1, 1, buf, bytes, "reuse", &r, ctx->err, sizeof ctx->err) == 0, "post: %s",
                       ctx->err);
            RANK_CHECK(ctx, tp_wait(&r, 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
        } else {
            memset(buf, 0x11, bytes);
            RANK_CHECK(ctx, tp_post_recv(t, 0, 1, buf, bytes, "reuse", &r, ctx->err, sizeof ctx->err) == 0, "post: %s",
                       ctx->err);
            RANK_CHECK(ctx, tp_wait(&r, 10, ctx->err, sizeof ctx->err) == 0, "wait: %s", ctx->err);
            long bad = rh_mismatch(buf, bytes, REUSE_SEED ^ (uint64_t)k);
            RANK_CHECK(ctx, bad < 0, "message %d (%zu bytes) differs at byte %ld", k, bytes, bad);
        }
    }
    free(buf);
    /* No barrier: the sender closes as soon as its last send completed, maybe before the
     * receiver is done with it (a credit in flight); that is no failure. */
    char why[600];
    RANK_CHECK(ctx, !tp_failed(t, why, sizeof why), "transport failed: %s", why);
    return 0;
}

static void case_reuse(conf_transport *X) {
    size_t cap = 2 * X->unit + 1;
    run_case(X, "reuse", 2, reuse_rank, &cap, NULL);
}

/* ---- failures: both ranks learn, each message names what the case says ---- */

/* tmpl with "{0}" and "{1}" replaced by the transport's names of ranks 0 and 1. */
static void expand(wp_transport *t, const char *tmpl, char *out, size_t outlen) {
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 1 < outlen;) {
        if (p[0] == '{' && (p[1] == '0' || p[1] == '1') && p[2] == '}') {
            char name[128];
            tp_peer_name(t, p[1] - '0', name, sizeof name);
            o += (size_t)snprintf(out + o, outlen - o, "%s", name);
            if (o >= outlen) o = outlen - 1;
            p += 3;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = 0;
}

/* The rank's message (of msg, or of the failure it learns of within 3 s) holds every part. */
static int expect_says(wp_rank_ctx *ctx, wp_transport *t, const char *what, char *msg, size_t msglen,
                       const char *const *parts) {
    for (double end = wp_now() + 3; !msg[0] && wp_now() < end;) {
        if (tp_failed(t, msg, msglen)) break;
        nap(0.01);
    }
    printf("%s: rank %d: %s\n", what, ctx->rank, msg[0] ? msg : "(no failure)");
    for (int i = 0; parts[i]; i++) {
        char part[400];
        expand(t, parts[i], part, sizeof part);
        RANK_CHECK(ctx, strstr(msg, part) != NULL, "%s: rank %d's message lacks \"%s\": %s", what, ctx->rank, part,
                   msg[0] ? msg : "(no failure)");
    }
    return 0;
}

typedef struct fail_run {
    conf_transport *X;
    const conf_fail *F;
    atomic_int reported; /* threads: ranks that have their message */
} fail_run;

static int fail_rank(wp_rank_ctx *ctx, void *arg) {
    const fail_run *R = arg;
    const conf_fail *F = R->F;
    wp_transport *t = ctx->t;
    if (connect_pair(ctx)) return 1;
    size_t bytes = ctx->rank == 0 ? F->send_bytes : F->recv_bytes;
    char *buf = calloc(1, bytes + 1);
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    rh_fill(buf, bytes, 0xfa11);
    wp_request *r = NULL;
    if (ctx->rank == 1)
        RANK_CHECK(ctx, tp_post_recv(t, 0, F->channel, buf, bytes, "want@1", &r, ctx->err, sizeof ctx->err) == 0,
                   "post: %s", ctx->err);
    else if (F->sender_posts)
        RANK_CHECK(ctx, tp_post_send(t, 1, F->channel, buf, bytes, "give@0", &r, ctx->err, sizeof ctx->err) == 0,
                   "post: %s", ctx->err);
    char msg[600] = "";
    if (r && tp_wait(&r, F->wait_s, msg, sizeof msg) == 0) msg[0] = 0;
    int rc = 0;
    if (ctx->rank != F->culprit || R->X->tells_culprit) rc = expect_says(ctx, t, F->name, msg, sizeof msg, F->says[ctx->rank]);
    else printf("%s: rank %d: the culprit, not told by %s\n", F->name, ctx->rank, R->X->name);
    /* Ranks as threads: stay until both have their message (at most 5 s), so that neither closes
     * its transport while the other is still learning why the job failed: a close is news of its
     * own, and could reach the other rank first. */
    if (R->X->threads) {
        atomic_int *reported = (atomic_int *)&R->reported;
        atomic_fetch_add(reported, 1);
        for (double end = wp_now() + 5; atomic_load(reported) < 2 && wp_now() < end;) nap(0.005);
    }
    free(buf);
    return rc;
}

void conf_expect_failure(conf_transport *X, const conf_fail *F) {
    fail_run R = {.X = X, .F = F};
    run_case(X, F->name, 2, fail_rank, &R, NULL);
}

/* A receive nobody sends: the wait fails naming the silent peer; the other rank learns. */
static void case_silence(conf_transport *X) {
    conf_fail F = {.name = "silence", .culprit = 0, .channel = 4, .send_bytes = 10, .recv_bytes = 10, .wait_s = 0.3,
                   .says = {{"silent for 0.3 s"}, {"{0} silent for 0.3 s while rank 1 waited for want@1"}}};
    conf_expect_failure(X, &F);
}

/* Sizes that disagree: the receiver names both labels and sizes; the sender learns. */
static void case_mismatch(conf_transport *X) {
    conf_fail F = {.name = "mismatch", .culprit = -1, .channel = 2, .send_bytes = 100, .recv_bytes = 120, .sender_posts = true,
                   .wait_s = 20,
                   .says = {{"rank 1 expects want@1 (120 bytes)"},
                            {"rank 0 sends give@0 (100 bytes) on channel 2 but rank 1 expects want@1 (120 bytes)"}}};
    conf_expect_failure(X, &F);
}

/* ---- gone: a peer that closed ---- */

/* Quiet while nothing is pending with it; the next send to it fails (at the post or the
 * wait) naming it and the label, in the transport's words. */
static int gone_rank(wp_rank_ctx *ctx, void *arg) {
    const conf_transport *X = arg;
    if (connect_pair(ctx) || barrier(ctx)) return 1;
    if (ctx->rank == 1) conf_close_rank(ctx);
    /* No barrier after the failure: where one failure is the world's (local), the control
     * channel fails with it. */
    if (barrier(ctx) || ctx->rank == 1) return ctx->rank == 1 ? 0 : 1;
    wp_transport *t = ctx->t;
    nap(0.1);
    char msg[600] = "";
    RANK_CHECK(ctx, !tp_failed(t, msg, sizeof msg), "failed although nothing was pending: %s", msg);
    char buf[5000];
    rh_fill(buf, sizeof buf, 3);
    wp_request *r;
    if (tp_post_send(t, 1, 0, buf, sizeof buf, "late@0", &r, msg, sizeof msg) == 0 && tp_wait(&r, 2, msg, sizeof msg) == 0)
        msg[0] = 0;
    const char *says[] = {"{1} ", X->gone_says, "late@0", NULL};
    return expect_says(ctx, t, "gone", msg, sizeof msg, says);
}

static void case_gone(conf_transport *X) { run_case(X, "gone", 2, gone_rank, X, NULL); }

const conf_case conf_cases[] = {
    {"matrix", "4 ranks, every pair and self, 3 channels, 0 B to 3 MiB, shuffled posts: every byte (so FIFO per "
               "(src, dst, channel)), wait_any, counters", case_matrix},
    {"late", "a receiver that posts late: no send completes before, all arrives intact after", case_late},
    {"reuse", "300 messages in a row on one channel, sizes up to 2 units; the sender leaves at once", case_reuse},
    {"silence", "a receive nobody sends fails naming the silent peer; the other rank learns", case_silence},
    {"mismatch", "sizes that disagree fail naming both labels and sizes, on both ranks", case_mismatch},
    {"gone", "a closed peer: no failure while nothing is pending, the next send fails naming it", case_gone},
};
const int conf_ncases = (int)(sizeof conf_cases / sizeof conf_cases[0]);

const conf_case *conf_find_case(const char *name) {
    for (int i = 0; i < conf_ncases; i++)
        if (strcmp(conf_cases[i].name, name) == 0) return &conf_cases[i];
    return NULL;
}
