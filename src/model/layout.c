/* Parameter layout, config validation, FLOP counts and deterministic init. */
#include "layout.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

#define NEED(cond, ...) \
    do {                \
        if (!(cond)) return wp_fail(WP_BAD_INPUT, err, errlen, __VA_ARGS__); \
    } while (0)

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

wp_result layout_build(const wp_model_cfg *cfg, wp_layout *L, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->cfg = *cfg;
    if (cfg->n_chunks < 1 || cfg->n_chunks > WP_MAX_CHUNKS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--num-chunks: %d is out of range", cfg->n_chunks);
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
        return wp_fail(WP_FAILED, err, errlen, "out of memory building the parameter table");
    }
    if (layer != cfg->n_layers) {
        layout_free(L);
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chunk-layers: chunks hold %d layers, but --num-layers is %d", layer,
                    cfg->n_layers);
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

/* FLOPs of a chunk of `layers` blocks, with the LM head when it is the last chunk. */
static wp_flops flops_of(const wp_model_cfg *m, int layers, bool last) {
    double T = (double)m->micro_batch * m->seq;
    double matmul = 0; /* multiply-adds per token in this chunk's matrix products */
    matmul += (double)layers * (double)(layout_block_numel(m) - 2 * (size_t)m->h);
    if (last) matmul += (double)m->vocab * m->h;
    /* causal attention: query i scores i+1 keys; QK^T and PV each 2 FLOPs per multiply-add;
     * document masks keep attn_share of those pairs */
    double share = m->attn_share > 0 ? m->attn_share : 1.0;
    double pairs = (double)m->micro_batch * attn_pairs_causal(m->seq) * share;
    double attn_fwd = 4.0 * pairs * m->n_heads * m->head_dim * layers;
    wp_flops f;
    f.fwd = 2.0 * T * matmul + attn_fwd;
    f.bwd_input = 2.0 * T * matmul + 2.0 * attn_fwd;
    f.bwd_weight = 2.0 * T * matmul;
    return f;
}

wp_flops layout_chunk_flops(const wp_layout *L, int c) {
    return flops_of(&L->cfg, L->cfg.chunk_layers[c], c == L->cfg.n_chunks - 1);
}

/* What a chunk costs its rank per micro-batch: forward, backward and, with recompute, the
 * forward again (the simulator's F + BW). */
static double chunk_cost(const wp_model_cfg *m, int layers, bool last) {
    wp_flops f = flops_of(m, layers, last);
    return f.fwd * (m->recompute ? 2 : 1) + f.bwd_input + f.bwd_weight;
}

void model_cfg_balanced_chunks(wp_model_cfg *cfg, int n_chunks) {
    model_cfg_even_chunks(cfg, n_chunks);
    if (n_chunks < 2 || cfg->n_layers < n_chunks) return;
    /* Blocks cost the same, so only the last chunk's count matters: k layers there, the other
     * L-k as evenly as possible over n-1 chunks. The smallest largest chunk wins; on a tie the
     * larger k (closest to even chunks). */
    const int L = cfg->n_layers, n = n_chunks;
    int best_k = 0;
    double best = 0;
    for (int k = 1; k <= L - (n - 1); k++) {
        int rest = L - k, most = (rest + n - 2) / (n - 1);
        double worst = fmax(chunk_cost(cfg, k, true), chunk_cost(cfg, most, false));
        if (best_k == 0 || worst <= best * (1 + 1e-12)) {
            best = worst;
            best_k = k;
        }
    }
    /* the extra layers go to the first chunks, as in even chunks (model_cfg_even_chunks): with
     * them on the chunks before the last instead, two heavy stages follow each other and 1F1B
     * loses 2.4% (N = 5, 32 layers, simulated) */
    int rest = L - best_k, base = rest / (n - 1), extra = rest % (n - 1);
    for (int c = 0; c < n - 1; c++) cfg->chunk_layers[c] = base + (c < extra);
    cfg->chunk_layers[n - 1] = best_k;
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
        /* tied: the head starts as the embedding (the same draws) */
        bool head = L->cfg.tied && strcmp(p->name, "lm_head.weight") == 0;
        uint64_t key = splitmix64(seed) ^ hash_name(head ? "model.embed_tokens.weight" : p->name);
        /* element j is a function of (key, j) alone, so the threads' split cannot change a bit;
         * one thread drew a 1B model's 1.2e9 values in about 30 s, each run of a GPU check */
#pragma omp parallel for schedule(static) if (n > (1u << 16))
        for (size_t j = 0; j < n; j++)
            w[j] = p->kind == WP_PARAM_NORM ? 1.0f : (float)(L->cfg.init_std * normal_at(key, j));
    }
}

static size_t om_chunk_numel(const void *ctx, int c) { return ((const wp_layout *)ctx)->chunk_numel[c]; }

static bool om_tensor(const void *ctx, int c, int i, size_t *offset, bool *decay) {
    const wp_layout *L = ctx;
    int first, end;
    layout_chunk_params(L, c, &first, &end);
    if (i < 0 || first + i >= end) return false;
    *offset = L->params[first + i].offset;
    *decay = L->params[first + i].kind != WP_PARAM_NORM;
    return true;
}

static void om_init_chunk(const void *ctx, int c, uint64_t seed, float *dst) { layout_init_chunk(ctx, c, seed, dst); }

/* Tied word embeddings: the head (src) is the embedding (dst), both in the one chunk. When
 * they sit in different chunks the schedule moves the tie between their owners (schedule_tie). */
static bool om_tied(const void *ctx, int c, size_t *dst, size_t *src, size_t *n) {
    const wp_layout *L = ctx;
    if (!L->cfg.tied) return false;
    const wp_param *e = layout_find(L, "model.embed_tokens.weight"), *h = layout_find(L, "lm_head.weight");
    if (!e || !h || e->chunk != c || h->chunk != c) return false;
    *dst = e->offset;
    *src = h->offset;
    *n = (size_t)e->rows * e->cols;
    return true;
}

wp_optim_model layout_optim_model(const wp_layout *L) {
    return (wp_optim_model){.ctx = L, .n_chunks = L->cfg.n_chunks, .chunk_numel = om_chunk_numel, .tensor = om_tensor,
                            .init_chunk = om_init_chunk, .tied = om_tied};
}

const wp_layout *layout_of_optim(const wp_optim *o) {
    const wp_optim_model *m = optim_model(o);
    return m->chunk_numel == om_chunk_numel ? m->ctx : NULL; /* made by layout_optim_model: ctx is a layout */
}
