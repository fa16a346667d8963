/* The staged transport (ring/staged.h), N = 3 ranks: over the local transport (threads) in
 * both modes, through pinned host slots (HOST) and device to device (DIRECT), and over tcp
 * (forked processes with the real rendezvous) through pinned slots. Runs with the CPU backend
 * everywhere (the same steps, synchronous) and, where a GPU is usable, again with CUDA
 * contexts sharing it (the parent touches CUDA only after its last fork).
 *
 * Checks: every message arrives bit-exact (seeded random bytes, odd sizes from 0 to 1 MiB+3);
 * FIFO per (peer, channel) with several messages queued at once; channels independent (the
 * receiver posts channel 2 before channel 0, the sender the other way round); a receive that
 * nothing sends fails after its silence bound (0.3 s) instead of hanging, and that failure
 * reaches the other rank's wait; a size mismatch fails both sides naming both labels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_harness.h"
#include "clock.h"
#include "launch.h"
#include "staged.h"
#include "ring_harness.h"

#define NRANKS 3
#define NMSG 4
static const size_t sizes[NMSG] = {0, 1, 4097, (1u << 20) + 3};

static wp_backend_kind kind;
static wp_stage_mode mode;
static bool over_tcp;
static wp_rank_fn current_fn;

/* The byte pattern of message m from rank src on channel ch. */
static void pattern(unsigned char *p, size_t n, int src, int ch, int m) {
    wp_rng g = rng_seeded((uint64_t)(1000 * src + 10 * ch + m) + 7);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rng_next(&g) >> 56);
}

typedef struct {
    wp_kern *k;
    wp_transport *t;
    void *dev[2][2][NMSG]; /* [send/recv][channel 0/2][message] */
} rank_bufs;

static int open_rank(wp_rank_ctx *ctx, rank_bufs *b) {
    wp_kern_opts o = {.kind = kind, .compute = WP_F32, .threads = 1, .device = 0};
    b->k = kern_create(&o, ctx->err, sizeof ctx->err);
    if (!b->k) return 1;
    if (tp_staged_open(ctx->t, b->k, mode, &b->t, ctx->err, sizeof ctx->err)) return 1;
    unsigned char *h = malloc(sizes[NMSG - 1]);
    if (!h) return snprintf(ctx->err, sizeof ctx->err, "out of memory"), 1;
    for (int c = 0; c < 2; c++)
        for (int m = 0; m < NMSG; m++) {
            b->dev[0][c][m] = kern_alloc(b->k, sizes[m]);
            b->dev[1][c][m] = kern_alloc(b->k, sizes[m]);
            pattern(h, sizes[m], ctx->rank, 2 * c, m);
            kern_to_device(b->k, b->dev[0][c][m], h, sizes[m]);
        }
    free(h);
    if (kern_error(b->k)) return snprintf(ctx->err, sizeof ctx->err, "%s", kern_error(b->k)), 1;
    return 0;
}

static void close_rank(rank_bufs *b) {
    if (b->t) tp_close(b->t);
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++)
            for (int m = 0; m < NMSG; m++) kern_free(b->k, b->dev[s][c][m]);
    kern_destroy(b->k);
}

/* Every message of every channel posted before any wait; then all awaited. */
static int exchange(wp_rank_ctx *ctx, rank_bufs *b) {
    int next = (ctx->rank + 1) % NRANKS, prev = (ctx->rank + NRANKS - 1) % NRANKS;
    wp_request *req[2][2][NMSG] = {{{0}}};
    char *e = ctx->err;
    size_t el = sizeof ctx->err;
    for (int c = 1; c >= 0; c--)
        for (int m = 0; m < NMSG; m++)
            if (tp_post_recv(b->t, prev, 2 * c, b->dev[1][c][m], sizes[m], "R", &req[1][c][m], e, el)) return 1;
    for (int c = 0; c < 2; c++)
        for (int m = 0; m < NMSG; m++)
            if (tp_post_send(b->t, next, 2 * c, b->dev[0][c][m], sizes[m], "S", &req[0][c][m], e, el)) return 1;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++)
            for (int m = 0; m < NMSG; m++)
                if (tp_wait(&req[s][c][m], 10.0, e, el)) return 1;
    return 0;
}

static int verify(wp_rank_ctx *ctx, rank_bufs *b) {
    int prev = (ctx->rank + NRANKS - 1) % NRANKS, bad = 0;
    unsigned char *want = malloc(sizes[NMSG - 1]), *got = malloc(sizes[NMSG - 1]);
    for (int c = 0; c < 2 && want && got; c++)
        for (int m = 0; m < NMSG; m++) {
            pattern(want, sizes[m], prev, 2 * c, m);
            kern_to_host(b->k, got, b->dev[1][c][m], sizes[m]);
            if (memcmp(want, got, sizes[m]) != 0) {
                snprintf(ctx->err, sizeof ctx->err, "rank %d: message %d on channel %d (%zu bytes) differs", ctx->rank,
                         m, 2 * c, sizes[m]);
                bad = 1;
            }
        }
    if (!want || !got) {
        snprintf(ctx->err, sizeof ctx->err, "out of memory");
        bad = 1;
    }
    free(want);
    free(got);
    return bad;
}

static int rank_exchange(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    rank_bufs b = {0};
    int rc = open_rank(ctx, &b);
    if (!rc) rc = exchange(ctx, &b);
    if (!rc) rc = verify(ctx, &b);
    close_rank(&b);
    return rc;
}

/* Rank 1 never sends; rank 0's receive must fail after its silence bound, then rank 0's
 * failure (through the inner transport) must reach rank 1's pending receive. */
static int rank_silent(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    rank_bufs b = {0};
    int rc = open_rank(ctx, &b);
    wp_request *r = NULL;
    if (!rc && ctx->rank < 2) rc = tp_post_recv(b.t, 1 - ctx->rank, 0, b.dev[1][0][2], sizes[2], "never", &r, ctx->err, sizeof ctx->err);
    if (!rc && ctx->rank < 2) {
        double t0 = wp_now();
        int failed = tp_wait(&r, ctx->rank == 0 ? 0.3 : 10.0, ctx->err, sizeof ctx->err);
        double dt = wp_now() - t0;
        printf("rank %d: wait failed=%d after %.2f s: %s\n", ctx->rank, failed, dt, ctx->err);
        bool want = ctx->rank == 0 ? strstr(ctx->err, "silent") != NULL : ctx->err[0] != 0;
        rc = failed && want && dt < 5.0 ? 0 : 1;
        if (rc) snprintf(ctx->err, sizeof ctx->err, "rank %d: the wait did not fail as it should", ctx->rank);
        else ctx->err[0] = 0;
    }
    close_rank(&b);
    return rc;
}

/* Rank 0 sends 4097 bytes, rank 1 expects 1 MiB + 3 on that channel: both waits fail and
 * the message names the two labels. */
static int rank_mismatch(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    rank_bufs b = {0};
    int rc = open_rank(ctx, &b);
    wp_request *r = NULL;
    if (!rc && ctx->rank == 0) rc = tp_post_send(b.t, 1, 0, b.dev[0][0][2], sizes[2], "small", &r, ctx->err, sizeof ctx->err);
    if (!rc && ctx->rank == 1) rc = tp_post_recv(b.t, 0, 0, b.dev[1][0][3], sizes[3], "large", &r, ctx->err, sizeof ctx->err);
    if (!rc && ctx->rank < 2) {
        int failed = tp_wait(&r, 10.0, ctx->err, sizeof ctx->err);
        printf("rank %d: wait failed=%d: %s\n", ctx->rank, failed, ctx->err);
        rc = failed && strstr(ctx->err, "small") && strstr(ctx->err, "large") ? 0 : 1;
        if (rc) snprintf(ctx->err, sizeof ctx->err, "rank %d: the size mismatch was not reported by name", ctx->rank);
        else ctx->err[0] = 0;
    }
    close_rank(&b);
    return rc;
}

/* tcp: every rank a forked process; all must exit 0. */
static int run_tcp(char *err, size_t errlen) {
    wp_net_opts net;
    rh_net(&net, 2);
    int exits[NRANKS];
    pid_t pgid = 0;
    if (rh_run_tcp(NRANKS, &net, current_fn, NULL, 60.0, exits, NULL, &pgid) != 0)
        return snprintf(err, errlen, "the ranks did not end within 60 s"), 1;
    for (int r = 0; r < NRANKS; r++)
        if (exits[r] != 0) return snprintf(err, errlen, "rank %d exited with %d (its reason is on stderr)", r, exits[r]), 1;
    return 0;
}

static void run(const char *what, wp_rank_fn fn) {
    wp_net_opts net;
    tp_net_defaults(&net);
    char err[2048] = "";
    double t0 = wp_now();
    current_fn = fn;
    int rc = over_tcp ? run_tcp(err, sizeof err) : launch_threads(NRANKS, &net, fn, NULL, err, sizeof err);
    check_say(rc == 0, "%s (%s backend, %s, %s, %.2f s)%s%s", what, kind == WP_BACKEND_CPU ? "cpu" : "cuda",
              over_tcp ? "tcp" : "local", mode == WP_STAGE_HOST ? "via pinned host" : "device to device", wp_now() - t0,
              err[0] ? ": " : "", err);
}

/* Whether CUDA is usable, asked in a child process: CUDA must not be initialised in a process
 * that forks ranks afterwards. The reason comes back through a pipe. */
static bool cuda_usable(char *why, size_t whylen) {
    int fd[2];
    if (pipe(fd) != 0) return snprintf(why, whylen, "pipe failed"), false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char w[512] = "";
        bool ok = kern_available(WP_BACKEND_CUDA, w, sizeof w);
        if (write(fd[1], w, strlen(w)) < 0) _exit(2);
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = pid > 0 ? read(fd[0], why, whylen - 1) : -1;
    why[n > 0 ? n : 0] = '\0';
    close(fd[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return snprintf(why, whylen, "fork failed"), false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void all_cases(void) {
    run("ring exchange, 2 channels x 4 messages (0 B .. 1 MiB+3) per rank", rank_exchange);
    run("silent peer fails the wait; the failure reaches the others", rank_silent);
    run("a size mismatch fails both sides, naming both labels", rank_mismatch);
}

int main(void) {
    char why[512];
    int backends = cuda_usable(why, sizeof why) ? 2 : 1;
    if (backends == 1) printf("cuda part skipped: %s\n", why);
    over_tcp = true;
    mode = WP_STAGE_HOST;
    for (int i = 0; i < backends; i++) {
        kind = i == 0 ? WP_BACKEND_CPU : WP_BACKEND_CUDA;
        all_cases();
    }
    over_tcp = false;
    for (int i = 0; i < 2 * backends; i++) {
        kind = i < 2 ? WP_BACKEND_CPU : WP_BACKEND_CUDA;
        mode = i % 2 == 0 ? WP_STAGE_HOST : WP_STAGE_DIRECT;
        all_cases();
    }
    return check_result("staged");
}
