/* Fuzz target: the token shard reader (src/io/data/shard.c, versions 1 and 7): any file opens with
 * 0, or 2 naming the field (1 only for system errors); an accepted shard's tokens are all below
 * the vocabulary and all readable. */
#include <string.h>

#include "fuzz.h"
#include "shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab = 1 + (data[0] | data[1] << 8); /* 1 .. 65536 */
    const char *path = fuzz_file("shard.bin", data + 2, size - 2);
    if (!path) return 0;
    wp_shard s;
    char err[512];
    int rc = shard_open(&s, path, vocab, err, sizeof err);
    if (rc == 0) {
        for (int64_t i = 0; i < s.n_tokens; i++)
            if (shard_token(&s, i) >= (uint32_t)vocab) __builtin_trap();
        shard_close(&s);
    } else if ((rc != 1 && rc != 2) || err[0] == '\0') {
        __builtin_trap();
    }
    return 0;
}
