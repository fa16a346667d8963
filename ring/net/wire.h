/* What travels on a TCP connection of weipipe: a fixed-size handshake that opens every
 * connection, then frames (a 48-byte header and a payload). All integers little-endian.
 * Checksums are zlib's crc32 (IEEE polynomial) over the header (without its crc field) and
 * the payload, so a flipped bit anywhere in a frame ends the job naming the peer instead of
 * corrupting weights silently. */
#ifndef WP_RING_WIRE_H
#define WP_RING_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"

#define WIRE_VERSION 4 /* 2: flags_hash (was spare, zero); 3: 64-bit flags_hash, HS_REFUSED; 4: F_SILENT */
#define WIRE_HS_BYTES 232
#define WIRE_FRAME_BYTES 48
#define WIRE_NAME_MAX 64 /* job id, secret and address fields, NUL included */

/* Handshake kinds: the connector sends DATA or CONTROL, the acceptor answers with the _ACK.
 * Rank 0's rendezvous answers a CONTROL handshake it refuses with HS_REFUSED: every field zero
 * but `rank`, which holds why (HS_WHY_*), so that a rank of another job or with another secret
 * fails at once instead of retrying; the reason never names this job's id or flags. */
enum { HS_DATA = 1, HS_DATA_ACK = 2, HS_CONTROL = 3, HS_CONTROL_ACK = 4, HS_REFUSED = 5 };
enum {
    HS_WHY_JOB = 1,  /* not admitted: another job id, another secret or another world size, not
                      * told apart (a stranger must not learn that a guessed job id is right) */
    HS_WHY_RANK = 4, /* id, secret and world agree, the rank has joined already (or claims rank 0) */
};

typedef struct wire_hs {
    uint16_t version;
    uint16_t kind;
    uint32_t rank;        /* sender's rank */
    uint32_t world;       /* sender's idea of the world size */
    uint16_t stream;      /* which of the nstreams sockets of a peer pair this is */
    uint16_t nstreams;
    uint32_t frame_bytes; /* largest data frame; both sides must agree */
    uint64_t flags_hash;  /* CONTROL and its ACK: keyed hash of the job's flags text (rendezvous.c); 0 = none */
    char job[WIRE_NAME_MAX];
    char secret[WIRE_NAME_MAX];
    char addr[WIRE_NAME_MAX]; /* CONTROL: the sender's data listen address ("ip:port") */
} wire_hs;

void wire_hs_encode(const wire_hs *h, uint8_t out[WIRE_HS_BYTES]);
/* Parses and checks magic, version, checksum and field sanity; on failure returns WP_FAILED
 * with a short reason in why ("wrong protocol version 7 (expected 1)"). Never reads past the
 * buffer. */
wp_result wire_hs_decode(const uint8_t in[WIRE_HS_BYTES], wire_hs *h, char *why, size_t whylen);

/* Frame types. DATA .. ABORT travel on data connections, the rest on control connections. */
enum {
    F_DATA = 1,       /* seq: message number on (direction, channel); a: offset; b: message bytes */
    F_CTS = 2,        /* clear to send: the receiver posted message seq of b bytes; payload: label */
    F_ABORT = 3,      /* payload: the reason */
    F_CONTRIB = 16,   /* a rank's contribution to collective number seq */
    F_RESULT = 17,    /* rank 0's result of collective seq */
    F_STATUS_REQ = 18,/* to rank 0: send me the grid (seq = request id); from rank 0: your line */
    F_STATUS_REP = 19,/* a rank's status line for gathering session seq */
    F_GRID = 20,      /* the gathered status grid for request seq */
    F_BYE = 21,       /* orderly close of a control connection */
    F_TABLE = 22,     /* rendezvous: every rank's data address, one per line */
    F_SILENT = 23,    /* rank 0's evidence: the ranks its status query did not hear from ("" = none) */
};

typedef struct wire_frame {
    uint8_t type;
    uint8_t channel;
    uint32_t length; /* payload bytes that follow the header */
    uint64_t seq;
    uint64_t a, b;
    uint32_t crc; /* crc32 of header bytes [0, 40) then the payload */
} wire_frame;

/* Fills f->crc from the header and the payload (payload may be NULL when length is 0). */
void wire_frame_seal(wire_frame *f, const void *payload);
void wire_frame_encode(const wire_frame *f, uint8_t out[WIRE_FRAME_BYTES]);
/* Parses a header; checks magic and reserved bytes (not the crc: that needs the payload).
 * Sets *crc_partial to the crc of the header part, to be continued over the payload. Returns
 * WP_OK, or WP_FAILED with a reason. */
wp_result wire_frame_decode(const uint8_t in[WIRE_FRAME_BYTES], wire_frame *f, uint32_t *crc_partial,
                            char *why, size_t whylen);
uint32_t wire_crc(uint32_t crc, const void *buf, size_t len);

const char *wire_frame_type_name(int type);

/* Constant-time comparison of two NUL-terminated secrets of at most WIRE_NAME_MAX bytes. */
bool wire_secret_equal(const char *a, const char *b);

#endif
