/* Handshake and frame encoding (see wire.h). */
#include "wire.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

static const uint8_t hs_magic[8] = {'W', 'E', 'I', 'P', 'I', 'P', 'E', '\n'};
#define FRAME_MAGIC 0x52465057u /* "WPFR" read as little-endian */
#define HS_CRC_AT 228
#define FRAME_CRC_AT 40

static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

uint32_t wire_crc(uint32_t crc, const void *buf, size_t len) {
    const unsigned char *p = buf;
    while (len > 0) { /* zlib takes uInt lengths */
        uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, n);
        p += n;
        len -= n;
    }
    return crc;
}

static void put_name(uint8_t *p, const char *s) {
    memset(p, 0, WIRE_NAME_MAX);
    size_t n = strnlen(s, WIRE_NAME_MAX - 1);
    memcpy(p, s, n);
}

/* A name field is valid when NUL-terminated inside its 64 bytes. */
static wp_result get_name(const uint8_t *p, char *out) {
    if (memchr(p, 0, WIRE_NAME_MAX) == NULL) return WP_FAILED;
    memcpy(out, p, WIRE_NAME_MAX);
    return WP_OK;
}

void wire_hs_encode(const wire_hs *h, uint8_t out[WIRE_HS_BYTES]) {
    memset(out, 0, WIRE_HS_BYTES);
    memcpy(out, hs_magic, sizeof hs_magic);
    put16(out + 8, h->version);
    put16(out + 10, h->kind);
    put32(out + 12, h->rank);
    put32(out + 16, h->world);
    put16(out + 20, h->stream);
    put16(out + 22, h->nstreams);
    put32(out + 24, h->frame_bytes);
    put32(out + 28, (uint32_t)h->flags_hash); /* the low half where version 2 had its crc32 */
    put32(out + 224, (uint32_t)(h->flags_hash >> 32));
    put_name(out + 32, h->job);
    put_name(out + 96, h->secret);
    put_name(out + 160, h->addr);
    put32(out + HS_CRC_AT, wire_crc(crc32(0, Z_NULL, 0), out, HS_CRC_AT));
}

wp_result wire_hs_decode(const uint8_t in[WIRE_HS_BYTES], wire_hs *h, char *why, size_t whylen) {
    memset(h, 0, sizeof *h);
    if (memcmp(in, hs_magic, sizeof hs_magic) != 0) {
        snprintf(why, whylen, "not a weipipe handshake (bad magic)");
        return WP_FAILED;
    }
    h->version = get16(in + 8);
    if (h->version != WIRE_VERSION) {
        snprintf(why, whylen, "wrong protocol version %u (expected %u)", h->version, WIRE_VERSION);
        return WP_FAILED;
    }
    if (get32(in + HS_CRC_AT) != wire_crc(crc32(0, Z_NULL, 0), in, HS_CRC_AT)) {
        snprintf(why, whylen, "corrupt handshake (checksum mismatch)");
        return WP_FAILED;
    }
    h->kind = get16(in + 10);
    h->rank = get32(in + 12);
    h->world = get32(in + 16);
    h->stream = get16(in + 20);
    h->nstreams = get16(in + 22);
    h->frame_bytes = get32(in + 24);
    h->flags_hash = (uint64_t)get32(in + 224) << 32 | get32(in + 28);
    if (get_name(in + 32, h->job) || get_name(in + 96, h->secret) || get_name(in + 160, h->addr)) {
        snprintf(why, whylen, "malformed handshake (unterminated name field)");
        return WP_FAILED;
    }
    if (h->kind < HS_DATA || h->kind > HS_REFUSED) {
        snprintf(why, whylen, "unknown handshake kind %u", h->kind);
        return WP_FAILED;
    }
    return WP_OK;
}

void wire_frame_seal(wire_frame *f, const void *payload) {
    uint8_t hdr[WIRE_FRAME_BYTES];
    f->crc = 0;
    wire_frame_encode(f, hdr);
    uint32_t crc = wire_crc(crc32(0, Z_NULL, 0), hdr, FRAME_CRC_AT);
    if (f->length > 0) crc = wire_crc(crc, payload, f->length);
    f->crc = crc;
}

void wire_frame_encode(const wire_frame *f, uint8_t out[WIRE_FRAME_BYTES]) {
    memset(out, 0, WIRE_FRAME_BYTES);
    put32(out, FRAME_MAGIC);
    out[4] = f->type;
    out[5] = f->channel;
    put32(out + 8, f->length);
    put64(out + 16, f->seq);
    put64(out + 24, f->a);
    put64(out + 32, f->b);
    put32(out + FRAME_CRC_AT, f->crc);
}

wp_result wire_frame_decode(const uint8_t in[WIRE_FRAME_BYTES], wire_frame *f, uint32_t *crc_partial,
                            char *why, size_t whylen) {
    memset(f, 0, sizeof *f);
    if (get32(in) != FRAME_MAGIC) {
        snprintf(why, whylen, "bad frame magic 0x%08x", get32(in));
        return WP_FAILED;
    }
    if (in[6] || in[7] || get32(in + 12) || get32(in + 44)) {
        snprintf(why, whylen, "bad frame header (reserved bytes set)");
        return WP_FAILED;
    }
    f->type = in[4];
    f->channel = in[5];
    f->length = get32(in + 8);
    f->seq = get64(in + 16);
    f->a = get64(in + 24);
    f->b = get64(in + 32);
    f->crc = get32(in + FRAME_CRC_AT);
    *crc_partial = wire_crc(crc32(0, Z_NULL, 0), in, FRAME_CRC_AT);
    return WP_OK;
}

const char *wire_frame_type_name(int type) {
    switch (type) {
    case F_DATA: return "data";
    case F_CTS: return "clear-to-send";
    case F_ABORT: return "abort";
    case F_CONTRIB: return "contribution";
    case F_RESULT: return "result";
    case F_STATUS_REQ: return "status request";
    case F_STATUS_REP: return "status reply";
    case F_GRID: return "status grid";
    case F_BYE: return "bye";
    case F_TABLE: return "address table";
    case F_SILENT: return "silent ranks";
    default: return "unknown";
    }
}

bool wire_secret_equal(const char *a, const char *b) {
    unsigned char diff = 0;
    size_t na = strnlen(a, WIRE_NAME_MAX), nb = strnlen(b, WIRE_NAME_MAX);
    for (size_t i = 0; i < WIRE_NAME_MAX; i++) {
        unsigned char ca = i < na ? (unsigned char)a[i] : 0;
        unsigned char cb = i < nb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0 && na == nb;
}
