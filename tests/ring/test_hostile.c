/* Hostile and broken connections.
 *  data:      while rank 0 receives 16 MiB from rank 1, it opens 9 bad connections to rank
 *             1's data listener (wrong secret, wrong version, random bytes, a handshake cut
 *             short and closed, one cut short and left open, wrong job id, a second copy of a
 *             connected stream, a wrong world size, a flipped bit). Each is refused without an
 *             answer, rank 1 counts exactly 9 refusals, and the real transfer arrives intact.
 *  rendezvous: an attacker process hits rank 0's rendezvous port with bad handshakes (those that
 *             decode are answered with a refusal code alone, then closed) while
 *             rank 1 is late; all are refused and logged, and the job still forms.
 *  badframe:  a fake rank 1 (this process, speaking the protocol by hand) answers rank 0's
 *             clear-to-send with a data frame whose checksum is wrong: rank 0's wait fails
 *             naming rank 1, the checksum and the label.
 *  cutframe:  the same fake rank 1 sends a frame header and half its payload, then closes:
 *             rank 0's wait fails naming rank 1 and the label (no hang, no partial message).
 *  flood:     200 silent connections to rank 0's rendezvous port, reopened as fast as rank 0
 *             drops them, while 4 ranks join from the same address: the job forms.
 *  leak:      a fake rank 1 with a wrong job id, then one with the job id (no secret is set)
 *             and other flags: neither gets the job id back nor any byte of rank 0's flags.
 *  fakeabort: the same fake peers, sending a garbage frame after their handshake: rank 0 logs
 *             and drops them and the job forms when the real rank 1 joins.
 *  peers:     WEIPIPE_PEERS=127.0.0.1: a stranger from 127.0.0.2 with an admissible handshake
 *             is dropped unanswered; the job forms.
 * usage: test_hostile data|rendezvous|badframe|cutframe|flood|leak|fakeabort|peers */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "control_tcp.h"
#include "ring_harness.h"
#include "sock.h"
#include "tcp.h"
#include "wire.h"

#define DATA_BYTES (16u << 20)

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int dial(const char *addr) {
    char host[64], why[200];
    int port;
    if (sock_split_addr(addr, host, sizeof host, &port, why, sizeof why) != 0) return -1;
    return sock_connect(host, port, wp_now() + 5, why, sizeof why);
}

/* The server closed the connection without sending a byte (no handshake answer). */
static bool refused(int fd, double wait_s) {
    char b[WIRE_HS_BYTES];
    double end = wp_now() + wait_s;
    while (wp_now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
        if (n > 0) return false;
    }
    return false;
}

static void good_hs(uint8_t *buf, int kind, int rank, int world, int stream, int nstreams, uint32_t frame,
                    const char *job, const char *secret) {
    wire_hs h = {.version = WIRE_VERSION, .kind = (uint16_t)kind, .rank = (uint32_t)rank, .world = (uint32_t)world,
                 .stream = (uint16_t)stream, .nstreams = (uint16_t)nstreams, .frame_bytes = frame};
    snprintf(h.job, sizeof h.job, "%s", job);
    snprintf(h.secret, sizeof h.secret, "%s", secret);
    snprintf(h.addr, sizeof h.addr, "127.0.0.1:9");
    wire_hs_encode(&h, buf);
}

typedef struct attack {
    const char *name;
    int bytes;      /* how much of buf to send */
    bool keep_open; /* wait for the server to give up */
    bool observable;/* the client can see the refusal (it did not close first) */
} attack;

/* Bad handshakes against addr; variant v fills buf. Returns how many were not refused. */
static int run_attacks(const char *addr, int kind, int world, int nstreams, uint32_t frame, bool include_cut) {
    int failures = 0;
    for (int v = 0; v < 9; v++) {
        uint8_t buf[WIRE_HS_BYTES];
        attack a = {"", WIRE_HS_BYTES, false, true};
        good_hs(buf, kind, 0, world, 0, nstreams, frame, RH_JOB, RH_SECRET);
        switch (v) {
        case 0: a.name = "wrong secret"; good_hs(buf, kind, 0, world, 0, nstreams, frame, RH_JOB, "guess"); break;
        case 1: a.name = "wrong version"; buf[8] = 99; break;
        case 2: a.name = "random bytes"; rh_fill(buf, sizeof buf, 99); break;
        case 3: a.name = "cut and closed"; a.bytes = 100; a.observable = false; break;
        case 4: a.name = "wrong job"; good_hs(buf, kind, 0, world, 0, nstreams, frame, "other-job", RH_SECRET); break;
        case 5: a.name = "duplicate"; break; /* data: stream 0 of rank 0 exists; rendezvous: claims rank 0 */
        case 6: a.name = "wrong world"; good_hs(buf, kind, 0, world + 1, 0, nstreams, frame, RH_JOB, RH_SECRET); break;
        case 7: a.name = "flipped bit"; buf[40] ^= 4; break;
        case 8: a.name = "cut and left open"; a.bytes = 100; a.keep_open = true; break;
        }
        if (v == 3 && !include_cut) continue;
        int fd = dial(addr);
        if (fd < 0) {
            fprintf(stderr, "attack '%s': cannot connect to %s\n", a.name, addr);
            failures++;
            continue;
        }
        char why[128];
        sock_write_all(fd, buf, (size_t)a.bytes, wp_now() + 2, why, sizeof why);
        /* wrong secret, job or world: one code, so that a guessed job id is not confirmed */
        int why_code = v == 0 || v == 4 || v == 6 ? HS_WHY_JOB : v == 5 ? HS_WHY_RANK : 0;
        if (kind == HS_CONTROL && why_code) {
            /* a weipipe rank that rank 0 refuses is told why in one code, and nothing of this job */
            wire_hs ack;
            uint8_t in[WIRE_HS_BYTES];
            bool told = sock_read_all(fd, in, sizeof in, wp_now() + 3, why, sizeof why) == 0 &&
                        wire_hs_decode(in, &ack, why, sizeof why) == 0 && ack.kind == HS_REFUSED &&
                        ack.rank == (uint32_t)why_code && ack.job[0] == 0 && ack.secret[0] == 0 && ack.addr[0] == 0 &&
                        ack.flags_hash == 0 && ack.world == 0 && refused(fd, 3.0);
            if (!told) {
                fprintf(stderr, "attack '%s' on %s: not refused with reason %d alone, then closed\n", a.name, addr,
                        why_code);
                failures++;
            }
        } else if (a.observable && !refused(fd, a.keep_open ? 8.0 : 3.0)) {
            fprintf(stderr, "attack '%s' on %s was not refused\n", a.name, addr);
            failures++;
        }
        close(fd);
    }
    return failures;
}

/* ---- data listener ---- */

static int data_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    char *buf = malloc(DATA_BYTES), *e = ctx->err;
    size_t el = sizeof ctx->err;
    wp_request *r;
    RANK_CHECK(ctx, buf != NULL, "out of memory");
    if (ctx->rank == 1) {
        rh_fill(buf, DATA_BYTES, 5);
        RANK_CHECK(ctx, tp_post_send(ctx->t, 0, WP_CH_WFWD, buf, DATA_BYTES, "W[0]@0", &r, e, el) == 0, "%s", e);
        RANK_CHECK(ctx, tp_wait(&r, 10, e, el) == 0, "send: %s", e);
        RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
        wp_transport_stats st;
        for (int i = 0; i < 1000; i++) {
            tp_stats(ctx->t, &st);
            if (st.rejected >= 9) break;
            nap(0.01);
        }
        nap(0.2); /* a tenth refusal would show up now */
        tp_stats(ctx->t, &st);
        RANK_CHECK(ctx, st.rejected == 9, "rank 1 refused %llu connections, expected 9", (unsigned long long)st.rejected);
    } else {
        memset(buf, 0, DATA_BYTES);
        RANK_CHECK(ctx, tp_post_recv(ctx->t, 1, WP_CH_WFWD, buf, DATA_BYTES, "W[0]@0", &r, e, el) == 0, "%s", e);
        int bad = run_attacks(tcp_peer_addr(ctx->t, 1), HS_DATA, 2, 2, 64 << 10, true);
        RANK_CHECK(ctx, bad == 0, "%d attacks were not refused", bad);
        RANK_CHECK(ctx, tp_wait(&r, 10, e, el) == 0, "receive: %s", e);
        RANK_CHECK(ctx, rh_mismatch(buf, DATA_BYTES, 5) < 0, "the real transfer was damaged");
        RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    }
    free(buf);
    RANK_CHECK(ctx, ctl_barrier(ctx->ctl, e, el) == 0, "%s", e);
    return 0;
}

static void test_data(const char *dir) {
    wp_net_opts net;
    rh_net(&net, 2);
    net.connect_timeout = 1.5; /* the handshake left open is dropped after this */
    net.link_bandwidth = 40e6;  /* the transfer runs while the attacks do */
    int exits[2];
    pid_t pgid;
    CHECK(rh_run_tcp(2, &net, data_rank, NULL, 40, exits, dir, &pgid) == 0, "data: ranks hung");
    CHECK(exits[0] == 0 && exits[1] == 0, "data: ranks exited %d, %d", exits[0], exits[1]);
    CHECK(rh_group_gone(pgid), "data: processes left behind");
    char path[600];
    snprintf(path, sizeof path, "%s/rank1.err", dir);
    char *log = rh_slurp(path);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "refused a connection")); p++) lines++;
    printf("rank 1 logged %d refusals:\n%s", lines, log);
    CHECK(lines == 9, "rank 1 logged %d refusals, expected 9", lines);
    free(log);
}

/* ---- rendezvous listener ---- */

static int plain_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    double x = ctx->rank + 1;
    RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_SUM, &x, 1, ctx->err, sizeof ctx->err) == 0 && x == 3, "allreduce");
    return 0;
}

static void test_rendezvous(const char *dir) {
    wp_net_opts net;
    rh_net(&net, 1);
    net.connect_timeout = 4;
    int port = rh_free_port();
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    pid_t pgid = 0;
    fflush(NULL);
    pid_t attacker = fork();
    CHECK(attacker >= 0, "fork");
    if (attacker == 0) {
        /* wait until rank 0 listens, then attack (the cut-and-closed case leaves no trace the
         * attacker could check, so it is covered by the data test) */
        for (int i = 0; i < 200; i++) {
            int fd = dial(addr);
            if (fd >= 0) {
                uint8_t hs[WIRE_HS_BYTES];
                good_hs(hs, HS_CONTROL, 5, 9, 0, 0, 0, "probe", "probe"); /* refused too */
                char why[64];
                sock_write_all(fd, hs, sizeof hs, wp_now() + 1, why, sizeof why);
                close(fd);
                break;
            }
            nap(0.01);
        }
        _exit(run_attacks(addr, HS_CONTROL, 2, 0, 0, false));
    }
    rh_join_delay[1] = 1.5; /* rank 1 joins after the attacks */
    pid_t p0 = rh_fork_rank(0, 2, port, RH_SECRET, &net, plain_rank, NULL, &pgid, dir);
    pid_t p1 = rh_fork_rank(1, 2, port, RH_SECRET, &net, plain_rank, NULL, &pgid, dir);
    rh_join_delay[1] = 0;
    int st;
    CHECK(waitpid(attacker, &st, 0) == attacker && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the attacker saw %d handshakes accepted", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    CHECK(waitpid(p0, &st, 0) == p0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 0 failed");
    CHECK(waitpid(p1, &st, 0) == p1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 1 failed");
    CHECK(rh_group_gone(pgid), "rendezvous: processes left behind");
    char path[600];
    snprintf(path, sizeof path, "%s/rank0.err", dir);
    char *log = rh_slurp(path);
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "refused a connection")); p++) lines++;
    printf("rank 0 logged %d refusals:\n%s", lines, log);
    CHECK(lines == 9, "rank 0 logged %d refusals, expected 9 (a probe and 8 attacks)", lines);
    free(log);
}

/* ---- strangers at the rendezvous: a flood, a fake peer (issue 31, findings 3 and 4) ---- */

/* Whatever this test leaves running dies with it, on every exit path (CHECK exits): the ranks'
 * process group and the attacker. Forked children inherit the handler but are not main. */
static pid_t guard_main, guard_pgid, guard_attacker;

static void guard_kill(void) {
    if (getpid() != guard_main) return;
    if (guard_attacker > 0) kill(guard_attacker, SIGKILL);
    if (guard_pgid > 0) kill(-guard_pgid, SIGKILL);
}

static int sum_rank(wp_rank_ctx *ctx, void *arg) {
    (void)arg;
    double x = ctx->rank + 1, want = ctx->world * (ctx->world + 1) / 2.0;
    RANK_CHECK(ctx, ctl_allreduce(ctx->ctl, CTL_SUM, &x, 1, ctx->err, sizeof ctx->err) == 0 && x == want, "allreduce");
    return 0;
}

/* A blocking connect to 127.0.0.1:port that sends nothing; -1 when nobody listens. */
static int silent_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

/* The attacker of the flood test: FLOOD_CONNS silent connections to rank 0's rendezvous port,
 * each reopened as soon as rank 0 drops it, for `seconds` or until killed. */
#define FLOOD_CONNS 200
static void flood(int port, double seconds) {
    int fds[FLOOD_CONNS];
    long opened = 0;
    for (int i = 0; i < FLOOD_CONNS; i++) fds[i] = -1;
    for (double end = wp_now() + seconds; wp_now() < end;) {
        for (int i = 0; i < FLOOD_CONNS; i++) {
            char b[64];
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (fds[i] >= 0 && poll(&p, 1, 0) > 0 && recv(fds[i], b, sizeof b, MSG_DONTWAIT) <= 0) {
                close(fds[i]);
                fds[i] = -1;
            }
            if (fds[i] < 0 && (fds[i] = silent_connect(port)) < 0) break; /* not listening (yet, or any more) */
            if (fds[i] >= 0) opened++;
        }
        nap(0.005);
    }
    _exit(opened > 0 ? 0 : 3);
}

static void wait_listening(int port) {
    for (int i = 0; i < 1000; i++) {
        int fd = silent_connect(port);
        if (fd >= 0) {
            close(fd);
            return;
        }
        nap(0.01);
    }
    CHECK(0, "rank 0 never listened on port %d", port);
}

/* Every rank exited 0 (waited for, with the group's deadline). */
static void wait_ranks(const pid_t *pids, int n, const char *dir, const char *what) {
    for (int r = 0; r < n; r++) {
        int st;
        CHECK(waitpid(pids[r], &st, 0) == pids[r], "waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            char path[600];
            snprintf(path, sizeof path, "%s/rank%d.err", dir, r);
            char *log = rh_slurp(path);
            fprintf(stderr, "rank %d's log:\n%s", r, log);
            free(log);
            CHECK(0, "%s: rank %d exited %d", what, r, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        }
    }
}

/* 200 silent connections, reopened as fast as rank 0 drops them, while a 4-rank job forms on
 * loopback (from the same address as the flood): the job forms and its allreduce is right. */
static void test_flood(const char *dir) {
    wp_net_opts net;
    rh_net(&net, 1);
    net.connect_timeout = 30;
    int port = rh_free_port();
    pid_t pids[4];
    for (int r = 1; r < 4; r++) rh_join_delay[r] = 1.0; /* the flood is on by then */
    for (int r = 0; r < 4; r++) pids[r] = rh_fork_rank(r, 4, port, "", &net, sum_rank, NULL, &guard_pgid, dir);
    wait_listening(port);
    fflush(NULL);
    guard_attacker = fork();
    CHECK(guard_attacker >= 0, "fork");
    if (guard_attacker == 0) flood(port, 60);
    wait_ranks(pids, 4, dir, "flood");
    kill(guard_attacker, SIGKILL);
    int st;
    CHECK(waitpid(guard_attacker, &st, 0) == guard_attacker, "waitpid attacker");
    guard_attacker = 0;
    CHECK(rh_group_gone(guard_pgid), "flood: processes left behind");
    char path[600];
    snprintf(path, sizeof path, "%s/rank0.err", dir);
    char *log = rh_slurp(path);
    printf("rank 0's log under the flood:\n%s", log);
    free(log);
}

#define SECRET_PATH "/home/alice/private-corpus.bin"
static const char fake_flags[] = "data=" SECRET_PATH "\nsave=/home/alice/run7\nlr=0.000314\nsteps=100\n";

/* A handshake of a fake rank 1: job id `job`, no secret, a flags hash that matches nothing. */
static void fake_hs(uint8_t *buf, const char *job) {
    wire_hs h = {.version = WIRE_VERSION, .kind = HS_CONTROL, .rank = 1, .world = 2, .flags_hash = 0x1234567u};
    snprintf(h.job, sizeof h.job, "%s", job);
    snprintf(h.addr, sizeof h.addr, "127.0.0.1:9");
    wire_hs_encode(&h, buf);
}

/* Send a handshake, then collect whatever rank 0 sends until it closes (or `wait_s`). */
static size_t fake_peer(int port, const uint8_t *hs, const void *more, size_t morelen, uint8_t *got, size_t cap,
                        double wait_s) {
    char why[128], addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    int fd = dial(addr);
    CHECK(fd >= 0, "the fake peer cannot reach rank 0");
    sock_write_all(fd, hs, WIRE_HS_BYTES, wp_now() + 2, why, sizeof why);
    size_t n = 0;
    bool sent_more = more == NULL;
    for (double end = wp_now() + wait_s; n < cap && wp_now() < end;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t k = recv(fd, got + n, cap - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        if (!sent_more && n >= WIRE_HS_BYTES) { /* answered: now the rest */
            sock_write_all(fd, more, morelen, wp_now() + 2, why, sizeof why);
            sent_more = true;
        }
    }
    close(fd);
    return n;
}

static bool holds(const uint8_t *got, size_t n, const char *s) { return memmem(got, n, s, strlen(s)) != NULL; }

/* A fake rank 1 without the secret (none is set: the README's default) and with flags of its
 * own, before the real rank 1 joins. leak: what rank 0 sends it holds neither the job id (to a
 * wrong one) nor any byte of rank 0's flag values (to either). abort: it also sends a garbage
 * frame after its handshake; rank 0 drops it, logs it, and the job forms when rank 1 joins. */
static void test_fake_peer(const char *dir, bool leak) {
    wp_net_opts net;
    rh_net(&net, 1);
    net.connect_timeout = 20;
    int port = rh_free_port();
    pid_t pids[2];
    rh_job_flags = fake_flags;
    rh_join_delay[1] = 6.0; /* after both fakes */
    for (int r = 0; r < 2; r++) pids[r] = rh_fork_rank(r, 2, port, "", &net, sum_rank, NULL, &guard_pgid, dir);
    rh_join_delay[1] = 0;
    wait_listening(port);
    uint8_t hs[WIRE_HS_BYTES], got[1 << 16], junk[1000];
    rh_fill(junk, sizeof junk, 7);
    fake_hs(hs, "someone-elses-job");
    size_t n = fake_peer(port, hs, leak ? NULL : junk, sizeof junk, got, sizeof got, 3.0);
    printf("a wrong job id got %zu bytes back\n", n);
    if (leak) CHECK(!holds(got, n, RH_JOB), "a peer with a wrong job id was told the job id '%s'", RH_JOB);
    const char *values[] = {SECRET_PATH, "/home/alice/run7", "0.000314", "data=", "steps="};
    for (size_t v = 0; leak && v < sizeof values / sizeof *values; v++)
        CHECK(!holds(got, n, values[v]), "a peer with a wrong job id got '%s' of rank 0's flags", values[v]);
    fake_hs(hs, RH_JOB);
    n = fake_peer(port, hs, leak ? NULL : junk, sizeof junk, got, sizeof got, 3.0);
    printf("the job id with other flags got %zu bytes back\n", n);
    for (size_t v = 0; leak && v < sizeof values / sizeof *values; v++)
        CHECK(!holds(got, n, values[v]), "a peer with other flags got '%s' of rank 0's flag values", values[v]);
    wait_ranks(pids, 2, dir, leak ? "leak" : "fake peer");
    CHECK(rh_group_gone(guard_pgid), "processes left behind");
    char path[600];
    snprintf(path, sizeof path, "%s/rank0.err", dir);
    char *log = rh_slurp(path);
    printf("rank 0's log:\n%s", log);
    CHECK(leak || strstr(log, "refused a connection"), "rank 0 did not log the fake peers");
    free(log);
    rh_job_flags = NULL;
}

/* WEIPIPE_PEERS=127.0.0.1: a stranger connecting from 127.0.0.2 (loopback too, another
 * address) with a handshake rank 0 would admit as rank 1 (the job id, no secret, no flags) is
 * dropped unanswered, logged, and the real rank 1 joins. */
static void test_peers(const char *dir) {
    wp_net_opts net;
    rh_net(&net, 1);
    net.connect_timeout = 20;
    int port = rh_free_port();
    pid_t pids[2];
    setenv("WEIPIPE_PEERS", "127.0.0.1", 1);
    rh_join_delay[1] = 3.0;
    for (int r = 0; r < 2; r++) pids[r] = rh_fork_rank(r, 2, port, "", &net, sum_rank, NULL, &guard_pgid, dir);
    rh_join_delay[1] = 0;
    unsetenv("WEIPIPE_PEERS");
    wait_listening(port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = inet_addr("127.0.0.2")},
                       to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&from, sizeof from) == 0 && connect(fd, (struct sockaddr *)&to, sizeof to) == 0,
          "cannot connect from 127.0.0.2: %s", strerror(errno));
    uint8_t hs[WIRE_HS_BYTES];
    char why[128];
    good_hs(hs, HS_CONTROL, 1, 2, 0, 0, 0, RH_JOB, "");
    sock_write_all(fd, hs, sizeof hs, wp_now() + 2, why, sizeof why);
    CHECK(refused(fd, 5.0), "a handshake from 127.0.0.2 was answered (WEIPIPE_PEERS=127.0.0.1)");
    close(fd);
    wait_ranks(pids, 2, dir, "peers");
    CHECK(rh_group_gone(guard_pgid), "peers: processes left behind");
    char path[600];
    snprintf(path, sizeof path, "%s/rank0.err", dir);
    char *log = rh_slurp(path);
    printf("rank 0's log:\n%s", log);
    CHECK(strstr(log, "from 127.0.0.2:") && strstr(log, "not an address of the job's hosts (WEIPIPE_PEERS)"),
          "rank 0 did not log the stranger from 127.0.0.2");
    free(log);
}

/* ---- a real peer sending a bad frame ---- */

static int victim_rank(wp_rank_ctx *ctx, void *arg) {
    const bool cut = *(const bool *)arg;
    char buf[1000], e[600];
    wp_request *r;
    RANK_CHECK(ctx, tp_post_recv(ctx->t, 1, WP_CH_WFWD, buf, sizeof buf, "W[3]@2", &r, e, sizeof e) == 0, "%s", e);
    RANK_CHECK(ctx, tp_wait(&r, 10, e, sizeof e) != 0, "a %s frame was accepted", cut ? "truncated" : "bad-checksum");
    RANK_CHECK(ctx, strstr(e, "rank 1 (127.0.0.1:") && (cut || strstr(e, "bad checksum")) && strstr(e, "W[3]@2"),
               "rank 0's error should name rank 1,%s W[3]@2: %s", cut ? "" : " the checksum and", e);
    printf("rank 0 got: %s\n", e);
    return 0;
}

static int accept_one(int lfd, double deadline) {
    while (wp_now() < deadline) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 50) > 0) {
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0) return fd;
        }
    }
    return -1;
}

static void test_badframe(bool cut) {
    wp_net_opts net;
    rh_net(&net, 1);
    int port = rh_free_port();
    pid_t pgid = 0;
    pid_t p0 = rh_fork_rank(0, 2, port, RH_SECRET, &net, victim_rank, &cut, &pgid, NULL);
    char why[256], my_addr[64];
    int lfd = sock_listen("127.0.0.1", 0, why, sizeof why);
    CHECK(lfd >= 0, "%s", why);
    sock_local_addr(lfd, my_addr, sizeof my_addr);
    double deadline = wp_now() + 10;
    /* rendezvous as rank 1 */
    int cfd = sock_connect("127.0.0.1", port, deadline, why, sizeof why);
    CHECK(cfd >= 0, "%s", why);
    uint8_t hs[WIRE_HS_BYTES];
    wire_hs h = {.version = WIRE_VERSION, .kind = HS_CONTROL, .rank = 1, .world = 2};
    snprintf(h.job, sizeof h.job, RH_JOB);
    snprintf(h.secret, sizeof h.secret, RH_SECRET);
    snprintf(h.addr, sizeof h.addr, "%s", my_addr);
    wire_hs_encode(&h, hs);
    CHECK(sock_write_all(cfd, hs, sizeof hs, deadline, why, sizeof why) == 0 &&
              sock_read_all(cfd, hs, sizeof hs, deadline, why, sizeof why) == 0, "rendezvous: %s", why);
    int type;
    uint64_t seq;
    char *table;
    size_t len;
    CHECK(ctl_read_frame(cfd, &type, &seq, &table, &len, 4096, deadline, why, sizeof why) == 0 && type == F_TABLE,
          "no table: %s", why);
    free(table);
    /* rank 0 opens the data stream when it posts its receive */
    int dfd = accept_one(lfd, deadline);
    CHECK(dfd >= 0, "rank 0 did not connect");
    CHECK(sock_read_all(dfd, hs, sizeof hs, deadline, why, sizeof why) == 0, "%s", why);
    h = (wire_hs){.version = WIRE_VERSION, .kind = HS_DATA_ACK, .rank = 1, .world = 2, .nstreams = 1,
                  .frame_bytes = (uint32_t)net.frame_bytes};
    snprintf(h.job, sizeof h.job, RH_JOB);
    snprintf(h.secret, sizeof h.secret, RH_SECRET);
    wire_hs_encode(&h, hs);
    CHECK(sock_write_all(dfd, hs, sizeof hs, deadline, why, sizeof why) == 0, "%s", why);
    uint8_t hdr[WIRE_FRAME_BYTES], label[64];
    wire_frame f;
    uint32_t crc;
    CHECK(sock_read_all(dfd, hdr, sizeof hdr, deadline, why, sizeof why) == 0 &&
              wire_frame_decode(hdr, &f, &crc, why, sizeof why) == 0 && f.type == F_CTS && f.a == 1000 &&
              f.length < sizeof label && sock_read_all(dfd, label, f.length, deadline, why, sizeof why) == 0,
          "no clear-to-send: %s", why);
    char payload[1000];
    rh_fill(payload, sizeof payload, 3);
    wire_frame d = {.type = F_DATA, .channel = WP_CH_WFWD, .length = sizeof payload, .seq = 0, .a = 0, .b = sizeof payload};
    wire_frame_seal(&d, payload);
    if (!cut) d.crc ^= 1;
    wire_frame_encode(&d, hdr);
    CHECK(sock_write_all(dfd, hdr, sizeof hdr, deadline, why, sizeof why) == 0 &&
              sock_write_all(dfd, payload, cut ? sizeof payload / 2 : sizeof payload, deadline, why, sizeof why) == 0,
          "%s", why);
    if (cut) {
        close(dfd);
        dfd = -1;
    }
    int st;
    double end = wp_now() + 15;
    pid_t got = 0;
    while ((got = waitpid(p0, &st, WNOHANG)) == 0 && wp_now() < end) nap(0.01);
    if (got != p0) kill(-pgid, SIGKILL);
    CHECK(got == p0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 0 did not end the job as expected");
    if (dfd >= 0) close(dfd);
    close(cfd);
    close(lfd);
    CHECK(rh_group_gone(pgid), "badframe: processes left behind");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    char dir[] = "/tmp/weipipe-ring-XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    guard_main = getpid();
    atexit(guard_kill);
    if (strcmp(mode, "data") == 0) test_data(dir);
    else if (strcmp(mode, "rendezvous") == 0) test_rendezvous(dir);
    else if (strcmp(mode, "badframe") == 0) test_badframe(false);
    else if (strcmp(mode, "cutframe") == 0) test_badframe(true);
    else if (strcmp(mode, "flood") == 0) test_flood(dir);
    else if (strcmp(mode, "leak") == 0) test_fake_peer(dir, true);
    else if (strcmp(mode, "fakeabort") == 0) test_fake_peer(dir, false);
    else if (strcmp(mode, "peers") == 0) test_peers(dir);
    else {
        fprintf(stderr, "usage: test_hostile data|rendezvous|badframe|cutframe|flood|leak|fakeabort|peers\n");
        return 2;
    }
    char path[600];
    for (int r = 0; r < 4; r++) {
        snprintf(path, sizeof path, "%s/rank%d.err", dir, r);
        unlink(path);
    }
    rmdir(dir);
    printf("ok: %s\n", mode);
    return 0;
}
