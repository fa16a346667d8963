/* Accepting side of a connection: read a handshake without blocking (a silent or hostile
 * client must never stall the thread that accepts) and check it against what this job
 * expects. Used by the tcp transport's listener and by rank 0's rendezvous. */
#ifndef WP_RING_HANDSHAKE_H
#define WP_RING_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "sock.h"
#include "wire.h"

/* Longest a client may take to send its handshake: a weipipe rank sends it with its connect,
 * so only a silent stranger needs more; it is dropped then, and its slot freed. */
#define HS_TIMEOUT_MAX 3.0
/* Connections waiting for their handshake: at most HS_MAX_PENDING in all and HS_MAX_PER_HOST
 * from one peer address. A new connection beyond either takes the slot of the oldest silent
 * one of its own address, else of the address holding the most, so that one address (a
 * flood) cannot keep the others (the real ranks) out; the dropped client sees its connection
 * closed (weipipe's ranks then retry until --connect-timeout). */
#define HS_MAX_PENDING 64
#define HS_MAX_PER_HOST 16
/* Refusals an acceptor logs one line each; after that they are only counted. */
#define HS_LOG_REFUSALS 16

typedef struct hs_pending {
    int fd;
    double deadline;
    size_t got;
    uint8_t buf[WIRE_HS_BYTES];
    char from[SOCK_ADDR_MAX];
} hs_pending;

/* Read what is there. Returns 1 when the handshake is complete, 0 when more is needed, -1 when
 * the client closed or failed (reason in why). */
int hs_read_some(hs_pending *p, char *why, size_t whylen);

/* What an acceptor expects of a handshake. */
typedef struct hs_expect {
    int kind;      /* HS_DATA or HS_CONTROL */
    int world;
    const char *job;
    const char *secret;
    uint32_t frame_bytes; /* HS_DATA only */
    int nstreams;         /* HS_DATA only */
} hs_expect;

/* Decode and check job, secret, world size, rank range, kind, stream numbers. Returns 0, or -1
 * with the reason ("wrong secret", "rank 7 is outside a world of 4"). */
int hs_check(const uint8_t buf[WIRE_HS_BYTES], const hs_expect *e, wire_hs *h, char *why, size_t whylen);

/* Accept every waiting connection on listen_fd into pending[] (making room as said above; each
 * connection dropped is counted in *rejected) and read what each new one has sent already.
 * Returns how many were added. */
int hs_accept_all(int listen_fd, hs_pending *pending, int *npending, double timeout, uint64_t *rejected,
                  int rank);

/* Log a refused connection (one warning line, for the first HS_LOG_REFUSALS refusals counted
 * in *rejected; then one line saying the rest are only counted) and close it. */
void hs_reject(hs_pending *p, int rank, const char *why, uint64_t *rejected);

#endif
