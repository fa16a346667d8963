/* weipipe sample CKPT_DIR|HF_DIR [--prompt TEXT | --prompt-tokens 1,2,3] [--max-new-tokens N]
 *   [--temperature T] [--top-k K] [--top-p P] [--seed S] [--format text|ids]
 *
 * Generation on one rank with the KV-cache decoder (src/model/decode.h): the weights are a
 * checkpoint's fp32 masters (SAVE/step-K, or SAVE: its latest) or a Hugging Face directory
 * (config.json + safetensors, read by hf_import), rounded through the weight wire dtype of
 * --precision (the checkpoint's by default, as `weipipe eval` does) and run on --backend.
 *
 * Positions: a checkpoint's model takes its training --seq-length positions, a Hugging Face
 * directory config.json's max_position_embeddings; --seq-length overrides either (RoPE has no
 * limit of its own). A prompt longer than that is refused; generation stops there.
 *
 * Tokens: the tokenizer is --tokenizer, else the model directory's tokenizer.model or
 * tokenizer.json (src/io/tokenizer.h), else the built-in bytes when the vocabulary is 256. --prompt
 * is encoded by it after its BOS (when it has one); --prompt-tokens are the ids as given; without
 * either the model starts from BOS, else token 0. Generation stops after the tokenizer's EOS.
 * --format text decodes the generated ids (bytes are written as they come); without a tokenizer
 * only --prompt-tokens and --format ids work. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters.h"
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "gguf.h"
#include "hf.h"
#include "hf_positions.h"
#include "log.h"
#include "tokenizer.h"

#define BYTE_VOCAB 256

typedef struct {
    wp_layout L;
    bool have_layout;
    float *params;      /* host fp32, layout order */
    int64_t positions;  /* what the model takes */
    char source[WP_PATH_MAX]; /* the step or Hugging Face directory read */
} sample_model;

static bool is_file(const char *dir, const char *name) {
    char path[WP_PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return false;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_hf_dir(const char *dir) {
    return is_file(dir, "config.json") &&
           (is_file(dir, "model.safetensors") || is_file(dir, "model.safetensors.index.json"));
}

static wp_precision precision_of(const wp_opts *o, wp_precision def) {
    if (!o->set[FLAG_precision]) return def;
    return strcmp(o->precision, "fp32") == 0 ? WP_PREC_FP32 : strcmp(o->precision, "bf16") == 0 ? WP_PREC_BF16 : WP_PREC_MIXED;
}

static int alloc_params(sample_model *sm, char *err, size_t errlen) {
    sm->params = malloc(sm->L.total_numel * sizeof *sm->params);
    if (!sm->params) return io_fail(err, errlen, 1, "sample: out of memory for %zu weights", sm->L.total_numel);
    return 0;
}

static int load_checkpoint(sample_model *sm, const wp_opts *o, char *err, size_t errlen) {
    char dir[WP_PATH_MAX];
    wp_ckpt *c = NULL;
    int rc = ckpt_resolve(o->args[0], NULL, dir, sizeof dir, err, errlen);
    if (rc == 0) rc = ckpt_open(&c, dir, err, errlen);
    if (rc) return rc;
    wp_model_cfg cfg = ckpt_info(c)->cfg;
    cfg.mb = 1;
    cfg.precision = precision_of(o, cfg.precision);
    model_cfg_even_chunks(&cfg, 1);
    sm->positions = o->set[FLAG_seq_length] ? o->seq_length : cfg.seq;
    snprintf(sm->source, sizeof sm->source, "%s", dir);
    rc = layout_build(&cfg, &sm->L, err, errlen);
    sm->have_layout = rc == 0;
    if (rc == 0) rc = alloc_params(sm, err, errlen);
    for (int i = 0; rc == 0 && i < sm->L.n_params; i++)
        rc = ckpt_read_master(c, &sm->L.params[i], sm->params + sm->L.params[i].offset, err, errlen);
    ckpt_close(c);
    return rc;
}

static int load_hf(sample_model *sm, const wp_opts *given, char *err, size_t errlen) {
    static wp_opts o; /* large; a copy the config fills */
    o = *given;
    const char *dir = given->args[0];
    bool gguf = gguf_is_file(dir); /* a llama.cpp file: read as the directory would be */
    snprintf(sm->source, sizeof sm->source, "%s", dir);
    wp_model_cfg cfg;
    int rc = hf_config_apply(dir, &o, err, errlen);
    if (rc == 0) {
        if (given->set[FLAG_seq_length])
            sm->positions = given->seq_length;
        else
            rc = gguf ? gguf_max_positions(dir, &sm->positions, err, errlen) : hf_max_positions(dir, &sm->positions, err, errlen);
    }
    if (rc == 0) {
        o.seq_length = sm->positions;
        o.micro_batch_size = 1;
        o.num_chunks = 1;
        o.chunk_layers[0] = '\0';
        rc = model_cfg_from_opts(&o, 1, &cfg, err, errlen);
    }
    if (rc == 0) {
        model_cfg_even_chunks(&cfg, 1);
        cfg.precision = precision_of(given, WP_PREC_FP32); /* the directory's weights as they are */
        rc = layout_build(&cfg, &sm->L, err, errlen);
        sm->have_layout = rc == 0;
    }
    if (rc == 0) rc = alloc_params(sm, err, errlen);
    if (rc) return rc;
    /* hf_load_masters fills an optimizer's masters: one on the CPU, only for loading */
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    char kerr[512];
    wp_kern *k = kern_create(&ko, kerr, sizeof kerr);
    if (!k) return io_fail(err, errlen, 1, "sample: %s", kerr);
    wp_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    wp_optim *opt = optim_create(layout_optim_model(&sm->L), k, (int[]){0}, 1, &hp, err, errlen);
    rc = !opt ? 1 : gguf ? gguf_load_masters(dir, opt, err, errlen) : hf_load_masters(dir, opt, err, errlen);
    if (rc == 0 && optim_get(opt, 0, WP_OPT_MASTER, sm->params) != 0)
        rc = io_fail(err, errlen, 1, "sample: reading the masters: %s", optim_error(opt));
    optim_destroy(opt);
    kern_destroy(k);
    return rc;
}

/* Comma-separated ids, each in [0, V). */
static int parse_ids(const char *s, int64_t V, int32_t **ids, int *n, char *err, size_t errlen) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return io_fail(err, errlen, 1, "sample: out of memory");
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || (*end != ',' && *end != '\0'))
            return cli_fail(err, errlen, "--prompt-tokens: '%s' is not a comma-separated list of token ids", s);
        if (v < 0 || v >= V)
            return cli_fail(err, errlen, "--prompt-tokens: id %lld is outside the model's vocabulary [0, %" PRId64 ")", v, V);
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0') break;
        p = end + 1;
    }
    return 0;
}

static int check_flags(const wp_opts *o, char *err, size_t errlen) {
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return cli_fail(err, errlen, "--temperature: %g must be 0 (greedy) or positive", o->temperature);
    if (o->top_k < 0) return cli_fail(err, errlen, "--top-k: %lld must be 0 (all) or positive", (long long)o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1)) return cli_fail(err, errlen, "--top-p: %g is outside (0, 1]", o->top_p);
    if (o->max_new_tokens < 0 || o->max_new_tokens > INT32_MAX)
        return cli_fail(err, errlen, "--max-new-tokens: %lld must be between 0 and %d", (long long)o->max_new_tokens, INT32_MAX);
    if (o->set[FLAG_seq_length] && (o->seq_length < 1 || o->seq_length > INT32_MAX))
        return cli_fail(err, errlen, "--seq-length: %lld must be at least 1", (long long)o->seq_length);
    if (o->prompt[0] && o->prompt_tokens[0])
        return cli_fail(err, errlen, "--prompt and --prompt-tokens: give one of them");
    if (strcmp(o->format, "text") != 0 && strcmp(o->format, "ids") != 0)
        return cli_fail(err, errlen, "--format: '%s' is not one of text, ids (sample)", o->format);
    return 0;
}

/* --tokenizer, else the model directory's, else bytes for a vocabulary of 256; *tok NULL: none. */
static int open_tokenizer(const wp_opts *o, const sample_model *sm, wp_tokenizer **tok, char *err, size_t errlen) {
    char path[WP_PATH_MAX] = "";
    *tok = NULL;
    int rc = 0;
    if (o->tokenizer[0])
        snprintf(path, sizeof path, "%s", o->tokenizer);
    else
        rc = tok_find_in_dir(sm->source, path, sizeof path, err, errlen);
    if (rc) return rc;
    if (!path[0]) return sm->L.cfg.vocab == BYTE_VOCAB ? tok_open(NULL, tok, err, errlen) : 0;
    if ((rc = tok_open(path, tok, err, errlen)) != 0) return rc;
    if (tok_vocab_size(*tok) > sm->L.cfg.vocab)
        return cli_fail(err, errlen, "%s: %s's vocabulary of %" PRId64 " exceeds the model's %d",
                        o->tokenizer[0] ? "--tokenizer" : "sample", path, tok_vocab_size(*tok), sm->L.cfg.vocab);
    return 0;
}

/* The prompt's ids: --prompt-tokens; --prompt encoded after the tokenizer's BOS; or BOS / 0. */
static int prompt_ids(const wp_opts *o, const wp_tokenizer *tok, int64_t V, int32_t **ids, int *n, char *err,
                      size_t errlen) {
    if (o->prompt_tokens[0]) return parse_ids(o->prompt_tokens, V, ids, n, err, errlen);
    if (o->prompt[0] && !tok)
        return cli_fail(err, errlen, "--prompt: no tokenizer for the model's vocabulary of %" PRId64 " (give --tokenizer, "
                        "or --prompt-tokens)", V);
    int32_t *text = NULL;
    size_t len = 0;
    if (o->prompt[0]) {
        int rc = tok_encode(tok, o->prompt, strlen(o->prompt), &text, &len, err, errlen);
        if (rc) return rc;
    }
    int32_t bos = tok && tok_bos(tok) >= 0 ? tok_bos(tok) : -1;
    bool lead = bos >= 0 || len == 0; /* BOS first; an empty prompt starts from token 0 */
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids) {
        free(text);
        return io_fail(err, errlen, 1, "sample: out of memory");
    }
    *n = 0;
    if (lead) (*ids)[(*n)++] = bos >= 0 ? bos : 0;
    for (size_t i = 0; i < len; i++) (*ids)[(*n)++] = text[i];
    free(text);
    for (int i = 0; i < *n; i++)
        if ((*ids)[i] >= V) return cli_fail(err, errlen, "--prompt: token %d is outside the model's vocabulary %" PRId64, (int)(*ids)[i], V);
    return 0;
}

typedef struct {
    bool ids, bytes; /* --format ids; text of the byte tokenizer (written as it comes) */
    int count;
} printer;

static void print_token(int32_t id, void *ctx) {
    printer *p = ctx;
    if (p->ids)
        printf("%s%d", p->count ? "," : "", (int)id);
    else if (p->bytes)
        putchar(id);
    else
        return; /* decoded at the end: a subword's text may depend on its neighbours */
    p->count++;
    fflush(stdout);
}

static int generate(const sample_model *sm, const wp_opts *o, const wp_tokenizer *tok, const int32_t *prompt, int P,
                    char *err, size_t errlen) {
    const wp_model_cfg *cfg = &sm->L.cfg;
    int64_t room = sm->positions - P, want = o->max_new_tokens;
    int max_new = (int)(want < room ? want : room);
    if (want > room)
        wp_warn("sample: %lld new tokens asked, the model's %" PRId64 " positions leave room for %d after the %d-token prompt",
                (long long)want, sm->positions, max_new, P);
    int cache = P + (max_new > 0 ? max_new - 1 : 0); /* the last token chosen is never run */
    wp_kern_opts ko;
    char kerr[512];
    if (kern_opts_from_opts(o, precision_act_dtype(cfg->precision), (int)o->threads, 0 /* one process: local rank 0 */,
                            &ko, kerr, sizeof kerr))
        return io_fail(err, errlen, 2, "%s", kerr);
    wp_kern *k = kern_create(&ko, kerr, sizeof kerr);
    if (!k) return io_fail(err, errlen, 1, "--backend %s: %s", o->backend, kerr);
    wp_decoder *D = decoder_create(&sm->L, k, cache, kerr, sizeof kerr);
    wp_sampling sp = {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p};
    wp_sampler *S = sampler_create(cfg->vocab, &sp, (uint64_t)o->seed);
    int32_t *out = malloc(((size_t)max_new + 1) * sizeof *out);
    int rc = D && S && out ? 0 : io_fail(err, errlen, 1, "sample: %s", D ? "out of memory" : kerr);
    if (rc == 0 && decoder_set_params(D, sm->params) != 0) rc = io_fail(err, errlen, 1, "sample: %s", kern_error(k));
    printer pr = {.ids = strcmp(o->format, "ids") == 0, .bytes = tok && strcmp(tok_kind(tok), "bytes") == 0};
    int n = 0;
    if (rc == 0 && max_new > 0)
        rc = decoder_generate(D, S, prompt, P, max_new, tok ? tok_eos(tok) : -1, out, &n, print_token, &pr, err, errlen);
    if (rc == 0 && !pr.ids && !pr.bytes) {
        char *text = NULL;
        rc = tok_decode(tok, out, (size_t)n, &text, err, errlen);
        if (rc == 0) fputs(text, stdout);
        free(text);
    }
    if (rc == 0 && (pr.ids || isatty(STDOUT_FILENO))) putchar('\n'); /* text in a pipe: the bytes alone */
    if (rc == 0 && fflush(stdout) != 0) rc = io_fail(err, errlen, 1, "sample: writing stdout: %s", strerror(errno));
    free(out);
    sampler_destroy(S);
    decoder_destroy(D);
    kern_destroy(k);
    return rc;
}

int cmd_sample(const wp_opts *o) {
    if (o->nargs != 1) {
        wp_error("sample: expected one CKPT_DIR or Hugging Face directory, got %d arguments", o->nargs);
        return 2;
    }
    char err[2 * WP_PATH_MAX];
    sample_model sm = {0};
    int32_t *prompt = NULL;
    int P = 0;
    wp_tokenizer *tok = NULL;
    int rc = check_flags(o, err, sizeof err);
    if (rc == 0) rc = is_hf_dir(o->args[0]) || gguf_is_file(o->args[0]) ? load_hf(&sm, o, err, sizeof err) : load_checkpoint(&sm, o, err, sizeof err);
    if (rc == 0) rc = open_tokenizer(o, &sm, &tok, err, sizeof err);
    if (rc == 0 && strcmp(o->format, "text") == 0 && !tok)
        rc = cli_fail(err, sizeof err, "--format text: no tokenizer for the model's vocabulary of %d (give --tokenizer, "
                      "or use --format ids)", sm.L.cfg.vocab);
    if (rc == 0) rc = prompt_ids(o, tok, sm.L.cfg.vocab, &prompt, &P, err, sizeof err);
    if (rc == 0 && P > sm.positions)
        rc = cli_fail(err, sizeof err, "%s: the prompt's %d tokens exceed the model's %" PRId64 " positions (%s)",
                      o->prompt_tokens[0] ? "--prompt-tokens" : "--prompt", P, sm.positions, sm.source);
    if (rc == 0) {
        /* masters rounded through the wire dtype, what training computes with (as eval) */
        wp_dtype wire = precision_weight_dtype(sm.L.cfg.precision);
        for (size_t i = 0; i < sm.L.total_numel; i++) sm.params[i] = wp_round_to(sm.params[i], wire);
        rc = generate(&sm, o, tok, prompt, P, err, sizeof err);
    }
    if (rc) wp_error("%s", err);
    free(prompt);
    tok_close(tok);
    free(sm.params);
    if (sm.have_layout) layout_free(&sm.L);
    return rc;
}
