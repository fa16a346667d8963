/* Socket helpers (see sock.h). */
#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "notice.h"

wp_result sock_split_addr(const char *addr, char *host, size_t hostlen, int *port, char *err, size_t errlen) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) {
        snprintf(err, errlen, "address '%s' is not host:port", addr);
        return WP_FAILED;
    }
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 0 || p > 65535 || n + 1 > hostlen) {
        snprintf(err, errlen, "address '%s' is not host:port", addr);
        return WP_FAILED;
    }
    memcpy(host, h, n);
    host[n] = 0;
    *port = (int)p;
    return WP_OK;
}

bool sock_is_wildcard(const char *host) {
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || host[0] == 0 || strcmp(host, "*") == 0;
}

static void format_sa(const struct sockaddr_storage *sa, char *out, size_t outlen) {
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
        snprintf(out, outlen, "%s:%d", ip, port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
        snprintf(out, outlen, "[%s]:%d", ip, port);
    } else {
        snprintf(out, outlen, "?");
    }
}

void sock_local_addr(int fd, char *out, size_t outlen) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(out, outlen, "?");
        return;
    }
    format_sa(&sa, out, outlen);
}

void sock_peer_addr(int fd, char *out, size_t outlen) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(out, outlen, "?");
        return;
    }
    format_sa(&sa, out, outlen);
}

static wp_result set_flags(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return WP_FAILED;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) != 0) return WP_FAILED;
    return WP_OK;
}

wp_result sock_tune(int fd, char *err, size_t errlen) {
    int one = 1, buf = SOCK_BUF_BYTES;
    if (set_flags(fd) != 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf) != 0) {
        snprintf(err, errlen, "cannot set socket options: %s", strerror(errno));
        return WP_FAILED;
    }
    return WP_OK;
}

static wp_result resolve(const char *host, int port, bool passive, struct addrinfo **res, char *err, size_t errlen) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    const char *node = (passive && sock_is_wildcard(host)) ? (strcmp(host, "::") == 0 ? "::" : NULL) : host;
    int rc = getaddrinfo(node, portstr, &hints, res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return WP_FAILED;
    }
    return WP_OK;
}

wp_result sock_route_addr(const char *host, int port, char *out, size_t outlen, char *err, size_t errlen) {
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return WP_FAILED;
    }
    snprintf(err, errlen, "'%s' has no usable address", host);
    wp_result ok = WP_FAILED;
    /* the first address with a route, in getaddrinfo's order (the order connects try too) */
    for (struct addrinfo *ai = res; ai && ok != WP_OK; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            continue;
        }
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        char ip[INET6_ADDRSTRLEN];
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            snprintf(err, errlen, "no route to '%s': %s", host, strerror(errno));
        } else if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
            snprintf(err, errlen, "getsockname: %s", strerror(errno));
        } else if (!inet_ntop(sa.ss_family,
                              sa.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&sa)->sin_addr
                                                      : (const void *)&((struct sockaddr_in6 *)&sa)->sin6_addr,
                              ip, sizeof ip)) {
            snprintf(err, errlen, "inet_ntop: %s", strerror(errno));
        } else if (strlen(ip) >= outlen) {
            snprintf(err, errlen, "address %s is too long", ip);
        } else {
            snprintf(out, outlen, "%s", ip);
            ok = WP_OK;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

int sock_listen(const char *host, int port, char *err, size_t errlen) {
    struct addrinfo *res;
    if (resolve(host, port, true, &res, err, errlen) != 0) return -1;
    int fd = -1;
    snprintf(err, errlen, "cannot listen on %s:%d: no usable address", host, port);
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* 1 when fd is ready, 0 at the deadline, -1 on a poll error (errno), -2 when the launcher says a
 * peer ended (notice.h: the ring is being set up and will not be). */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        if (notice_lost(NULL, 0)) return -2;
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = notice_fd(), .events = POLLIN}};
        double left = deadline - wp_now();
        if (left <= 0) return 0;
        int rc = poll(p, p[1].fd >= 0 ? 2 : 1, (int)(left * 1000) + 1);
        if (rc > 0 && p[0].revents) return 1;
        if (rc < 0 && errno != EINTR) return -1;
    }
}

/* wait_fd's failure as words. */
static void wait_why(int rc, char *err, size_t errlen) {
    if (rc == -2) notice_lost(err, errlen);
    else snprintf(err, errlen, "%s", rc == 0 ? "timed out" : strerror(errno));
}

/* One non-blocking connect attempt; 0 connected, 1 refused (retry), -1 other error. */
static int try_connect(const struct addrinfo *ai, double deadline, int *out, char *err, size_t errlen) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        int pr = wait_fd(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (pr == -2) {
            close(fd);
            wait_why(pr, err, errlen);
            return -1;
        }
        if (pr <= 0) {
            errno = pr == 0 ? ETIMEDOUT : errno;
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
            rc = 0;
        } else {
            errno = soerr ? soerr : errno;
        }
    }
    if (rc == 0) {
        if (sock_tune(fd, err, errlen) != 0) {
            close(fd);
            return -1;
        }
        *out = fd;
        return 0;
    }
    int e = errno;
    close(fd);
    snprintf(err, errlen, "%s", strerror(e));
    return (e == ECONNREFUSED || e == ETIMEDOUT || e == ECONNRESET || e == EHOSTUNREACH || e == ENETUNREACH) ? 1 : -1;
}

int sock_connect(const char *host, int port, double deadline, char *err, size_t errlen) {
    struct addrinfo *res;
    char why[256] = "timed out";
    for (;;) {
        if (resolve(host, port, false, &res, why, sizeof why) == 0) {
            int fd = -1, rc = 1;
            for (struct addrinfo *ai = res; ai && rc != 0; ai = ai->ai_next) rc = try_connect(ai, deadline, &fd, why, sizeof why);
            freeaddrinfo(res);
            if (rc == 0) return fd;
            if (rc < 0) break;
        }
        if (wp_now() + 0.05 >= deadline || notice_lost(why, sizeof why)) break;
        struct pollfd p = {.fd = notice_fd(), .events = POLLIN}; /* 50 ms, or until the launcher speaks */
        if (p.fd >= 0) poll(&p, 1, 50);
        else nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        if (notice_lost(why, sizeof why)) break;
    }
    snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port, why);
    return -1;
}

wp_result sock_write_all(int fd, const void *buf, size_t n, double deadline, char *err, size_t errlen) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "%s", strerror(errno));
            return WP_FAILED;
        }
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc <= 0) {
            wait_why(rc, err, errlen);
            return WP_FAILED;
        }
    }
    return WP_OK;
}

wp_result sock_read_all(int fd, void *buf, size_t n, double deadline, char *err, size_t errlen) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            snprintf(err, errlen, "connection closed");
            return WP_FAILED;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "%s", strerror(errno));
            return WP_FAILED;
        }
        int rc = wait_fd(fd, POLLIN, deadline);
        if (rc <= 0) {
            wait_why(rc, err, errlen);
            return WP_FAILED;
        }
    }
    return WP_OK;
}
