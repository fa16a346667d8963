/* bufmap.h against a second implementation (a plain array searched by buf_eq): 200,000 random
 * puts, updates and deletions over a key space small enough that keys come back after deletion
 * and probe runs wrap the table's end; after every operation the count agrees and every key of
 * the space is present with the reference's value or absent, as in the reference. Backward-shift
 * deletion breaks a probe run when it moves an entry wrongly, which shows as a key gone missing. */
#include <stdint.h>
#include <string.h>

#include "../check.h"
#include "bufmap.h"

enum { SPACE = 600 };

static wp_buf key_of(int i) { /* every field varies: the hash must use them all */
    wp_buf b = {.kind = (uint8_t)(i % WP_BUF_KINDS), .lane = (uint8_t)(i / 5 % 3), .chunk = (int16_t)(i / 15 % 4),
                .idx = i / 60 - 2};
    if (i % 7 == 0) b = buf_slice(b, i / 7 % 3, 3);
    return b;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next(void) { /* xorshift64*, fixed seed */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

int main(void) {
    for (int i = 0; i < SPACE; i++)
        for (int j = 0; j < i; j++) CHECK(!buf_eq(key_of(i), key_of(j)), "keys %d and %d are the same name", i, j);
    wp_bufmap m = {0};
    bool in[SPACE] = {0};
    intptr_t val[SPACE];
    int n = 0;
    CHECK(!bufmap_get(&m, key_of(0), NULL), "an empty map holds a key");
    bufmap_del(&m, key_of(0)); /* on an empty map: nothing */
    for (int op = 0; op < 200000; op++) {
        const int i = (int)(next() % SPACE);
        /* grow to about 400 keys, then hover there: half full tables, long probe runs */
        const bool put = next() % 1000 < (n < 400 ? 700u : 500u);
        if (put) {
            const intptr_t v = (intptr_t)next() - (intptr_t)INT32_MAX;
            CHECK(!bufmap_put(&m, key_of(i), v), "put %d failed", i);
            n += !in[i];
            in[i] = true, val[i] = v;
        } else {
            bufmap_del(&m, key_of(i));
            n -= in[i];
            in[i] = false;
        }
        CHECK(m.n == n, "operation %d: %d keys counted, the reference holds %d", op, m.n, n);
        if (op % 97 && op > 1000) continue; /* every key after the first 1000 operations, then every 97th */
        for (int k = 0; k < SPACE; k++) {
            intptr_t got = 12345;
            const bool has = bufmap_get(&m, key_of(k), &got);
            CHECK(has == in[k], "operation %d: key %d %s", op, k, in[k] ? "went missing" : "is there after its deletion");
            CHECK(!has || got == val[k], "operation %d: key %d holds %ld, not %ld", op, k, (long)got, (long)val[k]);
        }
    }
    CHECK(m.cap >= 2 * m.n && (m.cap & (m.cap - 1)) == 0, "capacity %d for %d keys", m.cap, m.n);
    bufmap_free(&m);
    CHECK(m.n == 0 && m.cap == 0 && !m.e, "a freed map is empty");
    return check_result("bufmap");
}
