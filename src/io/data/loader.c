/* Deterministic loader: which shards a value names, windows over shards, a keyed Feistel
 * permutation per epoch. */
#include "loader.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mask.h"
#include "shard.h"

struct wp_loader {
    wp_loader_cfg cfg;
    int n_shards;
    wp_shard *shards;
    wp_mask *masks; /* [n_shards] when the shards have target masks (all of them or none) */
    int64_t *first_window; /* [n_shards + 1]: prefix sums of windows per shard */
    int64_t n_tokens;
    char error[512];
};

static int64_t shard_windows(int64_t n_tokens, int s) { return n_tokens >= (int64_t)s + 1 ? (n_tokens - 1) / s : 0; }

/* ---- which shards a value names ---- */

static const char *split_pattern(wp_split split) { return split == WP_SPLIT_TRAIN ? "*train*.bin" : "*val*.bin"; }

static wp_result list_add(wp_shard_list *l, int *cap, const char *path, char *err, size_t errlen) {
    if (l->n == *cap) {
        int grown = *cap ? 2 * *cap : 16;
        char **p = realloc(l->paths, (size_t)grown * sizeof *p);
        if (!p) return wp_fail(WP_FAILED, err, errlen, "loader: out of memory listing shards");
        l->paths = p;
        *cap = grown;
    }
    if (!(l->paths[l->n] = strdup(path))) return wp_fail(WP_FAILED, err, errlen, "loader: out of memory listing shards");
    l->n++;
    return 0;
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A directory's plain files matching the split's pattern (a leading dot is never matched, as
 * in glob), sorted by name. Not through glob(3): the directory's own name may hold * or [. */
static wp_result list_dir(wp_shard_list *l, const char *dir, wp_split split, const char *flag, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: %s: cannot list", flag, dir);
    int cap = 0, rc = 0;
    const char *want = split_pattern(split), *other = split_pattern(split == WP_SPLIT_TRAIN ? WP_SPLIT_VAL : WP_SPLIT_TRAIN);
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (fnmatch(want, e->d_name, FNM_PERIOD) != 0) continue;
        char path[WP_PATH_MAX];
        rc = fs_join(path, sizeof path, dir, e->d_name, err, errlen);
        if (rc || !is_regular(path)) continue;
        if (fnmatch(other, e->d_name, FNM_PERIOD) == 0)
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s matches both *train*.bin and *val*.bin: rename it, or name the shards with "
                         "--data and --val-data (a file or a glob each)", flag, path);
        else
            rc = list_add(l, &cap, path, err, errlen);
    }
    closedir(d);
    if (rc == 0 && l->n > 1) qsort(l->paths, (size_t)l->n, sizeof *l->paths, cmp_path);
    return rc;
}

static wp_result list_glob(wp_shard_list *l, const char *pattern, const char *flag, char *err, size_t errlen) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc = glob(pattern, 0, NULL, &g), cap = 0; /* glob sorts the names */
    if (rc == GLOB_NOMATCH) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: pattern '%s' matches no file", flag, pattern);
    else if (rc != 0) rc = wp_fail(WP_FAILED, err, errlen, "%s: cannot expand the pattern '%s'", flag, pattern);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) rc = list_add(l, &cap, g.gl_pathv[i], err, errlen);
    globfree(&g);
    return rc;
}

wp_result shard_list_resolve(wp_shard_list *l, const char *spec, wp_split split, const char *flag, bool none_ok, char *err,
                       size_t errlen) {
    memset(l, 0, sizeof *l);
    int cap = 0, rc;
    if (!spec || !spec[0]) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: no path given", flag);
    if (fs_is_dir(spec)) {
        rc = list_dir(l, spec, split, flag, err, errlen);
        if (rc == 0 && l->n == 0 && !none_ok)
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s has no %s shard", flag, spec, split_pattern(split));
    } else if (fs_exists(spec)) {
        rc = list_add(l, &cap, spec, err, errlen);
    } else if (strpbrk(spec, "*?[")) {
        rc = list_glob(l, spec, flag, err, errlen);
    } else {
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s does not exist", flag, spec);
    }
    if (rc) shard_list_free(l);
    return rc;
}

void shard_list_free(wp_shard_list *l) {
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    l->paths = NULL;
    l->n = 0;
}

bool shard_list_overlap(const wp_shard_list *a, const wp_shard_list *b, int *first, int *common) {
    *first = -1;
    *common = 0;
    for (int i = 0; i < a->n; i++) {
        struct stat sa;
        if (stat(a->paths[i], &sa) != 0) continue;
        for (int j = 0; j < b->n; j++) {
            struct stat sb;
            if (stat(b->paths[j], &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino) {
                if (*first < 0) *first = i;
                (*common)++;
                break;
            }
        }
    }
    return *common > 0;
}

/* ---- the loader ---- */

static wp_result check_cfg(const wp_loader_cfg *c, char *err, size_t errlen) {
    if (c->b < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "loader: micro-batch size %d must be at least 1", c->b);
    if (c->s < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "loader: sequence length %d must be at least 1", c->s);
    if (c->vocab < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "loader: vocabulary size %d must be at least 1", c->vocab);
    if (c->micro_batches < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "loader: micro-batches per step %d must be at least 1", c->micro_batches);
    return 0;
}

/* Shard i's mask beside it: every shard of a list has one (prepare --chat) or none. */
static wp_result open_mask(wp_loader *l, int i, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    WP_TRY(mask_path_of(l->shards[i].path, path, sizeof path, err, errlen));
    bool has = fs_exists(path);
    if (i == 0 && has && !(l->masks = calloc((size_t)l->n_shards, sizeof *l->masks)))
        return wp_fail(WP_FAILED, err, errlen, "loader: out of memory for %d masks", l->n_shards);
    if (has != (l->masks != NULL))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s a target mask %s, but %s %s: the shards of one dataset all have one or none",
                       l->shards[i].path, has ? "has" : "lacks", path, l->shards[0].path, has ? "lacks one" : "has one");
    return has ? mask_open(&l->masks[i], path, l->shards[i].n_tokens, err, errlen) : 0;
}

static wp_result open_shards(wp_loader *l, const wp_shard_list *sl, const char *flag, char *err, size_t errlen) {
    if (sl->n < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: no shard given", flag);
    l->n_shards = sl->n;
    l->shards = calloc((size_t)l->n_shards, sizeof *l->shards);
    l->first_window = calloc((size_t)l->n_shards + 1, sizeof *l->first_window);
    if (!l->shards || !l->first_window) return wp_fail(WP_FAILED, err, errlen, "loader: out of memory for %d shards", l->n_shards);
    for (int i = 0; i < l->n_shards; i++) {
        WP_TRY(shard_open(&l->shards[i], sl->paths[i], l->cfg.vocab, err, errlen));
        const wp_shard *a = &l->shards[0], *b = &l->shards[i];
        if (b->version != a->version)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header version is %d (%s tokens), but %s is version %d (%s tokens): the shards of one dataset "
                           "share one format",
                           b->path, b->version, shard_token_type(b->version), a->path, a->version, shard_token_type(a->version));
        WP_TRY(open_mask(l, i, err, errlen));
        l->n_tokens += l->shards[i].n_tokens;
        l->first_window[i + 1] = l->first_window[i] + shard_windows(l->shards[i].n_tokens, l->cfg.s);
    }
    if (l->first_window[l->n_shards] == 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s%s holds %lld tokens, not one sequence of %d+1", flag, sl->paths[0],
                       l->n_shards > 1 ? " (and the other shards)" : "", (long long)l->n_tokens, l->cfg.s);
    return 0;
}

wp_result loader_open_list(wp_loader **out, const wp_shard_list *list, const char *flag, const wp_loader_cfg *cfg, char *err,
                     size_t errlen) {
    *out = NULL;
    WP_TRY(check_cfg(cfg, err, errlen));
    wp_loader *l = calloc(1, sizeof *l);
    if (!l) return wp_fail(WP_FAILED, err, errlen, "loader: out of memory");
    l->cfg = *cfg;
    wp_result rc = open_shards(l, list, flag, err, errlen);
    if (rc) {
        loader_close(l);
        return rc;
    }
    *out = l;
    return 0;
}

wp_result loader_open(wp_loader **out, const char *path, wp_split split, const wp_loader_cfg *cfg, char *err, size_t errlen) {
    *out = NULL;
    WP_TRY(check_cfg(cfg, err, errlen));
    wp_shard_list sl;
    WP_TRY(shard_list_resolve(&sl, path, split, "--data", false, err, errlen));
    wp_result rc = loader_open_list(out, &sl, "--data", cfg, err, errlen);
    shard_list_free(&sl);
    return rc;
}

void loader_close(wp_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->n_shards && l->shards; i++) shard_close(&l->shards[i]);
    for (int i = 0; i < l->n_shards && l->masks; i++) mask_close(&l->masks[i]);
    free(l->shards);
    free(l->masks);
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

/* The shard with first_window[i] <= w < first_window[i+1]. */
static int shard_of(const wp_loader *l, int64_t w) {
    int lo = 0, hi = l->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->first_window[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* The targets of window w: tokens 1..s of the window whose mask byte is 1 (all without masks). */
static int64_t window_targets(const wp_loader *l, int64_t w) {
    if (!l->masks) return l->cfg.s;
    int i = shard_of(l, w);
    const uint8_t *m = l->masks[i].bits + (w - l->first_window[i]) * (int64_t)l->cfg.s + 1;
    int64_t n = 0;
    for (int t = 0; t < l->cfg.s; t++) n += m[t];
    return n;
}

/* Copies window w (global index) as one row of inputs and targets; a target whose mask byte
 * is 0 becomes -1, a position without a loss (the kernels' convention). */
static void read_window(const wp_loader *l, int64_t w, int32_t *inputs, int32_t *targets) {
    const int lo = shard_of(l, w);
    const int s = l->cfg.s;
    const wp_shard *sh = &l->shards[lo];
    const int64_t first = (w - l->first_window[lo]) * (int64_t)s;
    /* every token was checked below the vocabulary (at most 2^31-1): it fits int32 */
    if (sh->token_bytes == 2) {
        const uint16_t *tok = (const uint16_t *)sh->tokens + first;
        for (int t = 0; t < s; t++) {
            inputs[t] = tok[t];
            targets[t] = tok[t + 1];
        }
    } else {
        const uint32_t *tok = (const uint32_t *)sh->tokens + first;
        for (int t = 0; t < s; t++) {
            inputs[t] = (int32_t)tok[t];
            targets[t] = (int32_t)tok[t + 1];
        }
    }
    if (l->masks) {
        const uint8_t *m = l->masks[lo].bits + first + 1;
        for (int t = 0; t < s; t++)
            if (!m[t]) targets[t] = -1;
    }
}

bool loader_masked(const wp_loader *l) { return l->masks != NULL; }

int64_t loader_step_targets(const wp_loader *l, int64_t step) {
    int64_t n = 0, rows = (int64_t)l->cfg.micro_batches * l->cfg.b;
    for (int64_t r = 0; r < rows; r++) n += window_targets(l, loader_window_of(l, step * rows + r));
    return n;
}

wp_result loader_get(wp_loader *l, int64_t step, int global_mb, int32_t *inputs, int32_t *targets) {
    if (step < 0 || global_mb < 0 || global_mb >= l->cfg.micro_batches)
        return wp_fail(WP_BAD_INPUT, l->error, sizeof l->error, "loader_get: step %lld, micro-batch %d out of range (M = %d)",
                       (long long)step, global_mb, l->cfg.micro_batches);
    const int b = l->cfg.b, s = l->cfg.s;
    for (int r = 0; r < b; r++) {
        int64_t q = (step * l->cfg.micro_batches + global_mb) * (int64_t)b + r;
        read_window(l, loader_window_of(l, q), inputs + (size_t)r * s, targets + (size_t)r * s);
    }
    return 0;
}

wp_result loader_sequential(wp_loader *l, int64_t i, int32_t *inputs, int32_t *targets) {
    if (i < 0 || i >= loader_windows(l))
        return wp_fail(WP_BAD_INPUT, l->error, sizeof l->error, "%s: sequence %lld is past the end (%lld sequences of %d tokens)",
                       l->shards[0].path, (long long)i, (long long)loader_windows(l), l->cfg.s);
    read_window(l, i, inputs, targets);
    return 0;
}

int64_t loader_windows(const wp_loader *l) { return l->first_window[l->n_shards]; }
int64_t loader_tokens(const wp_loader *l) { return l->n_tokens; }
int loader_shards(const wp_loader *l) { return l->n_shards; }
const char *loader_shard_path(const wp_loader *l, int i) { return l->shards[i].path; }
int loader_shard_version(const wp_loader *l) { return l->shards[0].version; }
const char *loader_error(const wp_loader *l) { return l->error; }
