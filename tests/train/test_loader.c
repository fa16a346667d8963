/* The loader: rows are whole windows of one shard (aligned, never past its end), targets are
 * the inputs shifted by one, each epoch reads every window exactly once shuffled across shards,
 * and the tokens of (step, micro-batch) depend only on (seed, step, g): the same from fresh
 * instances, in any reading order, whichever "rank" reads them. Version-7 shards read their
 * uint32 ids whole; shards of two versions are not mixed. Which shards a value names: a file,
 * a directory (today's and llm.c's names), a glob; the refusals of each. */
#include "loader.h"
#include "shard.h"
#include "tu.h"

static char dir[256], err[1024];

/* Token i of shard k is unique across all shards, so a row tells where it came from. */
#define BASE(k) ((k) * 20000)
static const int64_t shard_tokens[] = {1000, 57, 4001, 12};

static void make_shards(const char *prefix, int n) {
    for (int k = 0; k < n; k++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s_%03d.bin", dir, prefix, k);
        uint32_t *tok = malloc((size_t)shard_tokens[k] * sizeof *tok);
        for (int64_t i = 0; i < shard_tokens[k]; i++) tok[i] = (uint32_t)(BASE(k) + i);
        CHECK(shard_write(p, WP_SHARD_VERSION, tok, shard_tokens[k], err, sizeof err) == 0, "%s", err);
        free(tok);
    }
}

/* Checks one row; returns its global window id (shards in order, windows of stride s). */
static int64_t check_row(const int32_t *in, const int32_t *tgt, int s, int n_shards) {
    int k = in[0] / 20000;
    int64_t start = in[0] % 20000, first = 0;
    EXPECT(k < n_shards, "token %d from no shard", in[0]);
    EXPECT(start % s == 0, "row starts at %lld, not a multiple of s = %d", (long long)start, s);
    EXPECT(start + s + 1 <= shard_tokens[k], "row [%lld, %lld] runs past shard %d's end (%lld tokens)", (long long)start,
           (long long)(start + s), k, (long long)shard_tokens[k]);
    for (int t = 0; t < s; t++) {
        EXPECT(in[t] == BASE(k) + start + t, "inputs not consecutive at %d", t);
        EXPECT(tgt[t] == in[t] + 1, "target %d is not the next token (%d vs %d)", t, tgt[t], in[t]);
    }
    for (int j = 0; j < k; j++) first += shard_tokens[j] >= s + 1 ? (shard_tokens[j] - 1) / s : 0;
    return first + start / s;
}

static wp_loader *open_loader(const char *path, wp_split split, int b, int s, int M, uint64_t seed) {
    wp_loader_cfg c = {.b = b, .s = s, .vocab = 65536, .micro_batches = M, .seed = seed};
    wp_loader *l = NULL;
    int rc = loader_open(&l, path, split, &c, err, sizeof err);
    EXPECT(rc == 0, "loader_open %s: %s", path, err);
    return l;
}

static void test_rows_and_epochs(int s, int b, int M) {
    wp_loader *l = open_loader(dir, WP_SPLIT_TRAIN, b, s, M, 1234);
    if (!l) return;
    int64_t W = loader_windows(l);
    int64_t want = 0;
    for (int k = 0; k < 4; k++) want += shard_tokens[k] >= s + 1 ? (shard_tokens[k] - 1) / s : 0;
    EXPECT(W == want, "s=%d: %lld windows, want %lld", s, (long long)W, (long long)want);
    /* two epochs' worth of rows: every window exactly once per epoch */
    int64_t steps = (2 * W + (int64_t)M * b - 1) / ((int64_t)M * b);
    int *seen = calloc((size_t)W, sizeof *seen);
    int32_t *in = malloc((size_t)b * s * 4), *tgt = malloc((size_t)b * s * 4);
    int64_t q = 0, shards_in_first_rows = 0;
    int first_shard = -1;
    for (int64_t k = 0; k < steps; k++)
        for (int g = 0; g < M; g++) {
            EXPECT(loader_get(l, k, g, in, tgt) == 0, "loader_get: %s", loader_error(l));
            for (int r = 0; r < b; r++, q++) {
                int64_t w = check_row(in + (size_t)r * s, tgt + (size_t)r * s, s, 4);
                EXPECT(w == loader_window_of(l, q), "row %lld: window %lld, loader_window_of says %lld", (long long)q,
                       (long long)w, (long long)loader_window_of(l, q));
                if (q < 2 * W) seen[w]++;
                if (q < 8 && in[(size_t)r * s] / 20000 != first_shard) shards_in_first_rows++, first_shard = in[(size_t)r * s] / 20000;
            }
        }
    int bad = 0;
    for (int64_t w = 0; w < W; w++) bad += seen[w] != 2;
    EXPECT(bad == 0, "s=%d: %d windows not read exactly once per epoch over two epochs", s, bad);
    EXPECT(shards_in_first_rows > 1, "s=%d: the first rows all come from one shard (not shuffled across shards)", s);
    /* epochs are different shuffles: two random permutations agree in about one place */
    int same = 0;
    for (int64_t i = 0; i < W; i++) same += loader_window_of(l, i) == loader_window_of(l, W + i);
    EXPECT(W < 50 || same < 10, "s=%d: epoch 2 repeats epoch 1's order (%d of %lld equal)", s, same, (long long)W);
    free(seen), free(in), free(tgt);
    loader_close(l);
}

/* Same (seed, step, g) -> same tokens from fresh instances, in any order, read by any rank;
 * a different seed gives a different order. */
static void test_determinism(void) {
    const int s = 16, b = 3, M = 5, N = 3, steps = 7;
    size_t row = (size_t)b * s;
    int32_t *ref = malloc((size_t)steps * M * row * 4 * 2), *buf = malloc(row * 4 * 2);
    wp_loader *a = open_loader(dir, WP_SPLIT_TRAIN, b, s, M, 77);
    for (int k = 0; k < steps; k++)
        for (int g = 0; g < M; g++) {
            int32_t *p = ref + ((size_t)k * M + g) * row * 2;
            loader_get(a, k, g, p, p + row);
        }
    loader_close(a);
    /* N "ranks", each its own instance, each reading the micro-batches it is dealt, backwards */
    int differ = 0;
    for (int r = 0; r < N; r++) {
        wp_loader *l = open_loader(dir, WP_SPLIT_TRAIN, b, s, M, 77);
        for (int k = steps - 1; k >= 0; k--)
            for (int g = M - 1; g >= 0; g--) {
                if ((g + k) % N != r) continue;
                loader_get(l, k, g, buf, buf + row);
                differ += memcmp(buf, ref + ((size_t)k * M + g) * row * 2, row * 8) != 0;
            }
        loader_close(l);
    }
    EXPECT(differ == 0, "%d micro-batches differ between readers", differ);
    wp_loader *other = open_loader(dir, WP_SPLIT_TRAIN, b, s, M, 78);
    int same = 0;
    for (int g = 0; g < M; g++) {
        loader_get(other, 0, g, buf, buf + row);
        same += memcmp(buf, ref + (size_t)g * row * 2, row * 4) == 0;
    }
    EXPECT(same < M, "seed 78 reads the same first step as seed 77");
    EXPECT(loader_get(other, 0, M, buf, buf + row) == 2 && strstr(loader_error(other), "micro-batch"), "g = M accepted");
    EXPECT(loader_get(other, -1, 0, buf, buf + row) == 2, "step -1 accepted");
    loader_close(other);
    free(ref), free(buf);
}

static void test_sequential_and_splits(void) {
    const int s = 10;
    char p[512];
    snprintf(p, sizeof p, "%s/train_000.bin", dir);
    wp_loader *l = open_loader(p, WP_SPLIT_VAL, 1, s, 1, 0); /* a file serves any split */
    int32_t in[10], tgt[10];
    for (int64_t i = 0; l && i < loader_windows(l); i++) {
        EXPECT(loader_sequential(l, i, in, tgt) == 0, "sequence %lld: %s", (long long)i, loader_error(l));
        EXPECT(in[0] == BASE(0) + i * s && tgt[s - 1] == BASE(0) + (i + 1) * s, "sequence %lld is not tokens [i*s, (i+1)*s]",
               (long long)i);
    }
    EXPECT(l && loader_windows(l) == (1000 - 1) / s, "windows of one shard");
    EXPECT(l && loader_sequential(l, loader_windows(l), in, tgt) == 2 && strstr(loader_error(l), "past the end"),
           "reading past the last sequence must fail");
    loader_close(l);
    l = open_loader(dir, WP_SPLIT_VAL, 1, s, 1, 0); /* the directory's val_*.bin only */
    EXPECT(l && loader_shards(l) == 2 && loader_sequential(l, 0, in, tgt) == 0 && in[0] == BASE(0), "val split");
    loader_close(l);
    /* refusals */
    wp_loader_cfg c = {.b = 1, .s = 2000, .vocab = 65536, .micro_batches = 1, .seed = 0};
    int rc = loader_open(&l, dir, WP_SPLIT_VAL, &c, err, sizeof err); /* val: 1000 + 57 tokens */
    EXPECT_REFUSED(rc, err, "not one sequence");
    c.s = 8;
    c.vocab = 300;
    rc = loader_open(&l, dir, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "train_000.bin", "vocabulary size 300");
    char empty[512];
    snprintf(empty, sizeof empty, "%s/emptydir", dir);
    fs_mkdirs(empty, err, sizeof err);
    c.vocab = 65536;
    rc = loader_open(&l, empty, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "emptydir", "*train*.bin");
    rc = loader_open(&l, "/nonexistent/data", WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--data", "/nonexistent/data");
}

/* A small text file, or a shard of n tokens first, first+1, ... in a version. */
static void put_file(const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "%s: %s", p, strerror(errno));
}
static void put_shard(const char *rel, int version, uint32_t first, int64_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int64_t i = 0; i < n; i++) tok[i] = first + (uint32_t)i;
    CHECK(shard_write(p, version, tok, n, err, sizeof err) == 0, "%s", err);
    free(tok);
}

/* Version 7: ids above 65535 arrive whole, in windows as for version 1. */
static void test_v7_rows(void) {
    const int s = 16;
    char p[512];
    snprintf(p, sizeof p, "%s/wide", dir);
    fs_mkdirs(p, err, sizeof err);
    put_shard("wide/llama3_train_000000.bin", WP_SHARD_VERSION_U32, 120000, 500);
    wp_loader_cfg c = {.b = 2, .s = s, .vocab = 128256, .micro_batches = 1, .seed = 5};
    wp_loader *l = NULL;
    int rc = loader_open(&l, p, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT(rc == 0 && loader_windows(l) == (500 - 1) / s && loader_shard_version(l) == 7, "v7 loader: %s", err);
    int32_t in[32], tgt[32];
    for (int64_t i = 0; rc == 0 && i < loader_windows(l); i++) {
        loader_sequential(l, i, in, tgt);
        EXPECT(in[0] == 120000 + i * s && tgt[s - 1] == 120000 + (i + 1) * s, "v7 sequence %lld: %d .. %d", (long long)i, in[0],
               tgt[s - 1]);
    }
    if (rc == 0) {
        EXPECT(loader_get(l, 3, 0, in, tgt) == 0, "%s", loader_error(l));
        for (int t = 0; t < 2 * s; t++) EXPECT(in[t] >= 120000 && tgt[t] == in[t] + 1, "v7 row token %d: %d -> %d", t, in[t], tgt[t]);
    }
    loader_close(l);
    c.vocab = 120400;
    rc = loader_open(&l, p, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "llama3_train_000000.bin", "token 120400 at position 400");
    /* one dataset, one format: a version-1 shard beside version-7 ones is refused */
    put_shard("wide/llama3_train_000001.bin", WP_SHARD_VERSION, 0, 100);
    c.vocab = 128256;
    rc = loader_open(&l, p, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "llama3_train_000001.bin", "version is 1", "llama3_train_000000.bin", "share one format");
}

static void expect_list(const char *spec, wp_split split, const char *const *want, int n) {
    wp_shard_list sl;
    int rc = shard_list_resolve(&sl, spec, split, "--data", false, err, sizeof err);
    EXPECT(rc == 0 && sl.n == n, "%s (%s): %d shards, want %d: %s", spec, split == WP_SPLIT_TRAIN ? "train" : "val", rc ? -1 : sl.n,
           n, err);
    for (int i = 0; rc == 0 && i < n && i < sl.n; i++) {
        const char *base = strrchr(sl.paths[i], '/');
        EXPECT(strcmp(base ? base + 1 : sl.paths[i], want[i]) == 0, "%s: shard %d is %s, want %s", spec, i, sl.paths[i], want[i]);
    }
    if (rc == 0) shard_list_free(&sl);
}

/* Directories with llm.c's names and ours, globs, files; the refusals. */
static void test_resolution(void) {
    char d[512], pat[600];
    snprintf(d, sizeof d, "%s/llmc", dir);
    fs_mkdirs(d, err, sizeof err);
    fs_mkdirs(strcat(strcpy(pat, d), "/sub_train.bin"), err, sizeof err); /* a directory: never a shard */
    put_shard("llmc/fineweb_train_000002.bin", 1, 0, 50);
    put_shard("llmc/fineweb_train_000001.bin", 1, 0, 50);
    put_shard("llmc/fineweb_val_000000.bin", 1, 0, 50);
    put_shard("llmc/tiny_shakespeare_val.bin", 1, 0, 50);
    put_shard("llmc/train_000.bin", 1, 0, 50);
    put_file("llmc/README.md", "not a shard\n");
    put_file("llmc/.hidden_train.bin", "a hidden file\n");
    put_file("llmc/train_001.bin.tmp", "a temp file\n");
    const char *train[] = {"fineweb_train_000001.bin", "fineweb_train_000002.bin", "train_000.bin"};
    const char *val[] = {"fineweb_val_000000.bin", "tiny_shakespeare_val.bin"};
    expect_list(d, WP_SPLIT_TRAIN, train, 3);
    expect_list(d, WP_SPLIT_VAL, val, 2);
    snprintf(pat, sizeof pat, "%s/fineweb_train_*.bin", d);
    expect_list(pat, WP_SPLIT_TRAIN, train, 2);
    expect_list(pat, WP_SPLIT_VAL, train, 2); /* a pattern names its files, whichever the split */
    snprintf(pat, sizeof pat, "%s/tiny_shakespeare_val.bin", d);
    expect_list(pat, WP_SPLIT_TRAIN, val + 1, 1); /* so does a file */
    snprintf(pat, sizeof pat, "%s/*_val*.bin", d);
    expect_list(pat, WP_SPLIT_TRAIN, val, 2);
    /* overlap: the same file reached through a file and a pattern */
    wp_shard_list a, b;
    int first, common;
    snprintf(pat, sizeof pat, "%s/fineweb_train_000002.bin", d);
    CHECK(shard_list_resolve(&a, pat, WP_SPLIT_VAL, "--val-data", false, err, sizeof err) == 0, "%s", err);
    CHECK(shard_list_resolve(&b, d, WP_SPLIT_TRAIN, "--data", false, err, sizeof err) == 0, "%s", err);
    EXPECT(shard_list_overlap(&a, &b, &first, &common) && first == 0 && common == 1, "overlap of a training shard not found");
    shard_list_free(&a);
    CHECK(shard_list_resolve(&a, d, WP_SPLIT_VAL, "--val-data", false, err, sizeof err) == 0, "%s", err);
    EXPECT(!shard_list_overlap(&a, &b, &first, &common) && first == -1 && common == 0, "train and val of a directory overlap");
    shard_list_free(&a), shard_list_free(&b);

    /* refusals: each names the flag and what is wrong */
    wp_shard_list sl;
    snprintf(pat, sizeof pat, "%s/nothing_*.bin", d);
    int rc = shard_list_resolve(&sl, pat, WP_SPLIT_TRAIN, "--val-data", false, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--val-data", "nothing_*.bin", "matches no file");
    char empty[512];
    snprintf(empty, sizeof empty, "%s/noshards", dir);
    fs_mkdirs(empty, err, sizeof err);
    put_file("noshards/notes.txt", "x\n");
    rc = shard_list_resolve(&sl, empty, WP_SPLIT_VAL, "--val-data", false, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--val-data", "noshards", "no *val*.bin shard");
    rc = shard_list_resolve(&sl, empty, WP_SPLIT_VAL, "--data", true, err, sizeof err);
    EXPECT(rc == 0 && sl.n == 0, "none_ok: %d shards, rc %d: %s", sl.n, rc, err);
    put_shard("llmc/train_val.bin", 1, 0, 50);
    rc = shard_list_resolve(&sl, d, WP_SPLIT_TRAIN, "--data", false, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--data", "train_val.bin", "both");
    rc = shard_list_resolve(&sl, "/nonexistent/data.bin", WP_SPLIT_TRAIN, "--data", false, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--data", "/nonexistent/data.bin", "does not exist");
    /* a pattern that matches a directory: the directory is named when it is opened */
    snprintf(pat, sizeof pat, "%s/sub_*.bin", d);
    wp_loader_cfg c = {.b = 1, .s = 8, .vocab = 256, .micro_batches = 1, .seed = 0};
    wp_loader *l;
    rc = loader_open(&l, pat, WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "sub_train.bin", "not a regular file");
}

int main(void) {
    tu_scratch(dir, sizeof dir, "loader");
    make_shards("train", 4);
    make_shards("val", 2);
    test_rows_and_epochs(16, 4, 3);
    test_rows_and_epochs(7, 1, 1);
    test_rows_and_epochs(999, 2, 2); /* only the big shard and one window of the first hold one */
    test_determinism();
    test_sequential_and_splits();
    test_v7_rows();
    test_resolution();
    tu_cleanup(dir);
    return check_result("train/loader");
}
