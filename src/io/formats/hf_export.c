/* Export of a checkpoint's masters as a Hugging Face Llama directory, written whole into
 * a new OUT_DIR.tmp-XXXXXXXX and then renamed (or swapped) onto OUT_DIR, so a failed export leaves no
 * half-written directory and an earlier export stays whole until the new one is complete. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2 */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "safetensors.h"
#include "progress.h"
#include "tokenizer.h"

static const char *torch_dtype(wp_dtype t) { return t == WP_F16 ? "float16" : t == WP_BF16 ? "bfloat16" : "float32"; }

int hf_default_max_positions(const wp_model_cfg *c) {
    if (c->max_pos > 0) return c->max_pos;
    const wp_rope_scaling *r = &c->rope_scaling;
    if (r->factor > 0 && r->factor * r->original_max_pos <= 2147483647.0) return (int)(r->factor * r->original_max_pos);
    return c->seq > 4096 ? c->seq : 4096;
}

/* `weipipe prepare` starts every document with byte 0, so for the byte vocabulary 0 is both the
 * beginning and the end of a document; other vocabularies are not ours to name. */
static json_t *special_id(const wp_model_cfg *c, bool eos) {
    if (eos ? c->has_eos : c->has_bos) return json_integer(eos ? c->eos_id : c->bos_id); /* given, or imported */
    return c->vocab == 256 ? json_integer(0) : json_null();
}

static wp_result write_json(json_t *j, const char *out_dir, const char *name, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!text) return wp_fail(WP_FAILED, err, errlen, "%s: cannot build %s", out_dir, name);
    wp_result rc = fs_join(path, sizeof path, out_dir, name, err, errlen);
    if (rc == 0) rc = fs_write_file_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

wp_result hf_write_config(const wp_model_cfg *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen) {
    const wp_rope_scaling *r = &c->rope_scaling;
    json_t *scaling = r->factor > 0 ? json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", r->factor,
                                                "low_freq_factor", r->low_freq_factor, "high_freq_factor",
                                                r->high_freq_factor, "original_max_position_embeddings",
                                                (int)r->original_max_pos)
                                    : json_null();
    json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s, s:s, s:b, s:b, s:o,"
                          " s:f, s:f, s:i, s:b, s:o, s:o}",
                          "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", c->h,
                          "intermediate_size", c->ffn, "num_hidden_layers", c->n_layers, "num_attention_heads",
                          c->n_heads, "num_key_value_heads", c->n_kv_heads, "head_dim", c->head_dim, "vocab_size",
                          c->vocab, "rms_norm_eps", c->norm_eps, "rope_theta", c->rope_theta,
                          "max_position_embeddings", hf_default_max_positions(c), "tie_word_embeddings", c->tied,
                          "torch_dtype", torch_dtype(dtype), "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0,
                          "rope_scaling", scaling, "initializer_range", c->init_std, "attention_dropout", 0.0,
                          "pretraining_tp", 1, "use_cache", 1, "bos_token_id", special_id(c, false), "eos_token_id",
                          special_id(c, true));
    return write_json(j, out_dir, "config.json", err, errlen);
}

/* A JSON file of the checkpoint directory (a carried side file), NULL when absent; 2 when it is
 * there but not a JSON object. */
static wp_result ckpt_json(const char *ckpt, const char *name, json_t **out, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    *out = NULL;
    wp_result rc = fs_join(path, sizeof path, ckpt, name, err, errlen);
    if (rc || !fs_exists(path)) return rc;
    WP_TRY(fs_load_json(path, (size_t)1 << 30, 0, out, err, errlen));
    if (json_is_object(*out)) return 0;
    json_decref(*out);
    *out = NULL;
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a JSON object", path);
}

/* What transformers' GenerationConfig.from_model_config writes for such a config; the eos list
 * of the generation_config.json carried from --init-from when it names one whose first id is the
 * model's eos (Llama 3 Instruct ends a turn at any of [128001, 128008, 128009]). */
static wp_result write_generation_config(const wp_model_cfg *c, const char *ckpt, const char *out_dir, char *err, size_t errlen) {
    json_t *carried = NULL, *eos = special_id(c, true);
    wp_result rc = ckpt_json(ckpt, "generation_config.json", &carried, err, errlen);
    json_t *list = carried ? json_object_get(carried, "eos_token_id") : NULL;
    if (rc == 0 && json_is_array(list) && json_array_size(list) > 0 && json_is_integer(eos) &&
        json_equal(json_array_get(list, 0), eos)) {
        json_decref(eos);
        eos = json_incref(list);
    }
    json_decref(carried);
    json_t *j = json_pack("{s:b, s:o, s:o}", "_from_model_config", 1, "bos_token_id", special_id(c, false), "eos_token_id", eos);
    return rc ? (json_decref(j), rc) : write_json(j, out_dir, "generation_config.json", err, errlen);
}

static st_desc desc_of(const wp_param *p, wp_dtype dtype) {
    st_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", p->name);
    d.dtype = dtype;
    d.ndim = p->cols == 1 ? 1 : 2;
    d.shape[0] = p->rows;
    d.shape[1] = p->cols;
    return d;
}

static size_t param_bytes(const wp_param *p, wp_dtype dtype) {
    return (size_t)p->rows * (size_t)p->cols * (dtype == WP_F32 ? 4 : 2);
}

/* Position of a tensor in LlamaForCausalLM's state_dict: embedding, then per layer the modules
 * in the order LlamaDecoderLayer registers them (self_attn q k v o, mlp gate up down, the two
 * norms), the final norm, the head. Our storage order puts each norm before its block. */
static long hf_rank(const wp_param *p) {
    static const char *const in_layer[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                           "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                           "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
    if (p->layer < 0) return strcmp(p->name, "model.embed_tokens.weight") == 0 ? -1 : strcmp(p->name, "model.norm.weight") == 0 ? LONG_MAX - 1 : LONG_MAX;
    const char *suffix = strchr(strchr(p->name, '.') + 1, '.'); /* after "model.layers" */
    suffix = suffix ? strchr(suffix + 1, '.') : NULL;           /* after the layer number */
    for (size_t k = 0; suffix && k < sizeof in_layer / sizeof *in_layer; k++)
        if (strcmp(suffix + 1, in_layer[k]) == 0) return (long)p->layer * 16 + (long)k;
    return (long)p->layer * 16 + 15;
}

static const wp_layout *sort_layout; /* qsort has no context argument in C17 */
static int by_hf_rank(const void *a, const void *b) {
    long x = hf_rank(&sort_layout->params[*(const int *)a]), y = hf_rank(&sort_layout->params[*(const int *)b]);
    return x < y ? -1 : x > y;
}

/* Tensors into shards as huggingface_hub's split_state_dict_into_shards does for
 * save_pretrained: in state_dict order, a new shard when the next tensor would take the current
 * one above max_bytes; a tensor alone above max_bytes gets a shard of its own, numbered when it
 * is met. shard_of[i] gets each tensor's shard; returns the number of shards, 0 out of memory. */
static int plan_shards(const wp_layout *L, wp_dtype dtype, int64_t max_bytes, int *shard_of) {
    int *order = malloc((size_t)L->n_params * sizeof *order);
    if (!order) return 0;
    for (int i = 0; i < L->n_params; i++) order[i] = i;
    sort_layout = L;
    qsort(order, (size_t)L->n_params, sizeof *order, by_hf_rank);
    int n = 0, current = -1;
    size_t size = 0;
    for (int j = 0; j < L->n_params; j++) {
        int i = order[j];
        if (L->cfg.tied && strcmp(L->params[i].name, "lm_head.weight") == 0) { /* save_pretrained drops tied keys */
            shard_of[i] = -1;
            continue;
        }
        size_t b = param_bytes(&L->params[i], dtype);
        if ((int64_t)b > max_bytes) {
            shard_of[i] = n++;
            continue;
        }
        if (current < 0 || (int64_t)(size + b) > max_bytes) {
            current = n++;
            size = 0;
        }
        shard_of[i] = current;
        size += b;
    }
    free(order);
    return n;
}

/* Each tensor of shard s read from the checkpoint, converted, and appended. */
static wp_result put_tensors(const wp_ckpt *c, const wp_layout *L, const int *shard_of, int s, st_writer *w, wp_dtype dtype,
                       char *err, size_t errlen) {
    size_t most = 1;
    for (int i = 0; i < L->n_params; i++)
        if ((size_t)L->params[i].rows * L->params[i].cols > most) most = (size_t)L->params[i].rows * L->params[i].cols;
    float *f32 = malloc(most * sizeof *f32);
    uint16_t *half = malloc(most * sizeof *half);
    int rc = f32 && half ? 0 : wp_fail(WP_FAILED, err, errlen, "export: out of memory for %zu floats", most);
    for (int i = 0; rc == 0 && i < L->n_params; i++) {
        if (shard_of[i] != s) continue;
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

static void shard_name(char *out, size_t len, int s, int n) {
    if (n == 1) snprintf(out, len, "model.safetensors");
    else snprintf(out, len, "model-%05d-of-%05d.safetensors", s + 1, n);
}

static wp_result write_shard(const wp_ckpt *c, const wp_layout *L, const int *shard_of, int s, int n, const char *dir,
                       wp_dtype dtype, char *err, size_t errlen) {
    char name[64], path[WP_PATH_MAX];
    shard_name(name, sizeof name, s, n);
    wp_result rc = fs_join(path, sizeof path, dir, name, err, errlen);
    st_desc *descs = calloc((size_t)L->n_params, sizeof *descs);
    int count = 0;
    for (int i = 0; descs && i < L->n_params; i++)
        if (shard_of[i] == s) descs[count++] = desc_of(&L->params[i], dtype);
    if (rc == 0 && !descs) rc = wp_fail(WP_FAILED, err, errlen, "export: out of memory");
    st_writer *w = NULL;
    const char *keys[] = {"format"}, *values[] = {"pt"}; /* transformers expects the PyTorch flavour */
    if (rc == 0) rc = st_writer_open(&w, path, descs, count, keys, values, 1, err, errlen);
    free(descs);
    if (rc == 0) rc = put_tensors(c, L, shard_of, s, w, dtype, err, errlen);
    if (rc == 0) {
        rc = st_writer_finish(w, NULL, NULL, err, errlen);
        w = NULL;
    }
    st_writer_abort(w);
    return rc;
}

/* model.safetensors.index.json as save_pretrained writes it: metadata.total_size (the tensors'
 * bytes, headers not counted) and weight_map, keys sorted. */
static wp_result write_index(const wp_layout *L, const int *shard_of, int n, const char *dir, wp_dtype dtype, char *err,
                       size_t errlen) {
    json_t *map = json_object();
    size_t total = 0;
    for (int i = 0; map && i < L->n_params; i++) {
        char name[64];
        if (shard_of[i] < 0) continue;
        shard_name(name, sizeof name, shard_of[i], n);
        total += param_bytes(&L->params[i], dtype);
        if (json_object_set_new(map, L->params[i].name, json_string(name))) {
            json_decref(map);
            map = NULL;
        }
    }
    json_t *j = map ? json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map) : NULL;
    return write_json(j, dir, "model.safetensors.index.json", err, errlen);
}

/* The checkpoint's tokenizer (a run with one saves it next to manifest.json). */
static const char *const tokenizer_files[] = {"tokenizer.model", "tokenizer.json"};

/* The checkpoint's file `name`, when there, copied byte for byte into dir. */
static wp_result copy_side_file(const char *ckpt, const char *dir, const char *name, char *err, size_t errlen) {
    char from[WP_PATH_MAX], to[WP_PATH_MAX];
    wp_result rc = fs_join(from, sizeof from, ckpt, name, err, errlen);
    if (rc || !fs_exists(from)) return rc;
    char *data = NULL;
    size_t size = 0;
    rc = fs_read_small(from, (size_t)1 << 31, &data, &size, err, errlen);
    if (rc == 0) rc = fs_join(to, sizeof to, dir, name, err, errlen);
    if (rc == 0) rc = fs_write_file_atomic(to, data, size, err, errlen);
    free(data);
    return rc;
}

static wp_result copy_tokenizers(const char *ckpt, const char *dir, char *err, size_t errlen) {
    wp_result rc = WP_OK;
    for (size_t i = 0; rc == 0 && i < sizeof tokenizer_files / sizeof *tokenizer_files; i++)
        rc = copy_side_file(ckpt, dir, tokenizer_files[i], err, errlen);
    return rc;
}

/* The text of token id in tokenizer.json (its added_tokens, else its model's vocab), or NULL. */
static const char *token_text(json_t *tok, int id) {
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, t) {
        json_t *tid = json_object_get(t, "id");
        if (json_is_integer(tid) && json_integer_value(tid) == id) return json_string_value(json_object_get(t, "content"));
    }
    const char *key;
    json_object_foreach(json_object_get(json_object_get(tok, "model"), "vocab"), key, t)
        if (json_is_integer(t) && json_integer_value(t) == id) return key;
    return NULL;
}

/* A tokenizer_config.json for a tokenizer.json that came without one: the fast tokenizer class
 * (transformers' LlamaTokenizerFast would otherwise add its own <s> and </s> as new ids) and the
 * bos/eos tokens by text. */
static json_t *made_tokenizer_config(const wp_model_cfg *c, const char *ckpt, char *err, size_t errlen, wp_result *rc) {
    json_t *tok = NULL;
    *rc = ckpt_json(ckpt, "tokenizer.json", &tok, err, errlen);
    if (!tok) return NULL; /* tokenizer.model: transformers' sentencepiece classes need no help */
    const char *bos = c->has_bos ? token_text(tok, c->bos_id) : NULL, *eos = c->has_eos ? token_text(tok, c->eos_id) : NULL;
    json_t *j = json_pack("{s:s, s:b, s:i}", "tokenizer_class", "PreTrainedTokenizerFast", "clean_up_tokenization_spaces", 0,
                          "model_max_length", hf_default_max_positions(c));
    if (j && bos) json_object_set_new(j, "bos_token", json_string(bos));
    if (j && eos) json_object_set_new(j, "eos_token", json_string(eos));
    json_decref(tok);
    if (!j) *rc = wp_fail(WP_FAILED, err, errlen, "export: out of memory");
    return j;
}

/* tokenizer_config.json (the one carried from --init-from, else one made for a tokenizer.json)
 * and special_tokens_map.json, its special tokens as save_pretrained writes them. */
static wp_result write_tokenizer_config(const wp_model_cfg *c, const char *ckpt, const char *dir, char *err, size_t errlen) {
    json_t *cfg = NULL;
    wp_result rc = ckpt_json(ckpt, "tokenizer_config.json", &cfg, err, errlen);
    bool carried = cfg != NULL;
    if (rc == 0 && !cfg) cfg = made_tokenizer_config(c, ckpt, err, errlen, &rc);
    if (rc || !cfg) return rc;
    static const char *const specials[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    json_t *map = json_object();
    for (size_t i = 0; map && i < sizeof specials / sizeof *specials; i++) {
        json_t *v = json_object_get(cfg, specials[i]);
        if (v && !json_is_null(v)) json_object_set(map, specials[i], v);
    }
    /* a carried one byte for byte: a re-serialised copy would turn transformers' 64-bit-overflowing
     * integers (model_max_length 1e30) into reals and reorder what its author wrote */
    rc = carried ? copy_side_file(ckpt, dir, "tokenizer_config.json", err, errlen)
                 : write_json(json_incref(cfg), dir, "tokenizer_config.json", err, errlen);
    if (rc == 0) rc = write_json(map, dir, "special_tokens_map.json", err, errlen);
    else json_decref(map);
    json_decref(cfg);
    return rc;
}

/* An existing OUT_DIR is replaced only when everything in it is what an export writes, so a
 * mistyped OUT_DIR (a home directory, a checkpoint) is never swept away. */
static bool export_name(const char *n) {
    int a, b;
    char tail[32];
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strcmp(n, "config.json") == 0 ||
        strcmp(n, "generation_config.json") == 0 || strcmp(n, "model.safetensors") == 0 ||
        strcmp(n, "model.safetensors.index.json") == 0 || strcmp(n, "tokenizer_config.json") == 0 ||
        strcmp(n, "special_tokens_map.json") == 0)
        return true;
    for (size_t i = 0; i < sizeof tokenizer_files / sizeof *tokenizer_files; i++)
        if (strcmp(n, tokenizer_files[i]) == 0) return true;
    return sscanf(n, "model-%5d-of-%5d%31s", &a, &b, tail) == 3 && strcmp(tail, ".safetensors") == 0;
}

static wp_result check_replaceable(const char *out, char *err, size_t errlen) {
    if (!fs_exists(out)) return 0;
    if (!fs_is_dir(out)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: exists and is not a directory", out);
    DIR *d = opendir(out);
    if (!d) return wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: cannot list", out);
    wp_result rc = WP_OK;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (!export_name(e->d_name))
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: holds '%s', which no export writes (refusing to replace the directory)", out,
                         e->d_name);
    closedir(d);
    return rc;
}

/* tmp onto out: a plain rename when out is new, else an atomic exchange of the two directories
 * (the old export then sits at tmp and is removed). */
static wp_result publish(const char *tmp, const char *out, char *err, size_t errlen) {
    if (!fs_exists(out)) return fs_rename_durable(tmp, out, err, errlen);
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) != 0)
        return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot swap in %s", out, tmp);
    char parent[WP_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash == parent) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    wp_result rc = fs_fsync_dir(parent, err, errlen);
    if (rc == 0) rc = fs_remove_tree(tmp, err, errlen);
    return rc;
}

static wp_result write_all(const wp_ckpt *c, const wp_model_cfg *cfg, const hf_export_opts *x, const char *dir, char *err,
                     size_t errlen) {
    wp_layout L;
    WP_TRY_CTX(layout_build(cfg, &L, err, errlen), err, errlen, "%s", ckpt_dir(c));
    wp_result rc = WP_OK;
    int *shard_of = calloc((size_t)L.n_params, sizeof *shard_of);
    if (!shard_of) rc = wp_fail(WP_FAILED, err, errlen, "export: out of memory");
    int n = rc ? 0 : plan_shards(&L, x->dtype, x->max_shard_bytes, shard_of);
    if (rc == 0 && n == 0) rc = wp_fail(WP_FAILED, err, errlen, "export: out of memory");
    char what[WP_PATH_MAX + 16];
    snprintf(what, sizeof what, "export to %.200s", dir);
    bool metered = rc == 0;
    if (metered) io_progress_begin(what, (uint64_t)L.total_numel * wp_dtype_size(x->dtype));
    for (int s = 0; rc == 0 && s < n; s++) rc = write_shard(c, &L, shard_of, s, n, dir, x->dtype, err, errlen);
    if (metered) io_progress_end(rc == 0);
    if (rc == 0 && n > 1) rc = write_index(&L, shard_of, n, dir, x->dtype, err, errlen);
    free(shard_of);
    layout_free(&L);
    /* bos/eos not given nor imported: the checkpoint's tokenizer's, as transformers' loaders
     * expect them in config.json and generation_config.json beside the tokenizer file */
    wp_model_cfg named = *cfg;
    if (rc == 0 && ckpt_tokenizer(c) && (!named.has_bos || !named.has_eos)) {
        wp_tokenizer *t;
        char why[WP_PATH_MAX + 256];
        rc = tok_open(ckpt_tokenizer(c), &t, why, sizeof why);
        if (rc) rc = wp_fail(rc, err, errlen, "%s", why);
        if (rc == 0 && !named.has_bos && tok_bos(t) >= 0) named.has_bos = true, named.bos_id = tok_bos(t);
        if (rc == 0 && !named.has_eos && tok_eos(t) >= 0) named.has_eos = true, named.eos_id = tok_eos(t);
        if (rc == 0) tok_close(t);
    }
    if (rc == 0) rc = hf_write_config(&named, dir, x->dtype, err, errlen);
    if (rc == 0) rc = write_generation_config(&named, ckpt_dir(c), dir, err, errlen);
    if (rc == 0) rc = copy_tokenizers(ckpt_dir(c), dir, err, errlen);
    if (rc == 0 && ckpt_tokenizer(c)) rc = write_tokenizer_config(&named, ckpt_dir(c), dir, err, errlen);
    if (rc == 0) rc = fs_fsync_dir(dir, err, errlen);
    return rc;
}

wp_result hf_export_with(const wp_ckpt *c, const char *out_dir, const hf_export_opts *x, char *err, size_t errlen) {
    if (x->max_shard_bytes < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "--max-shard-size: %lld must be positive", (long long)x->max_shard_bytes);
    if (x->max_pos < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "--max-position-embeddings: %d must not be negative", x->max_pos);
    wp_model_cfg cfg = ckpt_info(c)->cfg;
    model_cfg_even_chunks(&cfg, 1); /* one chunk: the whole model in storage order */
    if (x->max_pos > 0) cfg.max_pos = x->max_pos;
    char out[WP_PATH_MAX], tmp[WP_PATH_MAX + 16];
    size_t len = strlen(out_dir);
    while (len > 1 && out_dir[len - 1] == '/') len--; /* "hf/" -> "hf", so the temp dir is a sibling */
    if (len == 0 || len >= sizeof out) return wp_fail(WP_BAD_INPUT, err, errlen, "export: output directory '%s' is not usable", out_dir);
    snprintf(out, sizeof out, "%.*s", (int)len, out_dir);
    /* a new directory beside OUT that no one else holds: a user's OUT.tmp is never touched (a
     * crashed export leaves its OUT.tmp-XXXXXXXX, which no later run removes: it may be anyone's) */
    int none;
    tmp[0] = '\0';
    wp_result rc = check_replaceable(out, err, errlen);
    if (rc == 0) rc = fs_create_beside(out, ".tmp", true, tmp, sizeof tmp, &none, err, errlen);
    if (rc == 0) rc = write_all(c, &cfg, x, tmp, err, errlen);
    if (rc == 0) rc = publish(tmp, out, err, errlen);
    if (rc && tmp[0]) {
        char ignored[256];
        fs_remove_tree(tmp, ignored, sizeof ignored); /* the first error is the one reported */
    }
    return rc;
}

wp_result hf_export(const wp_ckpt *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen) {
    hf_export_opts x = {.dtype = dtype, .max_shard_bytes = HF_DEFAULT_MAX_SHARD, .max_pos = 0};
    return hf_export_with(c, out_dir, &x, err, errlen);
}
