/* Replays (replay.h): the dispatcher's record of a span's calls with its key, and the per-key
 * decisions of kern_replay_run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "replay_impl.h"

/* ---- a map over a row's parameter or argument list: RP_MAP(m, sep, (a, b, c)) is
 * m(a) sep() m(b) sep() m(c); up to 20 elements (the longest row has 17) ---- */
#define RP_N(...) RP_N_(__VA_ARGS__, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
#define RP_N_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, n, ...) n
#define RP_CAT(a, b) RP_CAT_(a, b)
#define RP_CAT_(a, b) a##b
#define RP_UNPAREN(...) __VA_ARGS__
#define RP_MAP(m, sep, list) RP_MAP_I(m, sep, RP_UNPAREN list)
#define RP_MAP_I(m, sep, ...) RP_CAT(RP_MAP_, RP_N(__VA_ARGS__))(m, sep, __VA_ARGS__)
#define RP_MAP_1(m, sep, x) m(x)
#define RP_MAP_2(m, sep, x, ...) m(x) sep() RP_MAP_1(m, sep, __VA_ARGS__)
#define RP_MAP_3(m, sep, x, ...) m(x) sep() RP_MAP_2(m, sep, __VA_ARGS__)
#define RP_MAP_4(m, sep, x, ...) m(x) sep() RP_MAP_3(m, sep, __VA_ARGS__)
#define RP_MAP_5(m, sep, x, ...) m(x) sep() RP_MAP_4(m, sep, __VA_ARGS__)
#define RP_MAP_6(m, sep, x, ...) m(x) sep() RP_MAP_5(m, sep, __VA_ARGS__)
#define RP_MAP_7(m, sep, x, ...) m(x) sep() RP_MAP_6(m, sep, __VA_ARGS__)
#define RP_MAP_8(m, sep, x, ...) m(x) sep() RP_MAP_7(m, sep, __VA_ARGS__)
#define RP_MAP_9(m, sep, x, ...) m(x) sep() RP_MAP_8(m, sep, __VA_ARGS__)
#define RP_MAP_10(m, sep, x, ...) m(x) sep() RP_MAP_9(m, sep, __VA_ARGS__)
#define RP_MAP_11(m, sep, x, ...) m(x) sep() RP_MAP_10(m, sep, __VA_ARGS__)
#define RP_MAP_12(m, sep, x, ...) m(x) sep() RP_MAP_11(m, sep, __VA_ARGS__)
#define RP_MAP_13(m, sep, x, ...) m(x) sep() RP_MAP_12(m, sep, __VA_ARGS__)
#define RP_MAP_14(m, sep, x, ...) m(x) sep() RP_MAP_13(m, sep, __VA_ARGS__)
#define RP_MAP_15(m, sep, x, ...) m(x) sep() RP_MAP_14(m, sep, __VA_ARGS__)
#define RP_MAP_16(m, sep, x, ...) m(x) sep() RP_MAP_15(m, sep, __VA_ARGS__)
#define RP_MAP_17(m, sep, x, ...) m(x) sep() RP_MAP_16(m, sep, __VA_ARGS__)
#define RP_MAP_18(m, sep, x, ...) m(x) sep() RP_MAP_17(m, sep, __VA_ARGS__)
#define RP_MAP_19(m, sep, x, ...) m(x) sep() RP_MAP_18(m, sep, __VA_ARGS__)
#define RP_MAP_20(m, sep, x, ...) m(x) sep() RP_MAP_19(m, sep, __VA_ARGS__)
#define RP_NOSEP()
#define RP_COMMA() ,

/* ---- the record: each call's player and its arguments, back to back, padding zeroed, so that
 * equal calls make equal bytes. The key is a hash of those bytes: pointers, sizes and scalars all
 * count (a loss scale that moved is another key); the buffers' contents do not. ---- */

typedef void (*rp_player)(wp_kern *k, const void *args);
typedef struct {
    rp_player play;
    size_t size; /* of the whole entry, header included, a multiple of the alignment */
} rp_head;
struct rp_record {
    unsigned char *buf;
    size_t len, cap;
};
#define RP_ALIGN 16

static size_t rp_round(size_t n) { return (n + RP_ALIGN - 1) & ~(size_t)(RP_ALIGN - 1); }

static void rp_play_all(wp_kern *k, const struct rp_record *r) {
    size_t head = rp_round(sizeof(rp_head));
    for (size_t at = 0; at < r->len;) {
        const rp_head *h = (const rp_head *)(r->buf + at);
        h->play(k, (const unsigned char *)h + head);
        at += h->size;
    }
}

/* Whether two records hold the same calls with the same arguments: the key only finds the entry,
 * this decides (no hash collision can replay other calls). */
static bool same_calls(const struct rp_record *a, const struct rp_record *b) {
    return a && b && a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

/* FNV-1a over the record's 8-byte words (its length is a multiple of RP_ALIGN). */
static uint64_t rec_key(const struct rp_record *r) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < r->len; i += sizeof(uint64_t)) {
        uint64_t w;
        memcpy(&w, r->buf + i, sizeof w);
        h = (h ^ w) * 0x100000001b3ull;
    }
    return h;
}

static void rp_record_free(struct rp_record *r) {
    if (r) free(r->buf);
    free(r);
}

/* The span cannot be replayed from here on: what was recorded runs now, in order, and the rest of
 * the span (this call first) runs as it is made. */
void rp_break(wp_kern *k, const char *why) {
    if (k->rp_mode != RP_RECORD) return;
    k->rp_mode = RP_RUN;
    if (!k->rp_broken) k->rp_broken = why;
    if (k->rp_rec) rp_play_all(k, k->rp_rec);
}

void kern_replay_stale(wp_kern *k) {
    if (k) k->rp_epoch++;
}

/* Room for one call's arguments (args bytes, zeroed) in the record; NULL, with the span broken,
 * when the host has no memory. */
static void *rp_append(wp_kern *k, rp_player play, size_t args) {
    struct rp_record *r = k->rp_rec;
    size_t head = rp_round(sizeof(rp_head)), size = head + rp_round(args);
    if (r->len + size > r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 4096;
        while (cap < r->len + size) cap *= 2;
        unsigned char *b = realloc(r->buf, cap);
        if (!b) {
            rp_break(k, "out of host memory for the record");
            return NULL;
        }
        r->buf = b, r->cap = cap;
    }
    rp_head *h = (rp_head *)(r->buf + r->len);
    memset(h, 0, size); /* padding too: records are compared byte for byte (same_calls) */
    *h = (rp_head){.play = play, .size = size};
    r->len += size;
    return (unsigned char *)h + head;
}

/* ---- one hook per op row: the call kept; when the record broke meanwhile (no memory), made
 * now ---- */

#define RP_FIELD(p) p;
#define RP_STORE(x) rp_a_->x = x;
#define RP_ARG(x) rp_a_->x

#define RP_HOOK(ret, name, params, args, ...)                                                                         \
    struct rp_args_##name {                                                                                           \
        RP_MAP(RP_FIELD, RP_NOSEP, params)                                                                            \
    };                                                                                                                \
    static void rp_play_##name(wp_kern *k, const void *p) {                                                           \
        const struct rp_args_##name *rp_a_ = p;                                                                       \
        (void)k;                                                                                                      \
        k->ops->name(RP_MAP(RP_ARG, RP_COMMA, args));                                                                 \
    }                                                                                                                 \
    void rp_op_##name params {                                                                                        \
        struct rp_args_##name *rp_a_ = rp_append(k, rp_play_##name, sizeof *rp_a_);                                  \
        if (!rp_a_) {                                                                                                 \
            k->ops->name args;                                                                                        \
            return;                                                                                                   \
        }                                                                                                             \
        RP_MAP(RP_STORE, RP_NOSEP, args)                                                                              \
    }
WP_KERN_OPS(RP_HOOK, RP_HOOK)
#undef RP_HOOK

/* kern_zero (src NULL) and kern_copy */
struct rp_args_mem {
    void *dst;
    const void *src;
    size_t bytes;
};
static void rp_play_mem(wp_kern *k, const void *p) {
    const struct rp_args_mem *a = p;
    if (a->src) k->ops->copy(k, a->dst, a->src, a->bytes);
    else k->ops->zero(k, a->dst, a->bytes);
}

void rp_mem(wp_kern *k, void *dst, const void *src, size_t bytes) {
    struct rp_args_mem *a = rp_append(k, rp_play_mem, sizeof *a);
    if (a) *a = (struct rp_args_mem){dst, src, bytes};
    else rp_play_mem(k, &(struct rp_args_mem){dst, src, bytes});
}

/* ---- kern_replay_run ---- */

enum { RP_KEYS = 8 }; /* recordings per span: work that rotates among buffers has a few keys (wzb2 at N = 4: its weights among 3, its input among 2: 6) */
enum { RP_EMPTY = 0, RP_SEEN, RP_RECORDED, RP_BROKEN };

typedef struct {
    int state;
    uint64_t key, epoch, used;
    void *graph;           /* the backend's (graphs) */
    struct rp_record *rec; /* the calls recorded: replayed by a backend without graphs, compared always */
} rp_entry;

struct wp_kern_replay {
    rp_entry e[RP_KEYS];
    uint64_t tick;
};

wp_kern_replay *kern_replay_create(wp_kern *k) {
    wp_kern_replay *r = calloc(1, sizeof *r);
    if (!r) kern_set_error(k, "kern_replay_create: out of host memory");
    return r;
}

static void entry_drop(wp_kern *k, rp_entry *e) {
    if (e->graph) k->ops->graph_free(k, e->graph);
    rp_record_free(e->rec);
    e->graph = NULL, e->rec = NULL;
}

void kern_replay_destroy(wp_kern *k, wp_kern_replay *r) {
    if (!r) return;
    for (int i = 0; i < RP_KEYS; i++) entry_drop(k, &r->e[i]);
    free(r);
}

bool kern_replay_on_device(const wp_kern *k) { return k && k->ops->graph_begin; }

/* The entry of key, or NULL; *slot the one to take for a new key (empty, else least recent). */
static rp_entry *entry_find(wp_kern_replay *r, uint64_t key, rp_entry **slot) {
    *slot = &r->e[0];
    for (int i = 0; i < RP_KEYS; i++) {
        rp_entry *e = &r->e[i];
        if (e->state != RP_EMPTY && e->key == key) return e;
        if ((*slot)->state != RP_EMPTY && (e->state == RP_EMPTY || e->used < (*slot)->used)) *slot = e;
    }
    return NULL;
}

/* The record rec as a device graph: captured while played, instantiated. 0, or -1 with nothing
 * run and the reason in why. An error the context took while captured is the capture's (nothing
 * ran on the device): it becomes the reason and the context is left as it was. */
static int capture(wp_kern *k, const struct rp_record *rec, void **graph, char *why, size_t whylen) {
    const uint64_t epoch = k->rp_epoch;
    *graph = NULL;
    why[0] = '\0';
    if (k->ops->graph_begin(k, why, whylen)) return -1;
    rp_play_all(k, rec);
    char end_why[256] = "";
    int end = k->ops->graph_end(k, graph, end_why, sizeof end_why);
    if (k->error[0]) {
        snprintf(why, whylen, "%s", k->error);
        k->error[0] = '\0';
    } else if (end) {
        snprintf(why, whylen, "%s", end_why);
    } else if (k->rp_epoch != epoch) {
        snprintf(why, whylen, "memory moved while captured");
    }
    if (!why[0]) return 0;
    if (*graph) k->ops->graph_free(k, *graph);
    *graph = NULL;
    return -1;
}

wp_result kern_replay_run(wp_kern *k, wp_kern_replay *r, wp_replay_fn fn, void *arg, wp_replay_how *how,
                          const char **why) {
    const char *unused;
    if (!why) why = &unused;
    *how = WP_REPLAY_EAGER;
    *why = "";
    if (!k || k->error[0] || !r || k->rp_mode != RP_RUN) return fn(arg);
    struct rp_record *rec = calloc(1, sizeof *rec);
    if (!rec) {
        *why = "out of host memory for the record";
        return fn(arg);
    }
    /* fn runs once, its calls kept rather than made; a call that needs the host makes
     * what was kept and runs the rest as it comes (rp_break) */
    k->rp_mode = RP_RECORD;
    k->rp_broken = NULL;
    k->rp_rec = rec;
    wp_result rc = fn(arg);
    const bool broken = k->rp_mode != RP_RECORD;
    k->rp_mode = RP_RUN;
    k->rp_rec = NULL;
    if (broken || rc || k->error[0]) {
        if (!broken) rp_play_all(k, rec); /* no-ops after an error; fn's own result stands */
        *why = broken ? k->rp_broken : "the span failed";
        k->rp_broken = NULL;
        rp_record_free(rec);
        return rc;
    }
    const uint64_t key = rec_key(rec);
    rp_entry *slot, *e = entry_find(r, key, &slot);
    r->tick++;
    if (!e) { /* first sight: made as recorded, so that what it allocates lazily exists before a graph */
        entry_drop(k, slot);
        *slot = (rp_entry){.state = RP_SEEN, .key = key, .used = r->tick};
        rp_play_all(k, rec);
        rp_record_free(rec);
        *why = "first sight";
        return kern_status(k);
    }
    e->used = r->tick;
    if (e->state == RP_RECORDED && e->epoch == k->rp_epoch && same_calls(e->rec, rec)) {
        rp_record_free(rec);
        if (e->graph) k->ops->graph_launch(k, e->graph);
        else rp_play_all(k, e->rec);
        *how = WP_REPLAY_REPLAYED;
        return kern_status(k);
    }
    if (e->state == RP_BROKEN) {
        rp_play_all(k, rec);
        rp_record_free(rec);
        *why = "its capture failed (kern_notes)";
        return kern_status(k);
    }
    entry_drop(k, e); /* seen once, recorded in an older epoch, or other calls under the same key */
    e->epoch = k->rp_epoch;
    if (k->ops->graph_begin) {
        char cwhy[600];
        if (capture(k, rec, &e->graph, cwhy, sizeof cwhy)) {
            kern_note(k, "graphs: a span runs eagerly: %s", cwhy);
            e->state = RP_BROKEN;
            rp_play_all(k, rec);
            rp_record_free(rec);
            *why = "its capture failed (kern_notes)";
            return kern_status(k);
        }
        k->ops->graph_launch(k, e->graph);
    } else {
        rp_play_all(k, rec);
    }
    e->rec = rec;
    e->state = RP_RECORDED;
    *how = WP_REPLAY_RECORDED;
    return kern_status(k);
}
