/* Parameter layout, config validation, FLOP counts and deterministic init. */
#include "layout.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

wp_dtype precision_weight_dtype(wp_precision p) {
    return p == WP_PREC_MIXED ? WP_F16 : p == WP_PREC_BF16 ? WP_BF16 : WP_F32;
}
wp_dtype precision_grad_dtype(wp_precision p) { return p == WP_PREC_FP32 ? WP_F32 : WP_BF16; }
wp_dtype precision_act_dtype(wp_precision p) { return precision_weight_dtype(p); }
const char *precision_name(wp_precision p) {
    return p == WP_PREC_MIXED ? "mixed" : p == WP_PREC_BF16 ? "bf16" : "fp32";
}

void model_cfg_even_chunks(wp_model_cfg *cfg, int n_chunks) {
    cfg->n_chunks = n_chunks;
    for (int c = 0; c < n_chunks; c++)
        cfg->chunk_layers[c] = cfg->n_layers / n_chunks + (c < cfg->n_layers % n_chunks);
}

static int parse_chunk_layers(const char *list, wp_model_cfg *cfg, char *err, size_t errlen) {
    int n = 0, sum = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000)
            return fail(err, errlen, "--chunk-layers: '%s' is not a comma-separated list of positive layer counts", list);
        if (n == WP_MAX_CHUNKS) return fail(err, errlen, "--chunk-layers: more than %d chunks", WP_MAX_CHUNKS);
        cfg->chunk_layers[n++] = (int)v;
        sum += (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return fail(err, errlen, "--chunk-layers: unexpected '%c' in '%s'", *p, list);
    }
    if (sum != cfg->n_layers)
        return fail(err, errlen, "--chunk-layers: '%s' adds up to %d layers, but --num-layers is %d", list, sum, cfg->n_layers);
    cfg->n_chunks = n;
    return 0;
}

#define NEED(cond, ...) \
    do {                \
        if (!(cond)) return fail(err, errlen, __VA_ARGS__); \
    } while (0)

int model_cfg_from_opts(const wp_opts *o, int nranks, wp_model_cfg *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    const int64_t big = 1 << 24;
    NEED(o->num_layers >= 1 && o->num_layers <= 100000, "--num-layers: %lld must be at least 1", (long long)o->num_layers);
    NEED(o->hidden_size >= 1 && o->hidden_size <= big, "--hidden-size: %lld must be between 1 and %lld", (long long)o->hidden_size, (long long)big);
    NEED(o->num_attention_heads >= 1, "--num-attention-heads: %lld must be at least 1", (long long)o->num_attention_heads);
    NEED(o->hidden_size % o->num_attention_heads == 0, "--hidden-size: %lld is not divisible by --num-attention-heads %lld",
         (long long)o->hidden_size, (long long)o->num_attention_heads);
    int64_t hd = o->hidden_size / o->num_attention_heads;
    NEED(hd % 2 == 0, "--num-attention-heads: head size %lld (hidden-size / heads) must be even for RoPE", (long long)hd);
    int64_t kv = o->num_query_groups ? o->num_query_groups : o->num_attention_heads;
    NEED(kv >= 1 && o->num_attention_heads % kv == 0, "--num-query-groups: %lld must be positive and divide --num-attention-heads %lld",
         (long long)o->num_query_groups, (long long)o->num_attention_heads);
    int64_t ffn = o->ffn_hidden_size;
    if (ffn == 0) ffn = ((8 * o->hidden_size / 3 + 31) / 32) * 32;
    NEED(ffn >= 1 && ffn <= 4 * big, "--ffn-hidden-size: %lld must be positive", (long long)o->ffn_hidden_size);
    NEED(o->seq_length >= 1 && o->seq_length <= big, "--seq-length: %lld must be between 1 and %lld", (long long)o->seq_length, (long long)big);
    NEED(o->micro_batch_size >= 1 && o->micro_batch_size <= big, "--micro-batch-size: %lld must be at least 1", (long long)o->micro_batch_size);
    NEED(o->vocab_size >= 2 && o->vocab_size <= big, "--vocab-size: %lld must be between 2 and %lld", (long long)o->vocab_size, (long long)big);
    NEED(o->micro_batch_size * o->seq_length <= INT32_MAX,
         "--micro-batch-size x --seq-length: %lld tokens is too many", (long long)(o->micro_batch_size * o->seq_length));
    NEED(o->rope_theta > 0, "--rope-theta: %g must be positive", o->rope_theta);
    NEED(o->norm_eps > 0, "--norm-eps: %g must be positive", o->norm_eps);
    NEED(o->init_std >= 0, "--init-std: %g must not be negative", o->init_std);

    cfg->n_layers = (int)o->num_layers;
    cfg->h = (int)o->hidden_size;
    cfg->ffn = (int)ffn;
    cfg->n_heads = (int)o->num_attention_heads;
    cfg->n_kv_heads = (int)kv;
    cfg->head_dim = (int)hd;
    cfg->seq = (int)o->seq_length;
    cfg->mb = (int)o->micro_batch_size;
    cfg->vocab = (int)o->vocab_size;
    cfg->rope_theta = o->rope_theta;
    cfg->norm_eps = o->norm_eps;
    cfg->init_std = o->init_std;
    cfg->recompute = o->recompute;
    cfg->precision = strcmp(o->precision, "fp32") == 0 ? WP_PREC_FP32
                     : strcmp(o->precision, "bf16") == 0 ? WP_PREC_BF16
                                                          : WP_PREC_MIXED;

    if (o->chunk_layers[0]) {
        int rc = parse_chunk_layers(o->chunk_layers, cfg, err, errlen);
        if (rc) return rc;
        NEED(!o->set[FLAG_num_chunks] || o->num_chunks == cfg->n_chunks,
             "--num-chunks: %lld disagrees with --chunk-layers '%s' (%d chunks)", (long long)o->num_chunks, o->chunk_layers, cfg->n_chunks);
        return 0;
    }
    int64_t chunks = o->num_chunks ? o->num_chunks : (nranks > 0 ? nranks : 1);
    NEED(chunks >= 1 && chunks <= WP_MAX_CHUNKS, "--num-chunks: %lld must be between 1 and %d", (long long)chunks, WP_MAX_CHUNKS);
    NEED(chunks <= cfg->n_layers, "--num-chunks: %lld chunks need at least as many layers, but --num-layers is %d%s",
         (long long)chunks, cfg->n_layers, o->num_chunks ? "" : " (the default is one chunk per rank, --nranks)");
    model_cfg_even_chunks(cfg, (int)chunks);
    return 0;
}

size_t layout_block_numel(const wp_model_cfg *c) {
    size_t h = (size_t)c->h, q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    return 2 * h + h * q + 2 * h * kv + q * h + 3 * h * (size_t)c->ffn;
}

/* Appends one tensor to its chunk; false when memory runs out (the layout is then unusable). */
static bool add_param(wp_layout *L, int *cap, const char *name, wp_param_kind kind, int chunk, int layer, int rows, int cols) {
    if (L->n_params == *cap) {
        int grown = *cap ? *cap * 2 : 64;
        wp_param *params = realloc(L->params, (size_t)grown * sizeof *L->params);
        if (!params) return false;
        L->params = params;
        *cap = grown;
    }
    wp_param *p = &L->params[L->n_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->chunk = chunk;
    p->layer = layer;
    p->rows = rows;
    p->cols = cols;
    p->offset = L->chunk_numel[chunk];
    L->chunk_numel[chunk] += (size_t)rows * cols;
    return true;
}

int layout_build(const wp_model_cfg *cfg, wp_layout *L, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->cfg = *cfg;
    if (cfg->n_chunks < 1 || cfg->n_chunks > WP_MAX_CHUNKS) return fail(err, errlen, "--num-chunks: %d is out of range", cfg->n_chunks);
    int cap = 0, layer = 0;
    bool ok = true;
    const int h = cfg->h, q = cfg->n_heads * cfg->head_dim, kv = cfg->n_kv_heads * cfg->head_dim, f = cfg->ffn;
    char name[64];
    for (int c = 0; c < cfg->n_chunks; c++) {
        L->chunk_first_layer[c] = layer;
        if (c == 0) ok = ok && add_param(L, &cap, "model.embed_tokens.weight", WP_PARAM_EMBED, c, -1, cfg->vocab, h);
        for (int i = 0; i < cfg->chunk_layers[c]; i++, layer++) {
#define P(suffix, kind, r, k) \
    (snprintf(name, sizeof name, "model.layers.%d.%s", layer, suffix), ok = ok && add_param(L, &cap, name, kind, c, layer, r, k))
            P("input_layernorm.weight", WP_PARAM_NORM, h, 1);
            P("self_attn.q_proj.weight", WP_PARAM_MATRIX, q, h);
            P("self_attn.k_proj.weight", WP_PARAM_MATRIX, kv, h);
            P("self_attn.v_proj.weight", WP_PARAM_MATRIX, kv, h);
            P("self_attn.o_proj.weight", WP_PARAM_MATRIX, h, q);
            P("post_attention_layernorm.weight", WP_PARAM_NORM, h, 1);
            P("mlp.gate_proj.weight", WP_PARAM_MATRIX, f, h);
            P("mlp.up_proj.weight", WP_PARAM_MATRIX, f, h);
            P("mlp.down_proj.weight", WP_PARAM_MATRIX, h, f);
#undef P
        }
        if (c == cfg->n_chunks - 1) {
            ok = ok && add_param(L, &cap, "model.norm.weight", WP_PARAM_NORM, c, -1, h, 1);
            ok = ok && add_param(L, &cap, "lm_head.weight", WP_PARAM_EMBED, c, -1, cfg->vocab, h);
        }
    }
    if (!ok) {
        layout_free(L);
        return fail(err, errlen, "out of memory building the parameter table");
    }
    if (layer != cfg->n_layers) {
        layout_free(L);
        return fail(err, errlen, "--chunk-layers: chunks hold %d layers, but --num-layers is %d", layer, cfg->n_layers);
    }
    for (int c = 0; c < cfg->n_chunks; c++) {
        L->chunk_offset[c] = L->total_numel;
        L->total_numel += L->chunk_numel[c];
    }
    return 0;
}

void layout_free(wp_layout *L) {
    free(L->params);
    L->params = NULL;
    L->n_params = 0;
}

const wp_param *layout_find(const wp_layout *L, const char *name) {
    for (int i = 0; i < L->n_params; i++)
        if (strcmp(L->params[i].name, name) == 0) return &L->params[i];
    return NULL;
}

void layout_chunk_params(const wp_layout *L, int c, int *first, int *end) {
    int i = 0;
    while (i < L->n_params && L->params[i].chunk < c) i++;
    *first = i;
    while (i < L->n_params && L->params[i].chunk == c) i++;
    *end = i;
}

wp_flops layout_chunk_flops(const wp_layout *L, int c) {
    const wp_model_cfg *m = &L->cfg;
    double T = (double)m->mb * m->seq;
    double matmul = 0; /* multiply-adds per token in this chunk's matrix products */
    matmul += (double)m->chunk_layers[c] * (double)(layout_block_numel(m) - 2 * (size_t)m->h);
    if (c == m->n_chunks - 1) matmul += (double)m->vocab * m->h;
    /* causal attention: query i scores i+1 keys; QK^T and PV each 2 FLOPs per multiply-add */
    double pairs = (double)m->mb * m->seq * (m->seq + 1.0) / 2.0;
    double attn_fwd = 4.0 * pairs * m->n_heads * m->head_dim * m->chunk_layers[c];
    wp_flops f;
    f.fwd = 2.0 * T * matmul + attn_fwd;
    f.bwd_input = 2.0 * T * matmul + 2.0 * attn_fwd;
    f.bwd_weight = 2.0 * T * matmul;
    return f;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Standard normal from a counter (Box-Muller), so element i never depends on element i-1. */
static double normal_at(uint64_t key, uint64_t i) {
    uint64_t a = splitmix64(key ^ (2 * i)), b = splitmix64(key ^ (2 * i + 1));
    double u1 = ((a >> 11) + 1.0) * 0x1.0p-53, u2 = (b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void layout_init_chunk(const wp_layout *L, int c, uint64_t seed, float *dst) {
    int first, end;
    layout_chunk_params(L, c, &first, &end);
    for (int i = first; i < end; i++) {
        const wp_param *p = &L->params[i];
        size_t n = (size_t)p->rows * p->cols;
        float *w = dst + p->offset;
        uint64_t key = splitmix64(seed) ^ hash_name(p->name);
        for (size_t j = 0; j < n; j++)
            w[j] = p->kind == WP_PARAM_NORM ? 1.0f : (float)(L->cfg.init_std * normal_at(key, j));
    }
}
