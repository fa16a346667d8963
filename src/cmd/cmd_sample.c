/* weipipe sample CKPT_DIR|HF_DIR|MODEL.gguf [--prompt TEXT | --prompt-tokens 1,2,3]
 *   [--chat [--system TEXT] [--chat-template NAME]] [--max-new-tokens N]
 *   [--temperature T] [--top-k K] [--top-p P] [--seed S] [--format text|ids]
 *
 * Generation on one rank with the KV-cache decoder (src/model/decode.h): the weights are a
 * checkpoint's fp32 masters (SAVE/step-K, or SAVE: its latest) or a Hugging Face directory
 * (config.json + safetensors), opened by the model source (src/runtime/model_source.h) and
 * handed to the decoder tensor by tensor (no optimizer state, no second copy of the model),
 * rounded through the weight wire dtype of --precision (the checkpoint's by default, as
 * `weipipe eval` does) and run on --backend. At the end, stderr gets one line: the load time,
 * time to first token, decode tokens/s and peak resident memory.
 *
 * Positions: a checkpoint's model takes its training --seq-length positions, a Hugging Face
 * directory config.json's max_position_embeddings; --seq-length overrides either (RoPE has no
 * limit of its own). A prompt longer than that is refused; generation stops there.
 *
 * Tokens: the tokenizer is --tokenizer, else the model directory's tokenizer.model or
 * tokenizer.json (src/io/tokenizer/tokenizer.h), else the built-in bytes when the vocabulary is 256. --prompt
 * is encoded by it after its BOS (when it has one); --prompt-tokens are the ids as given; without
 * either the model starts from BOS, else token 0. Generation stops after any id of the model's
 * eos list (generation_config.json's eos_token_id, an id or a list; a checkpoint's eos token id),
 * else after the tokenizer's EOS.
 * --format text decodes the generated ids (bytes are written as they come); without a tokenizer
 * only --prompt-tokens and --format ids work.
 *
 * --chat: the prompt is a conversation of one user turn (--prompt), after a system turn when
 * --system is given, rendered by prepare's renderer (src/io/data/chat.h) with the assistant's
 * opening, as transformers' apply_chat_template(messages, add_generation_prompt=True) renders
 * and tokenizes it (no BOS of ours: the template places the one it wants). The template is
 * --chat-template NAME, else the one the tokenizer's source carries: a GGUF's
 * tokenizer.chat_template, the tokenizer_config.json beside the tokenizer file (a checkpoint
 * carries it, an HF directory has it). Generation also stops at the template's end-of-turn
 * token, which --format text leaves out: the answer alone is printed. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "adapters.h"
#include "chat_tokens.h"
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "gguf.h"
#include "log.h"
#include "memlimit.h"
#include "model_source.h"
#include "tokenizer.h"

#define BYTE_VOCAB 256

/* Comma-separated ids, each in [0, V). */
static wp_result parse_ids(const char *s, int64_t V, int32_t **ids, int *n, char *err, size_t errlen) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return wp_fail(WP_FAILED, err, errlen, "sample: out of memory");
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || (*end != ',' && *end != '\0'))
            return wp_fail(WP_BAD_INPUT, err, errlen, "--prompt-tokens: '%s' is not a comma-separated list of token ids", s);
        if (v < 0 || v >= V)
            return wp_fail(WP_BAD_INPUT, err, errlen, "--prompt-tokens: id %lld is outside the model's vocabulary [0, %" PRId64 ")", v, V);
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0') break;
        p = end + 1;
    }
    return 0;
}

static wp_result check_flags(const wp_opts *o, char *err, size_t errlen) {
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--temperature: %g must be 0 (greedy) or positive", o->temperature);
    if (o->top_k < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--top-k: %lld must be 0 (all) or positive", (long long)o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1)) return wp_fail(WP_BAD_INPUT, err, errlen, "--top-p: %g is outside (0, 1]", o->top_p);
    if (o->max_new_tokens < 0 || o->max_new_tokens > INT32_MAX)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--max-new-tokens: %lld must be between 0 and %d", (long long)o->max_new_tokens, INT32_MAX);
    if (o->set[FLAG_seq_length] && (o->seq_length < 1 || o->seq_length > INT32_MAX))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-length: %lld must be at least 1", (long long)o->seq_length);
    if (o->prompt[0] && o->prompt_tokens[0])
        return wp_fail(WP_BAD_INPUT, err, errlen, "--prompt and --prompt-tokens: give one of them");
    if (!o->chat && (o->set[FLAG_system] || o->set[FLAG_chat_template]))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--%s: only with --chat", o->set[FLAG_system] ? "system" : "chat-template");
    if (o->chat && o->prompt_tokens[0])
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chat and --prompt-tokens: --chat renders --prompt's text with the chat template; "
                       "give --prompt");
    if (o->format != WP_FMT_TEXT && o->format != (wp_format)WP_FMT_IDS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--format: '%s' is not one of text, ids (sample)", cli_enum_name(FLAG_format, o->format));
    return 0;
}

/* --tokenizer, else a GGUF model's own (from its metadata), else the model directory's, else
 * bytes for a vocabulary of 256; *tok NULL: none. *gguf: the GGUF file the tokenizer came from
 * (its chat template), --tokenizer's (the caller closes it) or the model's (sm's), else NULL. */
static wp_result open_tokenizer(const wp_opts *o, const wp_model_src *sm, wp_tokenizer **tok, gguf_file **own_gguf,
                                const gguf_file **gguf, char *err, size_t errlen) {
    char path[WP_PATH_MAX] = "";
    *tok = NULL;
    *gguf = NULL;
    int rc = 0;
    char *json = NULL;
    size_t len = 0;
    if (o->tokenizer[0])
        snprintf(path, sizeof path, "%s", o->tokenizer);
    else if (sm->gguf && (rc = gguf_tokenizer_json(sm->gguf, &json, &len, err, errlen)) == 0 && json)
        snprintf(path, sizeof path, "%s", sm->dir); /* a GGUF file's own, from its metadata */
    else if (rc == 0)
        rc = tok_find_in_dir(sm->dir, path, sizeof path, err, errlen);
    if (rc) return rc;
    if (!path[0]) return sm->L.cfg.vocab == BYTE_VOCAB ? tok_open(NULL, tok, err, errlen) : 0;
    if (json) {
        rc = tok_open_mem(json, len, sm->dir, tok, err, errlen);
        free(json);
        *gguf = sm->gguf;
    } else {
        rc = gguf_tok_open(path, tok, own_gguf, err, errlen);
        *gguf = *own_gguf;
    }
    if (rc) return rc;
    if (tok_vocab_size(*tok) > sm->L.cfg.vocab)
    {
        char name[WP_PATH_MAX + 32];
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s's vocabulary of %" PRId64 " exceeds the model's %d (%s)",
                        o->tokenizer[0] ? "--tokenizer" : "sample", path, tok_vocab_size(*tok), sm->L.cfg.vocab,
                        model_src_name(sm, name, sizeof name));
    }
    return 0;
}

/* The prompt's ids: --prompt-tokens; --prompt encoded after the tokenizer's BOS; or BOS / 0. */
static wp_result prompt_ids(const wp_opts *o, const wp_tokenizer *tok, int64_t V, int32_t **ids, int *n, char *err,
                      size_t errlen) {
    if (o->prompt_tokens[0]) return parse_ids(o->prompt_tokens, V, ids, n, err, errlen);
    if (o->prompt[0] && !tok)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--prompt: no tokenizer for the model's vocabulary of %" PRId64 " (give --tokenizer, "
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
        return wp_fail(WP_FAILED, err, errlen, "sample: out of memory");
    }
    *n = 0;
    if (lead) (*ids)[(*n)++] = bos >= 0 ? bos : 0;
    for (size_t i = 0; i < len; i++) (*ids)[(*n)++] = text[i];
    free(text);
    for (int i = 0; i < *n; i++)
        if ((*ids)[i] >= V) return wp_fail(WP_BAD_INPUT, err, errlen, "--prompt: token %d is outside the model's vocabulary %" PRId64, (int)(*ids)[i], V);
    return 0;
}

/* --chat: [system,] user rendered with the assistant's opening and encoded whole (no special
 * tokens added: the template's own are in the text); *eot the template's end-of-turn id. */
static wp_result chat_prompt_ids(const wp_opts *o, const wp_model_src *sm, const wp_tokenizer *tok, const gguf_file *gguf,
                                 int32_t **ids, int *n, int32_t *eot, char *err, size_t errlen) {
    if (!tok)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chat: no tokenizer for the model's vocabulary of %d (give --tokenizer)", sm->L.cfg.vocab);
    /* the template of the tokenizer's source: the GGUF file whose metadata made it */
    chat_template t;
    WP_TRY(chat_template_for(tok, gguf, o->chat_template, &t, err, errlen));
    chat_msg m[2];
    int nm = 0;
    if (o->system[0]) m[nm++] = (chat_msg){.role = "system", .content = o->system, .len = strlen(o->system)};
    m[nm++] = (chat_msg){.role = "user", .content = o->prompt, .len = strlen(o->prompt)};
    chat_text c = {0};
    char why[512];
    wp_result rc = chat_render(&t, m, nm, true, &c, why, sizeof why);
    if (rc) rc = wp_fail(rc, err, errlen, "--chat (%s template): %s", chat_family_name(t.family), why);
    int32_t *e = NULL, *text = NULL;
    size_t ne = 0, len = 0;
    const char *end = chat_end_of_turn(&t);
    if (rc == 0) rc = tok_encode(tok, end, strlen(end), &e, &ne, err, errlen);
    if (rc == 0 && ne != 1)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "--chat (%s template): its end of turn '%s' is %zu tokens of the tokenizer, not one",
                     chat_family_name(t.family), end, ne);
    if (rc == 0) *eot = e[0];
    if (rc == 0) rc = tok_encode(tok, c.text, c.len, &text, &len, err, errlen);
    if (rc == 0 && len > INT32_MAX) rc = wp_fail(WP_BAD_INPUT, err, errlen, "--prompt: too long");
    for (size_t i = 0; rc == 0 && i < len; i++)
        if (text[i] >= sm->L.cfg.vocab)
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "--chat: token %d is outside the model's vocabulary %d", (int)text[i], sm->L.cfg.vocab);
    if (rc == 0) {
        *ids = text;
        *n = (int)len;
        text = NULL;
    }
    free(text);
    free(e);
    chat_text_free(&c);
    chat_template_free(&t);
    return rc;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    bool ids, bytes; /* --format ids; text of the byte tokenizer (written as it comes) */
    int count;
    int chosen;         /* tokens chosen so far */
    double first, last; /* when the first and the latest were chosen */
} printer;

static void print_token(int32_t id, void *ctx) {
    printer *p = ctx;
    p->last = now();
    if (p->chosen++ == 0) p->first = p->last;
    if (p->ids)
        printf("%s%d", p->count ? "," : "", (int)id);
    else if (p->bytes)
        putchar(id);
    else
        return; /* decoded at the end: a subword's text may depend on its neighbours */
    p->count++;
    fflush(stdout);
}

/* The weights into the decoder, one piece at a time, rounded through the wire dtype first (what
 * training computes with, as eval). */
typedef struct {
    wp_decoder *D;
    wp_kern *k;
    wp_dtype wire;
} weight_sink;

static wp_result to_decoder(void *ctx, const wp_param *p, size_t first, size_t n, float *vals, char *err, size_t errlen) {
    weight_sink *w = ctx;
    for (size_t i = 0; i < n; i++) vals[i] = wp_round_to(vals[i], w->wire);
    if (decoder_set_param(w->D, p, first, n, vals) != 0)
        return wp_fail(WP_FAILED, err, errlen, "sample: %s: %s", p->name, kern_error(w->k) ? kern_error(w->k) : "out of memory");
    return 0;
}

/* Peak resident memory in MiB: /proc/self/status's VmHWM, this program's own (getrusage's
 * ru_maxrss carries over the high mark of the process that forked us, a Python test's, say);
 * ru_maxrss where /proc is missing. */
static double peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    struct rusage ru;
    if (kb < 0 && getrusage(RUSAGE_SELF, &ru) == 0) kb = ru.ru_maxrss;
    return kb < 0 ? -1.0 : (double)kb / 1024.0;
}

/* One line on stderr: what a user tuning threads or comparing runtimes reads. */
static void report_speed(const printer *pr, double t_start, double t_loaded) {
    double decode = pr->chosen > 1 ? (pr->chosen - 1) / (pr->last - pr->first) : 0.0;
    /* on one terminal the text ends without a newline: start the line on its own */
    if (isatty(STDOUT_FILENO) && isatty(STDERR_FILENO)) fputc('\n', stderr);
    fprintf(stderr, "sample: weights loaded in %.2f s; first token after %.2f s; %d tokens, %.1f tokens/s after the "
            "first; peak resident memory %.0f MiB\n", t_loaded - t_start, pr->chosen ? pr->first - t_start : 0.0,
            pr->chosen, decode, peak_rss_mib());
}

/* The ids that end generation: the model's eos list, else the tokenizer's EOS, else none. */
static int stop_ids(const wp_model_src *sm, const wp_tokenizer *tok, int32_t *eos) {
    if (sm->n_eos > 0) {
        memcpy(eos, sm->eos, (size_t)sm->n_eos * sizeof *eos);
        return sm->n_eos;
    }
    if (tok && tok_eos(tok) >= 0) {
        eos[0] = tok_eos(tok);
        return 1;
    }
    return 0;
}

/* eot: a chat template's end-of-turn id, also a stop id, left out of the text (-1: none) */
static int generate(wp_model_src *sm, const wp_opts *o, const wp_tokenizer *tok, const int32_t *prompt, int P, int32_t eot,
                    double t_start, char *err, size_t errlen) {
    const wp_model_cfg *cfg = &sm->L.cfg;
    int64_t room = sm->positions - P, want = o->max_new_tokens;
    int max_new = (int)(want < room ? want : room);
    if (want > room)
        wp_warn("sample: %lld new tokens asked, the model's %" PRId64 " positions leave room for %d after the %d-token prompt",
                (long long)want, sm->positions, max_new, P);
    int cache = P + (max_new > 0 ? max_new - 1 : 0); /* the last token chosen is never run */
    /* the start-up memory check (as train's), before anything is allocated */
    size_t kv = 0, need = decoder_bytes(&sm->L, o->backend == WP_BACKEND_CPU ? WP_F32 : precision_act_dtype(cfg->precision),
                                       cache, &kv);
    need += (size_t)cfg->vocab * (sizeof(int32_t) + sizeof(double) + sizeof(float)); /* sampler, logits */
    char culprit[WP_PATH_MAX + 96], parts[160];
    if (kv * 2 > need)
        snprintf(culprit, sizeof culprit, "--max-new-tokens %lld after a %d-token prompt", (long long)max_new, P);
    else
        snprintf(culprit, sizeof culprit, "the model %s", sm->dir);
    snprintf(parts, sizeof parts, "weights and scratch %.1f MiB, KV cache of %d positions %.1f MiB", (double)(need - kv) / 1048576.0,
             cache, (double)kv / 1048576.0);
    WP_TRY(memlimit_check("sample", culprit, (double)need, parts, (double)o->device_memory, "--device-memory",
                          o->backend == WP_BACKEND_CPU, err, errlen));
    wp_kern_opts ko;
    char kerr[512];
    if (kern_opts_from_opts(o, precision_act_dtype(cfg->precision), (int)o->threads, 0 /* one process: local rank 0 */,
                            &ko, kerr, sizeof kerr))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s", kerr);
    wp_kern *k = kern_create(&ko, kerr, sizeof kerr);
    if (!k) return wp_fail(WP_FAILED, err, errlen, "--backend %s: %s", cli_enum_name(FLAG_backend, o->backend), kerr);
    wp_decoder *D = decoder_create(&sm->L, k, cache, kerr, sizeof kerr);
    wp_sampling sp = {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p};
    /* A vocabulary padded beyond the tokenizer's (to a multiple of 64 or 128, as many models
     * are): the padded rows are no tokens, and one chosen could not be decoded (the run ended
     * with nothing printed). The sampler sees only the tokenizer's ids: the padded ones are
     * masked out, in every mode. */
    int64_t real = tok && tok_vocab_size(tok) > 0 && tok_vocab_size(tok) < cfg->vocab ? tok_vocab_size(tok) : cfg->vocab;
    if (real < cfg->vocab && !o->quiet)
        wp_warn("sample: the model's vocabulary of %d is padded beyond the tokenizer's %lld ids: ids %lld..%d are never "
                "sampled", cfg->vocab, (long long)real, (long long)real, cfg->vocab - 1);
    wp_sampler *S = sampler_create(real, &sp, (uint64_t)o->seed);
    int32_t *out = malloc(((size_t)max_new + 1) * sizeof *out);
    int rc = D && S && out ? 0 : wp_fail(WP_FAILED, err, errlen, "sample: %s", D ? "out of memory" : kerr);
    weight_sink ws = {.D = D, .k = k, .wire = precision_weight_dtype(cfg->precision)};
    if (rc == 0) rc = model_src_read(sm, to_decoder, &ws, err, errlen);
    double t_loaded = now();
    printer pr = {.ids = o->format == (wp_format)WP_FMT_IDS, .bytes = tok && strcmp(tok_kind(tok), "bytes") == 0};
    int32_t eos[WP_SRC_MAX_EOS + 1];
    int n_eos = stop_ids(sm, tok, eos), n = 0;
    bool eot_listed = false;
    for (int i = 0; i < n_eos; i++) eot_listed |= eos[i] == eot;
    if (eot >= 0 && !eot_listed) eos[n_eos++] = eot;
    if (rc == 0 && max_new > 0)
        rc = decoder_generate(D, S, prompt, P, max_new, eos, n_eos, out, &n, print_token, &pr, err, errlen);
    if (!pr.ids && !pr.bytes && n > 0) {
        /* what was generated is printed even when generation failed part-way: then the error;
         * with --chat the answer alone, not its end-of-turn token */
        char *text = NULL, derr[512];
        size_t shown = eot >= 0 && out[n - 1] == eot ? (size_t)n - 1 : (size_t)n;
        int drc = tok_decode(tok, out, shown, &text, derr, sizeof derr);
        if (drc == 0) fputs(text, stdout);
        if (drc != 0 && rc == 0) rc = wp_fail(drc, err, errlen, "%s", derr);
        free(text);
    }
    if (rc != 0 && n > 0) fflush(stdout);
    if (rc == 0 && (pr.ids || isatty(STDOUT_FILENO))) putchar('\n'); /* text in a pipe: the bytes alone */
    if (rc == 0 && fflush(stdout) != 0) rc = wp_fail(WP_FAILED, err, errlen, "sample: writing stdout: %s", strerror(errno));
    if (rc == 0) report_speed(&pr, t_start, t_loaded);
    free(out);
    sampler_destroy(S);
    decoder_destroy(D);
    kern_destroy(k);
    return rc;
}

int cmd_sample(const wp_opts *o) {
    double t_start = now();
    if (o->nargs != 1) {
        wp_error("sample: expected one CKPT_DIR or Hugging Face directory, got %d arguments", o->nargs);
        return 2;
    }
    char err[2 * WP_PATH_MAX];
    wp_model_src sm;
    int32_t *prompt = NULL;
    int P = 0;
    wp_tokenizer *tok = NULL;
    gguf_file *tok_gguf = NULL;     /* --tokenizer FILE.gguf, parsed once */
    const gguf_file *gguf = NULL;   /* the GGUF file the tokenizer came from (its chat template) */
    int rc = check_flags(o, err, sizeof err);
    if (rc == 0) rc = model_src_open(o->args[0], o, 1, false, &sm, err, sizeof err);
    else memset(&sm, 0, sizeof sm);
    if (rc == 0) rc = open_tokenizer(o, &sm, &tok, &tok_gguf, &gguf, err, sizeof err);
    if (rc == 0 && o->format == WP_FMT_TEXT && !tok)
        rc = wp_fail(WP_BAD_INPUT, err, sizeof err, "--format text: no tokenizer for the model's vocabulary of %d (give --tokenizer, "
                      "or use --format ids)", sm.L.cfg.vocab);
    int32_t eot = -1;
    if (rc == 0 && o->chat) rc = chat_prompt_ids(o, &sm, tok, gguf, &prompt, &P, &eot, err, sizeof err);
    else if (rc == 0) rc = prompt_ids(o, tok, sm.L.cfg.vocab, &prompt, &P, err, sizeof err);
    if (rc == 0 && P > sm.positions)
        rc = wp_fail(WP_BAD_INPUT, err, sizeof err, "%s: the prompt's %d tokens exceed the model's %" PRId64 " positions (%s)",
                      o->prompt_tokens[0] ? "--prompt-tokens" : "--prompt", P, sm.positions, sm.dir);
    if (rc == 0 && P == 0) rc = wp_fail(WP_BAD_INPUT, err, sizeof err, "--chat: the rendered prompt has no tokens");
    if (rc == 0) rc = generate(&sm, o, tok, prompt, P, eot, t_start, err, sizeof err);
    if (rc) wp_error("%s", err);
    free(prompt);
    tok_close(tok);
    gguf_close(tok_gguf);
    model_src_close(&sm);
    return rc;
}
