/* Accepting side of the handshake (see handshake.h). */
#include "handshake.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ring_warn.h"

int hs_read_some(hs_pending *p, char *why, size_t whylen) {
    while (p->got < WIRE_HS_BYTES) {
        ssize_t n = recv(p->fd, p->buf + p->got, WIRE_HS_BYTES - p->got, 0);
        if (n > 0) {
            p->got += (size_t)n;
            continue;
        }
        if (n == 0) {
            snprintf(why, whylen, "closed after %zu of %d handshake bytes", p->got, WIRE_HS_BYTES);
            return -1;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        snprintf(why, whylen, "%s after %zu handshake bytes", strerror(errno), p->got);
        return -1;
    }
    return 1;
}

int hs_check(const uint8_t buf[WIRE_HS_BYTES], const hs_expect *e, wire_hs *h, char *why, size_t whylen) {
    if (wire_hs_decode(buf, h, why, whylen) != 0) return -1;
    if (h->kind != e->kind) {
        snprintf(why, whylen, "handshake kind %u where %d was expected", h->kind, e->kind);
        return -1;
    }
    if (strcmp(h->job, e->job) != 0) {
        snprintf(why, whylen, "job id '%.40s' is not this job's", h->job);
        return -1;
    }
    if (!wire_secret_equal(h->secret, e->secret)) {
        snprintf(why, whylen, "wrong secret");
        return -1;
    }
    if ((int)h->world != e->world || h->rank >= (uint32_t)e->world) {
        snprintf(why, whylen, "rank %u of a world of %u (this job has %d ranks)", h->rank, h->world, e->world);
        return -1;
    }
    if (e->kind == HS_DATA &&
        (h->nstreams != e->nstreams || h->stream >= h->nstreams || h->frame_bytes != e->frame_bytes)) {
        snprintf(why, whylen, "stream %u of %u with %u-byte frames (this job: %d streams, %u-byte frames)", h->stream,
                 h->nstreams, h->frame_bytes, e->nstreams, e->frame_bytes);
        return -1;
    }
    return 0;
}

void hs_reject(hs_pending *p, int rank, const char *why, uint64_t *rejected) {
    /* a flood must not flood the log too */
    if (*rejected < HS_LOG_REFUSALS)
        ring_warn("rank %d: refused a connection from %s: %s", rank, p->from, why);
    else if (*rejected == HS_LOG_REFUSALS)
        ring_warn("rank %d: refused a connection from %s: %s (further refusals are counted, not logged)", rank,
                  p->from, why);
    close(p->fd);
    p->fd = -1;
    (*rejected)++;
}

/* The host part of "ip:port" / "[ip6]:port": its length. */
static size_t host_len(const char *from) {
    const char *colon = strrchr(from, ':');
    return colon ? (size_t)(colon - from) : strlen(from);
}

static bool same_host(const hs_pending *a, const hs_pending *b) {
    size_t n = host_len(a->from);
    return n == host_len(b->from) && memcmp(a->from, b->from, n) == 0;
}

/* How many pending connections share p's address, and the oldest of them that has not sent a
 * whole handshake (-1 if none). */
static int count_host(const hs_pending *pending, int n, const hs_pending *p, int *oldest) {
    int count = 0;
    *oldest = -1;
    for (int i = 0; i < n; i++)
        if (same_host(&pending[i], p)) {
            count++;
            if (pending[i].got < WIRE_HS_BYTES && (*oldest < 0 || pending[i].deadline < pending[*oldest].deadline))
                *oldest = i;
        }
    return count;
}

/* Make room for p: drop the oldest silent connection of its address when that address holds
 * HS_MAX_PER_HOST, else, when all slots are taken, that of the address holding the most.
 * Returns false when no silent connection can go (every pending one has sent its handshake:
 * the caller processes them next; p is the one refused then). */
static bool make_room(hs_pending *pending, int *npending, const hs_pending *p, uint64_t *rejected, int rank) {
    int victim = -1, oldest;
    if (count_host(pending, *npending, p, &oldest) >= HS_MAX_PER_HOST) {
        victim = oldest;
    } else if (*npending >= HS_MAX_PENDING) {
        int most = 0;
        for (int i = 0; i < *npending; i++) {
            int o, c = count_host(pending, *npending, &pending[i], &o);
            if (c > most && o >= 0) {
                most = c;
                victim = o;
            }
        }
    } else {
        return true;
    }
    if (victim < 0) return false;
    hs_reject(&pending[victim], rank, "dropped to make room for a newer connection (too many waiting)", rejected);
    pending[victim] = pending[--(*npending)];
    return true;
}

int hs_accept_all(int listen_fd, hs_pending *pending, int *npending, double timeout, uint64_t *rejected,
                  int rank) {
    int added = 0;
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                ring_warn("rank %d: accept failed: %s", rank, strerror(errno));
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return added;
        }
        hs_pending p = {.fd = fd, .deadline = wp_now() + timeout};
        sock_peer_addr(fd, p.from, sizeof p.from);
        /* An accepted socket inherits nothing of sock_tune: without TCP_NODELAY a small frame
         * from this side waits for the peer's delayed ACK (~40 ms on Linux) under Nagle. */
        char why[160];
        if (sock_tune(fd, why, sizeof why) != 0) {
            hs_reject(&p, rank, why, rejected);
            continue;
        }
        /* A rank sends its handshake with its connect: read it now, so that the connections
         * the room-making below may drop are the silent ones. */
        if (hs_read_some(&p, why, sizeof why) < 0) {
            hs_reject(&p, rank, why, rejected);
            continue;
        }
        if (!make_room(pending, npending, &p, rejected, rank)) {
            hs_reject(&p, rank, "too many connections waiting for their handshake", rejected);
            continue;
        }
        pending[(*npending)++] = p;
        added++;
    }
}
