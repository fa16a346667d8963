/* Fuzz target: what a TCP peer can send (ring/wire.c, ring/handshake.c): the 232-byte
 * handshake through the acceptor's full check against this job (magic, version, checksum,
 * secret, ranks, streams), then 48-byte frame headers, each followed by as much of its payload
 * as the input holds, checksummed as the receiver does. Decoders must reject with a reason and
 * never read past what they were given. */
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "handshake.h"
#include "wire.h"

static void handshake(const uint8_t *data, size_t size) {
    if (size == 0) return;
    uint8_t buf[WIRE_HS_BYTES] = {0};
    memcpy(buf, data, size < WIRE_HS_BYTES ? size : WIRE_HS_BYTES);
    wire_hs h;
    char why[256] = "";
    if (wire_hs_decode(buf, &h, why, sizeof why) != 0 && why[0] == '\0') __builtin_trap();
    hs_expect e = {.kind = data[0] % 2 ? HS_DATA : HS_CONTROL, .world = 4, .job = "job", .secret = "secret",
                   .frame_bytes = 1 << 20, .nstreams = 2};
    why[0] = '\0';
    if (hs_check(buf, &e, &h, why, sizeof why) != 0 && why[0] == '\0') __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    handshake(data, size);
    size_t at = size < WIRE_HS_BYTES ? size : WIRE_HS_BYTES;
    while (size - at >= WIRE_FRAME_BYTES) {
        wire_frame f;
        uint32_t crc;
        char why[256] = "";
        if (wire_frame_decode(data + at, &f, &crc, why, sizeof why) != 0) {
            if (why[0] == '\0') __builtin_trap();
            return 0;
        }
        at += WIRE_FRAME_BYTES;
        size_t payload = f.length < size - at ? f.length : size - at;
        crc = wire_crc(crc, data + at, payload);
        (void)wire_frame_type_name(f.type);
        if (payload < f.length || crc != f.crc) return 0; /* truncated or damaged: the peer is dropped */
        at += payload;
    }
    return 0;
}
