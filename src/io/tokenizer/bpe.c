/* The BPE model of a tokenizer.json (bpe.h), after the `tokenizers` library's
 * models/bpe/{model,word,serialization}.rs. */
#include "bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "tok_utf8.h"

enum { CACHE_SLOTS = 1 << 17, CACHE_MAX_WORD = 128 };

struct wp_bpe {
    size_t count;       /* vocabulary entries, ids 0 .. count-1 */
    char *arena;        /* every token's bytes */
    size_t *off;        /* id i: arena[off[i], off[i+1]) */
    uint32_t *slot;     /* string hash: id + 1, 0 empty */
    size_t slot_mask;
    uint64_t *mkey;     /* merges: (a << 32 | b), UINT64_MAX empty */
    uint32_t *mrank, *mnew;
    size_t mmask;
    int32_t unk;        /* -1: none */
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_id[256];     /* the id of each byte's byte-level character, -1 when none */
    int32_t fallback_id[256]; /* <0xNN>, -1 when none */
    bool byte_direct;         /* every byte's character is a token: words map byte by byte */
};

struct bpe_scratch {
    int32_t *id, *prev, *next;
    size_t cap;
    struct heap_e { uint64_t key; int32_t new_id; } *heap;
    size_t hn, hcap;
    char *mapped;
    size_t mcap;
    /* words seen in this call: key bytes and ids in arenas, found by hash */
    uint32_t *cslot; /* entry index + 1 */
    struct cache_e { uint32_t koff, klen, ioff, in; } *ce;
    size_t cn;
    char *ckeys;
    size_t ckn, ckcap;
    tok_ids cids;
};

wp_result ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 1024;
        int32_t *g = realloc(ids->v, cap * sizeof *g);
        if (!g) return 1;
        ids->v = g;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t k) {
    k = (k ^ (k >> 31)) * 0x7FB5D329728EA185ull;
    return k ^ (k >> 27);
}

static size_t pow2_above(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

uint32_t byte_level_char(unsigned char b) {
    /* printable bytes stand for themselves, the others for U+0100 + their rank among them */
#define BL_PRINTABLE(c) (((c) >= '!' && (c) <= '~') || ((c) >= 0xA1 && (c) <= 0xAC) || (c) >= 0xAE)
    if (BL_PRINTABLE(b)) return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++) k += !BL_PRINTABLE(c);
    return 256 + k;
#undef BL_PRINTABLE
}

int32_t bpe_id(const wp_bpe *b, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & b->slot_mask;; i = (i + 1) & b->slot_mask) {
        uint32_t e = b->slot[i];
        if (!e) return -1;
        size_t o = b->off[e - 1], l = b->off[e] - o;
        if (l == n && memcmp(b->arena + o, s, n) == 0) return (int32_t)(e - 1);
    }
}

size_t bpe_count(const wp_bpe *b) { return b->count; }

const char *bpe_token(const wp_bpe *b, int32_t id, size_t *len) {
    *len = b->off[id + 1] - b->off[id];
    return b->arena + b->off[id];
}

void bpe_free(wp_bpe *b) {
    if (!b) return;
    free(b->arena);
    free(b->off);
    free(b->slot);
    free(b->mkey);
    free(b->mrank);
    free(b->mnew);
    free(b);
}

/* (a, b) -> rank and merged id; false when they do not merge. */
static inline bool merge_get(const wp_bpe *b, int32_t x, int32_t y, uint32_t *rank, int32_t *nid) {
    uint64_t k = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
    for (size_t i = hash_u64(k) & b->mmask;; i = (i + 1) & b->mmask) {
        if (b->mkey[i] == UINT64_MAX) return false;
        if (b->mkey[i] == k) {
            *rank = b->mrank[i];
            *nid = (int32_t)b->mnew[i];
            return true;
        }
    }
}

/* The vocabulary: ids exactly 0 .. count-1, each once; strings into one arena. */
static wp_result parse_vocab(wp_bpe *b, json_t *vocab, const char *name, char *err, size_t errlen) {
    b->count = json_object_size(vocab);
    if (b->count == 0 || b->count > INT32_MAX) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.vocab has %zu entries", name, b->count);
    size_t total = 0, n = b->count;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) total += strlen(key);
    b->off = calloc(n + 1, sizeof *b->off);
    size_t *len = calloc(n, sizeof *len);
    const char **str = calloc(n, sizeof *str);
    b->arena = malloc(total + 1);
    b->slot_mask = pow2_above(n) - 1;
    b->slot = calloc(b->slot_mask + 1, sizeof *b->slot);
    int rc = b->off && len && str && b->arena && b->slot ? 0 : wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    json_object_foreach(vocab, key, val) {
        if (rc) break;
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (!json_is_integer(val))
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.vocab[\"%.40s\"]: the id is not an integer", name, key);
        else if (id < 0 || (size_t)id >= n)
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.vocab[\"%.40s\"]: id %lld is not in [0, %zu), the entry count (an id skipped or out of range)",
                         name, key, (long long)id, n);
        else if (str[id])
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.vocab[\"%.40s\"]: id %lld is also \"%.40s\"'s", name, key, (long long)id, str[id]);
        else
            str[id] = key, len[id] = strlen(key);
    }
    for (size_t i = 0, at = 0; rc == 0 && i < n; i++) {
        memcpy(b->arena + at, str[i], len[i]);
        b->off[i] = at;
        at += len[i];
        b->off[i + 1] = at;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t h = hash_bytes(str[i], len[i]) & b->slot_mask;
        while (b->slot[h]) h = (h + 1) & b->slot_mask;
        b->slot[h] = (uint32_t)i + 1;
    }
    free(len);
    free(str);
    return rc;
}

/* One merge: a "a b" string (exactly one space, as tokenizers splits it) or an [a, b] pair. */
static wp_result merge_parts(json_t *m, const char **a, size_t *al, const char **bb, size_t *bl) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ') || json_string_length(m) != strlen(s)) return 2;
        *a = s, *al = (size_t)(sp - s), *bb = sp + 1, *bl = strlen(sp + 1);
        return 0;
    }
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return 2;
    *a = json_string_value(json_array_get(m, 0)), *al = json_string_length(json_array_get(m, 0));
    *bb = json_string_value(json_array_get(m, 1)), *bl = json_string_length(json_array_get(m, 1));
    return 0;
}

static wp_result parse_merges(wp_bpe *b, json_t *merges, const char *name, char *err, size_t errlen) {
    size_t n = json_array_size(merges);
    b->mmask = pow2_above(n) - 1;
    b->mkey = malloc((b->mmask + 1) * sizeof *b->mkey);
    b->mrank = malloc((b->mmask + 1) * sizeof *b->mrank);
    b->mnew = malloc((b->mmask + 1) * sizeof *b->mnew);
    char *cat = NULL;
    size_t catcap = 0;
    if (!b->mkey || !b->mrank || !b->mnew) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    memset(b->mkey, 0xFF, (b->mmask + 1) * sizeof *b->mkey);
    wp_result rc = WP_OK;
    for (size_t r = 0; rc == 0 && r < n; r++) {
        const char *x, *y;
        size_t xl, yl;
        if (merge_parts(json_array_get(merges, r), &x, &xl, &y, &yl)) {
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", name, r);
            break;
        }
        if (xl + yl > catcap) {
            char *g = realloc(cat, catcap = 2 * (xl + yl));
            if (!g) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
            else cat = g;
        }
        if (rc) break;
        memcpy(cat, x, xl);
        memcpy(cat + xl, y, yl);
        int32_t ia = bpe_id(b, x, xl), ib = bpe_id(b, y, yl), in = bpe_id(b, cat, xl + yl);
        if (ia < 0 || ib < 0 || in < 0) {
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.merges[%zu]: \"%.*s\", \"%.*s\" or their join is not in the vocabulary", name, r,
                         (int)(xl > 40 ? 40 : xl), x, (int)(yl > 40 ? 40 : yl), y);
            break;
        }
        uint64_t k = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        size_t i = hash_u64(k) & b->mmask;
        while (b->mkey[i] != UINT64_MAX && b->mkey[i] != k) i = (i + 1) & b->mmask;
        /* a pair given twice takes its last rank, as tokenizers' HashMap collect does */
        b->mkey[i] = k, b->mrank[i] = (uint32_t)r, b->mnew[i] = (uint32_t)in;
    }
    free(cat);
    return rc;
}

static wp_result check_model(json_t *model, const char *name, char *err, size_t errlen) {
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.type is \"%s\": only BPE is encoded", name, type ? type : "(none)");
    static const char *const unset[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(model, unset[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.%s is set: not supported (the GPT-2, Llama and SentencePiece BPE families leave it null)",
                           name, unset[i]);
    }
    if (!json_is_object(json_object_get(model, "vocab")) || !json_is_array(json_object_get(model, "merges")))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model has no \"vocab\" object and \"merges\" array", name);
    return 0;
}

static bool get_flag(json_t *model, const char *key) { return json_is_true(json_object_get(model, key)); }

wp_result bpe_parse(json_t *model, const char *name, wp_bpe **out, char *err, size_t errlen) {
    *out = NULL;
    WP_TRY(check_model(model, name, err, errlen));
    wp_bpe *b = calloc(1, sizeof *b);
    if (!b) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", name);
    wp_result rc = parse_vocab(b, json_object_get(model, "vocab"), name, err, errlen);
    if (rc == 0) rc = parse_merges(b, json_object_get(model, "merges"), name, err, errlen);
    json_t *unk = json_object_get(model, "unk_token");
    /* looked up only in a vocabulary that parsed: a refused one may have no table at all */
    b->unk = rc == 0 && json_is_string(unk) ? bpe_id(b, json_string_value(unk), json_string_length(unk)) : -1;
    if (rc == 0 && json_is_string(unk) && b->unk < 0)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: model.unk_token \"%.40s\" is not in the vocabulary", name, json_string_value(unk));
    b->fuse_unk = get_flag(model, "fuse_unk");
    b->byte_fallback = get_flag(model, "byte_fallback");
    b->ignore_merges = get_flag(model, "ignore_merges");
    for (int c = 0; rc == 0 && c < 256; c++) {
        char s[8];
        b->byte_id[c] = bpe_id(b, s, utf8_put(byte_level_char((unsigned char)c), s));
        snprintf(s, sizeof s, "<0x%02X>", c);
        b->fallback_id[c] = bpe_id(b, s, 6);
    }
    b->byte_direct = true;
    for (int c = 0; c < 256; c++) b->byte_direct &= b->byte_id[c] >= 0;
    if (rc) {
        bpe_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

bpe_scratch *bpe_scratch_new(void) {
    bpe_scratch *sc = calloc(1, sizeof *sc);
    if (sc && !(sc->cslot = calloc(CACHE_SLOTS, sizeof *sc->cslot))) {
        free(sc);
        return NULL;
    }
    if (sc && !(sc->ce = malloc(CACHE_SLOTS / 2 * sizeof *sc->ce))) {
        free(sc->cslot);
        free(sc);
        return NULL;
    }
    return sc;
}

void bpe_scratch_free(bpe_scratch *sc) {
    if (!sc) return;
    free(sc->id);
    free(sc->prev);
    free(sc->next);
    free(sc->heap);
    free(sc->mapped);
    free(sc->cslot);
    free(sc->ce);
    free(sc->ckeys);
    free(sc->cids.v);
    free(sc);
}

static wp_result scratch_fit(bpe_scratch *sc, size_t n) {
    if (n <= sc->cap) return 0;
    size_t cap = n < 64 ? 64 : 2 * n;
    int32_t *a = realloc(sc->id, cap * sizeof *a);
    if (a) sc->id = a;
    int32_t *p = realloc(sc->prev, cap * sizeof *p);
    if (p) sc->prev = p;
    int32_t *q = realloc(sc->next, cap * sizeof *q);
    if (q) sc->next = q;
    struct heap_e *h = realloc(sc->heap, 2 * cap * sizeof *h);
    if (h) sc->heap = h;
    char *m = realloc(sc->mapped, 2 * cap + 8);
    if (m) sc->mapped = m;
    if (!a || !p || !q || !h || !m) return 1;
    sc->cap = cap;
    sc->hcap = 2 * cap;
    sc->mcap = 2 * cap + 8;
    return 0;
}

/* A min-heap on (rank << 32 | position): word.rs's queue pops the lowest rank, then the
 * leftmost position. */
static wp_result heap_push(bpe_scratch *sc, uint32_t rank, int32_t pos, int32_t nid) {
    if (sc->hn == sc->hcap) {
        struct heap_e *h = realloc(sc->heap, 2 * sc->hcap * sizeof *h);
        if (!h) return 1;
        sc->heap = h;
        sc->hcap *= 2;
    }
    struct heap_e e = {(uint64_t)rank << 32 | (uint32_t)pos, nid};
    size_t i = sc->hn++;
    while (i > 0 && sc->heap[(i - 1) / 2].key > e.key) {
        sc->heap[i] = sc->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    sc->heap[i] = e;
    return 0;
}

static struct heap_e heap_pop(bpe_scratch *sc) {
    struct heap_e top = sc->heap[0], last = sc->heap[--sc->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sc->hn) break;
        if (c + 1 < sc->hn && sc->heap[c + 1].key < sc->heap[c].key) c++;
        if (sc->heap[c].key >= last.key) break;
        sc->heap[i] = sc->heap[c];
        i = c;
    }
    if (sc->hn) sc->heap[i] = last;
    return top;
}

static wp_result try_queue(const wp_bpe *b, bpe_scratch *sc, int32_t pos) {
    uint32_t rank;
    int32_t nid;
    if (pos < 0 || sc->next[pos] < 0 || !merge_get(b, sc->id[pos], sc->id[sc->next[pos]], &rank, &nid)) return 0;
    return heap_push(sc, rank, pos, nid);
}

/* word.rs's merge_all over sc->id[0, n): a merge popped for a symbol that has gone, or whose
 * pair no longer makes the merge's token, is skipped. */
static wp_result merge_all(const wp_bpe *b, bpe_scratch *sc, size_t n, tok_ids *out) {
    sc->hn = 0;
    for (size_t i = 0; i < n; i++) {
        sc->prev[i] = (int32_t)i - 1;
        sc->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (try_queue(b, sc, (int32_t)i)) return 1;
    while (sc->hn) {
        struct heap_e e = heap_pop(sc);
        int32_t pos = (int32_t)(uint32_t)e.key, nx = sc->next[pos];
        uint32_t rank;
        int32_t nid;
        if (sc->id[pos] < 0 || nx < 0 || !merge_get(b, sc->id[pos], sc->id[nx], &rank, &nid) || nid != e.new_id) continue;
        sc->id[pos] = nid;
        sc->id[nx] = -1; /* gone */
        sc->next[pos] = sc->next[nx];
        if (sc->next[nx] >= 0) sc->prev[sc->next[nx]] = pos;
        if (try_queue(b, sc, sc->prev[pos]) || try_queue(b, sc, pos)) return 1;
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = sc->next[i])
        if (ids_push(out, sc->id[i])) return 1;
    return 0;
}

/* model.rs's merge_word before the merges: a character in the vocabulary is its id; else its
 * bytes as <0xNN> tokens (byte_fallback, when all exist); else the unknown token, fused with an
 * unknown neighbour under fuse_unk and, as tokenizers does, held back until the next known
 * character or the word's end. */
static size_t word_symbols(const wp_bpe *b, const char *s, size_t n, bpe_scratch *sc) {
    size_t k = 0;
    int32_t pending = -1;
    for (size_t i = 0; i < n;) {
        size_t c = utf8_len((unsigned char)s[i]), j = i + c <= n ? i + c : n;
        int32_t id = bpe_id(b, s + i, j - i);
        if (id >= 0) {
            if (pending >= 0) sc->id[k++] = pending;
            pending = -1;
            sc->id[k++] = id;
        } else {
            bool all = b->byte_fallback;
            for (size_t t = i; all && t < j; t++) all = b->fallback_id[(unsigned char)s[t]] >= 0;
            if (all) {
                for (size_t t = i; t < j; t++) sc->id[k++] = b->fallback_id[(unsigned char)s[t]];
            } else if (b->unk >= 0) {
                if (pending >= 0 && !b->fuse_unk) sc->id[k++] = pending;
                pending = b->unk;
            }
        }
        i = j;
    }
    if (pending >= 0) sc->id[k++] = pending;
    return k;
}

/* A word, not from the cache. */
static wp_result word_encode(const wp_bpe *b, const char *w, size_t n, bool byte_level, bpe_scratch *sc, tok_ids *out) {
    if (scratch_fit(sc, 2 * n + 2)) return 1; /* a byte's character takes at most 2 bytes */
    const char *s = w;
    size_t m = n;
    if (byte_level && (b->ignore_merges || !b->byte_direct)) {
        m = 0;
        for (size_t i = 0; i < n; i++) m += utf8_put(byte_level_char((unsigned char)w[i]), sc->mapped + m);
        s = sc->mapped;
    }
    if (b->ignore_merges) {
        int32_t id = bpe_id(b, s, m);
        if (id >= 0) return ids_push(out, id);
    }
    size_t k = n;
    if (byte_level && b->byte_direct)
        for (size_t i = 0; i < n; i++) sc->id[i] = b->byte_id[(unsigned char)w[i]];
    else
        k = word_symbols(b, s, m, sc);
    return merge_all(b, sc, k, out);
}

wp_result bpe_word(const wp_bpe *b, const char *w, size_t n, bool byte_level, bpe_scratch *sc, tok_ids *out) {
    if (n == 0) return 0;
    if (n > CACHE_MAX_WORD) return word_encode(b, w, n, byte_level, sc, out);
    size_t h = hash_bytes(w, n) & (CACHE_SLOTS - 1);
    for (; sc->cslot[h]; h = (h + 1) & (CACHE_SLOTS - 1)) {
        const struct cache_e *e = &sc->ce[sc->cslot[h] - 1];
        if (e->klen == n && memcmp(sc->ckeys + e->koff, w, n) == 0) {
            for (uint32_t i = 0; i < e->in; i++)
                if (ids_push(out, sc->cids.v[e->ioff + i])) return 1;
            return 0;
        }
    }
    size_t start = out->n;
    if (word_encode(b, w, n, byte_level, sc, out)) return 1;
    if (sc->cn >= CACHE_SLOTS / 2) return 0; /* full: the cache only saves time */
    if (sc->ckn + n > sc->ckcap) {
        size_t cap = sc->ckcap ? 2 * sc->ckcap : 1 << 16;
        while (cap < sc->ckn + n) cap *= 2;
        char *g = realloc(sc->ckeys, cap);
        if (!g) return 1;
        sc->ckeys = g;
        sc->ckcap = cap;
    }
    struct cache_e e = {(uint32_t)sc->ckn, (uint32_t)n, (uint32_t)sc->cids.n, (uint32_t)(out->n - start)};
    memcpy(sc->ckeys + sc->ckn, w, n);
    sc->ckn += n;
    for (size_t i = start; i < out->n; i++)
        if (ids_push(&sc->cids, out->v[i])) return 1;
    sc->ce[sc->cn++] = e;
    sc->cslot[h] = (uint32_t)sc->cn;
    return 0;
}
