/* wp_buf -> value, open addressing (bufmap.h). */
#include "bufmap.h"

#include <stdlib.h>

/* All six fields (buf_eq compares all six), mixed by the 64-bit finalizer of MurmurHash3: nearby
 * chunks and micro-batches must not land in nearby slots, or linear probing clusters. */
static uint64_t hash(wp_buf b) {
    uint64_t h = (uint64_t)b.kind | (uint64_t)b.lane << 8 | (uint64_t)(uint16_t)b.chunk << 16 | (uint64_t)(uint32_t)b.idx << 32;
    h ^= ((uint64_t)b.nslices << 16 | b.slice) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static bool is_free(const wp_bufmap_entry *x) { return x->key.kind == WP_BUF_KINDS; }

/* The slot holding key, else the free slot that ends its probe (cap > 0, never full). */
static int slot_of(const wp_bufmap *m, wp_buf key) {
    const int mask = m->cap - 1;
    int i = (int)(hash(key) & (uint64_t)mask);
    while (!is_free(&m->e[i]) && !buf_eq(m->e[i].key, key)) i = (i + 1) & mask;
    return i;
}

bool bufmap_get(const wp_bufmap *m, wp_buf key, intptr_t *val) {
    if (!m->n) return false;
    const wp_bufmap_entry *x = &m->e[slot_of(m, key)];
    if (is_free(x)) return false;
    if (val) *val = x->val;
    return true;
}

static wp_result grow(wp_bufmap *m) {
    const int cap = m->cap ? 2 * m->cap : 64;
    wp_bufmap_entry *e = malloc((size_t)cap * sizeof *e);
    if (!e) return WP_FAILED;
    for (int i = 0; i < cap; i++) e[i].key.kind = WP_BUF_KINDS;
    wp_bufmap old = *m;
    m->e = e, m->cap = cap;
    for (int i = 0; i < old.cap; i++)
        if (!is_free(&old.e[i])) m->e[slot_of(m, old.e[i].key)] = old.e[i];
    free(old.e);
    return WP_OK;
}

wp_result bufmap_put(wp_bufmap *m, wp_buf key, intptr_t val) {
    wp_bufmap_entry *x = m->cap ? &m->e[slot_of(m, key)] : NULL;
    if (!x || is_free(x)) { /* a new key: grow first (a present key's update never fails) */
        if (2 * (m->n + 1) > m->cap) {
            if (grow(m)) return WP_FAILED;
            x = &m->e[slot_of(m, key)];
        }
        x->key = key;
        m->n++;
    }
    x->val = val;
    return WP_OK;
}

/* Backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R): an entry after the hole moves
 * into it unless its home slot lies cyclically in (hole, entry], so every probe stays unbroken. */
void bufmap_del(wp_bufmap *m, wp_buf key) {
    if (!m->n) return;
    const int mask = m->cap - 1;
    int hole = slot_of(m, key);
    if (is_free(&m->e[hole])) return;
    m->n--;
    for (int j = (hole + 1) & mask; !is_free(&m->e[j]); j = (j + 1) & mask) {
        const int home = (int)(hash(m->e[j].key) & (uint64_t)mask);
        const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->e[hole] = m->e[j];
        hole = j;
    }
    m->e[hole].key.kind = WP_BUF_KINDS;
}

void bufmap_free(wp_bufmap *m) {
    free(m->e);
    *m = (wp_bufmap){0};
}
