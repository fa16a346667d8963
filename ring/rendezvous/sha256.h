/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the rendezvous' flags hash: one hash
 * per rank per job, so a plain byte-at-a-time implementation is fast enough, and Python's
 * hashlib / hmac are the independent reference its test checks against. */
#ifndef WP_RING_SHA256_H
#define WP_RING_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    uint8_t block[64];
    size_t used;    /* bytes waiting in block */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[SHA256_BYTES]);

/* HMAC-SHA-256 of the message parts msg[0..nmsg) (concatenated) under key. */
void hmac_sha256(const void *key, size_t keylen, const void *const *msg, const size_t *msglen, int nmsg,
                 uint8_t out[SHA256_BYTES]);

#endif
