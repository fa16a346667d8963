/* One model source for sample and eval (model_source.h). */
#include "model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "fsutil.h"
#include "hf_positions.h"

static wp_precision precision_of(const wp_opts *o, wp_precision def) {
    if (!o->set[FLAG_precision]) return def;
    return strcmp(o->precision, "fp32") == 0 ? WP_PREC_FP32 : strcmp(o->precision, "bf16") == 0 ? WP_PREC_BF16 : WP_PREC_MIXED;
}

static bool is_file(const char *dir, const char *name) {
    char path[WP_PATH_MAX];
    return snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path && fs_exists(path);
}

static bool is_hf_dir(const char *dir) {
    return is_file(dir, "config.json") && (is_file(dir, "model.safetensors") || is_file(dir, "model.safetensors.index.json"));
}

static int open_checkpoint(const char *path, const wp_opts *o, wp_model_src *s, wp_model_cfg *cfg, char *err, size_t errlen) {
    s->kind = WP_SRC_CHECKPOINT;
    int rc = ckpt_resolve(path, NULL, s->dir, sizeof s->dir, err, errlen);
    if (rc == 0) rc = ckpt_open(&s->ckpt, s->dir, err, errlen);
    if (rc) return rc;
    *cfg = ckpt_info(s->ckpt)->cfg;
    s->step = ckpt_info(s->ckpt)->step;
    s->positions = o->set[FLAG_seq_length] ? o->seq_length : cfg->seq;
    cfg->precision = precision_of(o, cfg->precision);
    if (cfg->has_eos) s->eos[s->n_eos++] = cfg->eos_id; /* carried from --init-from's config.json */
    return 0;
}

static int open_hf(const char *dir, const wp_opts *given, bool require_seq, wp_model_src *s, wp_model_cfg *cfg, char *err,
                   size_t errlen) {
    static wp_opts o; /* large; a copy the config fills (one source at a time) */
    o = *given;
    s->kind = WP_SRC_HF;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (require_seq && !given->set[FLAG_seq_length])
        return io_fail(err, errlen, 2, "--seq-length: %s is a Hugging Face directory, which has no sequence length of its own; give one", dir);
    int rc = hf_config_apply(dir, &o, err, errlen);
    if (rc == 0) rc = given->set[FLAG_seq_length] ? (s->positions = given->seq_length, 0) : hf_max_positions(dir, &s->positions, err, errlen);
    if (rc == 0) rc = hf_read_eos(dir, s->eos, WP_SRC_MAX_EOS, &s->n_eos, err, errlen);
    if (rc) return rc;
    o.seq_length = s->positions;
    o.micro_batch_size = 1;
    o.num_chunks = 1;
    o.chunk_layers[0] = '\0';
    rc = model_cfg_from_opts(&o, 1, cfg, err, errlen);
    cfg->precision = precision_of(given, WP_PREC_FP32);
    return rc;
}

int model_src_open(const char *path, const wp_opts *o, int mb, bool require_seq, wp_model_src *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->step = -1;
    wp_model_cfg cfg;
    int rc;
    /* GGUF: a path ending in .gguf opens here, as open_hf does: gguf_read_config (src/io/gguf.h)
     * into an hf_config, applied to a copy of the flags (hf_config_apply's counterpart), with
     * kind WP_SRC_GGUF and the eos the file's tokenizer.ggml.eos_token_id names. */
    if (is_hf_dir(path))
        rc = open_hf(path, o, require_seq, s, &cfg, err, errlen);
    else
        rc = open_checkpoint(path, o, s, &cfg, err, errlen);
    if (rc) return rc;
    if (s->positions < 1 || s->positions > INT32_MAX)
        return io_fail(err, errlen, 2, "--seq-length: %lld must be at least 1", (long long)s->positions);
    cfg.seq = (int)s->positions;
    cfg.micro_batch = mb;
    model_cfg_even_chunks(&cfg, 1);
    rc = layout_build(&cfg, &s->L, err, errlen);
    s->have_layout = rc == 0;
    return rc;
}

void model_src_close(wp_model_src *s) {
    ckpt_close(s->ckpt);
    s->ckpt = NULL;
    if (s->have_layout) layout_free(&s->L);
    s->have_layout = false;
}

static int read_checkpoint(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    size_t most = 1;
    for (int i = 0; i < s->L.n_params; i++)
        if (layout_param_numel(&s->L.params[i]) > most) most = layout_param_numel(&s->L.params[i]);
    float *host = malloc(most * sizeof *host);
    int rc = host ? 0 : io_fail(err, errlen, 1, "%s: out of memory for %zu floats", s->dir, most);
    for (int i = 0; rc == 0 && i < s->L.n_params; i++) {
        rc = ckpt_read_master(s->ckpt, &s->L.params[i], host, err, errlen);
        if (rc == 0) rc = sink(ctx, &s->L.params[i], 0, layout_param_numel(&s->L.params[i]), host, err, errlen);
    }
    free(host);
    return rc;
}

int model_src_read(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    /* GGUF: gguf_load_masters fills an optimizer, so: optim_create_weights(layout_optim_model(
     * &s->L), a CPU kern, {0}, 1) (masters only, optim.h), gguf_load_masters into it, then each
     * parameter p handed whole to sink (first 0) from optim_buffer(o, p->chunk, WP_OPT_MASTER) + p->offset. */
    if (s->kind == WP_SRC_HF) return hf_read_params(s->dir, &s->L, sink, ctx, err, errlen);
    return read_checkpoint(s, sink, ctx, err, errlen);
}

const char *model_src_name(const wp_model_src *s, char *buf, size_t len) {
    if (s->kind == WP_SRC_CHECKPOINT)
        snprintf(buf, len, "%s, step %lld", s->dir, (long long)s->step);
    else
        snprintf(buf, len, "Hugging Face %s", s->dir);
    return buf;
}
