/* Helpers of the ring tests (see ring_harness.h). */
#include "ring_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "sock.h"
#include "tcp.h"

uint64_t rh_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Little-endian bytes of one 64-bit word per 8 positions. */
static uint8_t byte_at(uint64_t seed, size_t i) { return (uint8_t)(rh_mix(seed ^ (i / 8) * 0x100000001b3ull) >> (8 * (i % 8))); }

static uint64_t word_at(uint64_t seed, size_t w) { return rh_mix(seed ^ w * 0x100000001b3ull); }

void rh_fill(void *buf, size_t n, uint64_t seed) {
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = word_at(seed, i / 8);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = byte_at(seed, i);
}

long rh_mismatch(const void *buf, size_t n, uint64_t seed) {
    const uint8_t *p = buf;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = word_at(seed, i / 8);
        if (memcmp(p + i, &v, 8) != 0) break;
    }
    for (; i < n; i++)
        if (p[i] != byte_at(seed, i)) return (long)i;
    return -1;
}

void rh_net(wp_net_opts *net, int streams) {
    tp_net_defaults(net);
    net->tcp_streams = streams;
    net->connect_timeout = 10;
    net->timeout = 10;
    net->frame_bytes = 64 << 10;
}

double rh_join_delay[8];
const char *rh_job_flags;

static void child_env(int rank, int n, int port, const char *secret) {
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", n);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("WEIPIPE_JOB_ID", RH_JOB, 1);
    setenv("WEIPIPE_SECRET", secret, 1);
}

static int run_child(int rank, int n, const wp_net_opts *net, wp_rank_fn fn, void *arg) {
    wp_boot_info bi;
    char err[512];
    if (rank < 8 && rh_join_delay[rank] > 0) {
        struct timespec ts = {(time_t)rh_join_delay[rank], (long)((rh_join_delay[rank] - (time_t)rh_join_delay[rank]) * 1e9)};
        nanosleep(&ts, NULL);
    }
    if (boot_from_environ(&bi, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 90;
    }
    bi.job_flags = rh_job_flags;
    wp_rank_ctx ctx = {.rank = rank, .world = n};
    if (tcp_job_open(&bi, net, &ctx.t, &ctx.ctl, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 91;
    }
    int rc = fn(&ctx, arg);
    if (rc != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, ctx.err);
        ctl_abort(ctx.ctl, ctx.err);
    }
    tcp_job_close(ctx.t, ctx.ctl);
    return rc;
}

/* A port below the ephemeral range (32768-60999 by default): the kernel gives ports from that
 * range to the outgoing connections of concurrent tests, which could take one we picked there
 * between our check and the rank's listen (the shell tests pick theirs the same way). */
int rh_free_port(void) {
    char why[128];
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(wp_now() * 1e6);
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = sock_listen("127.0.0.1", port, why, sizeof why);
        if (fd >= 0) {
            close(fd);
            return port;
        }
    }
    CHECK(0, "no free port in 20000-31999: %s", why);
    return -1;
}

pid_t rh_fork_rank(int rank, int n, int port, const char *secret, const wp_net_opts *net, wp_rank_fn fn, void *arg,
                   pid_t *pgid, const char *stderr_dir) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, *pgid);
        if (stderr_dir) {
            char path[512];
            snprintf(path, sizeof path, "%s/rank%d.err", stderr_dir, rank);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) dup2(fd, 2);
        }
        child_env(rank, n, port, secret);
        exit(run_child(rank, n, net, fn, arg));
    }
    if (!*pgid) *pgid = pid;
    setpgid(pid, *pgid);
    return pid;
}

int rh_run_tcp(int n, const wp_net_opts *net, wp_rank_fn fn, void *arg, double deadline_s, int *exits,
               const char *stderr_dir, pid_t *pgid_out) {
    int port = rh_free_port();
    pid_t *pids = calloc((size_t)n, sizeof *pids), pgid = 0;
    CHECK(pids, "out of memory");
    for (int r = 0; r < n; r++) pids[r] = rh_fork_rank(r, n, port, RH_SECRET, net, fn, arg, &pgid, stderr_dir);
    if (pgid_out) *pgid_out = pgid;
    double end = wp_now() + deadline_s;
    int left = n, rc = 0;
    while (left > 0) {
        for (int r = 0; r < n; r++) {
            int st;
            if (pids[r] && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
                exits[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                pids[r] = 0;
                left--;
            }
        }
        if (left > 0 && wp_now() > end) {
            fprintf(stderr, "rh_run_tcp: ranks still running after %g s: killing them\n", deadline_s);
            kill(-pgid, SIGKILL);
            rc = -1;
            end = wp_now() + 3600;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        if (left > 0) nanosleep(&ts, NULL);
    }
    free(pids);
    return rc;
}

int rh_run_local(int n, const wp_net_opts *net, wp_rank_fn fn, void *arg, char *err, size_t errlen) {
    return launch_threads(n, net, fn, arg, err, errlen);
}

bool rh_group_gone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

char *rh_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = s ? fread(s, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    if (s) s[got] = 0;
    fclose(f);
    return s;
}

void rh_set_err(char *dst, size_t dstlen, const char *msg) {
    size_t n = strlen(msg) < dstlen - 1 ? strlen(msg) : dstlen - 1;
    memmove(dst, msg, n);
    dst[n] = 0;
}
