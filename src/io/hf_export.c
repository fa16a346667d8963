/* Export of a checkpoint's masters as a Hugging Face Llama directory. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "safetensors.h"

static const char *torch_dtype(wp_dtype t) { return t == WP_F16 ? "float16" : t == WP_BF16 ? "bfloat16" : "float32"; }

int hf_write_config(const wp_model_cfg *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen) {
    /* `weipipe prepare` starts every document with byte 0, so for the byte vocabulary 0 is
     * both the beginning and the end of a document; other vocabularies are not ours to name */
    json_t *special = c->vocab == 256 ? json_integer(0) : json_null();
    json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s, s:s, s:b, s:b, s:n,"
                          " s:f, s:f, s:i, s:b, s:O, s:o}",
                          "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", c->h,
                          "intermediate_size", c->ffn, "num_hidden_layers", c->n_layers, "num_attention_heads",
                          c->n_heads, "num_key_value_heads", c->n_kv_heads, "head_dim", c->head_dim, "vocab_size",
                          c->vocab, "rms_norm_eps", c->norm_eps, "rope_theta", c->rope_theta,
                          "max_position_embeddings", c->seq, "tie_word_embeddings", 0, "torch_dtype", torch_dtype(dtype),
                          "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0, "rope_scaling", "initializer_range",
                          c->init_std, "attention_dropout", 0.0, "pretraining_tp", 1, "use_cache", 1, "bos_token_id",
                          special, "eos_token_id", special);
    char path[WP_PATH_MAX];
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(j);
    if (!text) return io_fail(err, errlen, 1, "%s: cannot build config.json", out_dir);
    int rc = fs_join(path, sizeof path, out_dir, "config.json", err, errlen);
    if (rc == 0) rc = fs_write_file_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

static st_desc *model_descs(const wp_layout *L, wp_dtype dtype) {
    st_desc *d = calloc((size_t)L->n_params, sizeof *d);
    for (int i = 0; d && i < L->n_params; i++) {
        const wp_param *p = &L->params[i];
        snprintf(d[i].name, sizeof d[i].name, "%s", p->name);
        d[i].dtype = dtype;
        d[i].ndim = p->cols == 1 ? 1 : 2;
        d[i].shape[0] = p->rows;
        d[i].shape[1] = p->cols;
    }
    return d;
}

/* Each tensor read from the checkpoint, converted, and appended. */
static int put_tensors(const wp_ckpt *c, const wp_layout *L, st_writer *w, wp_dtype dtype, char *err, size_t errlen) {
    size_t most = 1;
    for (int i = 0; i < L->n_params; i++)
        if ((size_t)L->params[i].rows * L->params[i].cols > most) most = (size_t)L->params[i].rows * L->params[i].cols;
    float *f32 = malloc(most * sizeof *f32);
    uint16_t *half = malloc(most * sizeof *half);
    int rc = f32 && half ? 0 : io_fail(err, errlen, 1, "export: out of memory for %zu floats", most);
    for (int i = 0; rc == 0 && i < L->n_params; i++) {
        size_t n = (size_t)L->params[i].rows * L->params[i].cols;
        rc = ckpt_read_master(c, &L->params[i], f32, err, errlen);
        if (rc == 0 && dtype == WP_F32) rc = st_writer_put(w, f32, n * sizeof *f32, err, errlen);
        if (rc == 0 && dtype != WP_F32) {
            for (size_t j = 0; j < n; j++) half[j] = dtype == WP_F16 ? wp_f32_to_f16(f32[j]) : wp_f32_to_bf16(f32[j]);
            rc = st_writer_put(w, half, n * sizeof *half, err, errlen);
        }
    }
    free(f32);
    free(half);
    return rc;
}

int hf_export(const wp_ckpt *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen) {
    wp_model_cfg cfg = ckpt_info(c)->cfg;
    model_cfg_even_chunks(&cfg, 1); /* one chunk: the whole model in storage order */
    wp_layout L;
    char lerr[256], path[WP_PATH_MAX];
    int rc = layout_build(&cfg, &L, lerr, sizeof lerr);
    if (rc) return io_fail(err, errlen, rc, "%s: %s", ckpt_dir(c), lerr);
    rc = fs_mkdirs(out_dir, err, errlen);
    if (rc == 0) rc = fs_join(path, sizeof path, out_dir, "model.safetensors", err, errlen);
    st_desc *descs = rc ? NULL : model_descs(&L, dtype);
    if (rc == 0 && !descs) rc = io_fail(err, errlen, 1, "export: out of memory");
    st_writer *w = NULL;
    const char *keys[] = {"format"}, *values[] = {"pt"}; /* transformers expects the PyTorch flavour */
    if (rc == 0) rc = st_writer_open(&w, path, descs, L.n_params, keys, values, 1, err, errlen);
    free(descs);
    if (rc == 0) rc = put_tensors(c, &L, w, dtype, err, errlen);
    if (rc == 0) {
        rc = st_writer_finish(w, NULL, NULL, err, errlen);
        w = NULL;
    }
    st_writer_abort(w);
    if (rc == 0) rc = hf_write_config(&cfg, out_dir, dtype, err, errlen);
    layout_free(&L);
    return rc;
}
