/* Deterministic loader: windows over shards, a keyed Feistel permutation per epoch. */
#include "loader.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard.h"

struct wp_loader {
    wp_loader_cfg cfg;
    int n_shards;
    wp_shard *shards;
    int64_t *first_window; /* [n_shards + 1]: prefix sums of windows per shard */
    int64_t n_tokens;
    char error[512];
};

static int64_t shard_windows(int64_t n_tokens, int s) { return n_tokens >= (int64_t)s + 1 ? (n_tokens - 1) / s : 0; }

/* The shard paths of a split: the file itself, or the directory's <split>_*.bin in name order. */
typedef struct {
    glob_t g;
    const char *single;
} shard_list;

static size_t list_count(const shard_list *sl) { return sl->single ? 1 : sl->g.gl_pathc; }
static const char *list_path(const shard_list *sl, size_t i) { return sl->single ? sl->single : sl->g.gl_pathv[i]; }

static int collect_paths(const char *path, wp_split split, shard_list *sl, char *err, size_t errlen) {
    memset(sl, 0, sizeof *sl);
    if (!fs_exists(path)) return io_fail(err, errlen, 2, "--data: %s does not exist", path);
    if (!fs_is_dir(path)) {
        sl->single = path;
        return 0;
    }
    const char *prefix = split == WP_SPLIT_TRAIN ? "train" : "val";
    char pattern[WP_PATH_MAX];
    if (snprintf(pattern, sizeof pattern, "%s/%s_*.bin", path, prefix) >= (int)sizeof pattern)
        return io_fail(err, errlen, 2, "--data: %s: path too long", path);
    int rc = glob(pattern, 0, NULL, &sl->g); /* glob sorts the names */
    if (rc == GLOB_NOMATCH) return io_fail(err, errlen, 2, "--data: %s has no %s_*.bin shards", path, prefix);
    if (rc != 0) return io_fail(err, errlen, 1, "--data: cannot list %s", pattern);
    return 0;
}

static void list_free(shard_list *sl) {
    if (!sl->single) globfree(&sl->g);
}

static int check_cfg(const wp_loader_cfg *c, char *err, size_t errlen) {
    if (c->b < 1) return io_fail(err, errlen, 2, "loader: micro-batch size %d must be at least 1", c->b);
    if (c->s < 1) return io_fail(err, errlen, 2, "loader: sequence length %d must be at least 1", c->s);
    if (c->vocab < 1 || c->vocab > 65536)
        return io_fail(err, errlen, 2, "loader: vocabulary size %d does not fit uint16 tokens", c->vocab);
    if (c->micro_batches < 1) return io_fail(err, errlen, 2, "loader: micro-batches per step %d must be at least 1", c->micro_batches);
    return 0;
}

static int open_shards(wp_loader *l, const shard_list *sl, char *err, size_t errlen) {
    l->n_shards = (int)list_count(sl);
    l->shards = calloc((size_t)l->n_shards, sizeof *l->shards);
    l->first_window = calloc((size_t)l->n_shards + 1, sizeof *l->first_window);
    if (!l->shards || !l->first_window) return io_fail(err, errlen, 1, "loader: out of memory for %d shards", l->n_shards);
    for (int i = 0; i < l->n_shards; i++) {
        int rc = shard_open(&l->shards[i], list_path(sl, (size_t)i), l->cfg.vocab, err, errlen);
        if (rc) return rc;
        l->n_tokens += l->shards[i].n_tokens;
        l->first_window[i + 1] = l->first_window[i] + shard_windows(l->shards[i].n_tokens, l->cfg.s);
    }
    if (l->first_window[l->n_shards] == 0)
        return io_fail(err, errlen, 2, "--data: %s%s holds %lld tokens, not one sequence of %d+1", list_path(sl, 0),
                       l->n_shards > 1 ? " (and the other shards)" : "", (long long)l->n_tokens, l->cfg.s);
    return 0;
}

int loader_open(wp_loader **out, const char *path, wp_split split, const wp_loader_cfg *cfg, char *err, size_t errlen) {
    *out = NULL;
    int rc = check_cfg(cfg, err, errlen);
    if (rc) return rc;
    shard_list sl;
    rc = collect_paths(path, split, &sl, err, errlen);
    if (rc) {
        list_free(&sl);
        return rc;
    }
    wp_loader *l = calloc(1, sizeof *l);
    if (!l) {
        list_free(&sl);
        return io_fail(err, errlen, 1, "loader: out of memory");
    }
    l->cfg = *cfg;
    rc = open_shards(l, &sl, err, errlen);
    list_free(&sl);
    if (rc) {
        loader_close(l);
        return rc;
    }
    *out = l;
    return 0;
}

void loader_close(wp_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->n_shards && l->shards; i++) shard_close(&l->shards[i]);
    free(l->shards);
    free(l->first_window);
    free(l);
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A bijection of [0, n): a 4-round balanced Feistel network on the smallest even-bit domain
 * holding n (at most 4n values), with cycle walking back into [0, n). Each round key comes
 * from (seed, epoch), so each epoch is a fresh shuffle that needs no table. */
static int64_t permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t i) {
    int half = 1;
    while (((uint64_t)1 << (2 * half)) < (uint64_t)n) half++;
    const uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t keys[4], base = splitmix64(splitmix64(seed) ^ (epoch * 0xd1342543de82ef95ull));
    for (int r = 0; r < 4; r++) keys[r] = splitmix64(base + (uint64_t)r);
    uint64_t x = (uint64_t)i;
    do {
        uint64_t left = x >> half, right = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t next = left ^ (splitmix64(right ^ keys[r]) & mask);
            left = right;
            right = next;
        }
        x = (left << half) | right;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t loader_window_of(const wp_loader *l, int64_t q) {
    int64_t W = l->first_window[l->n_shards];
    return permute(l->cfg.seed, (uint64_t)(q / W), W, q % W);
}

/* Copies window w (global index) as one row of inputs and targets. */
static void read_window(const wp_loader *l, int64_t w, int32_t *inputs, int32_t *targets) {
    int lo = 0, hi = l->n_shards - 1; /* the shard with first_window[i] <= w < first_window[i+1] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->first_window[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    const int s = l->cfg.s;
    const uint16_t *tok = l->shards[lo].tokens + (w - l->first_window[lo]) * (int64_t)s;
    for (int t = 0; t < s; t++) {
        inputs[t] = tok[t];
        targets[t] = tok[t + 1];
    }
}

int loader_get(wp_loader *l, int64_t step, int global_mb, int32_t *inputs, int32_t *targets) {
    if (step < 0 || global_mb < 0 || global_mb >= l->cfg.micro_batches)
        return io_fail(l->error, sizeof l->error, 2, "loader_get: step %lld, micro-batch %d out of range (M = %d)",
                       (long long)step, global_mb, l->cfg.micro_batches);
    const int b = l->cfg.b, s = l->cfg.s;
    for (int r = 0; r < b; r++) {
        int64_t q = (step * l->cfg.micro_batches + global_mb) * (int64_t)b + r;
        read_window(l, loader_window_of(l, q), inputs + (size_t)r * s, targets + (size_t)r * s);
    }
    return 0;
}

int loader_sequential(wp_loader *l, int64_t i, int32_t *inputs, int32_t *targets) {
    if (i < 0 || i >= loader_windows(l))
        return io_fail(l->error, sizeof l->error, 2, "%s: sequence %lld is past the end (%lld sequences of %d tokens)",
                       l->shards[0].path, (long long)i, (long long)loader_windows(l), l->cfg.s);
    read_window(l, i, inputs, targets);
    return 0;
}

int64_t loader_windows(const wp_loader *l) { return l->first_window[l->n_shards]; }
int64_t loader_tokens(const wp_loader *l) { return l->n_tokens; }
int loader_shards(const wp_loader *l) { return l->n_shards; }
const char *loader_shard_path(const wp_loader *l, int i) { return l->shards[i].path; }
const char *loader_error(const wp_loader *l) { return l->error; }
