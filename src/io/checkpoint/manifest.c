/* manifest.json: build, write atomically, read back with every key checked. */
#include "manifest.h"
#include "json_in.h"

#include "decision.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECKSUM_KEY ",\n  \"checksum\": \""
#define CHECKSUM_END "\"\n}\n"

void manifest_shard_name(int rank, char *out, size_t len) { snprintf(out, len, "rank-%05d.safetensors", rank); }

static json_t *model_json(const wp_model_cfg *c) {
    char chunks[WP_MAX_CHUNKS * 8] = "";
    for (int i = 0; i < c->n_chunks; i++) {
        size_t n = strlen(chunks);
        snprintf(chunks + n, sizeof chunks - n, "%s%d", i ? "," : "", c->chunk_layers[i]);
    }
    json_t *m = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:s}", "num-layers", c->n_layers, "hidden-size",
                          c->h, "ffn-hidden-size", c->ffn, "num-attention-heads", c->n_heads, "num-query-groups", c->n_kv_heads,
                          "vocab-size", c->vocab, "seq-length", c->seq, "micro-batch-size", c->micro_batch, "rope-theta", c->rope_theta,
                          "norm-eps", c->norm_eps, "init-std", c->init_std, "chunk-layers", chunks);
    /* written only when set, so manifests of plain models read the same as before */
    const wp_rope_scaling *r = &c->rope_scaling;
    if (m && r->factor != 0.0 &&
        json_object_set_new(m, "rope-scaling", json_pack("{s:f, s:f, s:f, s:f}", "factor", r->factor, "low-freq-factor",
                                                        r->low_freq_factor, "high-freq-factor", r->high_freq_factor,
                                                        "original-max-positions", r->original_max_pos))) {
        json_decref(m);
        return NULL;
    }
    if (m && c->has_bos && json_object_set_new(m, "bos-token-id", json_integer(c->bos_id))) {
        json_decref(m);
        return NULL;
    }
    if (m && c->has_eos && json_object_set_new(m, "eos-token-id", json_integer(c->eos_id))) {
        json_decref(m);
        return NULL;
    }
    if (m && c->tied && json_object_set_new(m, "tie-word-embeddings", json_true())) {
        json_decref(m);
        return NULL;
    }
    if (m && c->max_pos > 0 && json_object_set_new(m, "max-position-embeddings", json_integer(c->max_pos))) {
        json_decref(m);
        return NULL;
    }
    return m;
}

static json_t *files_json(const wp_manifest_file *files, int n) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        char crc[16];
        snprintf(crc, sizeof crc, "%08x", files[i].crc);
        json_array_append_new(arr, json_pack("{s:s, s:I, s:s}", "name", files[i].name, "size", (json_int_t)files[i].size,
                                             "crc32", crc));
    }
    return arr;
}

wp_result manifest_write(const char *path, const wp_ckpt_info *in, const wp_manifest_file *files, int n_files,
                   const wp_manifest_file *tokenizer, char *err, size_t errlen) {
    json_t *data = json_pack("{s:I, s:I, s:i, s:i}", "next_step", (json_int_t)in->step, "micro_batches",
                             (json_int_t)in->micro_batches, "micro_batch_size", in->cfg.micro_batch, "seq_length", in->cfg.seq);
    json_t *root = json_pack("{s:s, s:i, s:I, s:I, s:f, s:I, s:I, s:o, s:s, s:i, s:o, s:o}", "format", WP_CKPT_FORMAT,
                             "version", WP_CKPT_VERSION, "step", (json_int_t)in->step, "optimizer_step",
                             (json_int_t)in->optimizer_step, "loss_scale", in->loss_scale, "loss_scale_clean_steps",
                             (json_int_t)in->loss_scale_clean_steps, "seed", (json_int_t)in->seed, "data", data,
                             "precision", precision_name(in->cfg.precision), "nranks", in->nranks, "model",
                             model_json(&in->cfg), "files", files_json(files, n_files));
    json_t *flags = root && in->run_flags ? json_loads(in->run_flags, 0, NULL) : NULL;
    if (flags && json_object_set_new(root, "flags", flags)) {
        json_decref(root);
        root = NULL;
    }
    if (root && tokenizer) {
        json_t *arr = files_json(tokenizer, 1);
        json_object_set(root, "tokenizer", json_array_get(arr, 0));
        json_decref(arr);
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!text) return wp_fail(WP_FAILED, err, errlen, "%s: cannot build the manifest (non-finite loss scale or out of memory)", path);
    /* the CRC of everything before the closing "\n}" goes in as the last key (manifest.h) */
    size_t len = strlen(text);
    if (len < 2 || strcmp(text + len - 2, "\n}") != 0) {
        free(text);
        return wp_fail(WP_FAILED, err, errlen, "%s: unexpected JSON layout from jansson", path);
    }
    size_t body = len - 2, total = body + sizeof CHECKSUM_KEY - 1 + 8 + sizeof CHECKSUM_END - 1;
    char *full = malloc(total + 1);
    if (full) {
        memcpy(full, text, body);
        snprintf(full + body, total + 1 - body, CHECKSUM_KEY "%08x" CHECKSUM_END, fs_crc32(0, text, body));
    }
    free(text);
    if (!full) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    wp_result rc = fs_write_file_atomic(path, full, total, err, errlen);
    free(full);
    return rc;
}

/* ---- reading: every key checked, errors name the manifest and the key ---- */

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} ctx;

static wp_result get_int(const ctx *x, json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key %s missing or not an integer", x->path, key);
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key %s = %lld is outside [%lld, %lld]", x->path, key, (long long)*out,
                       (long long)lo, (long long)hi);
    return 0;
}

static wp_result get_int32(const ctx *x, json_t *obj, const char *key, int lo, int *out) {
    int64_t v;
    wp_result rc = get_int(x, obj, key, lo, INT32_MAX, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

static wp_result get_num(const ctx *x, json_t *obj, const char *key, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v)) return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key %s missing or not a number", x->path, key);
    *out = json_number_value(v);
    if (!isfinite(*out)) return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key %s is not finite", x->path, key);
    return 0;
}

static const char *get_str(const ctx *x, json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key %s missing or not a string", x->path, key);
        return NULL;
    }
    return json_string_value(v);
}

static wp_result parse_chunks(const ctx *x, const char *list, wp_model_cfg *c) {
    int n = 0, sum = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || n == WP_MAX_CHUNKS || (*end && *end != ','))
            return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key model.chunk-layers '%s' is not a list of layer counts", x->path, list);
        c->chunk_layers[n++] = (int)v;
        sum += (int)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0 || sum != c->n_layers)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key model.chunk-layers '%s' does not add up to num-layers %d", x->path, list,
                       c->n_layers);
    c->n_chunks = n;
    return 0;
}

static wp_result parse_shape(const ctx *x, json_t *m, wp_model_cfg *c) {
    wp_result rc = WP_OK;
    if (!json_is_object(m)) return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key model missing or not an object", x->path);
    if (!rc) rc = get_int32(x, m, "num-layers", 1, &c->n_layers);
    if (!rc) rc = get_int32(x, m, "hidden-size", 1, &c->h);
    if (!rc) rc = get_int32(x, m, "ffn-hidden-size", 1, &c->ffn);
    if (!rc) rc = get_int32(x, m, "num-attention-heads", 1, &c->n_heads);
    if (!rc) rc = get_int32(x, m, "num-query-groups", 1, &c->n_kv_heads);
    if (!rc) rc = get_int32(x, m, "vocab-size", 2, &c->vocab);
    if (!rc) rc = get_int32(x, m, "seq-length", 1, &c->seq);
    if (!rc) rc = get_int32(x, m, "micro-batch-size", 1, &c->micro_batch);
    if (rc) return rc;
    if (c->h % c->n_heads || (c->h / c->n_heads) % 2 || c->n_heads % c->n_kv_heads)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: model heads (%d query, %d key/value) do not divide hidden-size %d into even heads",
                       x->path, c->n_heads, c->n_kv_heads, c->h);
    c->head_dim = c->h / c->n_heads;
    return 0;
}

static wp_result parse_model(const ctx *x, json_t *m, wp_model_cfg *c) {
    wp_result rc = parse_shape(x, m, c);
    if (!rc) rc = get_num(x, m, "rope-theta", &c->rope_theta);
    if (!rc) rc = get_num(x, m, "norm-eps", &c->norm_eps);
    if (!rc) rc = get_num(x, m, "init-std", &c->init_std);
    json_t *r = rc ? NULL : json_object_get(m, "rope-scaling"); /* absent: no scaling (and older manifests) */
    if (r) {
        wp_rope_scaling *sc = &c->rope_scaling;
        if (!rc) rc = get_num(x, r, "factor", &sc->factor);
        if (!rc) rc = get_num(x, r, "low-freq-factor", &sc->low_freq_factor);
        if (!rc) rc = get_num(x, r, "high-freq-factor", &sc->high_freq_factor);
        if (!rc) rc = get_num(x, r, "original-max-positions", &sc->original_max_pos);
        if (!rc && !(sc->factor > 0 && sc->low_freq_factor > 0 && sc->high_freq_factor > sc->low_freq_factor &&
                     sc->original_max_pos >= 1))
            rc = wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key model.rope-scaling has a non-positive value or high <= low", x->path);
    }
    json_t *tie = rc ? NULL : json_object_get(m, "tie-word-embeddings");
    if (tie && !json_is_boolean(tie)) rc = wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key model.tie-word-embeddings is not a boolean", x->path);
    c->tied = json_is_true(tie);
    c->has_bos = !rc && json_object_get(m, "bos-token-id");
    if (c->has_bos) rc = get_int32(x, m, "bos-token-id", 0, &c->bos_id);
    c->has_eos = !rc && json_object_get(m, "eos-token-id");
    if (c->has_eos) rc = get_int32(x, m, "eos-token-id", 0, &c->eos_id);
    if (!rc && json_object_get(m, "max-position-embeddings")) rc = get_int32(x, m, "max-position-embeddings", 1, &c->max_pos);
    const char *chunks = rc ? NULL : get_str(x, m, "chunk-layers");
    if (!rc && !chunks) rc = 2;
    if (!rc) rc = parse_chunks(x, chunks, c);
    return rc;
}

static wp_result parse_precision(const ctx *x, json_t *root, wp_precision *p) {
    const char *name = get_str(x, root, "precision");
    if (!name) return 2;
    for (int i = WP_PREC_MIXED; i <= WP_PREC_FP32; i++)
        if (strcmp(name, precision_name((wp_precision)i)) == 0) {
            *p = (wp_precision)i;
            return 0;
        }
    return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key precision '%s' is not mixed|bf16|fp32", x->path, name);
}

static wp_result parse_file(const ctx *x, json_t *f, int i, wp_manifest_file *out) {
    json_t *name = json_object_get(f, "name"), *crc = json_object_get(f, "crc32");
    int64_t size;
    if (!json_is_string(name) || strlen(json_string_value(name)) >= sizeof out->name || strchr(json_string_value(name), '/'))
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: files[%d].name missing or not a plain file name", x->path, i);
    snprintf(out->name, sizeof out->name, "%s", json_string_value(name));
    WP_TRY(get_int(x, f, "size", 0, INT64_MAX, &size));
    out->size = (uint64_t)size;
    char *end = NULL;
    unsigned long v = json_is_string(crc) ? strtoul(json_string_value(crc), &end, 16) : 0;
    if (!json_is_string(crc) || strlen(json_string_value(crc)) != 8 || *end || v > 0xffffffffUL)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: files[%d].crc32 missing or not 8 hex digits", x->path, i);
    out->crc = (uint32_t)v;
    return 0;
}

static wp_result parse_files(const ctx *x, json_t *arr, wp_manifest *m) {
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 1000000)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key files missing or empty", x->path);
    m->n_files = (int)json_array_size(arr);
    m->files = calloc((size_t)m->n_files, sizeof *m->files);
    if (!m->files) return wp_fail(WP_FAILED, x->err, x->errlen, "%s: out of memory", x->path);
    for (int i = 0; i < m->n_files; i++) {
        WP_TRY(parse_file(x, json_array_get(arr, (size_t)i), i, &m->files[i]));
    }
    return 0;
}

static wp_result parse_root(const ctx *x, json_t *root, wp_manifest *m) {
    wp_ckpt_info *in = &m->info;
    const char *format = get_str(x, root, "format");
    if (!format) return 2;
    if (strcmp(format, WP_CKPT_FORMAT) != 0) return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key format is '%s', not %s", x->path, format, WP_CKPT_FORMAT);
    int64_t version, nranks = 0;
    wp_result rc = get_int(x, root, "version", 1, WP_CKPT_VERSION, &version);
    if (!rc) rc = get_int(x, root, "step", 0, INT64_MAX, &in->step);
    if (!rc) rc = get_int(x, root, "optimizer_step", 0, INT64_MAX, &in->optimizer_step);
    if (!rc) rc = get_num(x, root, "loss_scale", &in->loss_scale);
    if (!rc) rc = get_int(x, root, "loss_scale_clean_steps", 0, INT64_MAX, &in->loss_scale_clean_steps);
    if (!rc) rc = get_int(x, root, "seed", INT64_MIN, INT64_MAX, &in->seed);
    if (!rc) rc = get_int(x, json_object_get(root, "data"), "micro_batches", 1, INT32_MAX, &in->micro_batches);
    if (!rc) rc = get_int(x, root, "nranks", 1, 1000000, &nranks);
    if (!rc) rc = parse_precision(x, root, &in->cfg.precision);
    if (!rc) rc = parse_model(x, json_object_get(root, "model"), &in->cfg);
    if (!rc) rc = parse_files(x, json_object_get(root, "files"), m);
    json_t *tok = json_object_get(root, "tokenizer");
    if (!rc && tok) {
        rc = parse_file(x, tok, m->n_files, &m->tokenizer);
        if (!rc && strcmp(m->tokenizer.name, "tokenizer.model") != 0 && strcmp(m->tokenizer.name, "tokenizer.json") != 0)
            rc = wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key tokenizer.name '%s' is not tokenizer.model or tokenizer.json", x->path,
                         m->tokenizer.name);
        if (!rc) snprintf(in->tokenizer_name, sizeof in->tokenizer_name, "%s", m->tokenizer.name);
    }
    /* the scaler's own range (optim/decision.h): 1e-300 made every loss NaN and still exited 0 */
    if (!rc && !(in->loss_scale >= WP_LOSS_SCALE_MIN && in->loss_scale <= WP_LOSS_SCALE_MAX))
        rc = wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key loss_scale %g is outside [%g, %g]", x->path, in->loss_scale, WP_LOSS_SCALE_MIN,
                     WP_LOSS_SCALE_MAX);

    in->nranks = (int)nranks;
    return rc;
}

/* Version 2: the "checksum" key, last, as manifest_write puts it, over the bytes before it. */
static wp_result check_checksum(const ctx *x, json_t *root, const char *text, size_t size) {
    json_t *v = json_object_get(root, "version"), *sum = json_object_get(root, "checksum");
    if (json_is_integer(v) && json_integer_value(v) == 1 && !sum) return 0; /* written before checksums */
    const char *key = NULL;
    for (const char *p = strstr(text, CHECKSUM_KEY); p; p = strstr(p + 1, CHECKSUM_KEY)) key = p;
    size_t tail = sizeof CHECKSUM_KEY - 1 + 8 + sizeof CHECKSUM_END - 1;
    if (!json_is_string(sum) || !key || (size_t)(key - text) + tail != size ||
        strcmp(key + sizeof CHECKSUM_KEY - 1 + 8, CHECKSUM_END) != 0)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key checksum missing or not the last line (a version-2 manifest ends with it)",
                       x->path);
    char *end;
    unsigned long want = strtoul(json_string_value(sum), &end, 16);
    uint32_t got = fs_crc32(0, text, (size_t)(key - text));
    if (strlen(json_string_value(sum)) != 8 || *end || want != got)
        return wp_fail(WP_BAD_INPUT, x->err, x->errlen, "%s: key checksum is %s, but the manifest's bytes give %08x (edited or corrupted)",
                       x->path, json_string_value(sum), got);
    return 0;
}

wp_result manifest_read(const char *path, wp_manifest *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!fs_exists(path)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: missing: not a finished checkpoint", path);
    char *text;
    size_t size;
    WP_TRY(fs_read_small(path, (size_t)64 << 20, &text, &size, err, errlen));
    json_error_t jerr;
    json_t *root = json_in_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
    ctx x = {path, err, errlen};
    wp_result rc = WP_OK;
    if (!json_is_object(root)) rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a JSON object (%s, line %d)", path, root ? "wrong type" : jerr.text, jerr.line);
    else rc = check_checksum(&x, root, text, size);
    free(text);
    if (rc == 0) rc = parse_root(&x, root, m);
    json_decref(root);
    if (rc) manifest_free(m);
    return rc;
}

void manifest_free(wp_manifest *m) {
    free(m->files);
    m->files = NULL;
    m->n_files = 0;
}
