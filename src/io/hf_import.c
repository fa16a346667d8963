/* --init-from: a Hugging Face Llama directory into the model flags and the owners' masters. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "hf.h"
#include "safetensors.h"

static json_t *load_config(const char *hf_dir, char *path, size_t len, char *err, size_t errlen, int *rc) {
    *rc = fs_join(path, len, hf_dir, "config.json", err, errlen);
    if (*rc) return NULL;
    if (!fs_exists(path)) {
        *rc = io_fail(err, errlen, 2, "%s: missing (not a Hugging Face model directory)", path);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        *rc = io_fail(err, errlen, 2, "%s: line %d: %s", path, jerr.line, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *rc = io_fail(err, errlen, 2, "%s: not a JSON object", path);
        return NULL;
    }
    return j;
}

/* What our model does not implement is refused rather than silently computed differently. */
static int check_supported(const char *path, json_t *j, char *err, size_t errlen) {
    const char *type = json_string_value(json_object_get(j, "model_type"));
    const char *act = json_string_value(json_object_get(j, "hidden_act"));
    json_t *scaling = json_object_get(j, "rope_scaling");
    if (type && strcmp(type, "llama") != 0) return io_fail(err, errlen, 2, "%s: model_type '%s' is not llama", path, type);
    if (act && strcmp(act, "silu") != 0) return io_fail(err, errlen, 2, "%s: hidden_act '%s' is not silu", path, act);
    if (json_is_true(json_object_get(j, "attention_bias")) || json_is_true(json_object_get(j, "mlp_bias")))
        return io_fail(err, errlen, 2, "%s: attention_bias/mlp_bias: biases are not part of this model", path);
    if (scaling && !json_is_null(scaling)) return io_fail(err, errlen, 2, "%s: rope_scaling is not supported", path);
    return 0;
}

typedef struct {
    const char *key;
    int flag;
    bool integer;
} key_map;

static const key_map keys[] = {
    {"num_hidden_layers", FLAG_num_layers, true},         {"hidden_size", FLAG_hidden_size, true},
    {"intermediate_size", FLAG_ffn_hidden_size, true},    {"num_attention_heads", FLAG_num_attention_heads, true},
    {"num_key_value_heads", FLAG_num_query_groups, true}, {"vocab_size", FLAG_vocab_size, true},
    {"rms_norm_eps", FLAG_norm_eps, false},               {"rope_theta", FLAG_rope_theta, false},
};

static double *num_field(wp_opts *o, int flag) {
    return flag == FLAG_norm_eps ? &o->norm_eps : &o->rope_theta;
}

static int64_t *int_field(wp_opts *o, int flag) {
    switch (flag) {
    case FLAG_num_layers: return &o->num_layers;
    case FLAG_hidden_size: return &o->hidden_size;
    case FLAG_ffn_hidden_size: return &o->ffn_hidden_size;
    case FLAG_num_attention_heads: return &o->num_attention_heads;
    case FLAG_num_query_groups: return &o->num_query_groups;
    default: return &o->vocab_size;
    }
}

/* One config key into its flag: filled when the user left the flag alone, else compared. */
static int apply_key(const char *path, json_t *j, const key_map *k, wp_opts *o, char *err, size_t errlen) {
    json_t *v = json_object_get(j, k->key);
    if (!v && k->flag == FLAG_num_query_groups) v = json_object_get(j, "num_attention_heads");
    if (!v && k->flag == FLAG_rope_theta) return 0; /* transformers' default equals ours, 10000 */
    if (!json_is_number(v) || (k->integer && !json_is_integer(v)))
        return io_fail(err, errlen, 2, "%s: key %s missing or not a%s number", path, k->key, k->integer ? "n integer" : "");
    double value = json_number_value(v);
    double have = k->integer ? (double)*int_field(o, k->flag) : *num_field(o, k->flag);
    if (o->set[k->flag] && fabs(have - value) > 1e-12 * fabs(value))
        return io_fail(err, errlen, 2, "--%s %g disagrees with %s in %s (%g)", cli_flag_name(k->flag), have, k->key, path, value);
    if (k->integer) *int_field(o, k->flag) = json_integer_value(v);
    else *num_field(o, k->flag) = value;
    return 0;
}

int hf_config_apply(const char *hf_dir, wp_opts *o, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    int rc;
    json_t *j = load_config(hf_dir, path, sizeof path, err, errlen, &rc);
    if (!j) return rc;
    rc = check_supported(path, j, err, errlen);
    for (size_t i = 0; rc == 0 && i < sizeof keys / sizeof keys[0]; i++) rc = apply_key(path, j, &keys[i], o, err, errlen);
    json_t *hd = json_object_get(j, "head_dim");
    if (rc == 0 && json_is_integer(hd) && o->num_attention_heads > 0 &&
        json_integer_value(hd) * o->num_attention_heads != o->hidden_size)
        rc = io_fail(err, errlen, 2, "%s: head_dim %lld is not hidden_size / num_attention_heads", path, (long long)json_integer_value(hd));
    json_decref(j);
    return rc;
}

/* ---- tensors ---- */

typedef struct {
    int n;
    st_file *files[1024];
    bool tied;
} hf_files;

static int add_file(hf_files *h, const char *dir, const char *name, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    for (int i = 0; i < h->n; i++) {
        const char *p = st_path(h->files[i]), *slash = strrchr(p, '/');
        if (strcmp(slash ? slash + 1 : p, name) == 0) return 0;
    }
    if (strchr(name, '/')) return io_fail(err, errlen, 2, "%s: shard name '%s' is not a plain file name", dir, name);
    if (h->n == (int)(sizeof h->files / sizeof h->files[0])) return io_fail(err, errlen, 2, "%s: too many shard files", dir);
    int rc = fs_join(path, sizeof path, dir, name, err, errlen);
    if (rc == 0) rc = st_open(&h->files[h->n], path, err, errlen);
    if (rc == 0) h->n++;
    return rc;
}

/* model.safetensors.index.json's weight_map names the shards; otherwise model.safetensors. */
static int open_files(hf_files *h, const char *dir, char *err, size_t errlen) {
    char index[WP_PATH_MAX];
    int rc = fs_join(index, sizeof index, dir, "model.safetensors.index.json", err, errlen);
    if (rc) return rc;
    if (!fs_exists(index)) return add_file(h, dir, "model.safetensors", err, errlen);
    json_error_t jerr;
    json_t *j = json_load_file(index, 0, &jerr);
    json_t *map = json_object_get(j, "weight_map");
    if (!json_is_object(map)) rc = io_fail(err, errlen, 2, "%s: no weight_map object", index);
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file) {
        if (rc) break;
        if (!json_is_string(file)) rc = io_fail(err, errlen, 2, "%s: weight_map[%s] is not a file name", index, name);
        else rc = add_file(h, dir, json_string_value(file), err, errlen);
    }
    json_decref(j);
    return rc;
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

static int load_param(const hf_files *h, const char *dir, const wp_param *p, float *dst, char *err, size_t errlen) {
    const st_file *f;
    const st_tensor *t = find(h, p->name, &f);
    if (!t && h->tied && strcmp(p->name, "lm_head.weight") == 0) t = find(h, "model.embed_tokens.weight", &f);
    if (!t) return io_fail(err, errlen, 2, "%s: tensor %s not found in its safetensors files", dir, p->name);
    int rc = st_check_shape(f, t, p->rows, p->cols, err, errlen);
    if (rc == 0) rc = st_to_f32(f, t, dst, err, errlen);
    return rc;
}

static int load_chunks(const hf_files *h, const char *dir, wp_optim *o, char *err, size_t errlen) {
    const wp_layout *L = optim_layout(o);
    size_t most = 1;
    for (int i = 0; i < optim_n_owned(o); i++)
        if (L->chunk_numel[optim_owned_chunk(o, i)] > most) most = L->chunk_numel[optim_owned_chunk(o, i)];
    float *host = malloc(most * sizeof *host);
    if (!host) return io_fail(err, errlen, 1, "--init-from: out of memory for %zu floats", most);
    int rc = optim_reset(o) ? io_fail(err, errlen, 1, "--init-from: %s", optim_error(o)) : 0;
    for (int i = 0; rc == 0 && i < optim_n_owned(o); i++) {
        int c = optim_owned_chunk(o, i), first, end;
        layout_chunk_params(L, c, &first, &end);
        for (int p = first; rc == 0 && p < end; p++) rc = load_param(h, dir, &L->params[p], host + L->params[p].offset, err, errlen);
        /* a slice owner (fsdp) holds one element range of the chunk: hand it that range */
        size_t off = 0, len = 0;
        optim_range(o, c, &off, &len);
        if (rc == 0 && optim_set(o, c, WP_OPT_MASTER, host + off)) rc = io_fail(err, errlen, 1, "--init-from: %s", optim_error(o));
    }
    free(host);
    return rc;
}

int hf_load_masters(const char *hf_dir, wp_optim *o, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    int rc;
    json_t *j = load_config(hf_dir, path, sizeof path, err, errlen, &rc);
    if (!j) return rc;
    hf_files *h = calloc(1, sizeof *h);
    if (!h) {
        json_decref(j);
        return io_fail(err, errlen, 1, "--init-from: out of memory");
    }
    h->tied = json_is_true(json_object_get(j, "tie_word_embeddings"));
    json_decref(j);
    rc = open_files(h, hf_dir, err, errlen);
    if (rc == 0) rc = load_chunks(h, hf_dir, o, err, errlen);
    for (int i = 0; i < h->n; i++) st_close(h->files[i]);
    free(h);
    return rc;
}
