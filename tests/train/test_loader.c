/* The loader: rows are whole windows of one shard (aligned, never past its end), targets are
 * the inputs shifted by one, each epoch reads every window exactly once shuffled across shards,
 * and the tokens of (step, micro-batch) depend only on (seed, step, g): the same from fresh
 * instances, in any reading order, whichever "rank" reads them. */
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
        uint16_t *tok = malloc((size_t)shard_tokens[k] * 2);
        for (int64_t i = 0; i < shard_tokens[k]; i++) tok[i] = (uint16_t)(BASE(k) + i);
        CHECK(shard_write(p, tok, shard_tokens[k], err, sizeof err) == 0, "%s", err);
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
    EXPECT_REFUSED(rc, err, "emptydir", "train_*.bin");
    rc = loader_open(&l, "/nonexistent/data", WP_SPLIT_TRAIN, &c, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--data", "/nonexistent/data");
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
    tu_cleanup(dir);
    return check_result("train/loader");
}
