/* The tcp rendezvous (rendezvous.h, and bootstrap.h for the variables): rank 0 gathers every
 * rank's data address and sends the table back; the connections stay as the control channel. What a stranger at rank 0's port
 * can and cannot do is said in docs/transports.md ("Rendezvous"). */
#include "rendezvous.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "control_tcp.h"
#include "flags_check.h"
#include "handshake.h"
#include "notice.h"
#include "peer_hosts.h"
#include "ring_warn.h"
#include "sock.h"
#include "tcp.h"
#include "wire.h"

static uint64_t flags_hash(const wp_boot_info *bi) { return fc_hash(bi->job_flags, bi->job_id, bi->secret); }

static void hs_fill(wire_hs *h, int kind, const wp_boot_info *bi, int rank, const char *addr) {
    memset(h, 0, sizeof *h);
    h->flags_hash = flags_hash(bi);
    h->version = WIRE_VERSION;
    h->kind = (uint16_t)kind;
    h->rank = (uint32_t)rank;
    h->world = (uint32_t)bi->world;
    snprintf(h->job, sizeof h->job, "%s", bi->job_id);
    snprintf(h->secret, sizeof h->secret, "%s", bi->secret);
    snprintf(h->addr, sizeof h->addr, "%s", addr);
}

/* Tell the sender of a refused CONTROL handshake why, in one code (wire.h: HS_REFUSED), so that
 * a rank of another job, or with another secret or world size, fails at once naming it instead
 * of retrying until --connect-timeout. Nothing of this job goes back: no id, no flags. */
static void refuse(hs_pending *p, int why_code) {
    wire_hs h;
    char why[128];
    memset(&h, 0, sizeof h);
    h.version = WIRE_VERSION;
    h.kind = HS_REFUSED;
    h.rank = (uint32_t)why_code;
    uint8_t buf[WIRE_HS_BYTES];
    wire_hs_encode(&h, buf);
    sock_write_all(p->fd, buf, sizeof buf, wp_now() + 0.5, why, sizeof why); /* best effort */
}

/* Why a decoded CONTROL handshake failed hs_check, as told to the peer: one code whichever of
 * job id, secret and world size was wrong (issue 42). Codes apart told a stranger that a
 * guessed job id was right ("another secret"); rank 0's own log still names the field. */
static int refusal_code(void) { return HS_WHY_JOB; }

/* Rank 0, a joining rank whose flags hash differs (it showed the job id and the secret): read
 * its per-flag list, answer with the names that differ (flags_check.h). Bounded by a short
 * deadline: the accept loop waits on it. Fills names; "" when the peer did not say. */
static void root_flags_names(int fd, const wp_boot_info *bi, char *names, size_t nameslen) {
    char why[200], *theirs = NULL;
    int type = 0;
    uint64_t seq;
    size_t len;
    double deadline = wp_now() + 1.0;
    names[0] = 0;
    if (ctl_read_frame(fd, &type, &seq, &theirs, &len, 1 << 16, deadline, why, sizeof why) == 0 && type == F_ABORT &&
        memchr(theirs, 0, len + 1) == theirs + len) { /* text without a NUL inside */
        fc_differ(bi->job_flags, bi->job_id, bi->secret, theirs, names, nameslen);
        if (!names[0]) snprintf(names, nameslen, "(none by name: another weipipe version?)");
        ctl_write_frame(fd, F_ABORT, 0, names, strlen(names), deadline, why, sizeof why); /* best effort */
    }
    free(theirs);
}

/* The joining rank's side of the same: send the per-flag list, read the names. */
static void rank_flags_names(int fd, const wp_boot_info *bi, char *names, size_t nameslen) {
    char why[200], *list = fc_list(bi->job_flags, bi->job_id, bi->secret), *theirs = NULL;
    int type = 0;
    uint64_t seq;
    size_t len;
    double deadline = wp_now() + 3.0;
    snprintf(names, nameslen, "rank 0 did not say which");
    if (list && ctl_write_frame(fd, F_ABORT, 0, list, strlen(list), deadline, why, sizeof why) == 0 &&
        ctl_read_frame(fd, &type, &seq, &theirs, &len, 4096, deadline, why, sizeof why) == 0 && type == F_ABORT &&
        memchr(theirs, 0, len + 1) == theirs + len)
        snprintf(names, nameslen, "%s", theirs);
    free(list);
    free(theirs);
}

/* What rank 0 keeps of the rendezvous' refusals for its error message. */
typedef struct root_state {
    int joined;
    uint64_t rejected;
    char note[1100]; /* the last rank of this job refused for its flags */
} root_state;

/* A rank of this job (id, and secret when set) with other flags. With WEIPIPE_SECRET it is
 * one of the job's ranks: the job cannot run, and waiting would only hide why. Without one it
 * may be anyone who read the job id (squeue, ps): dropped and logged, rank 0 waits for the
 * real rank until --connect-timeout and then names it. */
static int root_flags_mismatch(const wp_boot_info *bi, hs_pending *p, const wire_hs *h, root_state *st, char *err,
                               size_t errlen) {
    char names[300], values[600], why[1200];
    root_flags_names(p->fd, bi, names, sizeof names);
    if (!names[0]) snprintf(names, sizeof names, "(it did not say which)");
    fc_values(bi->job_flags, names, values, sizeof values);
    if (bi->secret[0]) {
        snprintf(err, errlen, "rank %u (%s) was started with other job flags than rank 0: %s differ%s (rank 0 has %s; "
                 "start every rank with the same flags and config)", h->rank, h->addr, names, strchr(names, ',') ? "" : "s",
                 values[0] ? values : "none of them");
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    snprintf(why, sizeof why, "it claims rank %u of this job (%s) but was started with other job flags: %s (rank 0 has "
             "%s); without WEIPIPE_SECRET it may be a stranger, so rank 0 waits for rank %u", h->rank, h->addr, names,
             values[0] ? values : "none of them", h->rank);
    snprintf(st->note, sizeof st->note, "; rank %u (%s) came with other job flags than rank 0: %s (rank 0 has %s)", h->rank,
             h->addr, names, values[0] ? values : "none of them");
    hs_reject(p, 0, why, &st->rejected);
    return 0;
}

/* A joining rank's handshake is complete: check it, answer, keep its connection. Returns -1
 * with err when the job cannot form: a rank that showed this job's secret runs with other
 * job flags. Anything else bad is refused, logged and dropped: the job goes on waiting. */
static int root_admit(const wp_boot_info *bi, hs_pending *p, int *fds, char **addrs, root_state *st, char *err,
                      size_t errlen) {
    hs_expect e = {.kind = HS_CONTROL, .world = bi->world, .job = bi->job_id, .secret = bi->secret};
    wire_hs h, ack;
    char why[200], host[SOCK_ADDR_MAX];
    int port;
    if (hs_check(p->buf, &e, &h, why, sizeof why) != 0) {
        if (h.kind == HS_CONTROL) refuse(p, refusal_code()); /* decoded: a weipipe rank, tell it why */
        hs_reject(p, 0, why, &st->rejected);
        return 0;
    }
    if (h.rank == 0 || fds[h.rank] >= 0) {
        refuse(p, HS_WHY_RANK);
        hs_reject(p, 0, h.rank ? "rank already joined" : "claims rank 0", &st->rejected);
        return 0;
    }
    if (sock_split_addr(h.addr, host, sizeof host, &port, why, sizeof why) != 0) {
        hs_reject(p, 0, why, &st->rejected);
        return 0;
    }
    uint8_t buf[WIRE_HS_BYTES];
    hs_fill(&ack, HS_CONTROL_ACK, bi, 0, "");
    wire_hs_encode(&ack, buf);
    if (sock_write_all(p->fd, buf, sizeof buf, wp_now() + 1.0, why, sizeof why) != 0) {
        hs_reject(p, 0, why, &st->rejected);
        return 0;
    }
    if (h.flags_hash != ack.flags_hash) return root_flags_mismatch(bi, p, &h, st, err, errlen);
    fds[h.rank] = p->fd;
    addrs[h.rank] = strdup(h.addr);
    p->fd = -1;
    st->joined++;
    return 0;
}

static void missing_list(int world, const int *fds, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (int r = 1; r < world && used + 16 < outlen; r++)
        if (fds[r] < 0) used += (size_t)snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", r);
}

/* Rank 0: accept every other rank (refusing strangers, who never stop it), then send them the
 * address table. */
static int root_gather(const wp_boot_info *bi, const wp_net_opts *net, const ph_set *peers, int lfd, int *fds,
                       char **addrs, char *err, size_t errlen) {
    hs_pending pend[HS_MAX_PENDING];
    int np = 0;
    root_state st = {.joined = 1};
    double deadline = wp_now() + net->connect_timeout;
    while (st.joined < bi->world) {
        double now = wp_now(), next = deadline;
        if (now >= deadline) {
            char missing[256];
            missing_list(bi->world, fds, missing, sizeof missing);
            snprintf(err, errlen, "rendezvous at %s:%d: rank(s) %s did not join within %g s%s", bi->master_addr,
                     bi->master_port, missing, net->connect_timeout, st.note);
            for (int i = 0; i < np; i++) close(pend[i].fd);
            return 1;
        }
        char lost[200];
        if (notice_lost(lost, sizeof lost)) { /* a rank ended before it joined: no use waiting */
            char missing[256];
            missing_list(bi->world, fds, missing, sizeof missing);
            snprintf(err, errlen, "rendezvous at %s:%d: rank(s) %s had not joined when %s", bi->master_addr,
                     bi->master_port, missing, lost);
            for (int i = 0; i < np; i++) close(pend[i].fd);
            return 1;
        }
        struct pollfd pf[HS_MAX_PENDING + 2] = {{.fd = lfd, .events = POLLIN}};
        for (int i = 0; i < np; i++) {
            pf[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
            if (pend[i].deadline < next) next = pend[i].deadline;
        }
        pf[np + 1] = (struct pollfd){.fd = notice_fd(), .events = POLLIN}; /* fd -1: ignored by poll */
        if (poll(pf, (nfds_t)np + 2, (int)((next - now) * 1000) + 1) < 0 && errno != EINTR) {
            snprintf(err, errlen, "rendezvous: poll: %s", strerror(errno));
            return 1;
        }
        hs_accept_all(lfd, pend, &np, fmin(net->connect_timeout, HS_TIMEOUT_MAX), &st.rejected, 0);
        now = wp_now();
        int k = 0;
        for (int i = 0; i < np; i++) {
            char why[200];
            int rc = hs_read_some(&pend[i], why, sizeof why);
            if (peers && !ph_allowed(peers, pend[i].from)) {
                snprintf(why, sizeof why, "not an address of the job's hosts (%s)", bi->peers_from);
                rc = -1;
            }
            if (rc == 0 && now >= pend[i].deadline) {
                snprintf(why, sizeof why, "no complete handshake in time (%zu of %d bytes)", pend[i].got, WIRE_HS_BYTES);
                rc = -1;
            }
            if (rc < 0) hs_reject(&pend[i], 0, why, &st.rejected);
            else if (rc == 1 && root_admit(bi, &pend[i], fds, addrs, &st, err, errlen) != 0) {
                for (int q = 0; q < np; q++)
                    if (pend[q].fd >= 0) close(pend[q].fd);
                return 1;
            }
            if (pend[i].fd >= 0) pend[k++] = pend[i];
        }
        np = k;
    }
    for (int i = 0; i < np; i++) hs_reject(&pend[i], 0, "the rendezvous is complete", &st.rejected);
    if (st.rejected > 0)
        ring_warn("rank 0: the rendezvous refused %llu connection(s) that were not this job's ranks",
                  (unsigned long long)st.rejected);
    return 0;
}

/* Rank 0 gives up the rendezvous (a rank missing past --connect-timeout, or lost): the ranks that
 * joined learn why, an F_ABORT carrying rank 0's message, instead of a bare closed connection.
 * Best effort, half a second in all. */
static void abort_joined(const wp_boot_info *bi, const int *fds, const char *reason) {
    char why[128];
    const double deadline = wp_now() + 0.5;
    notice_watch(false); /* the reason may be the launcher's notice: these writes must not stop at it */
    for (int r = 1; r < bi->world; r++)
        if (fds[r] >= 0) ctl_write_frame(fds[r], F_ABORT, 0, reason, strlen(reason), deadline, why, sizeof why);
}

static char *join_table(char **addrs, int world, size_t *len) {
    size_t cap = (size_t)world * (SOCK_ADDR_MAX + 1) + 1, used = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    for (int r = 0; r < world; r++) used += (size_t)snprintf(t + used, cap - used, "%s\n", addrs[r]);
    *len = used;
    return t;
}

/* Rank 0 found MASTER_ADDR:MASTER_PORT taken: is it a weipipe rendezvous? Asks with a handshake
 * claiming no rank of a world of none, which no rendezvous admits: one of another job refuses
 * it as such (HS_WHY_JOB; it does not say whose: its id is for its own ranks only). 0 when a
 * weipipe rendezvous of another job answered, -1 otherwise. */
static int probe_holder(const wp_boot_info *bi) {
    char why[256];
    double deadline = wp_now() + 2.0;
    int fd = sock_connect(bi->master_addr, bi->master_port, deadline, why, sizeof why);
    if (fd < 0) return -1;
    wire_hs h, ack;
    memset(&h, 0, sizeof h);
    h.version = WIRE_VERSION;
    h.kind = HS_CONTROL;
    snprintf(h.job, sizeof h.job, "%s", bi->job_id);
    snprintf(h.addr, sizeof h.addr, "probe:1");
    uint8_t buf[WIRE_HS_BYTES];
    wire_hs_encode(&h, buf);
    int rc = sock_write_all(fd, buf, sizeof buf, deadline, why, sizeof why) == 0 &&
                     sock_read_all(fd, buf, sizeof buf, deadline, why, sizeof why) == 0 &&
                     wire_hs_decode(buf, &ack, why, sizeof why) == 0 && ack.kind == HS_REFUSED && ack.rank == HS_WHY_JOB
                 ? 0
                 : -1;
    close(fd);
    return rc;
}

/* lfd: the listener inherited from the launcher (closed here), or -1 to bind one. */
static int root_rendezvous(const wp_boot_info *bi, const wp_net_opts *net, int lfd, int *fds, char **addrs, char *err,
                           size_t errlen) {
    char why[256];
    if (lfd < 0) lfd = sock_listen(bi->master_addr, bi->master_port, why, sizeof why);
    if (lfd < 0) {
        if (strstr(why, strerror(EADDRINUSE)) && probe_holder(bi) == 0)
            snprintf(err, errlen, "rank 0 cannot listen at MASTER_ADDR:MASTER_PORT (%s:%d): it is the rendezvous of "
                     "another job (this job is '%s', from %s): give each job its own port (MASTER_PORT, or WEIPIPE_PORT)",
                     bi->master_addr, bi->master_port, bi->job_id, bi->job_id_from);
        else if (strstr(why, strerror(EADDRINUSE)))
            snprintf(err, errlen, "rank 0 cannot listen at %s:%d (port from %s): another process, not a weipipe "
                     "rendezvous, holds it; set WEIPIPE_PORT to a free port of the master host, the same on every rank",
                     bi->master_addr, bi->master_port, bi->port_from ? bi->port_from : "MASTER_PORT");
        else
            snprintf(err, errlen, "rank 0 cannot listen at MASTER_ADDR:MASTER_PORT: %s", why);
        return 1;
    }
    ph_set peers;
    int rc = bi->peers[0] ? ph_resolve(bi->peers, bi->peers_from, &peers, err, errlen) : 0;
    if (rc == 0) rc = root_gather(bi, net, bi->peers[0] ? &peers : NULL, lfd, fds, addrs, err, errlen);
    if (rc != 0) abort_joined(bi, fds, err);
    if (bi->peers[0]) ph_free(&peers);
    close(lfd);
    size_t len = 0;
    char *table = rc == 0 ? join_table(addrs, bi->world, &len) : NULL;
    if (rc == 0 && !table) {
        snprintf(err, errlen, "rank 0: out of memory for the address table");
        rc = 1;
    }
    for (int r = 1; rc == 0 && r < bi->world; r++)
        if (ctl_write_frame(fds[r], F_TABLE, 0, table, len, wp_now() + net->connect_timeout, why, sizeof why) != 0) {
            snprintf(err, errlen, "rank 0 cannot send the address table to rank %d (%s): %s", r, addrs[r], why);
            rc = 1;
        }
    free(table);
    return rc;
}

static int parse_table(char *text, int world, char **addrs, char *err, size_t errlen) {
    char *save = NULL;
    int r = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (r >= world) break;
        addrs[r++] = strdup(line);
    }
    if (r != world) {
        snprintf(err, errlen, "rendezvous: rank 0 sent %d addresses for %d ranks", r, world);
        return 1;
    }
    return 0;
}

/* The data address other ranks should dial: the listener's, with a wildcard host replaced by
 * the local address of the connection to rank 0 (the interface that reaches the others), or
 * by MASTER_ADDR on rank 0 itself. via_fd < 0: rank 0. */
static void format_addr(char *out, size_t outlen, const char *host, int port) {
    int n = strchr(host, ':') ? snprintf(out, outlen, "[%s]:%d", host, port) : snprintf(out, outlen, "%s:%d", host, port);
    if (n < 0 || (size_t)n >= outlen) out[0] = 0; /* refused later as a malformed address */
}

static void advertised_addr(const wp_boot_info *bi, wp_transport *t, int via_fd, char *out, size_t outlen) {
    char host[256], why[128], local[SOCK_ADDR_MAX];
    int port, ignore;
    const char *bound = tcp_listen_addr(t);
    snprintf(out, outlen, "%s", bound);
    if (sock_split_addr(bound, host, sizeof host, &port, why, sizeof why) != 0 || !sock_is_wildcard(host)) return;
    if (via_fd < 0) {
        snprintf(host, sizeof host, "%s", bi->master_addr);
    } else {
        sock_local_addr(via_fd, local, sizeof local);
        if (sock_split_addr(local, host, sizeof host, &ignore, why, sizeof why) != 0) return;
    }
    format_addr(out, outlen, host, port);
}

/* Rank 0's refusal (HS_REFUSED) as this rank's error. */
static void refused_msg(const wp_boot_info *bi, int code, char *err, size_t errlen) {
    const char *at = bi->port_from ? bi->port_from : "MASTER_PORT";
    if (code == HS_WHY_JOB) /* rank 0 does not say which of the three: its log does */
        snprintf(err, errlen, "rank %d: MASTER_ADDR:MASTER_PORT (%s:%d) is the rendezvous of another job (this job is "
                 "'%s', from %s), or of this job with another WEIPIPE_SECRET or world size than this rank's %d ranks: "
                 "give each job its own port (MASTER_PORT, or WEIPIPE_PORT), every rank the same secret and world size",
                 bi->rank, bi->master_addr, bi->master_port, bi->job_id, bi->job_id_from, bi->world);
    else if (code == HS_WHY_RANK)
        snprintf(err, errlen, "rank %d: rank 0 at %s:%d (port from %s) has a rank %d already (two processes started as "
                 "the same rank?)", bi->rank, bi->master_addr, bi->master_port, at, bi->rank);
    else
        snprintf(err, errlen, "rank %d: rank 0 at %s:%d (port from %s) refused the rendezvous (reason %d)", bi->rank,
                 bi->master_addr, bi->master_port, at, code);
}

/* One try: connect, send the handshake, read rank 0's answer. 0 with *fdp, *h and *ack; 1 with
 * err when trying again cannot help (rank 0 refused, or the answer is not this job's rank 0's);
 * -1 with why when the connection closed or failed before an answer: rank 0 drops connections
 * when strangers crowd its port (handshake.h), so the caller tries again. */
static int rank_hello(const wp_boot_info *bi, wp_transport *t, double deadline, int *fdp, wire_hs *h, wire_hs *ack,
                      char *why, size_t whylen, char *err, size_t errlen) {
    char my_addr[SOCK_ADDR_MAX], scratch[128];
    int fd = sock_connect(bi->master_addr, bi->master_port, deadline, why, whylen);
    if (fd < 0) {
        snprintf(err, errlen, "rank %d cannot reach rank 0 at MASTER_ADDR:MASTER_PORT: %s", bi->rank, why);
        return 1;
    }
    uint8_t buf[WIRE_HS_BYTES];
    advertised_addr(bi, t, fd, my_addr, sizeof my_addr);
    hs_fill(h, HS_CONTROL, bi, bi->rank, my_addr);
    wire_hs_encode(h, buf);
    if (sock_write_all(fd, buf, sizeof buf, deadline, why, whylen) != 0 ||
        sock_read_all(fd, buf, sizeof buf, deadline, why, whylen) != 0) {
        close(fd);
        return -1;
    }
    hs_expect e = {.kind = HS_CONTROL_ACK, .world = bi->world, .job = bi->job_id, .secret = bi->secret};
    if (wire_hs_decode(buf, ack, scratch, sizeof scratch) == 0 && ack->kind == HS_REFUSED) {
        refused_msg(bi, (int)ack->rank, err, errlen);
    } else if (hs_check(buf, &e, ack, why, whylen) != 0) {
        snprintf(err, errlen, "rank %d: the answer at %s:%d (port from %s) is not this job's rank 0 (%s; same "
                 "WEIPIPE_SECRET, WEIPIPE_JOB_ID and world size everywhere, and that port weipipe's?)", bi->rank,
                 bi->master_addr, bi->master_port, bi->port_from ? bi->port_from : "MASTER_PORT", why);
    } else {
        *fdp = fd;
        return 0;
    }
    close(fd);
    return 1;
}

/* Connect to rank 0 and say hello, trying again until --connect-timeout while rank 0 drops the
 * connection unanswered. 0 with *fdp; 1 with err. */
static int rank_join(const wp_boot_info *bi, const wp_net_opts *net, wp_transport *t, int *fdp, char *err,
                     size_t errlen) {
    char why[256] = "";
    double deadline = wp_now() + net->connect_timeout, pause = 0.05;
    wire_hs h, ack;
    int tries = 0, rc;
    while ((rc = rank_hello(bi, t, deadline, fdp, &h, &ack, why, sizeof why, err, errlen)) < 0) {
        tries++;
        if (wp_now() + pause >= deadline) {
            snprintf(err, errlen, "rank %d: rank 0 at %s:%d (port from %s) did not answer within %g s (%d tries, each "
                     "connection closed unanswered; last: %s)", bi->rank, bi->master_addr, bi->master_port,
                     bi->port_from ? bi->port_from : "MASTER_PORT", net->connect_timeout, tries, why);
            return 1;
        }
        struct timespec ts = {0, (long)(pause * 1e9)};
        nanosleep(&ts, NULL);
        pause = fmin(2 * pause, 0.5);
    }
    if (rc != 0) return 1;
    if (ack.flags_hash != h.flags_hash) {
        char names[300], values[600];
        rank_flags_names(*fdp, bi, names, sizeof names);
        fc_values(bi->job_flags, names, values, sizeof values);
        snprintf(err, errlen, "rank %d was started with other job flags than rank 0: %s differ%s (rank %d has %s; start "
                 "every rank with the same flags and config)", bi->rank, names, strchr(names, ',') ? "" : "s", bi->rank,
                 values[0] ? values : "none of them");
        close(*fdp);
        *fdp = -1;
        return 1;
    }
    return 0;
}

static int rank_rendezvous(const wp_boot_info *bi, const wp_net_opts *net, wp_transport *t, int *fd0,
                           char **addrs, char *err, size_t errlen) {
    char why[256];
    int fd = -1;
    if (rank_join(bi, net, t, &fd, err, errlen) != 0) return 1;
    double deadline;
    int type;
    uint64_t seq;
    char *table;
    size_t len;
    /* Rank 0 waits up to --connect-timeout for the last rank to join. */
    deadline = wp_now() + 2 * net->connect_timeout;
    int frc = ctl_read_frame(fd, &type, &seq, &table, &len, (size_t)bi->world * (SOCK_ADDR_MAX + 1), deadline, why, sizeof why);
    if (frc == 0 && type == F_ABORT) { /* rank 0 gave up, and says why (abort_joined) */
        for (char *c = table; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* its words, printed here: no control characters */
        snprintf(err, errlen, "rank %d: rank 0 gave up: %s", bi->rank, table); /* its words name the rendezvous */
        free(table);
        close(fd);
        return 1;
    }
    if (frc != 0 || type != F_TABLE) {
        if (table) snprintf(why, sizeof why, "a %s frame instead of the address table", wire_frame_type_name(type));
        snprintf(err, errlen, "rank %d: no address table from rank 0 at %s:%d: %s", bi->rank, bi->master_addr,
                 bi->master_port, why);
        free(table);
        close(fd);
        return 1;
    }
    int rc = parse_table(table, bi->world, addrs, err, errlen);
    free(table);
    if (rc != 0) {
        close(fd);
        return 1;
    }
    *fd0 = fd;
    return 0;
}

/* WEIPIPE_TEST_JOIN_DELAY=R:S: rank R waits S seconds before it takes part (tests/faults/kill.sh
 * kills it then, before it joined, every time). 0, or 2 naming the variable. */
static int test_join_delay(int rank, char *err, size_t errlen) {
    const char *v = getenv("WEIPIPE_TEST_JOIN_DELAY");
    if (!v || !*v) return 0;
    int r, used = 0;
    double sec;
    if (sscanf(v, "%d:%lf%n", &r, &sec, &used) != 2 || v[used] || r < 0 || !(sec >= 0 && sec <= 3600)) {
        snprintf(err, errlen, "WEIPIPE_TEST_JOIN_DELAY: '%s' is not RANK:SECONDS (0 to 3600 s)", v);
        return 2;
    }
    if (r == rank) nanosleep(&(struct timespec){(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)}, NULL);
    return 0;
}

int rdv_exchange(const wp_boot_info *bi, const wp_net_opts *net, wp_transport *t, int lfd, int *fds, char **addrs,
                 char *err, size_t errlen) {
    if (test_join_delay(bi->rank, err, errlen)) {
        if (lfd >= 0) close(lfd);
        return 2;
    }
    if (bi->rank != 0) return rank_rendezvous(bi, net, t, &fds[0], addrs, err, errlen);
    char my_addr[SOCK_ADDR_MAX];
    advertised_addr(bi, t, -1, my_addr, sizeof my_addr);
    addrs[0] = strdup(my_addr); /* NULL is caught with the others' (out of memory) */
    if (bi->world > 1) return root_rendezvous(bi, net, lfd, fds, addrs, err, errlen); /* closes lfd */
    if (lfd >= 0) close(lfd); /* a world of one needs no listener */
    return 0;
}
