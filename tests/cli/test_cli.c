/* The flag table, config files and model-config validation: every bad input is refused with
 * exit code 2 and a message naming the culprit; good input round-trips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adapters.h"
#include "check.h"
#include "cli.h"
#include "cli_impl.h"
#include "flag_bounds.h"
#include "layout.h"

static wp_opts opts;
static char err[512];

static int parse(const char *line) {
    char buf[2048], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *tok = strtok(buf, " "); tok && argc < 64; tok = strtok(NULL, " ")) argv[argc++] = tok;
    err[0] = '\0';
    return cli_parse(argc, argv, &opts, err, sizeof err);
}

/* A rejected command line must exit 2 and name 'culprit' in a single-line message. */
static void expect_bad(const char *line, const char *culprit) {
    int rc = parse(line);
    EXPECT(rc == 2, "'%s' gave %d, want 2", line, rc);
    EXPECT(strstr(err, culprit) != NULL, "'%s': message '%s' does not name '%s'", line, err, culprit);
    EXPECT(strchr(err, '\n') == NULL, "'%s': message has several lines", line);
}

static void test_bad_flags(void) {
    expect_bad("train --no-such-flag 3", "--no-such-flag");
    expect_bad("train --hidden-size", "--hidden-size");
    expect_bad("train --hidden-size 12x", "--hidden-size");
    expect_bad("train --precision fp8", "--precision");
    expect_bad("train --strategy pipedream", "--strategy");
    expect_bad("train --link-bandwidth 10", "--link-bandwidth");
    expect_bad("train --link-bandwidth 10Gbps", "--link-bandwidth");
    expect_bad("train --timeout 5 parsecs", "parsecs");
    expect_bad("train --timeout 5parsecs", "--timeout");
    expect_bad("export a b c", "'c'");
    expect_bad("train --recompute maybe=1", "maybe");
    expect_bad("prepare --strategy wzb1", "--strategy");
    expect_bad("frobnicate", "frobnicate");
    expect_bad("train --config /nonexistent/x.ini", "/nonexistent/x.ini");
    expect_bad("train -x", "-x");
}

static void test_units(void) {
    double v;
    int64_t s;
    EXPECT(cli_parse_rate("10Gbit", &v) && fabs(v - 1.25e9) < 1, "10Gbit -> %g", v);
    EXPECT(cli_parse_rate("400GByte", &v) && fabs(v - 4e11) < 1, "400GByte -> %g", v);
    EXPECT(cli_parse_rate("1.5Mbit/s", &v) && fabs(v - 187500) < 1e-6, "1.5Mbit/s -> %g", v);
    EXPECT(cli_parse_rate("0", &v) && v == 0, "0 -> %g", v);
    EXPECT(!cli_parse_rate("-1Gbit", &v), "negative rate accepted");
    EXPECT(cli_parse_time("20us", &v) && fabs(v - 20e-6) < 1e-15, "20us -> %g", v);
    EXPECT(cli_parse_time("5ms", &v) && fabs(v - 5e-3) < 1e-15, "5ms -> %g", v);
    EXPECT(cli_parse_time("2m", &v) && v == 120, "2m -> %g", v);
    EXPECT(cli_parse_time("30", &v) && v == 30, "30 -> %g", v);
    EXPECT(cli_parse_size("80G", &s) && s == 80ll << 30, "80G -> %lld", (long long)s);
    EXPECT(cli_parse_size("512MiB", &s) && s == 512ll << 20, "512MiB -> %lld", (long long)s);
    EXPECT(!cli_parse_size("1e30", &s), "1e30 bytes accepted");
}

/* Random values for every numeric model flag, written as INI and read back. */
static void test_ini_round_trip(void) {
    char path[] = "/tmp/wp_test_cli_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    srand(7);
    for (int trial = 0; trial < 50; trial++) {
        char line[256];
        snprintf(line, sizeof line, "train --hidden-size %d --num-layers %d --lr %.9g --link-bandwidth %dMbit --timeout %dms",
                 1 + rand() % 4096, 1 + rand() % 64, (rand() % 100000) * 1e-7, 1 + rand() % 10000, 1 + rand() % 5000);
        EXPECT(parse(line) == 0, "%s: %s", line, err);
        wp_opts first = opts;
        FILE *f = fopen(path, "w");
        cli_write_ini(f, &first, C_ALL);
        fclose(f);
        char again[512];
        snprintf(again, sizeof again, "train --config %s", path);
        EXPECT(parse(again) == 0, "reading back: %s", err);
        EXPECT(opts.hidden_size == first.hidden_size && opts.num_layers == first.num_layers && opts.lr == first.lr &&
                   opts.link_bandwidth == first.link_bandwidth && opts.timeout == first.timeout,
               "round trip of '%s' changed a value", line);
    }
    unlink(path);
}

static void test_config_file(void) {
    char path[] = "/tmp/wp_test_cfg_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fprintf(f, "[model]\nhidden-size = 96\nnum-layers = 3\n");
    fclose(f);
    char line[256];
    snprintf(line, sizeof line, "train --num-layers 5 --config %s", path);
    EXPECT(parse(line) == 0, "%s", err);
    EXPECT(opts.hidden_size == 96 && opts.num_layers == 5, "flags must override the file: h=%lld L=%lld",
           (long long)opts.hidden_size, (long long)opts.num_layers);
    EXPECT(opts.set[FLAG_hidden_size] && !opts.set[FLAG_seq_length], "set[] marks given keys only");

    f = fopen(path, "w");
    fprintf(f, "hidden-size = 96\nhiden-size = 3\n");
    fclose(f);
    snprintf(line, sizeof line, "train --config %s", path);
    expect_bad(line, "hiden-size");
    EXPECT(strstr(err, path) && strstr(err, "line 2"), "message '%s' names file and line", err);

    f = fopen(path, "w");
    fprintf(f, "this line has no equals sign\n");
    fclose(f);
    expect_bad(line, path);
    unlink(path);
}

/* Refused by the parser (a value outside the flag's range, flag_bounds.c) or by the model's
 * validation (shapes that do not fit together), naming the flag either way. */
static void expect_bad_model(const char *line, const char *culprit) {
    wp_model_cfg cfg;
    int rc = parse(line);
    EXPECT(rc == 0 || rc == 2, "'%s' gave %d: %s", line, rc, err);
    if (rc == 0) rc = model_cfg_from_opts(&opts, 1, &cfg, err, sizeof err);
    EXPECT(rc == 2, "'%s' gave %d, want 2", line, rc);
    EXPECT(strstr(err, culprit) != NULL, "'%s': message '%s' does not name '%s'", line, err, culprit);
}

static void test_model_validation(void) {
    expect_bad_model("check --hidden-size 100 --num-attention-heads 3", "--hidden-size");
    expect_bad_model("check --hidden-size 0", "--hidden-size");
    expect_bad_model("check --num-layers -2", "--num-layers");
    expect_bad_model("check --num-layers 2 --num-chunks 3", "--num-chunks");
    expect_bad_model("check --num-attention-heads 4 --num-query-groups 3", "--num-query-groups");
    expect_bad_model("check --hidden-size 12 --num-attention-heads 4", "--num-attention-heads");
    expect_bad_model("check --seq-length 0", "--seq-length");
    expect_bad_model("check --micro-batch-size -1", "--micro-batch-size");
    expect_bad_model("check --vocab-size 1", "--vocab-size");
    expect_bad_model("check --num-layers 4 --chunk-layers 1,2", "--chunk-layers");
    expect_bad_model("check --num-layers 4 --chunk-layers 2,x", "--chunk-layers");
    expect_bad_model("check --num-layers 4 --chunk-layers 2,2 --num-chunks 3", "--num-chunks");
    expect_bad_model("check --norm-eps 0", "--norm-eps");

    /* Valid shapes: the layout's parameter count matches the closed form. */
    srand(11);
    for (int trial = 0; trial < 40; trial++) {
        int heads = 1 + rand() % 8, hd = 2 * (1 + rand() % 8), groups_div = 1 + rand() % heads;
        while (heads % groups_div) groups_div--;
        int L = 1 + rand() % 6, chunks = 1 + rand() % L, V = 2 + rand() % 300, f = 1 + rand() % 200;
        char line[256];
        snprintf(line, sizeof line,
                 "check --hidden-size %d --num-attention-heads %d --num-query-groups %d --num-layers %d --num-chunks %d "
                 "--vocab-size %d --ffn-hidden-size %d",
                 heads * hd, heads, groups_div, L, chunks, V, f);
        wp_model_cfg cfg;
        wp_layout lay;
        EXPECT(parse(line) == 0, "%s: %s", line, err);
        EXPECT(model_cfg_from_opts(&opts, 1, &cfg, err, sizeof err) == 0, "%s: %s", line, err);
        EXPECT(layout_build(&cfg, &lay, err, sizeof err) == 0, "%s: %s", line, err);
        size_t h = (size_t)heads * hd, kv = (size_t)groups_div * hd;
        size_t block = 2 * h + 2 * h * h + 2 * h * kv + 3 * h * (size_t)f;
        size_t total = (size_t)L * block + 2 * (size_t)V * h + h;
        EXPECT(lay.total_numel == total, "%s: %zu parameters, closed form %zu", line, lay.total_numel, total);
        size_t sum = 0;
        for (int c = 0; c < cfg.n_chunks; c++) {
            EXPECT(lay.chunk_offset[c] == sum, "chunk %d offset", c);
            sum += lay.chunk_numel[c];
        }
        layout_free(&lay);
    }
}

/* The job flags (compared across ranks at the rendezvous): the same for flags that may differ
 * per rank or host, different for any other train flag, and each line "name=value". */
static void test_job_flags(void) {
    static char base[1 << 16], text[1 << 16];
    CHECK(parse("train --strategy 1f1b --hidden-size 64") == 0, "parse: %s", err);
    CHECK(cli_job_flags(&opts, base, sizeof base) == 0, "job flags do not fit");
    CHECK(strstr(base, "\nstrategy=1f1b\n") && strstr(base, "\nhidden-size=64\n") && !strstr(base, "bind=") &&
              !strstr(base, "\ntrace=") && !strstr(base, "\nnranks=") && !strstr(base, "\nthreads="),
          "job flags:\n%s", base);
    const char *same[] = {"--bind 10.0.0.2", "--trace t.json", "--metrics m", "--quiet", "--threads 3", "--timeout 9s",
                          "--connect-timeout 2s", "--nranks 8", "--ib-port 2"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char line[256];
        snprintf(line, sizeof line, "train --strategy 1f1b --hidden-size 64 %s", same[i]);
        CHECK(parse(line) == 0 && cli_job_flags(&opts, text, sizeof text) == 0 && strcmp(text, base) == 0,
              "'%s' changed the job flags", same[i]);
    }
    const char *other[] = {"--strategy wzb1", "--hidden-size 32", "--seed 7", "--data x.bin", "--lr 0.5",
                           "--num-microbatches 3", "--transport local", "--precision fp32"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        char line[256];
        snprintf(line, sizeof line, "train --strategy 1f1b --hidden-size 64 %s", other[i]);
        CHECK(parse(line) == 0 && cli_job_flags(&opts, text, sizeof text) == 0 && strcmp(text, base) != 0,
              "'%s' left the job flags as they were", other[i]);
    }
    CHECK(cli_job_flags(&opts, text, 16) == WP_FAILED, "a buffer too small was accepted");
    printf("ok: job flags (%zu bytes): per-rank flags left out, %zu job-wide flags each change them\n", strlen(base),
           sizeof other / sizeof other[0]);
}

/* Enumerated flags are parsed once into their enums: each choice named below gives the constant
 * written beside it (not the parser's own table), and every choice of every ENUM row (and of
 * every subcommand's --format) parses and prints back as itself. */
static void test_enums(void) {
    static const struct {
        const char *line;
        int flag, want;
    } cases[] = {
        {"train --precision bf16", FLAG_precision, WP_PREC_BF16},
        {"train --precision fp32", FLAG_precision, WP_PREC_FP32},
        {"train --backend cuda", FLAG_backend, WP_BACKEND_CUDA},
        {"train --attention native", FLAG_attention, WP_ATTN_NATIVE},
        {"train --attention cudnn", FLAG_attention, WP_ATTN_CUDNN},
        {"train --lr-decay-style linear", FLAG_lr_decay_style, WP_LR_LINEAR},
        {"train --lr-decay-style constant", FLAG_lr_decay_style, WP_LR_CONSTANT},
        {"train --strategy zb-h1", FLAG_strategy, WP_STRAT_ZBH1},
        {"train --strategy tawpipe", FLAG_strategy, WP_STRAT_TAWPIPE},
        {"simulate --strategy all", FLAG_strategy, WP_STRAT_ALL},
        {"train --strategy auto", FLAG_strategy, WP_STRAT_AUTO},
        {"train --wzb2-owner last", FLAG_wzb2_owner, WP_WZB2_LAST},
        {"train --i1f1b-order breadth-first", FLAG_i1f1b_order, WP_I1F1B_BREADTH_FIRST},
        {"train --transport local", FLAG_transport, WP_TRANSPORT_local},
        {"train --transport nccl", FLAG_transport, WP_TRANSPORT_nccl},
        {"simulate --format csv", FLAG_format, WP_FMT_CSV},
        {"sample x --format ids", FLAG_format, WP_FMT_IDS},
        {"export a b --format gguf", FLAG_format, WP_FMT_GGUF},
        {"train", FLAG_strategy, WP_STRAT_INTERLEAVE}, /* the defaults too */
        {"train", FLAG_precision, WP_PREC_MIXED},
        {"train", FLAG_transport, WP_TRANSPORT_tcp},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(parse(cases[i].line) == 0, "'%s': %s", cases[i].line, err);
        EXPECT(cli_enum_get(&opts, cases[i].flag) == cases[i].want, "'%s': --%s is %d, want %d", cases[i].line,
               cli_flag_name(cases[i].flag), cli_enum_get(&opts, cases[i].flag), cases[i].want);
    }
    CHECK(parse("train --transport ibverbs") == 0, "%s", err);
    EXPECT(strcmp(tp_table_row((int)opts.transport)->name, "ibverbs") == 0, "--transport ibverbs is not its row");
    int n = 0;
    for (int f = 0; f < FLAG_COUNT; f++) {
        if (flags[f].type != FT_ENUM) continue;
        EXPECT(flags[f].help[0] == '{', "--%s: an ENUM without choices", flags[f].name);
        const char *close = strchr(flags[f].help, '}');
        for (const char *p = flags[f].help + 1; close && p < close; n++) {
            char name[64];
            size_t len = strcspn(p, "|}");
            snprintf(name, sizeof name, "%.*s", (int)len, p);
            wp_opts o;
            memset(&o, 0xa5, sizeof o); /* poison: the value must come from the parse */
            o.cmd = 0;
            EXPECT(cli_set(&o, flags[f].name, name, "", err, sizeof err) == 0, "--%s %s: %s", flags[f].name, name, err);
            EXPECT(strcmp(cli_enum_name(f, cli_enum_get(&o, f)), name) == 0, "--%s %s prints back as %s", flags[f].name,
                   name, cli_enum_name(f, cli_enum_get(&o, f)));
            p += len + 1;
        }
    }
    for (int c = 0; c < CLI_N_COMMANDS; c++) /* a subcommand's formats are among --format's */
        for (const char *p = commands[c].formats ? commands[c].formats + 1 : ""; *p && *p != '}';) {
            size_t len = strcspn(p, "|}");
            char name[64];
            int v;
            snprintf(name, sizeof name, "%.*s", (int)len, p);
            EXPECT(cli_enum_parse(FLAG_format, name, &v), "%s --format %s is not in choices.h", commands[c].name, name);
            p += len + (p[len] == '|');
        }
    printf("ok: enums: %zu choices parse to their constants; all %d choices of the ENUM flags print back as given\n",
           sizeof cases / sizeof cases[0], n);
}

/* Issue 42's limits: every numeric flag has a range in flag_bounds.c's table (and its default
 * lies in it); a value out of it, or too small for a double, says so with the range; --prompt
 * takes any length; a config line too long for inih names the real limit; a key set twice in
 * one file is refused naming both lines. */
static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void test_limits(void) {
    int numeric = 0;
    for (int f = 0; f < FLAG_COUNT; f++) {
        wp_flag_type t = flags[f].type;
        if (t != FT_INT && t != FT_NUM && t != FT_RATE && t != FT_TIME && t != FT_SIZE) continue;
        numeric++;
        EXPECT(cli_flag_bounded(f), "--%s: a numeric flag without a range in flag_bounds.c", flags[f].name);
        wp_opts o;
        memset(&o, 0, sizeof o);
        EXPECT(cli_set(&o, flags[f].name, flags[f].def, "", err, sizeof err) == 0, "--%s's default '%s': %s",
               flags[f].name, flags[f].def, err);
    }
    expect_bad("train --peak-tflops -1", "--peak-tflops: -1 is out of range: the range is [1e-06, 1000000] TFLOP/s (or 0)");
    expect_bad("train --adam-beta2 1", "--adam-beta2: 1 is out of range: the range is [0, 1)");
    expect_bad("sample x --top-p 0", "--top-p: 0 is out of range: the range is (0, 1]");
    expect_bad("sample x --temperature 1e-308", "--temperature: 1e-308 is too small: the range is [1e-06, 1000000] (or 0)");
    expect_bad("sample x --temperature 1e400", "--temperature: '1e400' is out of range: beyond the largest number");
    expect_bad("sample x --temperature inf", "--temperature: 'inf' is out of range");
    expect_bad("sample x --temperature nan", "--temperature: 'nan' is not a number");
    EXPECT(parse("sample x --temperature 0") == 0 && opts.temperature == 0, "--temperature 0 (greedy): %s", err);

    /* a prompt of 5000 characters, as a chat prompt may be */
    static char prompt[5001];
    memset(prompt, 'a', 5000);
    char *argv[] = {"sample", "x", "--prompt", prompt};
    EXPECT(cli_parse(4, argv, &opts, err, sizeof err) == 0 && strlen(opts.prompt) == 5000,
           "--prompt of 5000 characters: %s", err);
    wp_opts copy = opts; /* TEXT values outlive a copy of the options */
    EXPECT(copy.prompt == opts.prompt && opts.prompt_tokens && !opts.prompt_tokens[0], "--prompt-tokens' default");

    char path[] = "/tmp/wp_test_limits_XXXXXX", line[256];
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    snprintf(line, sizeof line, "sample x --config %s", path);
    static char text[6000];
    snprintf(text, sizeof text, "top-k = 3\nprompt = %.5000s\n", prompt);
    write_file(path, text);
    expect_bad(line, "line 2: longer than 198 characters, the most a config line holds");
    snprintf(text, sizeof text, "prompt = %.180s\n", prompt); /* the longest that fits is taken */
    write_file(path, text);
    EXPECT(parse(line) == 0 && strlen(opts.prompt) == 180, "a 189-character line: %s", err);
    write_file(path, "top-k = 3\n[sampling]\ntemperature = 0.5\ntop-k = 4\ntop-k = 5\n");
    expect_bad(line, "line 4: key 'top-k' is set again (first on line 1");
    EXPECT(strstr(err, path) != NULL, "'%s' names the file", err);
    write_file(path, "top-k = 3\n");
    snprintf(line, sizeof line, "sample x --config %s --top-k 9", path);
    EXPECT(parse(line) == 0 && opts.top_k == 9, "a flag still overrides a file's key: %s", err);
    unlink(path);
    printf("ok: limits: %d numeric flags, each with a range its default lies in; out-of-range and too-small values "
           "name the range; a 5000-character --prompt; long config lines and keys set twice refused\n", numeric);
}

/* --deterministic: true unless given false, and what reaches the kernels' options (a zeroed
 * wp_kern_opts is the deterministic one) */
static void test_deterministic(void) {
    wp_kern_opts ko;
    CHECK(parse("train") == 0 && opts.deterministic, "--deterministic is not true by default: %s", err);
    EXPECT(kern_opts_from_opts(&opts, WP_F32, 1, 0, &ko, err, sizeof err) == 0 && !ko.nondeterministic,
           "the default asked the kernels for the non-deterministic backward");
    CHECK(parse("train --backend cuda --deterministic false") == 0 && !opts.deterministic, "--deterministic false: %s", err);
    opts.backend = WP_BACKEND_CPU; /* the adapter asks the driver about devices only for cuda */
    EXPECT(kern_opts_from_opts(&opts, WP_F32, 1, 0, &ko, err, sizeof err) == 0 && ko.nondeterministic,
           "--deterministic false did not reach wp_kern_opts");
    CHECK(parse("train --deterministic") == 0 && opts.deterministic, "a bare --deterministic is not true");
    expect_bad("train --deterministic=maybe", "--deterministic");
    printf("ok: --deterministic true by default, false reaches wp_kern_opts.nondeterministic\n");
}

int main(void) {
    test_limits();
    test_deterministic();
    test_enums();
    test_job_flags();
    test_bad_flags();
    test_units();
    test_ini_round_trip();
    test_config_file();
    test_model_validation();
    return check_result("cli");
}
