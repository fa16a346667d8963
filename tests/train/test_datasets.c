/* Real data in, through the weipipe binary.
 *   - llm.c's Llama-3 shards (version 7: magic 20240801, uint32 tokens; written here as llm.c's
 *     write_datafile writes them, ids above 65535 throughout) in a directory with llm.c's names
 *     train a model of vocabulary 128256: the first step's loss is within 1% of ln 128256, on
 *     one rank and on a 2-rank weight-passing ring; the checkpoint evaluates, exports (config
 *     and head of 128256 rows) and resumes with that vocabulary;
 *   - `weipipe prepare --vocab-size 128256` writes version-7 shards that train the same way;
 *   - --data as a directory, a glob and a file; --val-data; --eval-every without validation
 *     data refused (exit 2, one line naming --eval-every and --val-data, no output file), and
 *     allowed with one warning line when --val-data names training shards on purpose; shards
 *     of two versions in one dataset refused.
 * argv: WEIPIPE */
#include <sys/stat.h>
#include <sys/wait.h>

#include "safetensors.h"
#include "shard.h"
#include "tu.h"

enum { V = 128256 };

static char dir[256], err[2048];
static const char *weipipe;
static char out[65536];

/* Runs weipipe with args; its exit status, its stdout+stderr in `out`. */
static int run(const char *args) {
    char full[8192];
    snprintf(full, sizeof full, "'%s' %s 2>&1", weipipe, args);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s, const char *containing) {
    int n = 0;
    for (const char *line = s; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        if (len > 0 && (!containing || strstr(buf, containing))) n++;
        line += len + (end ? 1 : 0);
    }
    return n;
}

/* A token file as llm.c's dev/data/data_common.py write_datafile makes it: a header of 256
 * int32 (numpy zeros), [0] magic, [1] version, [2] len(toks), then np.array(toks, dtype)
 * .tobytes(): "llama-3" is magic 20240801, version 7, uint32; "gpt-2" 20240520, 1, uint16. */
static void write_datafile(const char *path, const uint32_t *toks, int32_t n, bool llama3) {
    int32_t header[256] = {0};
    header[0] = llama3 ? 20240801 : 20240520;
    header[1] = llama3 ? 7 : 1;
    header[2] = n;
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(header, sizeof header, 1, f) == 1, "%s: %s", path, strerror(errno));
    for (int32_t i = 0; i < n; i++) {
        uint16_t narrow = (uint16_t)toks[i];
        CHECK(llama3 ? fwrite(&toks[i], 4, 1, f) == 1 : fwrite(&narrow, 2, 1, f) == 1, "%s: write", path);
    }
    CHECK(fclose(f) == 0, "%s: %s", path, strerror(errno));
}

/* n tokens as llm.c's fineweb.py tokenizes for Llama-3: each document opened by
 * <|begin_of_text|> (128000), ids from the whole vocabulary. */
static void llama3_shard(const char *name, int32_t n, uint64_t seed) {
    uint32_t *t = malloc((size_t)n * sizeof *t);
    for (int32_t i = 0; i < n; i++) t[i] = i % 97 == 0 ? 128000 : (uint32_t)(tu_next(&seed) % V);
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_datafile(p, t, n, true);
    free(t);
}

/* The first metrics line's loss (step 1), or NaN. */
static double step1_loss(const char *metrics) {
    char *text;
    size_t size;
    double loss = NAN;
    if (fs_read_small(metrics, 1 << 20, &text, &size, err, sizeof err) != 0) return loss;
    const char *at = strstr(text, "{\"step\": 1, "), *key = at ? strstr(at, "\"loss\": ") : NULL;
    if (key && (!strchr(at, '\n') || key < strchr(at, '\n'))) sscanf(key, "\"loss\": %lf", &loss); /* in that line */
    free(text);
    return loss;
}

static void expect_ln_v(const char *what, double loss) {
    double lnv = log((double)V), rel = fabs(loss - lnv) / lnv;
    printf("%s: step-1 loss %.6f, ln %d = %.6f, %.4f%% apart (tolerance 1%%)\n", what, loss, V, lnv, 100 * rel);
    EXPECT(isfinite(loss) && rel < 0.01, "%s: step-1 loss %g is not within 1%% of ln %d = %g", what, loss, V, lnv);
}

/* A tiny model; with the large vocabulary its embedding and head are 128256 x 16. */
#define TINY "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --ffn-hidden-size 32 --seq-length 16 " \
             "--micro-batch-size 2 --transport local --threads 1 --quiet"
#define BIG TINY " --vocab-size 128256"
#define SMALL TINY " --vocab-size 256"

static void test_llama3_shards(void) {
    char d[300], args[4096], m[400];
    snprintf(d, sizeof d, "%s/llama3", dir);
    CHECK(fs_mkdirs(d, err, sizeof err) == 0, "%s", err);
    llama3_shard("llama3/fineweb_train_000001.bin", 4000, 1);
    llama3_shard("llama3/fineweb_train_000002.bin", 3000, 2);
    llama3_shard("llama3/fineweb_val_000000.bin", 1000, 3);
    FILE *f = fopen(strcat(strcpy(m, d), "/README.md"), "w");
    CHECK(f && fputs("not a shard\n", f) >= 0 && fclose(f) == 0, "README");

    /* a directory: *train*.bin for training, *val*.bin for validation */
    snprintf(m, sizeof m, "%s/one.jsonl", dir);
    snprintf(args, sizeof args, "train " BIG " --data '%s' --steps 2 --eval-every 1 --eval-batches 2 --metrics '%s' --save '%s/ck'",
             d, m, dir);
    int rc = run(args);
    EXPECT(rc == 0 && count_lines(out, "warning") == 0, "train on llm.c Llama-3 shards: exit %d: %s", rc, out);
    expect_ln_v("Llama-3 shards (version 7), one rank", step1_loss(m));
    char *text;
    size_t size;
    if (fs_read_small(m, 1 << 20, &text, &size, err, sizeof err) == 0) {
        EXPECT(count_lines(text, "\"val_loss\"") == 2, "two validation losses expected in %s", text);
        free(text);
    }
    /* a 2-rank weight-passing ring carries the 128256 x 16 chunks */
    snprintf(m, sizeof m, "%s/ring.jsonl", dir);
    snprintf(args, sizeof args,
             "train " TINY " --vocab-size 128256 --num-layers 2 --nranks 2 --strategy weipipe-interleave --data '%s' --steps 1 --metrics '%s'", d, m);
    rc = run(args);
    EXPECT(rc == 0, "2-rank ring on Llama-3 shards: exit %d: %s", rc, out);
    expect_ln_v("Llama-3 shards, 2-rank weipipe-interleave", step1_loss(m));

    /* the checkpoint: eval (the directory's *val*.bin), export, resume */
    snprintf(args, sizeof args, "eval '%s/ck' --data '%s' --batches 4", dir, d);
    rc = run(args);
    double loss = NAN;
    const char *at = strstr(out, "loss ");
    EXPECT(rc == 0 && at && sscanf(at, "loss %lf", &loss) == 1 && fabs(loss - log((double)V)) < 0.02 * log((double)V),
           "eval of a vocabulary-128256 checkpoint: exit %d: %s", rc, out);
    snprintf(args, sizeof args, "export '%s/ck' '%s/hf'", dir, dir);
    rc = run(args);
    EXPECT(rc == 0, "export: exit %d: %s", rc, out);
    char p[400];
    snprintf(p, sizeof p, "%s/hf/config.json", dir);
    if (fs_read_small(p, 1 << 20, &text, &size, err, sizeof err) == 0) {
        EXPECT(strstr(text, "\"vocab_size\": 128256"), "config.json lacks vocab_size 128256: %s", text);
        free(text);
    }
    snprintf(p, sizeof p, "%s/hf/model.safetensors", dir);
    st_file *sf;
    if (st_open(&sf, p, err, sizeof err) == 0) {
        const st_tensor *head = st_find(sf, "lm_head.weight"), *emb = st_find(sf, "model.embed_tokens.weight");
        EXPECT(head && st_check_shape(sf, head, V, 16, err, sizeof err) == 0, "lm_head.weight: %s", err);
        EXPECT(emb && st_check_shape(sf, emb, V, 16, err, sizeof err) == 0, "embed_tokens: %s", err);
        st_close(sf);
    } else {
        EXPECT(0, "%s", err);
    }
    snprintf(args, sizeof args, "train " BIG " --data '%s' --steps 3 --resume '%s/ck'", d, dir);
    rc = run(args);
    EXPECT(rc == 0, "resume a vocabulary-128256 checkpoint: exit %d: %s", rc, out);
    snprintf(args, sizeof args, "train " TINY " --vocab-size 128000 --data '%s' --steps 3 --resume '%s/ck'", d, dir);
    rc = run(args);
    EXPECT(rc == 2 && strstr(out, "vocab"), "resume under another vocabulary: exit %d: %s", rc, out);
    /* tokens at 128000 and above do not fit a smaller vocabulary: named with the file */
    snprintf(args, sizeof args, "train " TINY " --vocab-size 128000 --data '%s' --steps 1", d);
    rc = run(args);
    EXPECT(rc == 2 && count_lines(out, NULL) == 1 && strstr(out, "fineweb_train_000001.bin: token 128000 at position 0"),
           "a token past the vocabulary: exit %d: %s", rc, out);

    /* globs for both */
    snprintf(args, sizeof args,
             "train " BIG " --data '%s/fineweb_train_*.bin' --val-data '%s/*_val_*.bin' --steps 1 "
             "--eval-every 1 --eval-batches 1",
             d, d);
    rc = run(args);
    EXPECT(rc == 0 && count_lines(out, "warning") == 0, "globs: exit %d: %s", rc, out);
}

/* --eval-every without validation data: refused for a file, a glob, a directory without
 * *val*.bin; allowed with one warning when --val-data names the training data. */
static void test_eval_refusal(void) {
    char d[300], file[400], args[4096], m[400];
    snprintf(d, sizeof d, "%s/llama3", dir);
    snprintf(file, sizeof file, "%s/fineweb_train_000001.bin", d);
    snprintf(m, sizeof m, "%s/refused.jsonl", dir);
    const char *specs[3][2] = {{file, ""}, {d, "/fineweb_train_*.bin"}, {dir, "/trainonly"}};
    char only[400];
    snprintf(only, sizeof only, "%s/trainonly", dir);
    CHECK(fs_mkdirs(only, err, sizeof err) == 0, "%s", err);
    llama3_shard("trainonly/shard_train_000000.bin", 2000, 4);
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "train " BIG " --data '%s%s' --steps 1 --eval-every 5 --metrics '%s' --save '%s/never'",
                 specs[i][0], specs[i][1], m, dir);
        int rc = run(args);
        EXPECT(rc == 2 && count_lines(out, NULL) == 1 && strstr(out, "weipipe: error: --eval-every 5") && strstr(out, "--val-data"),
               "--eval-every without validation data (%s%s): exit %d, '%s'", specs[i][0], specs[i][1], rc, out);
        EXPECT(!fs_exists(m) && !fs_exists(strcat(strcpy(args, dir), "/never")), "a refused run wrote its outputs");
    }
    printf("refused: %s", out);
    /* on purpose: the training file as --val-data */
    snprintf(args, sizeof args, "train " BIG " --data '%s' --val-data '%s' --steps 1 --eval-every 1 --eval-batches 1", file, file);
    int rc = run(args);
    EXPECT(rc == 0 && count_lines(out, "warning") == 1 && count_lines(out, "--val-data") == 1 && strstr(out, "not held out"),
           "--val-data naming the training file: exit %d, '%s'", rc, out);
    printf("on purpose: %s", out);
    /* --val-data that names nothing */
    snprintf(args, sizeof args, "train " BIG " --data '%s' --val-data '%s/nothing_*.bin' --steps 1 --eval-every 1", d, d);
    rc = run(args);
    EXPECT(rc == 2 && count_lines(out, NULL) == 1 && strstr(out, "--val-data") && strstr(out, "matches no file"),
           "--val-data matching nothing: exit %d, '%s'", rc, out);
}

/* weipipe prepare --vocab-size 128256: version-7 shards of byte tokens, which train at ln V. */
static void test_prepare_v7(void) {
    char text[400], p[400], args[4096], m[400];
    snprintf(text, sizeof text, "%s/doc.txt", dir);
    FILE *f = fopen(text, "w");
    CHECK(f, "%s", text);
    for (int i = 0; i < 60; i++) fprintf(f, "Line %d of a small English text, long enough for a few sequences.\n", i);
    CHECK(fclose(f) == 0, "%s", text);
    snprintf(args, sizeof args, "prepare '%s' --out '%s/prep' --vocab-size 128256 --val-fraction 0.2", text, dir);
    int rc = run(args);
    EXPECT(rc == 0 && strstr(out, "version 7, uint32"), "prepare --vocab-size 128256: exit %d: %s", rc, out);
    snprintf(p, sizeof p, "%s/prep/train_000.bin", dir);
    wp_shard s;
    if (shard_open(&s, p, V, err, sizeof err) == 0) {
        struct stat st;
        EXPECT(s.version == 7 && stat(p, &st) == 0 && st.st_size == WP_SHARD_HEADER_BYTES + 4 * s.n_tokens,
               "prepare wrote version %d, %lld bytes for %lld tokens", s.version, (long long)st.st_size, (long long)s.n_tokens);
        shard_close(&s);
    } else {
        EXPECT(0, "%s", err);
    }
    snprintf(m, sizeof m, "%s/prep.jsonl", dir);
    snprintf(args, sizeof args, "train " BIG " --data '%s/prep' --steps 1 --eval-every 1 --eval-batches 1 --metrics '%s'", dir, m);
    rc = run(args);
    EXPECT(rc == 0, "train on prepared version-7 shards: exit %d: %s", rc, out);
    expect_ln_v("prepare --vocab-size 128256 (version 7)", step1_loss(m));
    /* 65536 still fits uint16 */
    snprintf(args, sizeof args, "prepare '%s' --out '%s/prep16' --vocab-size 65536 --quiet", text, dir);
    EXPECT(run(args) == 0, "prepare --vocab-size 65536: %s", out);
    snprintf(p, sizeof p, "%s/prep16/train_000.bin", dir);
    EXPECT(shard_open(&s, p, 65536, err, sizeof err) == 0 && s.version == 1, "--vocab-size 65536 wrote version %d: %s", s.version, err);
    shard_close(&s);

    /* one dataset, one format: version-1 training shards, version-7 validation shards */
    char mix[300];
    snprintf(mix, sizeof mix, "%s/mix", dir);
    CHECK(fs_mkdirs(mix, err, sizeof err) == 0, "%s", err);
    snprintf(args, sizeof args, "cp '%s/prep16/train_000.bin' '%s/prep/val_000.bin' '%s/' && mv '%s/val_000.bin' '%s/x_val.bin'", dir,
             dir, mix, mix, mix);
    CHECK(system(args) == 0, "%s", args);
    snprintf(args, sizeof args, "train " SMALL " --data '%s' --steps 1 --eval-every 1 --eval-batches 1", mix);
    rc = run(args);
    EXPECT(rc == 2 && count_lines(out, NULL) == 1 && strstr(out, "x_val.bin is version 7") && strstr(out, "share one format"),
           "mixed versions: exit %d, '%s'", rc, out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_datasets WEIPIPE\n");
        return 1;
    }
    weipipe = argv[1];
    tu_scratch(dir, sizeof dir, "datasets");
    test_llama3_shards();
    test_eval_refusal();
    test_prepare_v7();
    tu_cleanup(dir);
    return check_result("train/datasets");
}
