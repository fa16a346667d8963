/* Token shards and prepare: round trips in both versions, every corruption refused naming its
 * field, llm.c GPT-2 (version 1, vocabulary 50257) and Llama-3 (version 7, vocabulary 128256)
 * shards accepted as llm.c writes them, no partial file ever under a final name, and prepare's
 * split, document boundaries, shard roll-over, stale-shard removal and version choice. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prepare.h"
#include "shard.h"
#include "tu.h"

static char dir[256], err[1024];

static void path_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

/* A shard's bytes as llm.c's write_datafile lays them out (256 int32 of header, zero but for
 * [0] magic, [1] version, [2] count; then the tokens, `width` bytes each, little-endian), with
 * the header fields under our control and the last `cut` bytes left off. */
static void write_raw_w(const char *path, int32_t magic, int32_t version, int32_t count, const uint32_t *tok, size_t n,
                        int width, size_t cut) {
    unsigned char *buf = calloc(1, WP_SHARD_HEADER_BYTES + (size_t)width * n);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < width; b++) buf[WP_SHARD_HEADER_BYTES + (size_t)width * i + (size_t)b] = (unsigned char)(tok[i] >> (8 * b));
    size_t size = WP_SHARD_HEADER_BYTES + (size_t)width * n - cut;
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, size, f) == size && fclose(f) == 0, "%s: %s", path, strerror(errno));
    free(buf);
}

/* version 1 (llm.c "gpt-2": uint16 tokens) */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tok, size_t n,
                      size_t cut) {
    uint32_t *wide = malloc((n ? n : 1) * sizeof *wide);
    for (size_t i = 0; i < n; i++) wide[i] = tok[i];
    write_raw_w(path, magic, version, count, wide, n, 2, cut);
    free(wide);
}

/* version 7 (llm.c "llama-3": uint32 tokens) */
static void write_raw7(const char *path, int32_t magic, int32_t version, int32_t count, const uint32_t *tok, size_t n,
                       size_t cut) {
    write_raw_w(path, magic, version, count, tok, n, 4, cut);
}

static bool same_tokens(const wp_shard *s, const uint32_t *tok, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (shard_token(s, i) != tok[i]) return false;
    return true;
}

static void test_round_trip(int version, uint32_t vocab) {
    const int64_t sizes[] = {0, 1, 7, 1000, 65537};
    const int width = version == WP_SHARD_VERSION ? 2 : 4;
    uint64_t rng = 42;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t n = sizes[i];
        uint32_t *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
        for (int64_t j = 0; j < n; j++) tok[j] = (uint32_t)(tu_next(&rng) % vocab);
        if (n > 2) tok[1] = vocab - 1; /* the largest token */
        char path[512];
        path_of(path, sizeof path, "rt.bin");
        EXPECT(shard_write(path, version, tok, n, err, sizeof err) == 0, "write v%d %lld: %s", version, (long long)n, err);
        wp_shard s;
        int rc = shard_open(&s, path, (int)vocab, err, sizeof err);
        EXPECT(rc == 0, "open v%d %lld tokens: %s", version, (long long)n, err);
        if (rc == 0) {
            EXPECT(s.n_tokens == n && s.version == version && s.token_bytes == width, "v%d: count %lld (want %lld), version %d, width %d",
                   version, (long long)s.n_tokens, (long long)n, s.version, s.token_bytes);
            EXPECT(same_tokens(&s, tok, n), "v%d: tokens differ after a round trip of %lld", version, (long long)n);
            shard_close(&s);
        }
        struct stat st;
        EXPECT(stat(path, &st) == 0 && st.st_size == WP_SHARD_HEADER_BYTES + width * n, "v%d: file size of %lld tokens", version,
               (long long)n);
        char tmp[520];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        EXPECT(!fs_exists(tmp), "temp file left behind");
        free(tok);
    }
}

static void expect_refused(const char *name, int vocab, const char *f1, const char *f2) {
    char path[512];
    path_of(path, sizeof path, name);
    wp_shard s;
    err[0] = '\0';
    int rc = shard_open(&s, path, vocab, err, sizeof err);
    EXPECT_REFUSED(rc, err, path, f1, f2);
}

static void test_corruptions(void) {
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)(i * 3);
    char p[512];
    path_of(p, sizeof p, "magic.bin"), write_raw(p, 20240521, 1, 100, tok, 100, 0);
    expect_refused("magic.bin", 512, "magic", "20240521");
    path_of(p, sizeof p, "version.bin"), write_raw(p, WP_SHARD_MAGIC, 2, 100, tok, 100, 0);
    expect_refused("version.bin", 512, "version", "2");
    path_of(p, sizeof p, "count.bin"), write_raw(p, WP_SHARD_MAGIC, 1, 101, tok, 100, 0);
    expect_refused("count.bin", 512, "token count 101", "truncated");
    path_of(p, sizeof p, "negative.bin"), write_raw(p, WP_SHARD_MAGIC, 1, -5, tok, 100, 0);
    expect_refused("negative.bin", 512, "token count", "negative");
    path_of(p, sizeof p, "trailing.bin"), write_raw(p, WP_SHARD_MAGIC, 1, 99, tok, 100, 0);
    expect_refused("trailing.bin", 512, "token count 99", "trailing");
    path_of(p, sizeof p, "truncated.bin"), write_raw(p, WP_SHARD_MAGIC, 1, 100, tok, 100, 7);
    expect_refused("truncated.bin", 512, "token count 100", "truncated");
    path_of(p, sizeof p, "short.bin"), write_raw(p, WP_SHARD_MAGIC, 1, 0, tok, 0, 1000);
    expect_refused("short.bin", 512, "truncated", "header");
    path_of(p, sizeof p, "vocab.bin"), write_raw(p, WP_SHARD_MAGIC, 1, 100, tok, 100, 0);
    expect_refused("vocab.bin", 297, "token 297 at position 99", "vocabulary size 297");
    expect_refused("missing.bin", 512, "missing.bin", "No such file");
    /* the same file is fine when the vocabulary holds its tokens */
    wp_shard s;
    EXPECT(shard_open(&s, p, 298, err, sizeof err) == 0, "vocab 298: %s", err);
    shard_close(&s);
}

/* Version 7: the same checks on uint32 tokens, and the magic and version must pair up. */
static void test_corruptions_v7(void) {
    uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)(i * 1283);
    char p[512];
    path_of(p, sizeof p, "v7-version.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 1, 100, tok, 100, 0);
    expect_refused("v7-version.bin", 128256, "header version is 1", "expected 7");
    path_of(p, sizeof p, "v1-version7.bin"), write_raw7(p, WP_SHARD_MAGIC, 7, 100, tok, 100, 0);
    expect_refused("v1-version7.bin", 128256, "header version is 7", "expected 1");
    path_of(p, sizeof p, "v7-magic.bin"), write_raw7(p, 20240802, 7, 100, tok, 100, 0);
    expect_refused("v7-magic.bin", 128256, "magic is 20240802", "20240801");
    path_of(p, sizeof p, "v7-truncated.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 7, 100, tok, 100, 2); /* half a token short */
    expect_refused("v7-truncated.bin", 128256, "token count 100", "truncated");
    path_of(p, sizeof p, "v7-as-v1.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 7, 200, tok, 100, 0); /* the size of 200 uint16 */
    expect_refused("v7-as-v1.bin", 128256, "token count 200 needs 1824 bytes (uint32", "truncated");
    path_of(p, sizeof p, "v7-trailing.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 7, 99, tok, 100, 0);
    expect_refused("v7-trailing.bin", 128256, "token count 99", "trailing");
    path_of(p, sizeof p, "v7-vocab.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 7, 100, tok, 100, 0);
    expect_refused("v7-vocab.bin", 127017, "token 127017 at position 99", "vocabulary size 127017");
    wp_shard s;
    EXPECT(shard_open(&s, p, 127018, err, sizeof err) == 0 && shard_token(&s, 99) == 127017, "vocab 127018: %s", err);
    shard_close(&s);
    /* a token past int32 is refused under the largest vocabulary */
    tok[50] = 0xffffffffu;
    path_of(p, sizeof p, "v7-huge.bin"), write_raw7(p, WP_SHARD_MAGIC_U32, 7, 100, tok, 100, 0);
    expect_refused("v7-huge.bin", INT32_MAX, "token 4294967295 at position 50", "vocabulary size 2147483647");
}

/* A GPT-2 shard as llm.c's fineweb.py writes it: every document opened by <|endoftext|>. */
static void test_llmc_gpt2(void) {
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = i % 16 == 0 ? 50256 : (uint16_t)(1000 + 37 * i);
    char p[512];
    path_of(p, sizeof p, "gpt2_val_000000.bin");
    write_raw(p, WP_SHARD_MAGIC, 1, 64, tok, 64, 0);
    wp_shard s;
    EXPECT(shard_open(&s, p, 50257, err, sizeof err) == 0 && s.n_tokens == 64 && shard_token(&s, 16) == 50256 && s.version == 1,
           "GPT-2 shard: %s", err);
    shard_close(&s);
    expect_refused("gpt2_val_000000.bin", 256, "token 50256 at position 0", "vocabulary size 256");
}

/* A Llama-3 shard as llm.c's fineweb.py writes it (model_desc "llama-3": magic 20240801,
 * version 7, uint32 tokens): every document opened by <|begin_of_text|> (128000), ids above
 * 65535 throughout. */
static void test_llmc_llama3(void) {
    uint32_t tok[256];
    uint64_t rng = 3;
    for (int i = 0; i < 256; i++) tok[i] = i % 64 == 0 ? 128000 : (uint32_t)(tu_next(&rng) % 128000);
    tok[7] = 128255;
    char p[512];
    path_of(p, sizeof p, "fineweb_train_000001.bin");
    write_raw7(p, WP_SHARD_MAGIC_U32, WP_SHARD_VERSION_U32, 256, tok, 256, 0);
    wp_shard s;
    EXPECT(shard_open(&s, p, 128256, err, sizeof err) == 0 && s.n_tokens == 256 && s.version == 7 && same_tokens(&s, tok, 256),
           "Llama-3 shard: %s", err);
    shard_close(&s);
    expect_refused("fineweb_train_000001.bin", 65536, "token 128000 at position 0", "vocabulary size 65536");
    /* our writer makes the same bytes */
    char q[512];
    path_of(q, sizeof q, "ours.bin");
    EXPECT(shard_write(q, WP_SHARD_VERSION_U32, tok, 256, err, sizeof err) == 0, "write: %s", err);
    fs_map a, b;
    EXPECT(fs_map_file(p, &a, err, sizeof err) == 0 && fs_map_file(q, &b, err, sizeof err) == 0, "map: %s", err);
    EXPECT(a.size == b.size && memcmp(a.data, b.data, a.size) == 0, "our version-7 shard differs from llm.c's bytes");
    fs_unmap(&a), fs_unmap(&b);
    /* version 1 cannot hold these ids: refused, nothing under the final name */
    path_of(q, sizeof q, "narrow.bin");
    EXPECT_REFUSED(shard_write(q, WP_SHARD_VERSION, tok, 256, err, sizeof err), err, "token 128000", "uint16");
    EXPECT(!fs_exists(q), "a refused version-1 write left %s", q);
    EXPECT(shard_version_for_vocab(65536) == 1 && shard_version_for_vocab(65537) == 7 && shard_version_for_vocab(256) == 1,
           "version for a vocabulary");
}

static void test_writer_abort(void) {
    char p[512], tmp[520];
    path_of(p, sizeof p, "aborted.bin");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    wp_shard_writer w;
    uint32_t tok[10] = {1, 2, 3};
    EXPECT(shard_writer_open(&w, p, WP_SHARD_VERSION, err, sizeof err) == 0, "open: %s", err);
    shard_writer_append(&w, tok, 10, err, sizeof err);
    EXPECT(!fs_exists(p), "a shard is visible under its final name before commit");
    shard_writer_close(&w, err, sizeof err);
    EXPECT(!fs_exists(p), "a closed, uncommitted shard is visible under its final name");
    shard_writer_abort(&w);
    EXPECT(!fs_exists(p) && !fs_exists(tmp), "abort left a file");
}

static void write_text(const char *path, const unsigned char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0, "%s: %s", path, strerror(errno));
}

/* All shards of a prefix concatenated; 0 when the first is missing. */
static size_t read_run(const char *out, const char *prefix, uint16_t *dst, size_t cap, int *shards, int version) {
    size_t n = 0;
    *shards = 0;
    for (int i = 0;; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s_%03d.bin", out, prefix, i);
        wp_shard s;
        if (!fs_exists(p) || shard_open(&s, p, 256, err, sizeof err) != 0) return n;
        (*shards)++;
        EXPECT(s.version == version, "%s: version %d, want %d", p, s.version, version);
        for (int64_t j = 0; j < s.n_tokens && n < cap; j++) dst[n++] = (uint16_t)shard_token(&s, j);
        shard_close(&s);
    }
}

static void test_prepare(int64_t vocab, int version) {
    enum { FILES = 4, CAP = 20000 };
    const size_t sizes[FILES] = {1000, 0, 333, 2501};
    char in[FILES][512], out[512];
    const char *inputs[FILES];
    uint64_t rng = 9;
    unsigned char *text[FILES];
    for (int f = 0; f < FILES; f++) {
        char name[32];
        snprintf(name, sizeof name, "doc%d.txt", f);
        path_of(in[f], sizeof in[f], name);
        text[f] = malloc(sizes[f] + 1);
        for (size_t j = 0; j < sizes[f]; j++) text[f][j] = (unsigned char)(1 + tu_next(&rng) % 255);
        write_text(in[f], text[f], sizes[f]);
        inputs[f] = in[f];
    }
    path_of(out, sizeof out, "prepared");
    /* stale shards of an earlier, larger run must disappear */
    fs_mkdirs(out, err, sizeof err);
    for (int i = 0; i < 40; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/train_%03d.bin", out, i);
        write_text(p, (const unsigned char *)"junk", 4);
    }
    wp_prepare_stats st;
    int rc = prepare_shards(inputs, FILES, out, 0.25, vocab, 128, &st, err, sizeof err);
    EXPECT(rc == 0 && st.version == version, "prepare (vocabulary %lld): version %d, want %d: %s", (long long)vocab, st.version,
           version, err);
    uint16_t *want_train = malloc(CAP * 2), *want_val = malloc(CAP * 2), *got = malloc(CAP * 2);
    size_t nt = 0, nv = 0;
    for (int f = 0; f < FILES; f++) {
        size_t v = (size_t)llround(0.25 * (double)sizes[f]), t = sizes[f] - v;
        if (t) want_train[nt++] = 0;
        for (size_t j = 0; j < t; j++) want_train[nt++] = text[f][j];
        if (v) want_val[nv++] = 0;
        for (size_t j = t; j < sizes[f]; j++) want_val[nv++] = text[f][j];
    }
    int shards;
    size_t n = read_run(out, "train", got, CAP, &shards, version);
    EXPECT(n == nt && memcmp(got, want_train, nt * 2) == 0, "train tokens: %zu, want %zu (heads after token 0)", n, nt);
    EXPECT(shards == (int)((nt + 127) / 128) && st.train_shards == shards, "train shards %d (stats %d), want %zu", shards,
           st.train_shards, (nt + 127) / 128);
    n = read_run(out, "val", got, CAP, &shards, version);
    EXPECT(n == nv && memcmp(got, want_val, nv * 2) == 0, "val tokens: %zu, want %zu", n, nv);
    EXPECT(st.train_tokens == (int64_t)nt && st.val_tokens == (int64_t)nv, "stats %lld/%lld", (long long)st.train_tokens,
           (long long)st.val_tokens);
    char stale[600];
    snprintf(stale, sizeof stale, "%s/train_%03d.bin", out, 39);
    EXPECT(!fs_exists(stale), "a stale shard of an earlier run survived");

    /* a missing input: refused before anything is written, no directory created */
    char out2[512];
    path_of(out2, sizeof out2, "never");
    const char *bad[] = {in[0], "/nonexistent/input.txt"};
    rc = prepare_shards(bad, 2, out2, 0.1, vocab, 128, &st, err, sizeof err);
    EXPECT_REFUSED(rc, err, "/nonexistent/input.txt");
    EXPECT(!fs_exists(out2), "a refused prepare created its output directory");
    rc = prepare_shards(inputs, FILES, out2, 1.0, vocab, 128, &st, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--val-fraction");
    rc = prepare_shards(inputs, FILES, out2, 0.1, 255, 128, &st, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--vocab-size", "255");
    rc = prepare_shards(inputs, FILES, out2, 0.1, (int64_t)INT32_MAX + 1, 128, &st, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--vocab-size", "2147483648");
    EXPECT(!fs_exists(out2), "a refused prepare created its output directory");
    for (int f = 0; f < FILES; f++) free(text[f]);
    free(want_train), free(want_val), free(got);
}

int main(void) {
    tu_scratch(dir, sizeof dir, "shard");
    test_round_trip(WP_SHARD_VERSION, 50257);
    test_round_trip(WP_SHARD_VERSION, 65536);
    test_round_trip(WP_SHARD_VERSION_U32, 128256);
    test_round_trip(WP_SHARD_VERSION_U32, INT32_MAX);
    test_corruptions();
    test_corruptions_v7();
    test_llmc_gpt2();
    test_llmc_llama3();
    test_writer_abort();
    test_prepare(256, WP_SHARD_VERSION);
    test_prepare(65536, WP_SHARD_VERSION);
    test_prepare(128256, WP_SHARD_VERSION_U32);
    tu_cleanup(dir);
    return check_result("train/shard");
}
