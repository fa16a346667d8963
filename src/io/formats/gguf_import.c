/* --init-from MODEL.gguf: the config and the owners' masters from a llama.cpp file (gguf.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_file.h"
#include "gguf_rope.h"
#include "masters_fill.h"

/* What our model does not implement is refused by name rather than computed differently. */
static wp_result check_supported(const gguf_file *f, char *err, size_t errlen) {
    const char *arch, *scaling;
    size_t len, slen;
    WP_TRY(gguf_get_str(f, "general.architecture", true, &arch, &len, err, errlen));
    if (len != 5 || memcmp(arch, "llama", 5) != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: general.architecture '%.*s' is not llama", f->path, (int)(len < 64 ? len : 64), arch);
    wp_result rc = gguf_get_str(f, "llama.rope.scaling.type", false, &scaling, &slen, err, errlen);
    if (rc == 0 && scaling && !(slen == 4 && memcmp(scaling, "none", 4) == 0))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: llama.rope.scaling.type '%.*s' is not supported", f->path, (int)(slen < 64 ? slen : 64), scaling);
    if (rc == 0 && (gguf_find_tensor(f, "blk.0.attn_q.bias") || gguf_find_tensor(f, "blk.0.attn_k.bias")))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor blk.0.attn_q.bias: biases are not part of this model", f->path);
    return rc;
}

static const struct {
    hf_key k;
    const char *key;
    bool required;
} keys[] = {
    {HF_NUM_HIDDEN_LAYERS, "llama.block_count", true},        {HF_HIDDEN_SIZE, "llama.embedding_length", true},
    {HF_INTERMEDIATE_SIZE, "llama.feed_forward_length", true}, {HF_NUM_ATTENTION_HEADS, "llama.attention.head_count", true},
    {HF_NUM_KEY_VALUE_HEADS, "llama.attention.head_count_kv", false},
    {HF_RMS_NORM_EPS, "llama.attention.layer_norm_rms_epsilon", true},
    {HF_ROPE_THETA, "llama.rope.freq_base", false},            {HF_MAX_POSITIONS, "llama.context_length", false},
    {HF_BOS_TOKEN_ID, "tokenizer.ggml.bos_token_id", false},  {HF_EOS_TOKEN_ID, "tokenizer.ggml.eos_token_id", false},
};

/* llama.vocab_size, else the embedding's rows (older files leave the key out). */
static wp_result read_vocab(const gguf_file *f, hf_config *c, char *err, size_t errlen) {
    uint64_t v;
    bool present;
    wp_result rc = gguf_get_uint(f, "llama.vocab_size", false, &v, &present, err, errlen);
    const gguf_tensor *e = gguf_find_tensor(f, "token_embd.weight");
    if (rc == 0 && !present) {
        if (!e || e->ndims != 2) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: no llama.vocab_size and no 2-d tensor token_embd.weight", f->path);
        v = e->dims[1];
    }
    c->value[HF_VOCAB_SIZE] = (double)v;
    c->present[HF_VOCAB_SIZE] = rc == 0;
    return rc;
}

static wp_result fill_config(const gguf_file *f, hf_config *c, char *err, size_t errlen) {
    wp_result rc = check_supported(f, err, errlen);
    for (size_t i = 0; rc == 0 && i < sizeof keys / sizeof keys[0]; i++) {
        hf_key k = keys[i].k;
        if (hf_key_integer(k)) {
            uint64_t v;
            rc = gguf_get_uint(f, keys[i].key, keys[i].required, &v, &c->present[k], err, errlen);
            c->value[k] = (double)v;
        } else {
            rc = gguf_get_float(f, keys[i].key, keys[i].required, &c->value[k], &c->present[k], err, errlen);
        }
    }
    if (rc == 0 && !c->present[HF_NUM_KEY_VALUE_HEADS]) {
        c->present[HF_NUM_KEY_VALUE_HEADS] = true;
        c->value[HF_NUM_KEY_VALUE_HEADS] = c->value[HF_NUM_ATTENTION_HEADS];
    }
    if (rc == 0) rc = read_vocab(f, c, err, errlen);
    /* partial RoPE (fewer rotated dims than the head) is another model */
    uint64_t rot, heads = (uint64_t)c->value[HF_NUM_ATTENTION_HEADS];
    bool have_rot = false;
    if (rc == 0) rc = gguf_get_uint(f, "llama.rope.dimension_count", false, &rot, &have_rot, err, errlen);
    if (rc == 0 && have_rot && heads && rot * heads != (uint64_t)c->value[HF_HIDDEN_SIZE])
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: llama.rope.dimension_count %llu is not the head size (partial RoPE is not supported)",
                     f->path, (unsigned long long)rot);
    c->tied = !gguf_find_tensor(f, "output.weight");
    if (rc == 0) {
        /* the settings checked as the file's, by the keys it spells (not the flags they set) */
        const char *names[HF_NKEYS] = {[HF_VOCAB_SIZE] = "llama.vocab_size (or token_embd.weight's rows)",
                                       [HF_ROPE_FACTOR] = "rope factor", [HF_ROPE_LOW_FREQ] = "rope low_freq_factor",
                                       [HF_ROPE_HIGH_FREQ] = "rope high_freq_factor", [HF_ROPE_ORIGINAL_MAX] = "rope original_max"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) names[keys[i].k] = keys[i].key;
        rc = hf_config_check(c, names, err, errlen);
    }
    /* llama 3.x's frequency scaling travels as per-pair factors (rope_freqs.weight), recovered
     * as its rope_scaling parameters (gguf_rope.c); the heads' size is checked even by now */
    wp_rope_scaling sc;
    double theta = c->present[HF_ROPE_THETA] ? c->value[HF_ROPE_THETA] : 10000.0; /* llama.cpp's default too */
    if (rc == 0) rc = gguf_rope_read(f, (int)(c->value[HF_HIDDEN_SIZE] / c->value[HF_NUM_ATTENTION_HEADS]), theta, &sc, err, errlen);
    if (rc == 0 && sc.factor > 0) {
        const double v[] = {sc.factor, sc.low_freq_factor, sc.high_freq_factor, sc.original_max_pos};
        for (int k = HF_ROPE_FACTOR; k <= HF_ROPE_ORIGINAL_MAX; k++) c->value[k] = v[k - HF_ROPE_FACTOR], c->present[k] = true;
    }
    return rc;
}

/* One tensor the model needs: present, of a type we dequantize, with the dims (d1 0: a vector). */
static wp_result check_tensor(const gguf_file *f, const char *name, uint64_t d0, uint64_t d1, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is missing", f->path, name);
    if (!gguf_type_readable(t->type))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: type %s (%u) is not one weipipe dequantizes (F32, F16, BF16, Q8_0, "
                       "Q4_0, Q4_1)", f->path, name, gguf_type_name(t->type), t->type);
    if (t->ndims != (d1 ? 2u : 1u) || t->dims[0] != d0 || (d1 && t->dims[1] != d1))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: dims [%llu, %llu] (n_dims %u), the config needs [%llu, %llu]", f->path,
                       name, (unsigned long long)t->dims[0], (unsigned long long)(t->ndims > 1 ? t->dims[1] : 0), t->ndims,
                       (unsigned long long)d0, (unsigned long long)d1);
    return 0;
}

/* Every tensor the config implies, checked before anything is written (a checkpoint directory
 * is made before the masters load). */
static wp_result check_tensors(const gguf_file *f, const hf_config *c, char *err, size_t errlen) {
    uint64_t L = (uint64_t)c->value[HF_NUM_HIDDEN_LAYERS], h = (uint64_t)c->value[HF_HIDDEN_SIZE];
    uint64_t ffn = (uint64_t)c->value[HF_INTERMEDIATE_SIZE], heads = (uint64_t)c->value[HF_NUM_ATTENTION_HEADS];
    uint64_t kv = (uint64_t)c->value[HF_NUM_KEY_VALUE_HEADS], V = (uint64_t)c->value[HF_VOCAB_SIZE];
    uint64_t kvdim = kv * (h / heads);
    wp_result rc = check_tensor(f, "token_embd.weight", h, V, err, errlen);
    if (rc == 0) rc = check_tensor(f, "output_norm.weight", h, 0, err, errlen);
    if (rc == 0 && !c->tied) rc = check_tensor(f, "output.weight", h, V, err, errlen);
    const struct {
        const char *name;
        uint64_t d0, d1;
    } per_layer[] = {{"attn_norm", h, 0}, {"attn_q", h, h},       {"attn_k", h, kvdim}, {"attn_v", h, kvdim},
                     {"attn_output", h, h}, {"ffn_norm", h, 0},   {"ffn_gate", h, ffn}, {"ffn_up", h, ffn},
                     {"ffn_down", ffn, h}};
    char name[96];
    for (uint64_t l = 0; rc == 0 && l < L; l++)
        for (size_t i = 0; rc == 0 && i < sizeof per_layer / sizeof per_layer[0]; i++) {
            snprintf(name, sizeof name, "blk.%llu.%s.weight", (unsigned long long)l, per_layer[i].name);
            rc = check_tensor(f, name, per_layer[i].d0, per_layer[i].d1, err, errlen);
        }
    /* every tensor is one of those: a 30th layer under a block count of 29 is not dropped unseen */
    for (size_t i = 0; rc == 0 && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->t[i];
        snprintf(name, sizeof name, "%.*s", (int)t->namelen, t->name);
        unsigned long long l;
        int at = 0;
        bool known = !strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") || !strcmp(name, "output.weight") ||
                     !strcmp(name, GGUF_ROPE_TENSOR); /* checked by gguf_rope_read */
        if (!known && sscanf(name, "blk.%llu.%n", &l, &at) == 1 && at > 0 && l < L)
            for (size_t k = 0; !known && k < sizeof per_layer / sizeof per_layer[0]; k++) {
                size_t pl = strlen(per_layer[k].name);
                known = !strncmp(name + at, per_layer[k].name, pl) && !strcmp(name + at + pl, ".weight");
            }
        if (!known)
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s is not one of a llama model with llama.block_count %llu (unexpected)",
                         f->path, name, (unsigned long long)L);
    }
    return rc;
}

wp_result gguf_read_config(const gguf_file *f, hf_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", f->path);
    wp_result rc = fill_config(f, c, err, errlen);
    if (rc == 0) rc = check_tensors(f, c, err, errlen);
    return rc;
}

wp_result gguf_max_positions(const gguf_file *f, int64_t *positions, char *err, size_t errlen) {
    uint64_t v = 0;
    wp_result rc = gguf_get_uint(f, "llama.context_length", true, &v, NULL, err, errlen);
    if (rc == 0 && (v < 1 || v > INT32_MAX))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: llama.context_length %llu is not in [1, 2^31)", f->path, (unsigned long long)v);
    if (rc == 0) *positions = (int64_t)v;
    return rc;
}

wp_result gguf_chat_info(const gguf_file *f, char **tmpl, int64_t *bos, int64_t *eos, char *err, size_t errlen) {
    *tmpl = NULL;
    *bos = *eos = -1;
    const char *s = NULL;
    size_t len = 0;
    uint64_t v = 0;
    bool present = false;
    wp_result rc = gguf_get_str(f, "tokenizer.chat_template", false, &s, &len, err, errlen);
    if (rc == 0 && s && !(*tmpl = strndup(s, len))) rc = wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
    if (rc == 0) rc = gguf_get_uint(f, "tokenizer.ggml.bos_token_id", false, &v, &present, err, errlen);
    if (rc == 0 && present) *bos = v <= INT32_MAX ? (int64_t)v : -1;
    if (rc == 0) rc = gguf_get_uint(f, "tokenizer.ggml.eos_token_id", false, &v, &present, err, errlen);
    if (rc == 0 && present) *eos = v <= INT32_MAX ? (int64_t)v : -1;
    if (rc) {
        free(*tmpl);
        *tmpl = NULL;
    }
    return rc;
}

/* ---- tensors ---- */

static const struct {
    const char *hf, *gguf;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},     {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},  {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},         {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

/* llama.cpp's name of a Hugging Face Llama tensor (tied: the head is the embedding). */
int gguf_name(const char *hf, bool tied, char *out, size_t len) {
    int layer, at = 0;
    if (strcmp(hf, "model.embed_tokens.weight") == 0 || (tied && strcmp(hf, "lm_head.weight") == 0))
        return snprintf(out, len, "token_embd.weight") < 0;
    if (strcmp(hf, "lm_head.weight") == 0) return snprintf(out, len, "output.weight") < 0;
    if (strcmp(hf, "model.norm.weight") == 0) return snprintf(out, len, "output_norm.weight") < 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &at) == 1 && at > 0)
        for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
            if (strcmp(hf + at, layer_names[i].hf) == 0) return snprintf(out, len, "blk.%d.%s", layer, layer_names[i].gguf) < 0;
    return 1;
}

/* convert_hf_to_gguf.py's permute interleaves each head's two rotary halves (row i*D/2 + j
 * goes to 2j + i) for llama.cpp's adjacent-pair RoPE; this puts them back (rotate-half). */
static wp_result unpermute(float *w, int heads, int head_dim, int cols, char *err, size_t errlen) {
    size_t n = (size_t)head_dim * cols;
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return wp_fail(WP_FAILED, err, errlen, "--init-from: out of memory");
    for (int h = 0; h < heads; h++) {
        float *head = w + (size_t)h * n;
        memcpy(tmp, head, n * sizeof *tmp);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < head_dim / 2; j++)
                memcpy(head + ((size_t)i * head_dim / 2 + j) * cols, tmp + (size_t)(2 * j + i) * cols, cols * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

static wp_result load_param(const gguf_file *f, bool tied, const wp_model_cfg *cfg, const wp_param *p, float *dst, char *err,
                      size_t errlen) {
    char name[96];
    if (gguf_name(p->name, tied, name, sizeof name)) return wp_fail(WP_FAILED, err, errlen, "--init-from: no GGUF name for %s", p->name);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s (%s) is missing", f->path, name, p->name);
    bool vec = p->cols == 1; /* norms: one dimension in the file */
    bool fits = vec ? t->ndims == 1 && t->dims[0] == (uint64_t)p->rows
                    : t->ndims == 2 && t->dims[0] == (uint64_t)p->cols && t->dims[1] == (uint64_t)p->rows;
    if (!fits)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s has dims [%llu, %llu] (n_dims %u), the model needs [%d, %d]", f->path, name,
                       (unsigned long long)t->dims[0], (unsigned long long)(t->ndims > 1 ? t->dims[1] : 1), t->ndims,
                       p->cols, vec ? 1 : p->rows);
    wp_result rc = gguf_tensor_f32(f, t, dst, err, errlen);
    if (rc == 0 && strstr(p->name, "self_attn.q_proj"))
        rc = unpermute(dst, cfg->n_heads, cfg->head_dim, p->cols, err, errlen);
    if (rc == 0 && strstr(p->name, "self_attn.k_proj"))
        rc = unpermute(dst, cfg->n_kv_heads, cfg->head_dim, p->cols, err, errlen);
    return rc;
}

typedef struct {
    const gguf_file *f;
    bool tied;
    const wp_model_cfg *cfg;
} gguf_reader;

static wp_result read_param(void *ctx, const wp_param *p, float *dst, char *err, size_t errlen) {
    const gguf_reader *r = ctx;
    return load_param(r->f, r->tied, r->cfg, p, dst, err, errlen);
}

wp_result gguf_load_masters(const gguf_file *f, wp_optim *o, char *err, size_t errlen) {
    wp_result rc = check_supported(f, err, errlen);
    gguf_reader r = {f, !gguf_find_tensor(f, "output.weight"), &layout_of_optim(o)->cfg};
    if (rc == 0) rc = masters_fill(o, read_param, &r, err, errlen);
    return rc;
}
