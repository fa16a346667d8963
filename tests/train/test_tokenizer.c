/* The tokenizers of src/io/tokenizer/tokenizer.h against independent implementations.
 *
 *   test_tokenizer spm SPM_TRAIN SPM_ENCODE SPM_DECODE
 *       the byte tokenizer's round trip; files that are not tokenizers (exit 2 naming them);
 *       a SentencePiece BPE (vocabulary 300) trained here by Debian's spm_train on random text,
 *       whose encode and decode of random text / ids must equal the spm_encode / spm_decode
 *       tools' output byte for byte.
 *   test_tokenizer hf PYTHON HELPER
 *       a byte-level BPE tokenizer.json built by the `tokenizers` library (HELPER, skipping with
 *       77 when the library is absent), decoded here and checked by HELPER against the library's
 *       own decode.
 * Random data from fixed seeds; the temporary directory is removed on every exit path. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include <omp.h>

#include "fsutil.h"
#include "prepare.h"
#include "tokenizer.h"

static char g_dir[] = "/tmp/wp_tok_XXXXXX";
static int g_made;

static void cleanup(void) {
    char err[256];
    if (g_made) fs_remove_tree(g_dir, err, sizeof err);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "%s: %s", path, strerror(errno));
    CHECK(fwrite(data, 1, n, f) == n && fclose(f) == 0, "%s: write failed", path);
}

static char *read_file(const char *path, size_t *n) {
    char *data, err[512];
    int rc = fs_read_small(path, (size_t)1 << 26, &data, n, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    return data;
}

static int run(const char *cmd) {
    int st = system(cmd);
    CHECK(st != -1, "system(%s): %s", cmd, strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Random text: words from a few syllables, some with accents, kana and punctuation, so the
 * model learns merges and meets characters it rarely saw. No newline (spm_encode reads lines). */
static size_t random_text(char *buf, size_t cap, size_t words) {
    static const char *const syl[] = {"ka", "to", "ri", "mu", "sen", "tha", "an", "es", "ol", "qu", "é", "ü",
                                      "の", "日本", ",", ".", "!", "x", "zz", "42", "Ω", "ing", "the", "pre"};
    size_t n = 0;
    for (size_t w = 0; w < words; w++) {
        int k = 1 + (int)(rnd() % 3);
        for (int i = 0; i < k; i++) {
            const char *s = syl[rnd() % (sizeof syl / sizeof *syl)];
            size_t m = strlen(s);
            if (n + m + 2 >= cap) return n;
            memcpy(buf + n, s, m);
            n += m;
        }
        buf[n++] = ' ';
    }
    buf[n] = '\0';
    return n;
}

static void expect_refused(const char *path, const char *why) {
    wp_tokenizer *t = (wp_tokenizer *)1;
    char err[1024] = "";
    int rc = tok_open(path, &t, err, sizeof err);
    EXPECT(rc == 2 && t == NULL, "%s: tok_open returned %d, want 2", why, rc);
    EXPECT(strstr(err, path) != NULL, "%s: the message does not name the file: %s", why, err);
    printf("refused (%s): %s\n", why, err);
}

static void test_bytes(void) {
    wp_tokenizer *t;
    char err[512];
    CHECK(tok_open(NULL, &t, err, sizeof err) == 0, "%s", err);
    EXPECT(tok_vocab_size(t) == 256 && tok_bos(t) == -1 && tok_eos(t) == -1, "bytes: vocab/bos/eos");
    EXPECT(strcmp(tok_kind(t), "bytes") == 0 && tok_path(t) == NULL && tok_file_name(t) == NULL, "bytes: kind/path");
    char text[4096];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (char)(1 + rnd() % 255);
    int32_t *ids;
    size_t n;
    CHECK(tok_encode(t, text, sizeof text, &ids, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == sizeof text, "bytes: %zu ids for %zu bytes", n, sizeof text);
    for (size_t i = 0; i < n; i++) EXPECT(ids[i] == (unsigned char)text[i], "bytes: id %zu", i);
    char *back;
    CHECK(tok_decode(t, ids, n, &back, err, sizeof err) == 0, "%s", err);
    EXPECT(strlen(back) == n && memcmp(back, text, n) == 0, "bytes: decode(encode(x)) != x");
    free(back);
    ids[7] = 256;
    EXPECT(tok_decode(t, ids, n, &back, err, sizeof err) == 2 && back == NULL, "bytes: id 256 accepted");
    EXPECT(strstr(err, "256") && strstr(err, "position 7"), "bytes: message does not name the id: %s", err);
    ids[7] = -1;
    EXPECT(tok_decode(t, ids, n, &back, err, sizeof err) == 2, "bytes: id -1 accepted");
    free(ids);
    tok_close(t);
    CHECK(tok_open("bytes", &t, err, sizeof err) == 0 && strcmp(tok_kind(t), "bytes") == 0, "\"bytes\"");
    tok_close(t);
}

static void test_refusals(void) {
    char p[WP_PATH_MAX];
    path_in(p, sizeof p, "notes.txt");
    const char *text = "hello world, this is a text file and not a tokenizer\n";
    write_file(p, text, strlen(text));
    expect_refused(p, "a text file");
    path_in(p, sizeof p, "empty.model");
    write_file(p, "", 0);
    expect_refused(p, "an empty file");
    path_in(p, sizeof p, "missing.model");
    expect_refused(p, "a missing file");
    path_in(p, sizeof p, "random.model");
    unsigned char junk[2000];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rnd();
    write_file(p, junk, sizeof junk);
    expect_refused(p, "random bytes");
    path_in(p, sizeof p, "other.json");
    const char *js = "{\"a\": 1}";
    write_file(p, js, strlen(js));
    expect_refused(p, "JSON without a model");
    path_in(p, sizeof p, "wordpiece.json");
    js = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}, \"decoder\": {\"type\": \"WordPiece\"}}";
    write_file(p, js, strlen(js));
    expect_refused(p, "a WordPiece tokenizer.json");
    path_in(p, sizeof p, "badid.json");
    js = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": -3}}, \"decoder\": {\"type\": \"ByteLevel\"}}";
    write_file(p, js, strlen(js));
    expect_refused(p, "a negative token id");
    path_in(p, sizeof p, "broken.json");
    js = "{\"model\": {\"type\": \"BPE\", ";
    write_file(p, js, strlen(js));
    expect_refused(p, "truncated JSON");

    /* tok_find_in_dir: none, one, both */
    char sub[512], found[WP_PATH_MAX], err[1024];
    path_in(sub, sizeof sub, "find");
    CHECK(fs_mkdirs(sub, err, sizeof err) == 0, "%s", err);
    EXPECT(tok_find_in_dir(sub, found, sizeof found, err, sizeof err) == 0 && found[0] == '\0', "find: empty dir");
    snprintf(p, sizeof p, "%s/%s", sub, TOK_FILE_HF);
    write_file(p, "{}", 2);
    EXPECT(tok_find_in_dir(sub, found, sizeof found, err, sizeof err) == 0 && strcmp(found, p) == 0, "find: json");
    snprintf(p, sizeof p, "%s/%s", sub, TOK_FILE_SPM);
    write_file(p, "x", 1);
    EXPECT(tok_find_in_dir(sub, found, sizeof found, err, sizeof err) == 2 && strstr(err, p), "find: both: %s", err);
}

static void test_prepare_pieces(const wp_tokenizer *t);

/* "1 2 3\n" lines of ids from spm_encode into one array per line. */
static size_t parse_ids(const char **cursor, int32_t *ids, size_t cap) {
    size_t n = 0;
    const char *s = *cursor;
    while (*s && *s != '\n') {
        char *end;
        long v = strtol(s, &end, 10);
        CHECK(end != s && n < cap, "spm_encode output unreadable near \"%.20s\"", s);
        ids[n++] = (int32_t)v;
        s = end;
        while (*s == ' ') s++;
    }
    if (*s == '\n') s++;
    *cursor = s;
    return n;
}

static void test_spm(const char *spm_train, const char *spm_encode, const char *spm_decode) {
    char corpus[WP_PATH_MAX], prefix[WP_PATH_MAX], model[WP_PATH_MAX], cmd[4 * WP_PATH_MAX], err[1024];
    path_in(corpus, sizeof corpus, "corpus.txt");
    path_in(prefix, sizeof prefix, "m");
    path_in(model, sizeof model, "m.model");
    /* ~12 KB of training text, one sentence a line */
    FILE *f = fopen(corpus, "w");
    CHECK(f, "%s", corpus);
    for (int line = 0; line < 200; line++) {
        char buf[256];
        random_text(buf, sizeof buf, 3 + rnd() % 12);
        fprintf(f, "%s\n", buf);
    }
    CHECK(fclose(f) == 0, "%s", corpus);
    /* Llama-2's settings that matter here: BPE, identity normalization (text kept as written),
     * spaces kept as written, byte fallback (no unknown characters): decode(encode(x)) == x */
    snprintf(cmd, sizeof cmd,
             "'%s' --input='%s' --model_prefix='%s' --vocab_size=300 --model_type=bpe --character_coverage=1.0 "
             "--normalization_rule_name=identity --remove_extra_whitespaces=false --byte_fallback=true --num_threads=1 "
             ">/dev/null 2>&1",
             spm_train, corpus, prefix);
    CHECK(run(cmd) == 0, "spm_train failed: %s", cmd);

    wp_tokenizer *t;
    CHECK(tok_open(model, &t, err, sizeof err) == 0, "%s", err);
    EXPECT(strcmp(tok_kind(t), "sentencepiece") == 0 && strcmp(tok_path(t), model) == 0 &&
               strcmp(tok_file_name(t), TOK_FILE_SPM) == 0,
           "spm: kind/path");
    EXPECT(tok_vocab_size(t) == 300, "spm: vocabulary %lld, want 300", (long long)tok_vocab_size(t));
    EXPECT(tok_bos(t) == 1 && tok_eos(t) == 2, "spm: bos %d eos %d, want spm_train's 1 and 2", tok_bos(t), tok_eos(t));

    /* encode: random lines, some with characters never trained on (byte fallback) */
    enum { CASES = 40 };
    char texts[CASES][512], in[WP_PATH_MAX], out[WP_PATH_MAX];
    path_in(in, sizeof in, "enc_in.txt");
    path_in(out, sizeof out, "enc_out.txt");
    f = fopen(in, "w");
    CHECK(f, "%s", in);
    for (int c = 0; c < CASES; c++) {
        random_text(texts[c], sizeof texts[c] - 16, 1 + rnd() % 30);
        if (c % 4 == 1) strcat(texts[c], "Ж€ \t∑");
        fprintf(f, "%s\n", texts[c]);
    }
    CHECK(fclose(f) == 0, "%s", in);
    snprintf(cmd, sizeof cmd, "'%s' --model='%s' --output_format=id < '%s' > '%s'", spm_encode, model, in, out);
    CHECK(run(cmd) == 0, "spm_encode failed: %s", cmd);
    size_t outn;
    char *ref = read_file(out, &outn);
    const char *cur = ref;
    size_t total = 0;
    for (int c = 0; c < CASES; c++) {
        int32_t want[1024], *got;
        size_t nw = parse_ids(&cur, want, 1024), ng;
        CHECK(tok_encode(t, texts[c], strlen(texts[c]), &got, &ng, err, sizeof err) == 0, "%s", err);
        EXPECT(ng == nw && (ng == 0 || memcmp(got, want, ng * sizeof *got) == 0),
               "spm encode of case %d (\"%.40s\"): %zu ids, spm_encode gives %zu", c, texts[c], ng, nw);
        total += ng;
        char *back;
        CHECK(tok_decode(t, got, ng, &back, err, sizeof err) == 0, "%s", err);
        EXPECT(strcmp(back, texts[c]) == 0, "spm: decode(encode(\"%s\")) = \"%s\"", texts[c], back);
        free(back);
        free(got);
    }
    free(ref);
    printf("spm encode: %d texts, %zu tokens equal to spm_encode's\n", CASES, total);

    /* decode: random ids over the whole vocabulary (control, byte and merged pieces) */
    int32_t cases[CASES][64];
    size_t lens[CASES];
    path_in(in, sizeof in, "dec_in.txt");
    path_in(out, sizeof out, "dec_out.txt");
    f = fopen(in, "w");
    CHECK(f, "%s", in);
    for (int c = 0; c < CASES; c++) {
        lens[c] = 1 + rnd() % 64;
        for (size_t i = 0; i < lens[c]; i++) {
            cases[c][i] = (int32_t)(rnd() % 300);
            fprintf(f, "%s%d", i ? " " : "", cases[c][i]);
        }
        fputc('\n', f);
    }
    CHECK(fclose(f) == 0, "%s", in);
    snprintf(cmd, sizeof cmd, "'%s' --model='%s' --input_format=id < '%s' > '%s'", spm_decode, model, in, out);
    CHECK(run(cmd) == 0, "spm_decode failed: %s", cmd);
    ref = read_file(out, &outn);
    /* the tool writes one line per case, but a decoded <0x0A> is a newline too: compare the
     * whole output with ours joined the same way (less NUL bytes, which ours drops) */
    size_t cap = outn + 1, m = 0;
    char *mine = malloc(cap + CASES * 4096), *want = malloc(cap);
    CHECK(mine && want, "out of memory");
    for (size_t i = 0; i < outn; i++)
        if (ref[i]) want[m++] = ref[i];
    want[m] = '\0';
    mine[0] = '\0';
    size_t mlen = 0;
    for (int c = 0; c < CASES; c++) {
        char *back;
        CHECK(tok_decode(t, cases[c], lens[c], &back, err, sizeof err) == 0, "%s", err);
        size_t bl = strlen(back);
        memcpy(mine + mlen, back, bl);
        mlen += bl;
        mine[mlen++] = '\n';
        free(back);
    }
    mine[mlen] = '\0';
    EXPECT(mlen == m && memcmp(mine, want, m) == 0, "spm decode of random ids differs from spm_decode (%zu vs %zu bytes)",
           mlen, m);
    printf("spm decode: %d random id sequences equal to spm_decode's (%zu bytes)\n", CASES, m);
    free(mine);
    free(want);
    free(ref);

    int32_t bad[2] = {5, 300};
    char *back;
    EXPECT(tok_decode(t, bad, 2, &back, err, sizeof err) == 2 && strstr(err, "300"), "spm: id 300 accepted");
    test_prepare_pieces(t);
    tok_close(t);
}

/* prepare_shards_tok in small pieces (PIECE bytes, cut after the last newline inside each):
 * the shard is BOS then each piece's own encoding, in order, whatever the thread count. */
static void test_prepare_pieces(const wp_tokenizer *t) {
    enum { PIECE = 256 };
    char in[WP_PATH_MAX], err[1024];
    path_in(in, sizeof in, "doc.txt");
    static char text[16384];
    size_t len = 0;
    while (len < sizeof text - 600) {
        len += random_text(text + len, 400, 1 + rnd() % 20);
        text[len++] = '\n';
    }
    write_file(in, text, len);
    /* the reference: cut as documented, each piece encoded alone */
    int32_t *want = malloc((len + 1) * sizeof *want);
    CHECK(want, "out of memory");
    size_t nw = 0;
    want[nw++] = tok_bos(t);
    int pieces = 0;
    for (size_t at = 0; at < len; pieces++) {
        size_t n = len - at;
        if (n > PIECE) {
            n = PIECE;
            while (n > 0 && text[at + n - 1] != '\n') n--;
            CHECK(n > 0, "a line longer than a piece: make the lines shorter");
        }
        int32_t *ids;
        size_t k;
        CHECK(tok_encode(t, text + at, n, &ids, &k, err, sizeof err) == 0, "%s", err);
        memcpy(want + nw, ids, k * sizeof *ids);
        nw += k;
        free(ids);
        at += n;
    }
    unsigned char *shard[2] = {NULL, NULL};
    size_t size[2] = {0, 0};
    int threads[2] = {1, 4};
    for (int r = 0; r < 2; r++) {
        char out[512], name[64], path[WP_PATH_MAX];
        snprintf(name, sizeof name, "pieces%d", threads[r]);
        path_in(out, sizeof out, name);
        omp_set_num_threads(threads[r]);
        const char *inputs[1] = {in};
        wp_prepare_stats st;
        CHECK(prepare_shards_tok(inputs, 1, out, 0.0, tok_vocab_size(t), t, 1 << 20, PIECE, NULL, NULL, &st, err,
                                 sizeof err) == 0,
              "prepare: %s", err);
        snprintf(path, sizeof path, "%s/train_000.bin", out);
        shard[r] = (unsigned char *)read_file(path, &size[r]);
        snprintf(path, sizeof path, "%s/%s", out, TOK_FILE_SPM);
        size_t ms;
        char *copy = read_file(path, &ms), *orig = read_file(tok_path(t), &len);
        EXPECT(ms == len && memcmp(copy, orig, ms) == 0, "prepare: %s is not a copy of the model", path);
        free(copy);
        free(orig);
    }
    omp_set_num_threads(1);
    EXPECT(size[0] == 1024 + 2 * nw, "prepare pieces: %zu tokens, want %zu", (size[0] - 1024) / 2, nw);
    for (size_t i = 0; i < nw && size[0] == 1024 + 2 * nw; i++) {
        int32_t got = shard[0][1024 + 2 * i] | shard[0][1024 + 2 * i + 1] << 8;
        if (got != want[i]) {
            EXPECT(got == want[i], "prepare pieces: token %zu is %d, want %d", i, got, want[i]);
            break;
        }
    }
    EXPECT(size[0] == size[1] && memcmp(shard[0], shard[1], size[0]) == 0, "prepare: 4 threads wrote another shard than 1");
    printf("prepare in %d pieces of <= %d bytes: %zu tokens, the same on 1 and 4 threads\n", pieces, PIECE, nw);
    free(shard[0]);
    free(shard[1]);
    free(want);
}

/* HELPER make DIR writes DIR/tokenizer.json and DIR/cases.txt (ids per line); we decode each
 * line as hex into DIR/ours.txt; HELPER check DIR compares with the library's decode. */
static int test_hf(const char *python, const char *helper) {
    char cmd[4 * WP_PATH_MAX], p[WP_PATH_MAX], err[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' make '%s'", python, helper, g_dir);
    int rc = run(cmd);
    if (rc == 77) return 77;
    CHECK(rc == 0, "%s failed (%d)", cmd, rc);
    path_in(p, sizeof p, TOK_FILE_HF);
    wp_tokenizer *t;
    CHECK(tok_open(p, &t, err, sizeof err) == 0, "%s", err);
    EXPECT(strcmp(tok_kind(t), "hf-tokenizer.json") == 0 && strcmp(tok_file_name(t), TOK_FILE_HF) == 0, "hf: kind");
    int32_t *ids;
    size_t n;
    EXPECT(tok_encode(t, "abc", 3, &ids, &n, err, sizeof err) == 0 && n > 0, "hf: encode: %s", err);
    free(ids); /* every id against the library: tests/tokenizer/tok_check.py */
    /* the helper's facts: vocabulary, eos */
    path_in(p, sizeof p, "facts.txt");
    size_t len;
    char *facts = read_file(p, &len);
    long long vocab = -1, eos = -2, bos = -2;
    CHECK(sscanf(facts, "%lld %lld %lld", &vocab, &bos, &eos) == 3, "facts.txt unreadable");
    free(facts);
    EXPECT(tok_vocab_size(t) == vocab && tok_eos(t) == eos && tok_bos(t) == bos, "hf: vocab %lld bos %d eos %d, want %lld %lld %lld",
           (long long)tok_vocab_size(t), tok_bos(t), tok_eos(t), vocab, bos, eos);
    path_in(p, sizeof p, "cases.txt");
    char *cases = read_file(p, &len);
    char out[WP_PATH_MAX];
    path_in(out, sizeof out, "ours.txt");
    FILE *f = fopen(out, "w");
    CHECK(f, "%s", out);
    const char *cur = cases;
    int lines = 0;
    while (*cur) {
        static int32_t line[1 << 16];
        size_t k = parse_ids(&cur, line, 1 << 16);
        char *back;
        CHECK(tok_decode(t, line, k, &back, err, sizeof err) == 0, "%s", err);
        for (const char *s = back; *s; s++) fprintf(f, "%02x", (unsigned char)*s);
        fputc('\n', f);
        free(back);
        lines++;
    }
    CHECK(fclose(f) == 0, "%s", out);
    free(cases);
    int32_t bad = (int32_t)vocab;
    char *back;
    EXPECT(tok_decode(t, &bad, 1, &back, err, sizeof err) == 2, "hf: id = vocab accepted");
    tok_close(t);
    /* a tokenizer_config.json beside it names BOS/EOS (as an object and as a string): the
     * helper's trainer gave <|endoftext|> id 0, and "hello world" was added last */
    path_in(p, sizeof p, "tokenizer_config.json");
    const char *cfg = "{\"bos_token\": {\"content\": \"<|endoftext|>\"}, \"eos_token\": \"hello world\"}";
    write_file(p, cfg, strlen(cfg));
    path_in(p, sizeof p, TOK_FILE_HF);
    CHECK(tok_open(p, &t, err, sizeof err) == 0, "%s", err);
    EXPECT(tok_bos(t) == 0 && tok_eos(t) == vocab - 1, "hf with tokenizer_config.json: bos %d eos %d, want 0 and %lld",
           tok_bos(t), tok_eos(t), vocab - 1);
    tok_close(t);
    snprintf(cmd, sizeof cmd, "'%s' '%s' check '%s'", python, helper, g_dir);
    EXPECT(run(cmd) == 0, "the tokenizers library decodes differently (%d cases): %s", lines, cmd);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc >= 2, "usage: test_tokenizer spm SPM_TRAIN SPM_ENCODE SPM_DECODE | hf PYTHON HELPER");
    CHECK(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
    g_made = 1;
    atexit(cleanup);
    if (strcmp(argv[1], "spm") == 0) {
        CHECK(argc == 5, "spm SPM_TRAIN SPM_ENCODE SPM_DECODE");
        test_bytes();
        test_refusals();
        test_spm(argv[2], argv[3], argv[4]);
    } else {
        CHECK(argc == 4 && strcmp(argv[1], "hf") == 0, "hf PYTHON HELPER");
        if (test_hf(argv[2], argv[3]) == 77) {
            printf("tokenizer hf: skipped (no `tokenizers` module for %s)\n", argv[2]);
            return 77;
        }
    }
    return check_result(argv[1][0] == 's' ? "tokenizer spm" : "tokenizer hf");
}
