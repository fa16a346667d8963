/* --init-from: a Hugging Face Llama directory's config and the owners' masters (hf.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "masters_fill.h"
#include "progress.h"
#include "safetensors.h"

static json_t *load_config(const char *hf_dir, char *path, size_t len, char *err, size_t errlen, int *rc) {
    *rc = fs_join(path, len, hf_dir, "config.json", err, errlen);
    if (*rc) return NULL;
    if (!fs_exists(path)) {
        *rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: missing (not a Hugging Face model directory)", path);
        return NULL;
    }
    json_t *j;
    *rc = fs_load_json(path, (size_t)64 << 20, JSON_REJECT_DUPLICATES, &j, err, errlen);
    if (*rc) return NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        *rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a JSON object", path);
        return NULL;
    }
    return j;
}

/* What our model does not implement is refused rather than silently computed differently. */
static wp_result check_supported(const char *path, json_t *j, char *err, size_t errlen) {
    const char *type = json_string_value(json_object_get(j, "model_type"));
    const char *act = json_string_value(json_object_get(j, "hidden_act"));
    json_t *scaling = json_object_get(j, "rope_scaling");
    if (type && strcmp(type, "llama") != 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: model_type '%s' is not llama", path, type);
    if (act && strcmp(act, "silu") != 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: hidden_act '%s' is not silu", path, act);
    if (json_is_true(json_object_get(j, "attention_bias")) || json_is_true(json_object_get(j, "mlp_bias")))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: attention_bias/mlp_bias: biases are not part of this model", path);
    if (scaling && !json_is_null(scaling)) {
        if (!json_is_object(scaling)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: rope_scaling is neither null nor an object", path);
        /* transformers writes rope_type; configs from before 4.45 say type */
        json_t *t = json_object_get(scaling, "rope_type");
        if (!t) t = json_object_get(scaling, "type");
        const char *name = json_string_value(t);
        if (!name) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: rope_scaling.rope_type missing or not a string", path);
        if (strcmp(name, "llama3") != 0)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: rope_scaling.rope_type '%s' is not supported (only llama3)", path, name);
    }
    return 0;
}

/* The model keys our flags mirror, in the order they are checked. */
static const struct {
    const char *key;
    bool integer;
} keys[HF_NKEYS] = {
    [HF_NUM_HIDDEN_LAYERS] = {"num_hidden_layers", true},   [HF_HIDDEN_SIZE] = {"hidden_size", true},
    [HF_INTERMEDIATE_SIZE] = {"intermediate_size", true},   [HF_NUM_ATTENTION_HEADS] = {"num_attention_heads", true},
    [HF_NUM_KEY_VALUE_HEADS] = {"num_key_value_heads", true}, [HF_VOCAB_SIZE] = {"vocab_size", true},
    [HF_RMS_NORM_EPS] = {"rms_norm_eps", false},            [HF_ROPE_THETA] = {"rope_theta", false},
    [HF_ROPE_FACTOR] = {"factor", false},                   [HF_ROPE_LOW_FREQ] = {"low_freq_factor", false},
    [HF_ROPE_HIGH_FREQ] = {"high_freq_factor", false},      [HF_ROPE_ORIGINAL_MAX] = {"original_max_position_embeddings", true},
    [HF_MAX_POSITIONS] = {"max_position_embeddings", true}, [HF_BOS_TOKEN_ID] = {"bos_token_id", true},
    [HF_EOS_TOKEN_ID] = {"eos_token_id", true},
};

static bool in_scaling(int k) { return k >= HF_ROPE_FACTOR && k <= HF_ROPE_ORIGINAL_MAX; }

const char *hf_key_name(hf_key k) { return keys[k].key; }
bool hf_key_integer(hf_key k) { return keys[k].integer; }

wp_result hf_read_config(const char *hf_dir, hf_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int rc;
    json_t *j = load_config(hf_dir, c->path, sizeof c->path, err, errlen, &rc);
    if (!j) return rc;
    rc = check_supported(c->path, j, err, errlen);
    json_t *scaling = json_object_get(j, "rope_scaling");
    bool scaled = json_is_object(scaling); /* check_supported: then its type is llama3 */
    for (int k = 0; rc == 0 && k < HF_NKEYS; k++) {
        if (in_scaling(k) && !scaled) continue;
        json_t *v = json_object_get(in_scaling(k) ? scaling : j, keys[k].key);
        if (!v && k == HF_NUM_KEY_VALUE_HEADS) v = json_object_get(j, "num_attention_heads");
        if (!v && k == HF_ROPE_THETA) continue; /* transformers' default equals ours, 10000 */
        bool special = k == HF_BOS_TOKEN_ID || k == HF_EOS_TOKEN_ID;
        if (special && json_is_array(v)) v = json_array_get(v, 0); /* Llama 3.x instruct lists several eos */
        if ((json_is_null(v) || !v) && (k == HF_MAX_POSITIONS || special)) continue;
        if (!json_is_number(v) || (keys[k].integer && !json_is_integer(v)))
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key %s%s missing or not a%s number", c->path, in_scaling(k) ? "rope_scaling." : "",
                         keys[k].key, keys[k].integer ? "n integer" : "");
        else {
            c->present[k] = true;
            c->value[k] = json_number_value(v);
        }
    }
    json_t *tie = json_object_get(j, "tie_word_embeddings");
    if (rc == 0 && tie && !json_is_boolean(tie))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: key tie_word_embeddings is not true or false", c->path);
    c->tied = json_is_true(tie);
    json_t *hd = json_object_get(j, "head_dim");
    if (rc == 0 && json_is_integer(hd)) {
        c->have_head_dim = true;
        c->head_dim = json_integer_value(hd);
    }
    json_decref(j);
    if (rc == 0) {
        const char *names[HF_NKEYS];
        char scaled_names[4][64];
        for (int k = 0; k < HF_NKEYS; k++) {
            names[k] = keys[k].key;
            if (in_scaling(k)) {
                snprintf(scaled_names[k - HF_ROPE_FACTOR], sizeof scaled_names[0], "rope_scaling.%s", keys[k].key);
                names[k] = scaled_names[k - HF_ROPE_FACTOR];
            }
        }
        rc = hf_config_check(c, names, err, errlen);
    }
    return rc;
}

wp_result hf_config_check(const hf_config *c, const char *const names[HF_NKEYS], char *err, size_t errlen) {
    /* the ranges of the model flags (model_cfg_split_from_opts), stated for the file */
    static const struct {
        double lo, hi;
    } range[HF_NKEYS] = {
        [HF_NUM_HIDDEN_LAYERS] = {1, 100000},       [HF_HIDDEN_SIZE] = {1, 1 << 24},     [HF_INTERMEDIATE_SIZE] = {1, 1 << 26},
        [HF_NUM_ATTENTION_HEADS] = {1, 1 << 24},    [HF_NUM_KEY_VALUE_HEADS] = {1, 1 << 24}, [HF_VOCAB_SIZE] = {2, 2147483647.0},
        [HF_ROPE_ORIGINAL_MAX] = {1, 2147483647.0}, [HF_MAX_POSITIONS] = {1, 2147483647.0},
        [HF_BOS_TOKEN_ID] = {0, 2147483646.0},      [HF_EOS_TOKEN_ID] = {0, 2147483646.0},
    };
    const double *v = c->value;
    for (int k = 0; k < HF_NKEYS; k++) {
        if (!c->present[k]) continue;
        if (!isfinite(v[k]))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s is %g, not a finite number", c->path, names[k], v[k]);
        if (hf_key_integer((hf_key)k)) {
            if (v[k] < range[k].lo || v[k] > range[k].hi || v[k] != floor(v[k]))
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %.17g is not an integer in [%.0f, %.0f]", c->path, names[k], v[k],
                               range[k].lo, range[k].hi);
        } else if (!(v[k] > 0)) {
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %g must be positive", c->path, names[k], v[k]);
        }
    }
    static const hf_key required[] = {HF_NUM_HIDDEN_LAYERS, HF_HIDDEN_SIZE, HF_INTERMEDIATE_SIZE, HF_NUM_ATTENTION_HEADS,
                                       HF_NUM_KEY_VALUE_HEADS, HF_VOCAB_SIZE, HF_RMS_NORM_EPS};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!c->present[required[i]]) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s is missing", c->path, names[required[i]]);
    double h = v[HF_HIDDEN_SIZE], heads = v[HF_NUM_ATTENTION_HEADS], kv = v[HF_NUM_KEY_VALUE_HEADS], V = v[HF_VOCAB_SIZE];
    if (fmod(h, heads) != 0 || fmod(h / heads, 2) != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %.0f does not split into %s %.0f heads of an even size (RoPE rotates pairs)",
                       c->path, names[HF_HIDDEN_SIZE], h, names[HF_NUM_ATTENTION_HEADS], heads);
    if (kv > heads || fmod(heads, kv) != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %.0f does not divide %s %.0f", c->path, names[HF_NUM_KEY_VALUE_HEADS], kv,
                       names[HF_NUM_ATTENTION_HEADS], heads);
    for (int k = HF_BOS_TOKEN_ID; k <= HF_EOS_TOKEN_ID; k++)
        if (c->present[k] && v[k] >= V)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %.0f is not below %s %.0f", c->path, names[k], v[k], names[HF_VOCAB_SIZE], V);
    if (c->present[HF_ROPE_LOW_FREQ] && c->present[HF_ROPE_HIGH_FREQ] && !(v[HF_ROPE_HIGH_FREQ] > v[HF_ROPE_LOW_FREQ]))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: %s %g must exceed %s %g", c->path, names[HF_ROPE_HIGH_FREQ], v[HF_ROPE_HIGH_FREQ],
                       names[HF_ROPE_LOW_FREQ], v[HF_ROPE_LOW_FREQ]);
    return 0;
}

/* ---- tensors ---- */

typedef struct {
    int n;
    st_file *files[1024];
    bool tied;
} hf_files;

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* index: the model.safetensors.index.json that names the file, NULL for model.safetensors. */
static wp_result add_file(hf_files *h, const char *dir, const char *index, const char *name, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    for (int i = 0; i < h->n; i++)
        if (strcmp(base_name(st_path(h->files[i])), name) == 0) return 0;
    if (strchr(name, '/')) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: shard name '%s' is not a plain file name", dir, name);
    if (h->n == (int)(sizeof h->files / sizeof h->files[0])) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: too many shard files", dir);
    wp_result rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc == 0 && index && !fs_exists(path))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: weight_map names %s, which is missing", index, name);
    if (rc == 0) rc = st_open(&h->files[h->n], path, err, errlen);
    if (rc == 0) h->n++;
    return rc;
}

/* A name in two shards: which one a reader took would depend on the order of the index. */
static wp_result check_duplicates(const hf_files *h, char *err, size_t errlen) {
    for (int i = 1; i < h->n; i++)
        for (int k = 0; k < st_count(h->files[i]); k++) {
            const char *name = st_at(h->files[i], k)->name;
            for (int j = 0; j < i; j++)
                if (st_find(h->files[j], name))
                    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is also in %s (a name given twice)", st_path(h->files[i]),
                                   name, st_path(h->files[j]));
        }
    return 0;
}

/* The index and the shards agree: each tensor of a shard is listed with that shard, and each
 * listed tensor is in the shard the list names (a file swapped or edited by hand otherwise). */
static wp_result check_index(const hf_files *h, const char *index, json_t *map, char *err, size_t errlen) {
    for (int i = 0; i < h->n; i++)
        for (int k = 0; k < st_count(h->files[i]); k++) {
            const char *name = st_at(h->files[i], k)->name, *file = base_name(st_path(h->files[i]));
            const char *listed = json_string_value(json_object_get(map, name));
            if (!listed) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s of %s is not in its weight_map", index, name, file);
            if (strcmp(listed, file) != 0)
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: weight_map puts tensor %s in %s, but it is in %s", index, name, listed,
                               st_path(h->files[i]));
        }
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file) {
        for (int i = 0; i < h->n; i++)
            if (strcmp(base_name(st_path(h->files[i])), json_string_value(file)) == 0 && !st_find(h->files[i], name))
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: weight_map puts tensor %s in %s, which does not hold it", index, name,
                               json_string_value(file));
    }
    return 0;
}

/* model.safetensors.index.json's weight_map names the shards; otherwise model.safetensors. */
static wp_result open_files(hf_files *h, const char *dir, char *err, size_t errlen) {
    char index[WP_PATH_MAX];
    WP_TRY(fs_join(index, sizeof index, dir, "model.safetensors.index.json", err, errlen));
    if (!fs_exists(index)) return add_file(h, dir, NULL, "model.safetensors", err, errlen);
    json_t *j;
    WP_TRY(fs_load_json(index, (size_t)256 << 20, 0, &j, err, errlen));
    json_t *map = json_object_get(j, "weight_map");
    wp_result rc = WP_OK;
    if (!json_is_object(map)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: no weight_map object", index);
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file) {
        if (rc) break;
        if (!json_is_string(file)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: weight_map[%s] is not a file name", index, name);
        else rc = add_file(h, dir, index, json_string_value(file), err, errlen);
    }
    if (rc == 0) rc = check_duplicates(h, err, errlen);
    if (rc == 0) rc = check_index(h, index, map, err, errlen);
    json_decref(j);
    return rc;
}

/* The one tensor that older transformers saves carry and our model has no use for: a layer's
 * RoPE frequencies, model.layers.N.self_attn.rotary_emb.inv_freq (we compute them from
 * rope_theta, as transformers does now without saving them). */
static bool known_buffer(const char *name, int n_layers) {
    static const char prefix[] = "model.layers.", suffix[] = ".self_attn.rotary_emb.inv_freq";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return false;
    const char *digits = name + sizeof prefix - 1, *end = digits;
    while (*end >= '0' && *end <= '9' && end - digits < 7) end++;
    return end > digits && strcmp(end, suffix) == 0 && atoi(digits) < n_layers;
}

/* Every tensor of the files is one of L's parameters or the known buffer: anything else (a layer
 * past num_hidden_layers, a bias, another architecture's weight) means the files are not the
 * model that config.json describes, and is refused rather than silently left out. */
static wp_result check_used(const hf_files *h, const wp_layout *L, char *err, size_t errlen) {
    for (int i = 0; i < h->n; i++)
        for (int k = 0; k < st_count(h->files[i]); k++) {
            const char *name = st_at(h->files[i], k)->name;
            if (!layout_find(L, name) && !known_buffer(name, L->cfg.n_layers))
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is unexpected: no part of the %d-layer llama of its config.json",
                               st_path(h->files[i]), name, L->cfg.n_layers);
        }
    return 0;
}

static const st_tensor *find(const hf_files *h, const char *name, const st_file **file) {
    for (int i = 0; i < h->n; i++) {
        const st_tensor *t = st_find(h->files[i], name);
        if (t) {
            *file = h->files[i];
            return t;
        }
    }
    return NULL;
}

static wp_result load_param(const hf_files *h, const char *dir, const wp_param *p, float *dst, char *err, size_t errlen) {
    const st_file *f;
    /* tied: the head is the embedding, whatever lm_head.weight a file may also carry */
    bool head = h->tied && strcmp(p->name, "lm_head.weight") == 0;
    const st_tensor *t = find(h, head ? "model.embed_tokens.weight" : p->name, &f);
    if (!t) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s not found in its safetensors files", dir, p->name);
    wp_result rc = st_check_shape(f, t, p->rows, p->cols, err, errlen);
    if (rc == 0) rc = st_to_f32(f, t, dst, err, errlen);
    if (rc == 0) io_progress_add(t->nbytes);
    return rc;
}

typedef struct {
    const hf_files *h;
    const char *dir;
} hf_reader;

static wp_result read_param(void *ctx, const wp_param *p, float *dst, char *err, size_t errlen) {
    const hf_reader *r = ctx;
    return load_param(r->h, r->dir, p, dst, err, errlen);
}

/* The directory's safetensors files, checked against layout L, and whether the head is the embedding. */
static wp_result open_dir(const char *hf_dir, const wp_layout *L, hf_files *h, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    int rc;
    json_t *j = load_config(hf_dir, path, sizeof path, err, errlen, &rc);
    if (!j) return rc;
    h->tied = json_is_true(json_object_get(j, "tie_word_embeddings"));
    json_decref(j);
    WP_TRY(open_files(h, hf_dir, err, errlen));
    return check_used(h, L, err, errlen);
}

static void close_dir(hf_files *h) {
    for (int i = 0; i < h->n; i++) st_close(h->files[i]);
    free(h);
}

/* The bytes of the files' tensors that L's parameters read (those of o's chunks when o is given): the meter's total. */
static uint64_t file_bytes(const hf_files *h, const wp_layout *L, const wp_optim *o) {
    uint64_t total = 0;
    for (int i = 0; i < L->n_params; i++) {
        const st_file *f;
        bool head = h->tied && strcmp(L->params[i].name, "lm_head.weight") == 0;
        const st_tensor *t = o && !optim_owns(o, L->params[i].chunk) ? NULL : find(h, head ? "model.embed_tokens.weight" : L->params[i].name, &f);
        if (t) total += t->nbytes;
    }
    return total;
}

wp_result hf_load_masters(const char *hf_dir, wp_optim *o, char *err, size_t errlen) {
    hf_files *h = calloc(1, sizeof *h);
    if (!h) return wp_fail(WP_FAILED, err, errlen, "--init-from: out of memory");
    wp_result rc = open_dir(hf_dir, layout_of_optim(o), h, err, errlen);
    char what[WP_PATH_MAX + 16];
    snprintf(what, sizeof what, "reading %.200s", hf_dir);
    bool metered = rc == 0;
    if (metered) io_progress_begin(what, file_bytes(h, layout_of_optim(o), o));
    if (rc == 0) rc = masters_fill(o, read_param, &(hf_reader){h, hf_dir}, err, errlen);
    if (metered) io_progress_end(rc == 0);
    close_dir(h);
    return rc;
}

/* A parameter's tensor in pieces of at most `piece` elements, each converted, handed to sink and
 * its file pages dropped: the reader holds one piece, never a whole embedding. */
static wp_result read_pieces(const hf_files *h, const char *dir, const wp_param *p, float *buf, size_t piece, hf_param_sink sink,
                       void *ctx, char *err, size_t errlen) {
    const st_file *f;
    bool head = h->tied && strcmp(p->name, "lm_head.weight") == 0; /* as load_param */
    const st_tensor *t = find(h, head ? "model.embed_tokens.weight" : p->name, &f);
    if (!t) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s not found in its safetensors files", dir, p->name);
    wp_result rc = st_check_shape(f, t, p->rows, p->cols, err, errlen);
    size_t numel = layout_param_numel(p);
    for (size_t first = 0; rc == 0 && first < numel; first += piece) {
        size_t n = numel - first < piece ? numel - first : piece;
        rc = st_to_f32_range(f, t, first, n, buf, err, errlen);
        if (rc == 0) io_progress_add(n * (t->nbytes / (t->numel ? t->numel : 1)));
        if (rc == 0) rc = sink(ctx, p, first, n, buf, err, errlen);
        if (rc == 0) st_release(f, t, first, n); /* a tied head reads the embedding again: from the page cache */
    }
    return rc;
}

wp_result hf_read_params(const char *hf_dir, const wp_layout *L, hf_param_sink sink, void *ctx, char *err, size_t errlen) {
    const size_t piece = (size_t)1 << 22; /* 16 MiB of fp32 */
    hf_files *h = calloc(1, sizeof *h);
    float *buf = h ? malloc(piece * sizeof *buf) : NULL;
    int rc = buf ? 0 : wp_fail(WP_FAILED, err, errlen, "%s: out of memory", hf_dir);
    if (rc == 0) rc = open_dir(hf_dir, L, h, err, errlen);
    char what[WP_PATH_MAX + 16];
    snprintf(what, sizeof what, "reading %.200s", hf_dir);
    bool metered = rc == 0;
    if (metered) io_progress_begin(what, file_bytes(h, L, NULL));
    for (int i = 0; rc == 0 && i < L->n_params; i++) rc = read_pieces(h, hf_dir, &L->params[i], buf, piece, sink, ctx, err, errlen);
    if (metered) io_progress_end(rc == 0);
    free(buf);
    if (h) close_dir(h);
    return rc;
}

/* One token id of generation_config.json / config.json: an integer in [0, 2^31). */
static wp_result eos_id(const char *path, json_t *v, int32_t *id, char *err, size_t errlen) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: eos_token_id holds something other than a token id", path);
    *id = (int32_t)json_integer_value(v);
    return 0;
}

/* eos_token_id of DIR/NAME: absent or null leaves *n = 0; an integer or a list of them. */
static wp_result eos_of(const char *dir, const char *name, int32_t *ids, int max, int *n, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    wp_result rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc || !fs_exists(path)) return rc;
    json_t *j;
    WP_TRY(fs_load_json(path, (size_t)64 << 20, 0, &j, err, errlen));
    json_t *v = json_object_get(j, "eos_token_id");
    if (json_is_array(v)) {
        if ((int)json_array_size(v) > max) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: eos_token_id lists more than %d ids", path, max);
        for (size_t i = 0; rc == 0 && i < json_array_size(v); i++) rc = eos_id(path, json_array_get(v, i), &ids[(*n)++], err, errlen);
    } else if (v && !json_is_null(v)) {
        rc = eos_id(path, v, &ids[(*n)++], err, errlen);
    }
    json_decref(j);
    return rc;
}

wp_result hf_read_eos(const char *hf_dir, int32_t *ids, int max, int *n, char *err, size_t errlen) {
    *n = 0;
    wp_result rc = eos_of(hf_dir, "generation_config.json", ids, max, n, err, errlen);
    if (rc == 0 && *n == 0) rc = eos_of(hf_dir, "config.json", ids, max, n, err, errlen);
    return rc;
}
