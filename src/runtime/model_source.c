/* One model source for sample and eval (model_source.h). */
#include "model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "fsutil.h"
#include "gguf.h"
#include "kernels.h"
#include "optim.h"
#include "hf_positions.h"

static bool is_file(const char *dir, const char *name) {
    char path[WP_PATH_MAX];
    return snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path && fs_exists(path);
}

static bool is_hf_dir(const char *dir) {
    return is_file(dir, "config.json") && (is_file(dir, "model.safetensors") || is_file(dir, "model.safetensors.index.json"));
}

static wp_result open_checkpoint(const char *path, const wp_opts *o, wp_model_src *s, wp_model_cfg *cfg, char *err, size_t errlen) {
    s->kind = WP_SRC_CHECKPOINT;
    wp_result rc = ckpt_resolve(path, NULL, s->dir, sizeof s->dir, err, errlen);
    if (rc == 0) rc = ckpt_open(&s->ckpt, s->dir, err, errlen);
    if (rc) return rc;
    *cfg = ckpt_info(s->ckpt)->cfg;
    s->step = ckpt_info(s->ckpt)->step;
    s->positions = o->set[FLAG_seq_length] ? o->seq_length : cfg->seq;
    cfg->precision = precision_from_opts(o, cfg->precision);
    if (cfg->has_eos) s->eos[s->n_eos++] = cfg->eos_id; /* carried from --init-from's config.json */
    return 0;
}

/* A pretrained file's shape (o: the flags its config filled) as the one chunk that sample and
 * eval run: its positions as the sequence length, one sequence, fp32 unless --precision. */
static wp_result one_chunk_cfg(wp_opts *o, const wp_opts *given, int64_t positions, wp_model_cfg *cfg, char *err, size_t errlen) {
    o->seq_length = positions;
    o->micro_batch_size = 1;
    o->num_chunks = 1;
    o->chunk_layers[0] = '\0';
    int rc = model_cfg_from_opts(o, 1, cfg, err, errlen);
    cfg->precision = precision_from_opts(given, WP_PREC_FP32);
    return rc;
}

static wp_result open_hf(const char *dir, const wp_opts *given, bool require_seq, wp_model_src *s, wp_model_cfg *cfg, char *err,
                   size_t errlen) {
    static wp_opts o; /* large; a copy the config fills (one source at a time) */
    o = *given;
    s->kind = WP_SRC_HF;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (require_seq && !given->set[FLAG_seq_length])
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-length: %s is a Hugging Face directory, which has no sequence length of its own; give one", dir);
    hf_config c;
    wp_result rc = hf_read_config(dir, &c, err, errlen);
    if (rc == 0) rc = hf_config_apply(&c, &o, err, errlen);
    if (rc == 0) rc = given->set[FLAG_seq_length] ? (s->positions = given->seq_length, WP_OK) : hf_max_positions(dir, &s->positions, err, errlen);
    if (rc == 0) rc = hf_read_eos(dir, s->eos, WP_SRC_MAX_EOS, &s->n_eos, err, errlen);
    return rc ? rc : one_chunk_cfg(&o, given, s->positions, cfg, err, errlen);
}

/* A llama.cpp file, parsed once (s->gguf, kept open for the weights and the tokenizer): its
 * config, its positions from llama.context_length, its eos from tokenizer.ggml.eos_token_id. */
static wp_result open_gguf(const wp_opts *given, wp_model_src *s, wp_model_cfg *cfg, char *err, size_t errlen) {
    static wp_opts o; /* large; a copy the config fills (one source at a time) */
    o = *given;
    s->kind = WP_SRC_GGUF;
    snprintf(s->dir, sizeof s->dir, "%s", gguf_path(s->gguf));
    hf_config c;
    int rc = gguf_read_config(s->gguf, &c, err, errlen);
    if (rc == 0) rc = hf_config_apply(&c, &o, err, errlen);
    if (rc == 0) rc = given->set[FLAG_seq_length] ? (s->positions = given->seq_length, 0) : gguf_max_positions(s->gguf, &s->positions, err, errlen);
    if (rc == 0) rc = one_chunk_cfg(&o, given, s->positions, cfg, err, errlen);
    if (rc == 0 && cfg->has_eos) s->eos[s->n_eos++] = cfg->eos_id;
    return rc;
}

wp_result model_src_open(const char *path, const wp_opts *o, int mb, bool require_seq, wp_model_src *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->step = -1;
    wp_model_cfg cfg;
    WP_TRY(gguf_open_if(path, &s->gguf, err, errlen));
    if (s->gguf)
        WP_TRY(open_gguf(o, s, &cfg, err, errlen)); /* it states its context length: no --seq-length needed */
    else if (is_hf_dir(path))
        WP_TRY(open_hf(path, o, require_seq, s, &cfg, err, errlen));
    else
        WP_TRY(open_checkpoint(path, o, s, &cfg, err, errlen));
    if (s->positions < 1 || s->positions > INT32_MAX)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-length: %lld must be at least 1", (long long)s->positions);
    cfg.seq = (int)s->positions;
    cfg.micro_batch = mb;
    model_cfg_even_chunks(&cfg, 1);
    wp_result rc = layout_build(&cfg, &s->L, err, errlen);
    s->have_layout = rc == 0;
    return rc;
}

void model_src_close(wp_model_src *s) {
    ckpt_close(s->ckpt);
    s->ckpt = NULL;
    if (s->have_layout) layout_free(&s->L);
    s->have_layout = false;
    gguf_close(s->gguf);
    s->gguf = NULL;
}

/* gguf_load_masters fills an optimizer's masters (the contract of hf_load_masters): one holding
 * masters only (no moments, no gradients) on a CPU context, each parameter then handed whole. */
static wp_result read_gguf(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, errlen);
    if (!k) return wp_context(WP_FAILED, err, errlen, "%s", s->dir);
    wp_optim *opt = optim_create_weights(layout_optim_model(&s->L), k, (int[]){0}, 1, err, errlen);
    wp_result rc = opt ? gguf_load_masters(s->gguf, opt, err, errlen) : WP_FAILED;
    float *m = rc == 0 ? optim_buffer(opt, 0, WP_OPT_MASTER) : NULL;
    if (rc == 0 && !m) rc = wp_fail(WP_FAILED, err, errlen, "%s: %s", s->dir, optim_error(opt));
    for (int i = 0; rc == 0 && i < s->L.n_params; i++)
        rc = sink(ctx, &s->L.params[i], 0, layout_param_numel(&s->L.params[i]), m + s->L.params[i].offset, err, errlen);
    optim_destroy(opt);
    kern_destroy(k);
    return rc;
}

static wp_result read_checkpoint(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    size_t most = 1;
    for (int i = 0; i < s->L.n_params; i++)
        if (layout_param_numel(&s->L.params[i]) > most) most = layout_param_numel(&s->L.params[i]);
    float *host = malloc(most * sizeof *host);
    int rc = host ? 0 : wp_fail(WP_FAILED, err, errlen, "%s: out of memory for %zu floats", s->dir, most);
    for (int i = 0; rc == 0 && i < s->L.n_params; i++) {
        rc = ckpt_read_master(s->ckpt, &s->L.params[i], host, err, errlen);
        if (rc == 0) rc = sink(ctx, &s->L.params[i], 0, layout_param_numel(&s->L.params[i]), host, err, errlen);
    }
    free(host);
    return rc;
}

wp_result model_src_read(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    if (s->kind == WP_SRC_GGUF) return read_gguf(s, sink, ctx, err, errlen);
    if (s->kind == WP_SRC_HF) return hf_read_params(s->dir, &s->L, sink, ctx, err, errlen);
    return read_checkpoint(s, sink, ctx, err, errlen);
}

const char *model_src_name(const wp_model_src *s, char *buf, size_t len) {
    if (s->kind == WP_SRC_CHECKPOINT)
        snprintf(buf, len, "%s, step %lld", s->dir, (long long)s->step);
    else
        snprintf(buf, len, "%s %s", s->kind == WP_SRC_GGUF ? "GGUF" : "Hugging Face", s->dir);
    return buf;
}
