/* The local launcher hands rank 0 the rendezvous listener it bound (WEIPIPE_LISTEN_FD), so the
 * port it chose is never free between the choice and the rendezvous.
 *  held:  launch_local with 3 ranks. Every rank, before its rendezvous, tries to listen on
 *         MASTER_ADDR:MASTER_PORT itself, as any other process of the machine could: that must
 *         fail with "Address already in use" (when the launcher only chose a free port and
 *         closed it, rank 0 took the port here and its own listen then failed), and the job
 *         must form (rendezvous and an allreduce). Only rank 0 gets the variable, and holds the
 *         fd close-on-exec once booted; the other ranks hold no listening socket at the port.
 *         The launcher leaks no fd and leaves no process.
 *  check: boot_from_environ as rank 0 with WEIPIPE_LISTEN_FD naming what is not a listening
 *         TCP socket at MASTER_ADDR:MASTER_PORT (not a number, negative, a closed fd,
 *         /dev/null, a UDP socket, a TCP socket that does not listen, a listener on another
 *         port, one on another address) -> 2 with a message naming the variable; the right
 *         socket is taken (close-on-exec and non-blocking afterwards); rank 1 ignores it.
 * usage: test_listen_fd held|check */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch.h"
#include "sock.h"
#include "tcp.h"

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static int port_of(int fd) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) return -1;
    if (sa.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&sa)->sin_port);
    if (sa.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    return -1;
}

static bool listening(int fd) {
    int on = 0;
    socklen_t len = sizeof on;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on;
}

/* The open fds of this process that are listening sockets at `port`; also counts all fds. */
static int listeners_at(int port, int *nfds) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
    int found = 0, n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        n++;
        if (fd != dirfd(d) && listening(fd) && port_of(fd) == port) found++;
    }
    closedir(d);
    if (nfds) *nfds = n - 1; /* the directory's own fd */
    return found;
}

static int rank_main(void) {
    int rank = atoi(getenv("RANK")), port = atoi(getenv("MASTER_PORT"));
    const char *v = getenv("WEIPIPE_LISTEN_FD");
    char why[256], err[512];
    /* Another process taking the port now, before rank 0's rendezvous is complete. */
    int thief = sock_listen("127.0.0.1", port, why, sizeof why);
    CHECK(thief < 0, "rank %d could listen on the launcher's port %d itself: nothing held it", rank, port);
    CHECK(strstr(why, strerror(EADDRINUSE)), "rank %d: listening on port %d failed otherwise: %s", rank, port, why);
    if (rank == 0) {
        CHECK(v, "rank 0 got no WEIPIPE_LISTEN_FD");
        int fd = atoi(v);
        CHECK(listening(fd) && port_of(fd) == port, "rank 0: WEIPIPE_LISTEN_FD=%s is not the listener at %d", v, port);
        CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0, "rank 0: the inherited fd is close-on-exec before boot");
    } else {
        CHECK(!v, "rank %d got WEIPIPE_LISTEN_FD=%s", rank, v);
        CHECK(listeners_at(port, NULL) == 0, "rank %d holds a listening socket at port %d", rank, port);
    }
    wp_boot_info bi;
    CHECK(boot_from_environ(&bi, err, sizeof err) == 0, "rank %d: %s", rank, err);
    if (rank == 0) CHECK(fcntl(atoi(v), F_GETFD) & FD_CLOEXEC, "rank 0: the taken fd is not close-on-exec");
    wp_net_opts net;
    tp_net_defaults(&net);
    net.connect_timeout = 10;
    net.timeout = 10;
    wp_transport *t;
    wp_control *c;
    CHECK(tcp_job_open(&bi, &net, &t, &c, err, sizeof err) == 0, "rank %d: %s", rank, err);
    double x = rank;
    CHECK(ctl_allreduce(c, CTL_SUM, &x, 1, err, sizeof err) == 0 && x == 3, "rank %d: allreduce: %s", rank, err);
    tcp_job_close(t, c);
    printf("rank %d: the port was held; the job formed\n", rank);
    return 0;
}

static int held(char *self) {
    int before, after;
    listeners_at(-1, &before);
    char *argv[] = {self, "held", NULL};
    wp_launch_result res;
    char err[600];
    int rc = launch_local(2, argv, 3, 1.0, &res, err, sizeof err);
    CHECK(rc == 0, "launch_local returned %d: %s", rc, err);
    listeners_at(-1, &after);
    CHECK(after == before, "the launcher had %d fds open before and %d after", before, after);
    CHECK(kill(-res.pgid, 0) != 0 && errno == ESRCH, "processes of group %d left behind", res.pgid);
    return 0;
}

static int listen_on(const char *host, int port) {
    char why[256];
    int fd = sock_listen(host, port, why, sizeof why);
    CHECK(fd >= 0, "%s", why);
    return fd;
}

/* boot_from_environ as `rank` of 2 with WEIPIPE_LISTEN_FD=value: the return code, err filled. */
static int boot_with(int rank, int port, const char *value, char *err, size_t errlen) {
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("WEIPIPE_SECRET", "s", 1);
    setenv("WEIPIPE_JOB_ID", "j", 1);
    setenv("WEIPIPE_LISTEN_FD", value, 1);
    wp_boot_info bi;
    err[0] = 0;
    return boot_from_environ(&bi, err, errlen);
}

static void refused(int port, const char *value, const char *what) {
    char err[512];
    int rc = boot_with(0, port, value, err, sizeof err);
    printf("%-34s -> %d: %s\n", what, rc, err);
    CHECK(rc == 2 && strstr(err, "WEIPIPE_LISTEN_FD"), "%s: expected 2 naming WEIPIPE_LISTEN_FD, got %d: %s", what, rc,
          err);
}

static void refused_fd(int port, int fd, const char *what) {
    char v[16];
    snprintf(v, sizeof v, "%d", fd);
    refused(port, v, what);
}

static int check(void) {
    int good = listen_on("127.0.0.1", 0), port = port_of(good);
    refused(port, "three", "not a number");
    refused(port, "-1", "negative");
    int closed = dup(good);
    close(closed);
    refused_fd(port, closed, "a closed fd");
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    refused_fd(port, null, "/dev/null");
    int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    refused_fd(port, udp, "a UDP socket");
    int quiet = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(quiet, (struct sockaddr *)&lo, sizeof lo) == 0, "bind: %s", strerror(errno));
    refused_fd(port, quiet, "a TCP socket that does not listen");
    int other_port = listen_on("127.0.0.1", 0);
    refused_fd(port, other_port, "a listener on another port");
    int other_addr = listen_on("127.0.0.2", port);
    refused_fd(port, other_addr, "a listener on another address");

    char v[16], err[512];
    snprintf(v, sizeof v, "%d", null);
    CHECK(boot_with(1, port, v, err, sizeof err) == 0, "rank 1 did not ignore WEIPIPE_LISTEN_FD: %s", err);
    /* The right one: taken, and made close-on-exec and non-blocking as a listener of ours. */
    CHECK(fcntl(good, F_SETFD, 0) == 0 && fcntl(good, F_SETFL, 0) == 0, "fcntl: %s", strerror(errno));
    snprintf(v, sizeof v, "%d", good);
    CHECK(boot_with(0, port, v, err, sizeof err) == 0, "rank 0 refused its listener: %s", err);
    CHECK((fcntl(good, F_GETFD) & FD_CLOEXEC) && (fcntl(good, F_GETFL) & O_NONBLOCK),
          "the taken listener is not close-on-exec and non-blocking");
    printf("the listener at 127.0.0.1:%d (fd %d) is taken; rank 1 ignores the variable\n", port, good);

    /* WEIPIPE_NOTICE_FD, the launcher's notice socket (ring/net/notice.h), on any rank: what is
     * not an open Unix stream socket is refused naming the variable */
    const char *bad[][2] = {{"three", "not a number"}, {"-1", "negative"}, {NULL, "/dev/null"}, {NULL, "a UDP socket"},
                            {NULL, "a TCP listener"}};
    char fdv[3][16];
    snprintf(fdv[0], sizeof fdv[0], "%d", null), bad[2][0] = fdv[0];
    snprintf(fdv[1], sizeof fdv[1], "%d", udp), bad[3][0] = fdv[1];
    snprintf(fdv[2], sizeof fdv[2], "%d", other_port), bad[4][0] = fdv[2];
    for (int i = 0; i < 5; i++) {
        setenv("WEIPIPE_NOTICE_FD", bad[i][0], 1);
        int rc = boot_with(1, port, "", err, sizeof err);
        printf("WEIPIPE_NOTICE_FD %-20s -> %d: %s\n", bad[i][1], rc, err);
        CHECK(rc == 2 && strstr(err, "WEIPIPE_NOTICE_FD"), "%s: expected 2 naming WEIPIPE_NOTICE_FD, got %d: %s", bad[i][1],
              rc, err);
    }
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0, "socketpair: %s", strerror(errno));
    snprintf(v, sizeof v, "%d", pair[1]);
    setenv("WEIPIPE_NOTICE_FD", v, 1);
    CHECK(boot_with(1, port, "", err, sizeof err) == 0, "a Unix socket pair's end was refused: %s", err);
    unsetenv("WEIPIPE_NOTICE_FD");
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (getenv("RANK") && strcmp(mode, "held") == 0) return rank_main();
    if (strcmp(mode, "held") == 0) return held(argv[0]);
    if (strcmp(mode, "check") == 0) return check();
    fprintf(stderr, "usage: test_listen_fd held|check\n");
    return 2;
}
