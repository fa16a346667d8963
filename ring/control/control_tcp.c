/* The control channel over tcp (see control_tcp.h and control.h). A reader thread per rank
 * handles what arrives at any time: aborts, status questions, contributions (rank 0) and
 * results (the others). Frames are the wire.h frames with the control types. */
#include "control_tcp.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "control_impl.h"
#include "sock.h"
#include "wire.h"

#define CTL_MAX_FRAME (CTL_MAX_BCAST + 4096)
#define STATUS_TIMEOUT_MAX 3.0

typedef struct ctl_conn {
    int fd; /* -1: closed */
    int rank;
    char addr[SOCK_ADDR_MAX];
    pthread_mutex_t wmu; /* one writer at a time */
    uint8_t *rbuf;
    size_t rlen, rcap;
    bool bye; /* said goodbye: its end is no failure */
} ctl_conn;

typedef struct ctl_tcp {
    wp_control base;
    wp_sync sync; /* guards everything below (taken before base.mu when both are needed) */
    ctl_conn *conns; /* [world]: rank 0 uses 1..world-1, the others [0] (to rank 0) */
    int wake_fd;
    pthread_t reader;
    bool started, stop;
    double status_timeout;
    /* rank 0: one contribution per rank for the running collective */
    void **slot;
    size_t *slot_bytes;
    uint64_t *slot_seq;
    /* others: the result of the running collective */
    void *result;
    size_t result_bytes;
    uint64_t result_seq; /* 0: none */
    /* rank 0: the status gathering session */
    bool session;
    bool session_told; /* its silent ranks were sent to every rank (rank 0's evidence) */
    uint64_t session_id;
    double session_deadline;
    char **lines;
    int nreq;
    int *req_rank;
    uint64_t *req_id;
    /* any rank: its last grid request and the grid that answered it */
    uint64_t grid_req, grid_id;
    char *grid;
} ctl_tcp;

static ctl_tcp *tcp_ctl(wp_control *c) { return (ctl_tcp *)c; }

/* ---- frames ---- */

enum { CTL_ONE_SEND_BYTES = 4096 };

wp_result ctl_write_frame(int fd, int type, uint64_t seq, const void *payload, size_t len, double deadline, char *why,
                          size_t whylen) {
    wire_frame f = {.type = (uint8_t)type, .length = (uint32_t)len, .seq = seq};
    uint8_t hdr[WIRE_FRAME_BYTES];
    wire_frame_seal(&f, payload);
    wire_frame_encode(&f, hdr);
    /* A small frame goes out in one send: header and payload as two sends wait on the peer's
     * delayed ACK where Nagle is on (accepted sockets are not tuned), ~40 ms per collective
     * result on loopback, which the clock exchange (clock_sync.h) measured. */
    if (len > 0 && len <= CTL_ONE_SEND_BYTES) {
        uint8_t one[WIRE_FRAME_BYTES + CTL_ONE_SEND_BYTES];
        memcpy(one, hdr, sizeof hdr);
        memcpy(one + sizeof hdr, payload, len);
        return sock_write_all(fd, one, sizeof hdr + len, deadline, why, whylen);
    }
    WP_TRY(sock_write_all(fd, hdr, sizeof hdr, deadline, why, whylen));
    return len ? sock_write_all(fd, payload, len, deadline, why, whylen) : WP_OK;
}

wp_result ctl_read_frame(int fd, int *type, uint64_t *seq, char **payload, size_t *len, size_t max_len, double deadline,
                         char *why, size_t whylen) {
    uint8_t hdr[WIRE_FRAME_BYTES];
    wire_frame f;
    uint32_t crc;
    *payload = NULL;
    if (sock_read_all(fd, hdr, sizeof hdr, deadline, why, whylen) != 0 ||
        wire_frame_decode(hdr, &f, &crc, why, whylen) != 0)
        return WP_FAILED;
    if (f.length > max_len) {
        snprintf(why, whylen, "%s frame of %u bytes (at most %zu)", wire_frame_type_name(f.type), f.length, max_len);
        return WP_FAILED;
    }
    char *p = malloc((size_t)f.length + 1);
    if (!p) {
        snprintf(why, whylen, "out of memory");
        return WP_FAILED;
    }
    if (sock_read_all(fd, p, f.length, deadline, why, whylen) != 0) {
        free(p);
        return WP_FAILED;
    }
    p[f.length] = 0;
    if (wire_crc(crc, p, f.length) != f.crc) {
        snprintf(why, whylen, "%s frame with a bad checksum", wire_frame_type_name(f.type));
        free(p);
        return WP_FAILED;
    }
    *type = f.type;
    *seq = f.seq;
    *payload = p;
    *len = f.length;
    return WP_OK;
}

static double write_deadline(ctl_tcp *T) { return wp_now() + fmin(T->base.timeout, 5.0); }

/* Send on a connection; WP_FAILED when it is gone or the write failed (why set). */
static wp_result conn_send(ctl_tcp *T, ctl_conn *k, int type, uint64_t seq, const void *payload, size_t len, char *why,
                           size_t whylen) {
    pthread_mutex_lock(&k->wmu);
    wp_result rc = k->fd < 0 ? WP_FAILED : ctl_write_frame(k->fd, type, seq, payload, len, write_deadline(T), why, whylen);
    if (k->fd < 0) snprintf(why, whylen, "connection closed");
    pthread_mutex_unlock(&k->wmu);
    return rc;
}

/* ---- failure ---- */

/* Record the failure; rank 0 relays it to every rank but the one it came from (sync held). */
/* A rank that has not answered a status query by then is taken as silent (live ranks answer
 * from their reader thread, within milliseconds; 1 s leaves room for a loaded machine and a
 * sanitizer, and is still well inside --timeout / 3 + the stall watcher's query). */
#define SILENT_AFTER_S 1.0

static void silent_ranks(ctl_tcp *T, char *out, size_t outlen);

static void fail(ctl_tcp *T, const char *why, int origin) {
    /* Rank 0 adds the ranks its last status query did not hear from: a rank that timed out may
     * have waited on a live peer blocked by a dead one, and every rank should name the dead. */
    char silent[sizeof T->base.unanswered], with[sizeof T->base.why];
    bool known = T->base.rank == 0 && ctl_unanswered(&T->base, silent, sizeof silent);
    /* A status query under way for a while (live ranks answer within milliseconds) already knows
     * who is silent: the failure may arrive before the query's own deadline. */
    if (T->base.rank == 0 && !known && T->session &&
        wp_now() - (T->session_deadline - T->status_timeout) >= SILENT_AFTER_S) {
        silent_ranks(T, silent, sizeof silent);
        known = silent[0] != 0;
    }
    if (known && !strstr(why, silent)) {
        snprintf(with, sizeof with, "%s; rank 0's last status query went unanswered by %s", why, silent);
        why = with;
    }
    if (!ctl_fail_local(&T->base, why)) return;
    if (T->base.rank == 0) {
        char ignore[128];
        for (int r = 1; r < T->base.world; r++)
            if (r != origin) conn_send(T, &T->conns[r], F_ABORT, 0, why, strlen(why), ignore, sizeof ignore);
    }
    pthread_cond_broadcast(&T->sync.cv);
}

static void tcp_ctl_abort(wp_control *c, const char *why) {
    ctl_tcp *T = tcp_ctl(c);
    pthread_mutex_lock(&T->sync.mu);
    if (c->rank != 0 && !ctl_failed(c, NULL, 0)) {
        char ignore[128];
        conn_send(T, &T->conns[0], F_ABORT, 0, why, strlen(why), ignore, sizeof ignore);
    }
    fail(T, why, -1);
    pthread_mutex_unlock(&T->sync.mu);
}

/* "rank 2 (10.0.0.2:4000)"; on rank 0, which knows every rank's address, also the ranks that
 * share that host ("rank 2 (10.0.0.2:4000, host of ranks 2, 3)"): a host that dies takes them
 * all, and the first one noticed should not hide the others. */
static void conn_name(ctl_tcp *T, int r, char *buf, size_t buflen) {
    ctl_conn *k = &T->conns[T->base.rank == 0 ? r : 0];
    char host[SOCK_ADDR_MAX], other[SOCK_ADDR_MAX], why[128], list[160] = "";
    int port, n = 0;
    size_t used = 0;
    if (T->base.rank == 0 && sock_split_addr(k->addr, host, sizeof host, &port, why, sizeof why) == 0)
        for (int q = 1; q < T->base.world && used + 16 < sizeof list; q++)
            if (sock_split_addr(T->conns[q].addr, other, sizeof other, &port, why, sizeof why) == 0 &&
                strcmp(host, other) == 0) {
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", n ? ", " : "", q);
                n++;
            }
    if (n > 1)
        snprintf(buf, buflen, "rank %d (%s, host of ranks %s)", r, k->addr, list);
    else
        snprintf(buf, buflen, "rank %d (%s)", r, k->addr);
}

/* ---- rank 0: status sessions ---- */

/* The ranks of the running session that have not answered yet and whose connection is still
 * open (a lost connection is reported as such), named with their hosts; "" when none. */
static void silent_ranks(ctl_tcp *T, char *out, size_t outlen) {
    size_t n = 0;
    out[0] = 0;
    for (int r = 1; r < T->base.world && n + 64 < outlen; r++) {
        if (T->lines[r] || T->conns[r].fd < 0) continue;
        char name[256];
        conn_name(T, r, name, sizeof name);
        n += (size_t)snprintf(out + n, outlen - n, "%s%s", n ? ", " : "", name);
    }
}

/* Rank 0's evidence to every rank (sync held): the ranks its status query did not hear from.
 * A rank whose own wait times out may be waiting on a live peer blocked behind the lost one;
 * with this it names the lost ranks (and their host) at once, instead of the peer that went
 * silent first or a cause relayed too late (issue 42: faults/hosts under ThreadSanitizer). */
static void tell_silent(ctl_tcp *T, const char *silent) {
    pthread_mutex_lock(&T->base.mu);
    bool same = strcmp(T->base.unanswered, silent) == 0;
    snprintf(T->base.unanswered, sizeof T->base.unanswered, "%s", silent);
    pthread_mutex_unlock(&T->base.mu);
    if (same) return;
    char ignore[128];
    for (int r = 1; r < T->base.world; r++) conn_send(T, &T->conns[r], F_SILENT, 0, silent, strlen(silent), ignore, sizeof ignore);
}

/* SILENT_AFTER_S into a session: the ranks still silent are the evidence (once per session;
 * the session's end tells again if it changed). */
static void early_silent(ctl_tcp *T) {
    if (!T->session || T->session_told || wp_now() - (T->session_deadline - T->status_timeout) < SILENT_AFTER_S) return;
    T->session_told = true;
    char silent[sizeof T->base.unanswered];
    silent_ranks(T, silent, sizeof silent);
    if (silent[0]) tell_silent(T, silent);
}

static void finish_session(ctl_tcp *T) {
    size_t cap = (size_t)T->base.world * (CTL_STATUS_MAX + 96) + 1, used = 0;
    char *grid = malloc(cap);
    if (!grid) return;
    grid[0] = 0;
    char silent[sizeof T->base.unanswered];
    silent_ranks(T, silent, sizeof silent);
    for (int r = 0; r < T->base.world; r++) {
        const char *note = T->lines[r];
        char missing[96];
        if (!note) {
            bool gone = r > 0 && T->conns[r].fd < 0;
            snprintf(missing, sizeof missing, "%s", gone ? (T->conns[r].bye ? "(finished)" : "(connection lost)") : "");
            if (!gone) snprintf(missing, sizeof missing, "(no answer within %g s: stopped or dead?)", T->status_timeout);
            note = missing;
        }
        used += (size_t)snprintf(grid + used, cap - used, "rank %d: %s\n", r, note);
    }
    tell_silent(T, silent);
    char ignore[128];
    for (int i = 0; i < T->nreq; i++) {
        if (T->req_rank[i] == 0) {
            free(T->grid);
            T->grid = strdup(grid);
            T->grid_id = T->req_id[i];
        } else {
            conn_send(T, &T->conns[T->req_rank[i]], F_GRID, T->req_id[i], grid, used, ignore, sizeof ignore);
        }
    }
    free(grid);
    for (int r = 0; r < T->base.world; r++) {
        free(T->lines[r]);
        T->lines[r] = NULL;
    }
    T->nreq = 0;
    T->session = false;
    pthread_cond_broadcast(&T->sync.cv);
}

static bool session_complete(ctl_tcp *T) {
    for (int r = 0; r < T->base.world; r++)
        if (!T->lines[r] && (r == 0 || T->conns[r].fd >= 0)) return false;
    return true;
}

/* A rank (0 included) asks for the grid: start a session or join the running one. */
static void session_join(ctl_tcp *T, int rank, uint64_t req_id) {
    if (T->nreq >= T->base.world + 1) return;
    T->req_rank[T->nreq] = rank;
    T->req_id[T->nreq++] = req_id;
    if (T->session) return;
    T->session = true;
    T->session_told = false;
    T->session_id++;
    T->session_deadline = wp_now() + T->status_timeout;
    char line[CTL_STATUS_MAX + 48], ignore[128];
    ctl_status_line(&T->base, line, sizeof line);
    T->lines[0] = strdup(line);
    for (int r = 1; r < T->base.world; r++)
        if (T->conns[r].fd >= 0) conn_send(T, &T->conns[r], F_STATUS_REQ, T->session_id, NULL, 0, ignore, sizeof ignore);
    if (session_complete(T)) finish_session(T);
}

/* ---- handling what arrives ---- */

static void protocol_error(ctl_tcp *T, int r, const char *what) {
    char name[256], why[512];
    conn_name(T, r, name, sizeof name);
    snprintf(why, sizeof why, "%s %s on the control connection", name, what);
    fail(T, why, -1);
}

static void root_handle(ctl_tcp *T, int r, int type, uint64_t seq, const char *p, size_t len) {
    if (type == F_CONTRIB) {
        if (T->slot[r]) {
            protocol_error(T, r, "sent two contributions to one collective");
            return;
        }
        T->slot[r] = malloc(len ? len : 1);
        if (!T->slot[r]) {
            fail(T, "rank 0: out of memory for a contribution", -1);
            return;
        }
        memcpy(T->slot[r], p, len);
        T->slot_bytes[r] = len;
        T->slot_seq[r] = seq;
        pthread_cond_broadcast(&T->sync.cv);
    } else if (type == F_ABORT) {
        fail(T, p, r);
    } else if (type == F_STATUS_REQ) {
        session_join(T, r, seq);
    } else if (type == F_STATUS_REP) {
        if (T->session && seq == T->session_id && !T->lines[r]) T->lines[r] = strdup(p);
        if (T->session && session_complete(T)) finish_session(T);
    } else if (type == F_BYE) {
        T->conns[r].bye = true;
        pthread_cond_broadcast(&T->sync.cv);
    } else {
        protocol_error(T, r, "sent an unexpected frame");
    }
}

static void rank_handle(ctl_tcp *T, int type, uint64_t seq, const char *p, size_t len) {
    char line[CTL_STATUS_MAX + 48], ignore[128];
    if (type == F_RESULT) {
        free(T->result);
        T->result = malloc(len ? len : 1);
        if (!T->result) {
            fail(T, "out of memory for a collective's result", -1);
            return;
        }
        memcpy(T->result, p, len);
        T->result_bytes = len;
        T->result_seq = seq;
        pthread_cond_broadcast(&T->sync.cv);
    } else if (type == F_ABORT) {
        fail(T, p, 0);
    } else if (type == F_STATUS_REQ) {
        ctl_status_line(&T->base, line, sizeof line);
        conn_send(T, &T->conns[0], F_STATUS_REP, seq, line, strlen(line), ignore, sizeof ignore);
    } else if (type == F_GRID) {
        free(T->grid);
        T->grid = strdup(p);
        T->grid_id = seq;
        pthread_cond_broadcast(&T->sync.cv);
    } else if (type == F_SILENT) { /* rank 0's evidence, for this rank's own failure message */
        pthread_mutex_lock(&T->base.mu);
        snprintf(T->base.unanswered, sizeof T->base.unanswered, "%s", p);
        pthread_mutex_unlock(&T->base.mu);
        pthread_cond_broadcast(&T->sync.cv);
    } else if (type == F_BYE) {
        T->conns[0].bye = true;
    } else {
        protocol_error(T, 0, "sent an unexpected frame");
    }
}

/* Handle every whole frame in k's buffer. */
static void parse_frames(ctl_tcp *T, ctl_conn *k) {
    size_t off = 0;
    while (k->fd >= 0 && k->rlen - off >= WIRE_FRAME_BYTES) {
        wire_frame f;
        uint32_t crc;
        char why[160], what[200];
        if (wire_frame_decode(k->rbuf + off, &f, &crc, why, sizeof why) != 0 || f.length > CTL_MAX_FRAME) {
            snprintf(what, sizeof what, "sent a bad frame (%s)", f.length > CTL_MAX_FRAME ? "too long" : why);
            protocol_error(T, k->rank, what);
            return;
        }
        if (k->rlen - off < WIRE_FRAME_BYTES + (size_t)f.length) break;
        uint8_t *p = k->rbuf + off + WIRE_FRAME_BYTES;
        if (wire_crc(crc, p, f.length) != f.crc) {
            protocol_error(T, k->rank, "sent a frame with a bad checksum");
            return;
        }
        char *copy = malloc((size_t)f.length + 1);
        if (!copy) {
            fail(T, "out of memory reading the control channel", -1);
            return;
        }
        memcpy(copy, p, f.length);
        copy[f.length] = 0;
        off += WIRE_FRAME_BYTES + f.length;
        if (T->base.rank == 0) root_handle(T, k->rank, f.type, f.seq, copy, f.length);
        else rank_handle(T, f.type, f.seq, copy, f.length);
        free(copy);
    }
    memmove(k->rbuf, k->rbuf + off, k->rlen - off);
    k->rlen -= off;
}

/* Whether the peer of k ran on this host: its advertised address and this end of the connection
 * have the same IP (loopback for every rank of a one-host job). */
static bool same_host(const ctl_conn *k) {
    char mine[SOCK_ADDR_MAX], host[SOCK_ADDR_MAX], theirs[SOCK_ADDR_MAX], why[128];
    int port;
    sock_local_addr(k->fd, mine, sizeof mine);
    return sock_split_addr(mine, host, sizeof host, &port, why, sizeof why) == 0 &&
           sock_split_addr(k->addr, theirs, sizeof theirs, &port, why, sizeof why) == 0 && strcmp(host, theirs) == 0;
}

static void conn_closed(ctl_tcp *T, ctl_conn *k, int err) {
    const bool local = same_host(k); /* while the socket is still open */
    pthread_mutex_lock(&k->wmu);
    close(k->fd);
    k->fd = -1;
    pthread_mutex_unlock(&k->wmu);
    if (!k->bye && !T->stop) {
        char name[256], why[1024], note[400];
        conn_name(T, k->rank, name, sizeof name);
        ctl_death_note(&T->base, k->rank, local, note, sizeof note);
        snprintf(why, sizeof why, "%s %s the control connection%s%s%s", name, err ? "lost" : "closed",
                 err ? ": " : note[0] ? " without saying goodbye" : " without saying goodbye (died?)", err ? strerror(err) : "", note);
        fail(T, why, k->rank);
    }
    if (T->session && session_complete(T)) finish_session(T);
    pthread_cond_broadcast(&T->sync.cv);
}

static void conn_read(ctl_tcp *T, ctl_conn *k) {
    for (;;) {
        if (k->rcap - k->rlen < 65536) {
            size_t cap = k->rcap ? 2 * k->rcap : 131072;
            if (cap > 2 * (size_t)CTL_MAX_FRAME + 131072) {
                protocol_error(T, k->rank, "sent more than the control channel holds");
                return;
            }
            uint8_t *b = realloc(k->rbuf, cap);
            if (!b) {
                fail(T, "out of memory reading the control channel", -1);
                return;
            }
            k->rbuf = b;
            k->rcap = cap;
        }
        ssize_t n = recv(k->fd, k->rbuf + k->rlen, k->rcap - k->rlen, MSG_DONTWAIT);
        if (n > 0) {
            k->rlen += (size_t)n;
            parse_frames(T, k);
            if (k->fd < 0) return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        conn_closed(T, k, n == 0 ? 0 : errno);
        return;
    }
}

static void *reader_main(void *arg) {
    ctl_tcp *T = arg;
    int world = T->base.world;
    struct pollfd *fds = calloc((size_t)world + 1, sizeof *fds);
    int *who = calloc((size_t)world + 1, sizeof *who);
    pthread_mutex_lock(&T->sync.mu);
    if (!fds || !who) fail(T, "out of memory in the control reader", -1);
    while (fds && who && !T->stop) {
        int n = 0;
        fds[n++] = (struct pollfd){.fd = T->wake_fd, .events = POLLIN};
        for (int r = 0; r < world; r++)
            if (T->conns[r].fd >= 0) {
                who[n] = r;
                fds[n++] = (struct pollfd){.fd = T->conns[r].fd, .events = POLLIN};
            }
        double now = wp_now(), next = T->session ? T->session_deadline : now + 1.0;
        if (T->session && !T->session_told) {
            double early = T->session_deadline - T->status_timeout + SILENT_AFTER_S;
            if (early < next) next = early;
        }
        struct timespec ts = wp_timespec(next > now ? next - now : 0);
        pthread_mutex_unlock(&T->sync.mu);
        int rc = ppoll(fds, (nfds_t)n, &ts, NULL);
        pthread_mutex_lock(&T->sync.mu);
        if (rc > 0 && fds[0].revents) {
            uint64_t v;
            while (read(T->wake_fd, &v, sizeof v) > 0) {
            }
        }
        for (int i = 1; rc > 0 && i < n; i++)
            if (fds[i].revents && T->conns[who[i]].fd == fds[i].fd) conn_read(T, &T->conns[who[i]]);
        early_silent(T);
        if (T->session && wp_now() >= T->session_deadline) finish_session(T);
    }
    pthread_mutex_unlock(&T->sync.mu);
    free(fds);
    free(who);
    return NULL;
}

/* ---- collectives ---- */

static void missing_ranks(ctl_tcp *T, uint64_t seq, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 1; r < T->base.world && used + 16 < outlen; r++)
        if (!T->slot[r] || T->slot_seq[r] != seq) used += (size_t)snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", r);
}

/* The hosts of the ranks missing from collective seq, distinct, as " on host(s) 10.0.0.2": when a
 * machine vanishes, which one it was is the first thing to know. */
static void missing_hosts(ctl_tcp *T, uint64_t seq, char *out, size_t outlen) {
    size_t used = 0;
    int n = 0;
    out[0] = 0;
    for (int r = 1; r < T->base.world; r++) {
        char host[SOCK_ADDR_MAX], other[SOCK_ADDR_MAX], why[128];
        int port;
        bool seen = false;
        if ((T->slot[r] && T->slot_seq[r] == seq) || sock_split_addr(T->conns[r].addr, host, sizeof host, &port, why, sizeof why))
            continue;
        for (int q = 1; q < r && !seen; q++)
            seen = !(T->slot[q] && T->slot_seq[q] == seq) &&
                   sock_split_addr(T->conns[q].addr, other, sizeof other, &port, why, sizeof why) == 0 && strcmp(host, other) == 0;
        if (seen || used + strlen(host) + 16 >= outlen) continue;
        used += (size_t)snprintf(out + used, outlen - used, "%s%s", n++ ? ", " : " on host(s) ", host);
    }
}

static int failed_msg(ctl_tcp *T, char *err, size_t errlen) {
    char why[512];
    ctl_failed(&T->base, why, sizeof why);
    snprintf(err, errlen, "%s (rank %d was in collective #%llu)", why, T->base.rank, (unsigned long long)T->base.seq);
    return 1;
}

/* Rank 0: wait for every contribution, combine, send the result to all. */
static int root_exchange(ctl_tcp *T, const void *contrib, size_t bytes, void **result, size_t *result_bytes,
                         char *err, size_t errlen) {
    uint64_t seq = T->base.seq;
    int world = T->base.world;
    pthread_mutex_lock(&T->sync.mu);
    double deadline = wp_now() + T->base.timeout;
    for (;;) {
        if (ctl_failed(&T->base, NULL, 0)) {
            pthread_mutex_unlock(&T->sync.mu);
            return failed_msg(T, err, errlen);
        }
        char missing[256], why[400];
        missing_ranks(T, seq, missing, sizeof missing);
        for (int r = 1; r < world; r++)
            if (T->slot[r] && T->slot_seq[r] != seq) {
                snprintf(why, sizeof why, "rank %d is at collective #%llu while rank 0 is at #%llu", r,
                         (unsigned long long)T->slot_seq[r], (unsigned long long)seq);
                fail(T, why, -1);
            }
        if (!missing[0] || ctl_failed(&T->base, NULL, 0)) {
            if (!missing[0]) break;
            continue;
        }
        if (wp_now() >= deadline) {
            char hosts[128];
            missing_hosts(T, seq, hosts, sizeof hosts);
            snprintf(why, sizeof why, "collective #%llu: rank(s) %s%s did not arrive within %g s", (unsigned long long)seq,
                     missing, hosts, T->base.timeout);
            fail(T, why, -1);
            continue;
        }
        wp_sync_wait_until(&T->sync, deadline);
    }
    T->slot[0] = (void *)(uintptr_t)contrib;
    T->slot_bytes[0] = bytes;
    wp_result rc = ctl_combine(world, T->slot, T->slot_bytes, result, result_bytes, seq, err, errlen);
    for (int r = 1; r < world; r++) {
        free(T->slot[r]);
        T->slot[r] = NULL;
    }
    T->slot[0] = NULL;
    if (rc != 0) {
        fail(T, err, -1);
        pthread_mutex_unlock(&T->sync.mu);
        return 1;
    }
    pthread_mutex_unlock(&T->sync.mu);
    for (int r = 1; r < world; r++) {
        char why[160], msg[300];
        if (conn_send(T, &T->conns[r], F_RESULT, seq, *result, *result_bytes, why, sizeof why) != 0) {
            snprintf(msg, sizeof msg, "rank 0 cannot send collective #%llu's result to rank %d: %s",
                     (unsigned long long)seq, r, why);
            ctl_abort(&T->base, msg);
        }
    }
    return 0;
}

static int rank_exchange(ctl_tcp *T, const void *contrib, size_t bytes, void **result, size_t *result_bytes,
                         char *err, size_t errlen) {
    uint64_t seq = T->base.seq;
    char why[160];
    if (conn_send(T, &T->conns[0], F_CONTRIB, seq, contrib, bytes, why, sizeof why) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "rank %d cannot reach rank 0 for collective #%llu: %s", T->base.rank,
                 (unsigned long long)seq, why);
        ctl_abort(&T->base, msg);
        return failed_msg(T, err, errlen);
    }
    pthread_mutex_lock(&T->sync.mu);
    /* Rank 0 waits --timeout for the slowest rank, then aborts naming it: wait longer. */
    double limit = 2 * T->base.timeout + 5, deadline = wp_now() + limit;
    while (T->result_seq != seq) {
        if (ctl_failed(&T->base, NULL, 0)) {
            pthread_mutex_unlock(&T->sync.mu);
            return failed_msg(T, err, errlen);
        }
        if (wp_now() >= deadline) {
            char msg[300];
            snprintf(msg, sizeof msg, "rank 0 (%s) did not answer collective #%llu within %g s", T->conns[0].addr,
                     (unsigned long long)seq, limit);
            fail(T, msg, -1);
            continue;
        }
        wp_sync_wait_until(&T->sync, deadline);
    }
    *result = T->result;
    *result_bytes = T->result_bytes;
    T->result = NULL;
    pthread_mutex_unlock(&T->sync.mu);
    return 0;
}

static int tcp_exchange(wp_control *c, const void *contrib, size_t bytes, void **result, size_t *result_bytes,
                        char *err, size_t errlen) {
    ctl_tcp *T = tcp_ctl(c);
    if (c->world == 1) return ctl_combine(1, (void *const *)&contrib, &bytes, result, result_bytes, c->seq, err, errlen) ? 1 : 0;
    return c->rank == 0 ? root_exchange(T, contrib, bytes, result, result_bytes, err, errlen)
                        : rank_exchange(T, contrib, bytes, result, result_bytes, err, errlen);
}

/* ---- status grid ---- */

static int tcp_status_grid(wp_control *c, char **grid, char *err, size_t errlen) {
    ctl_tcp *T = tcp_ctl(c);
    char why[160];
    pthread_mutex_lock(&T->sync.mu);
    uint64_t id = ++T->grid_req;
    if (c->rank == 0) {
        session_join(T, 0, id);
    } else if (conn_send(T, &T->conns[0], F_STATUS_REQ, id, NULL, 0, why, sizeof why) != 0) {
        pthread_mutex_unlock(&T->sync.mu);
        snprintf(err, errlen, "rank %d cannot ask rank 0 for the status grid: %s", c->rank, why);
        return 1;
    }
    double deadline = wp_now() + 2 * T->status_timeout + 1;
    while (T->grid_id != id && wp_now() < deadline && (c->rank == 0 || T->conns[0].fd >= 0))
        wp_sync_wait_until(&T->sync, deadline);
    int rc = 0;
    if (T->grid_id == id) {
        *grid = T->grid;
        T->grid = NULL;
    } else {
        snprintf(err, errlen, "rank %d: no status grid from rank 0 within %g s", c->rank, 2 * T->status_timeout + 1);
        rc = 1;
    }
    pthread_mutex_unlock(&T->sync.mu);
    return rc;
}

/* ---- lifetime ---- */

static void free_ctl(ctl_tcp *T) {
    for (int r = 0; T->conns && r < T->base.world; r++) {
        if (T->conns[r].fd >= 0) close(T->conns[r].fd);
        free(T->conns[r].rbuf);
        pthread_mutex_destroy(&T->conns[r].wmu);
    }
    for (int r = 0; T->slot && r < T->base.world; r++) free(T->slot[r]);
    for (int r = 0; T->lines && r < T->base.world; r++) free(T->lines[r]);
    free(T->conns);
    free(T->slot);
    free(T->slot_bytes);
    free(T->slot_seq);
    free(T->lines);
    free(T->req_rank);
    free(T->req_id);
    free(T->result);
    free(T->grid);
    if (T->wake_fd >= 0) close(T->wake_fd);
    wp_sync_destroy(&T->sync);
    ctl_base_destroy(&T->base);
    free(T);
}

static void stop_reader(ctl_tcp *T) {
    pthread_mutex_lock(&T->sync.mu);
    T->stop = true;
    uint64_t one = 1;
    if (write(T->wake_fd, &one, sizeof one) < 0) {
        /* the counter is full: the reader is being woken anyway */
    }
    pthread_mutex_unlock(&T->sync.mu);
    if (T->started) pthread_join(T->reader, NULL);
}

static bool others_done(ctl_tcp *T) {
    for (int r = 1; r < T->base.world; r++)
        if (T->conns[r].fd >= 0 && !T->conns[r].bye) return false;
    return true;
}

static void tcp_ctl_close(wp_control *c) {
    ctl_tcp *T = tcp_ctl(c);
    char ignore[128];
    pthread_mutex_lock(&T->sync.mu);
    if (c->rank == 0) {
        /* Stay reachable while the others finish, so their aborts still travel (unless the job
         * is over here already: a failed transport). */
        pthread_mutex_lock(&c->mu);
        wp_transport *t = c->attached;
        pthread_mutex_unlock(&c->mu);
        bool over = t && tp_failed(t, NULL, 0);
        double deadline = wp_now() + c->timeout;
        while (!over && !ctl_failed(c, NULL, 0) && !others_done(T) && wp_now() < deadline) wp_sync_wait_until(&T->sync, deadline);
        for (int r = 1; r < c->world; r++) conn_send(T, &T->conns[r], F_BYE, 0, NULL, 0, ignore, sizeof ignore);
    } else {
        conn_send(T, &T->conns[0], F_BYE, 0, NULL, 0, ignore, sizeof ignore);
    }
    pthread_mutex_unlock(&T->sync.mu);
    stop_reader(T);
    for (int r = 0; r < c->world; r++)
        if (T->conns[r].fd >= 0) shutdown(T->conns[r].fd, SHUT_WR);
    free_ctl(T);
}

static const ctl_ops tcp_ctl_ops = {
    .exchange = tcp_exchange,
    .status_grid = tcp_status_grid,
    .abort = tcp_ctl_abort,
    .close = tcp_ctl_close,
};

static int alloc_ctl(ctl_tcp *T, int world) {
    size_t n = (size_t)world;
    T->conns = calloc(n, sizeof *T->conns);
    T->slot = calloc(n, sizeof *T->slot);
    T->slot_bytes = calloc(n, sizeof *T->slot_bytes);
    T->slot_seq = calloc(n, sizeof *T->slot_seq);
    T->lines = calloc(n, sizeof *T->lines);
    T->req_rank = calloc(n + 1, sizeof *T->req_rank);
    T->req_id = calloc(n + 1, sizeof *T->req_id);
    if (!T->conns || !T->slot || !T->slot_bytes || !T->slot_seq || !T->lines || !T->req_rank || !T->req_id) return -1;
    for (int r = 0; r < world; r++) {
        T->conns[r].fd = -1;
        T->conns[r].rank = r;
        if (pthread_mutex_init(&T->conns[r].wmu, NULL) != 0) return -1;
    }
    return 0;
}

int ctl_tcp_start(int rank, int world, const int *fds, char *const *addrs, double timeout, wp_control **out,
                  char *err, size_t errlen) {
    *out = NULL;
    ctl_tcp *T = calloc(1, sizeof *T);
    int rc = -1;
    if (T && ctl_base_init(&T->base, &tcp_ctl_ops, rank, world, timeout) == 0) {
        if (wp_sync_init(&T->sync) == 0) rc = 0;
        else ctl_base_destroy(&T->base);
    }
    if (rc != 0) {
        free(T);
        for (int r = 0; r < world; r++)
            if ((rank == 0 ? r > 0 : r == 0) && fds[r] >= 0) close(fds[r]);
        snprintf(err, errlen, "rank %d: cannot create the control channel", rank);
        return 1;
    }
    T->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    T->status_timeout = fmin(timeout, STATUS_TIMEOUT_MAX);
    rc = alloc_ctl(T, world);
    for (int r = 0; T->conns && r < world; r++) {
        bool mine = rank == 0 ? r > 0 : r == 0;
        if (mine) T->conns[r].fd = fds[r];
        if (rc == 0) snprintf(T->conns[r].addr, sizeof T->conns[r].addr, "%s", addrs[rank == 0 ? r : 0]);
    }
    if (rc == 0 && T->wake_fd >= 0 && pthread_create(&T->reader, NULL, reader_main, T) == 0) {
        T->started = true;
        *out = &T->base;
        return 0;
    }
    snprintf(err, errlen, "rank %d: cannot start the control channel's reader", rank);
    free_ctl(T);
    return 1;
}
