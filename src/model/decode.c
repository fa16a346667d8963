/* KV-cache decoding and token choice (see decode.h). One Llama block per position block, as an
 * explicit list of kernel calls with shapes beside each (n rows at positions pos..pos+n-1):
 *   n1 = rmsnorm(x) * ln1;  q = rope(n1 Wq^T);  K[pos..] = rope(n1 Wk^T);  V[pos..] = n1 Wv^T
 *   x1 = x + attn(q, K[0..pos+n), V[0..pos+n)) Wo^T;  n2 = rmsnorm(x1) * ln2
 *   x  = x1 + (silu(n2 Wg^T) * (n2 Wu^T)) Wd^T
 * The block's code mirrors block_forward (block.c) rather than calling it, because there the
 * keys and values live in per-micro-batch activations and here in the cache (b = 1, so the new
 * rows of the cache are contiguous and the projections write straight into it). */
#include "decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

typedef struct {
    const void *w; /* the chunk's weights */
    size_t ln1, wq, wk, wv, wo, ln2, wg, wu, wd;
} dec_block;

struct wp_decoder {
    const wp_layout *L;
    wp_kern *k;
    wp_dtype ct;
    size_t cs;                   /* bytes per compute-dtype element */
    int h, q, kv, f, nh, nkv, hd, max_pos, pos;
    int64_t V;
    float eps, theta;
    void *w[WP_MAX_CHUNKS];      /* weights of each chunk, compute dtype */
    dec_block *blocks;           /* n_layers */
    const void *embed, *norm, *head;
    void **cache_k, **cache_v;   /* n_layers, [max_pos, kv] each */
    /* scratch for WP_DECODE_ROWS rows */
    void *x, *n1, *qb, *att, *x1, *n2, *gate, *up, *sw;
    float *rstd, *lse, *logits;  /* [R], [nh*R], [V] fp32 */
    int32_t *tokens;             /* backend [R] */
};

static void free_if(wp_kern *k, void *p) {
    if (p) kern_free(k, p);
}

void decoder_destroy(wp_decoder *D) {
    if (!D) return;
    wp_kern *k = D->k;
    for (int c = 0; c < D->L->cfg.n_chunks; c++) free_if(k, D->w[c]);
    for (int i = 0; i < D->L->cfg.n_layers; i++) {
        if (D->cache_k) free_if(k, D->cache_k[i]);
        if (D->cache_v) free_if(k, D->cache_v[i]);
    }
    void *scratch[] = {D->x, D->n1, D->qb, D->att, D->x1, D->n2, D->gate, D->up, D->sw, D->rstd, D->lse, D->logits, D->tokens};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) free_if(k, scratch[i]);
    free(D->cache_k);
    free(D->cache_v);
    free(D->blocks);
    free(D);
}

/* Element offset of a tensor in its chunk; the chunk of a layer's tensors is the layer's. */
static size_t off_of(const wp_layout *L, const char *fmt, int layer, int *chunk) {
    char name[64];
    snprintf(name, sizeof name, fmt, layer);
    const wp_param *p = layout_find(L, name);
    *chunk = p ? p->chunk : -1;
    return p ? p->offset : 0;
}

static wp_result alloc_all(wp_decoder *D) {
    wp_kern *k = D->k;
    const size_t R = WP_DECODE_ROWS, cs = D->cs;
    for (int c = 0; c < D->L->cfg.n_chunks; c++)
        if (!(D->w[c] = kern_alloc(k, D->L->chunk_numel[c] * cs))) return WP_FAILED;
    for (int i = 0; i < D->L->cfg.n_layers; i++) {
        D->cache_k[i] = kern_alloc(k, (size_t)D->max_pos * D->kv * cs);
        D->cache_v[i] = kern_alloc(k, (size_t)D->max_pos * D->kv * cs);
        if (!D->cache_k[i] || !D->cache_v[i]) return WP_FAILED;
    }
    void **ct_bufs[] = {&D->x, &D->n1, &D->x1, &D->n2};
    for (size_t i = 0; i < 4; i++)
        if (!(*ct_bufs[i] = kern_alloc(k, R * D->h * cs))) return WP_FAILED;
    if (!(D->qb = kern_alloc(k, R * D->q * cs)) || !(D->att = kern_alloc(k, R * D->q * cs))) return WP_FAILED;
    if (!(D->gate = kern_alloc(k, R * D->f * cs)) || !(D->up = kern_alloc(k, R * D->f * cs)) ||
        !(D->sw = kern_alloc(k, R * D->f * cs)))
        return WP_FAILED;
    D->rstd = kern_alloc(k, R * sizeof(float));
    D->lse = kern_alloc(k, R * D->nh * sizeof(float));
    D->logits = kern_alloc(k, (size_t)D->V * sizeof(float));
    D->tokens = kern_alloc(k, R * sizeof(int32_t));
    return D->rstd && D->lse && D->logits && D->tokens ? WP_OK : WP_FAILED;
}

size_t decoder_bytes(const wp_layout *L, wp_dtype compute, int max_pos, size_t *kv_bytes) {
    /* what alloc_all takes, buffer by buffer, plus decoder_set_param's fp32 staging (a chunk) */
    const wp_model_cfg *c = &L->cfg;
    const size_t R = WP_DECODE_ROWS, cs = wp_dtype_size(compute), q = (size_t)c->n_heads * c->head_dim;
    size_t weights = 0, chunk = 0;
    for (int i = 0; i < c->n_chunks; i++) {
        weights += L->chunk_numel[i] * cs;
        if (L->chunk_numel[i] > chunk) chunk = L->chunk_numel[i];
    }
    *kv_bytes = 2 * (size_t)c->n_layers * (size_t)max_pos * (size_t)c->n_kv_heads * c->head_dim * cs;
    size_t scratch = (4 * R * (size_t)c->h + 2 * R * q + 3 * R * (size_t)c->ffn) * cs +
                     (R + R * (size_t)c->n_heads + (size_t)c->vocab + R) * 4;
    return weights + *kv_bytes + scratch + chunk * sizeof(float);
}

static wp_result map_tensors(wp_decoder *D) {
    const wp_layout *L = D->L;
    int c = -1;
    size_t off = off_of(L, "model.embed_tokens.weight", 0, &c);
    if (c < 0) return WP_FAILED;
    D->embed = (const char *)D->w[c] + off * D->cs;
    off = off_of(L, "model.norm.weight", 0, &c);
    if (c < 0) return WP_FAILED;
    D->norm = (const char *)D->w[c] + off * D->cs;
    off = off_of(L, "lm_head.weight", 0, &c);
    if (c < 0) off = off_of(L, "model.embed_tokens.weight", 0, &c); /* tied: the head is the embedding */
    D->head = (const char *)D->w[c] + off * D->cs;
    for (int i = 0; i < L->cfg.n_layers; i++) {
        dec_block *b = &D->blocks[i];
        int cc[9];
        b->ln1 = off_of(L, "model.layers.%d.input_layernorm.weight", i, &cc[0]);
        b->wq = off_of(L, "model.layers.%d.self_attn.q_proj.weight", i, &cc[1]);
        b->wk = off_of(L, "model.layers.%d.self_attn.k_proj.weight", i, &cc[2]);
        b->wv = off_of(L, "model.layers.%d.self_attn.v_proj.weight", i, &cc[3]);
        b->wo = off_of(L, "model.layers.%d.self_attn.o_proj.weight", i, &cc[4]);
        b->ln2 = off_of(L, "model.layers.%d.post_attention_layernorm.weight", i, &cc[5]);
        b->wg = off_of(L, "model.layers.%d.mlp.gate_proj.weight", i, &cc[6]);
        b->wu = off_of(L, "model.layers.%d.mlp.up_proj.weight", i, &cc[7]);
        b->wd = off_of(L, "model.layers.%d.mlp.down_proj.weight", i, &cc[8]);
        for (int j = 0; j < 9; j++)
            if (cc[j] != cc[0] || cc[j] < 0) return WP_FAILED; /* a block never straddles chunks */
        b->w = D->w[cc[0]];
    }
    return 0;
}

wp_decoder *decoder_create(const wp_layout *L, wp_kern *k, int max_pos, char *err, size_t errlen) {
    if (max_pos < 1) {
        snprintf(err, errlen, "decoder: %d positions (want at least 1)", max_pos);
        return NULL;
    }
    const wp_model_cfg *c = &L->cfg;
    wp_decoder *D = calloc(1, sizeof *D);
    if (!D) {
        snprintf(err, errlen, "decoder: out of host memory");
        return NULL;
    }
    *D = (wp_decoder){.L = L, .k = k, .ct = kern_compute_dtype(k), .cs = wp_dtype_size(kern_compute_dtype(k)),
                      .h = c->h, .q = c->n_heads * c->head_dim, .kv = c->n_kv_heads * c->head_dim, .f = c->ffn,
                      .nh = c->n_heads, .nkv = c->n_kv_heads, .hd = c->head_dim, .max_pos = max_pos, .V = c->vocab,
                      .eps = (float)c->norm_eps, .theta = (float)c->rope_theta};
    D->blocks = calloc((size_t)c->n_layers + 1, sizeof *D->blocks);
    D->cache_k = calloc((size_t)c->n_layers + 1, sizeof *D->cache_k);
    D->cache_v = calloc((size_t)c->n_layers + 1, sizeof *D->cache_v);
    if (!D->blocks || !D->cache_k || !D->cache_v) {
        snprintf(err, errlen, "decoder: out of host memory");
        decoder_destroy(D);
        return NULL;
    }
    if (alloc_all(D) != 0) {
        snprintf(err, errlen, "decoder: %s", kern_error(k) ? kern_error(k) : "out of memory");
        decoder_destroy(D);
        return NULL;
    }
    if (map_tensors(D) != 0) {
        snprintf(err, errlen, "decoder: the layout lacks a Llama tensor");
        decoder_destroy(D);
        return NULL;
    }
    return D;
}

wp_result decoder_set_params(wp_decoder *D, const float *params) {
    for (int c = 0; c < D->L->cfg.n_chunks; c++) {
        const float *src = params + D->L->chunk_offset[c];
        size_t n = D->L->chunk_numel[c];
        if (D->ct == WP_F32) {
            kern_to_device(D->k, D->w[c], src, n * sizeof(float));
            continue;
        }
        /* round on the backend, through an fp32 staging copy (as whole_set_params) */
        float *staging = kern_alloc(D->k, n * sizeof(float));
        if (!staging) return 1;
        kern_to_device(D->k, staging, src, n * sizeof(float));
        kern_convert(D->k, D->w[c], D->ct, staging, WP_F32, n);
        kern_sync(D->k);
        kern_free(D->k, staging);
    }
    return kern_status(D->k);
}

wp_result decoder_set_param(wp_decoder *D, const wp_param *p, size_t first, size_t n, const float *src) {
    if (first > layout_param_numel(p) || n > layout_param_numel(p) - first) {
        kern_set_error(D->k, "decoder_set_param: elements %zu..+%zu outside %s", first, n, p->name);
        return 1;
    }
    char *dst = (char *)D->w[p->chunk] + (p->offset + first) * D->cs; /* offsets count from the chunk's start */
    if (D->ct == WP_F32) {
        kern_to_device(D->k, dst, src, n * sizeof(float));
        return kern_status(D->k);
    }
    float *staging = kern_alloc(D->k, n * sizeof(float)); /* one piece, not the model */
    if (!staging) return 1;
    kern_to_device(D->k, staging, src, n * sizeof(float));
    kern_convert(D->k, dst, D->ct, staging, WP_F32, n);
    kern_sync(D->k);
    kern_free(D->k, staging);
    return kern_status(D->k);
}

void decoder_reset(wp_decoder *D) { D->pos = 0; }
int decoder_pos(const wp_decoder *D) { return D->pos; }
int decoder_max_pos(const wp_decoder *D) { return D->max_pos; }

#define AT(base, off) ((const char *)(base) + (size_t)(off) * D->cs)

/* y[n,out] = x[n,in] @ W^T (+ y when beta is 1) */
static void linear(wp_decoder *D, void *y, const void *x, const void *W, int n, int out, int in, float beta) {
    kern_gemm(D->k, false, true, n, out, in, 1.0f, x, in, W, in, beta, y, D->ct, out);
}

static void block_step(wp_decoder *D, int i, int n) {
    wp_kern *k = D->k;
    const dec_block *b = &D->blocks[i];
    const int pos = D->pos, h = D->h;
    void *kn = (char *)D->cache_k[i] + (size_t)pos * D->kv * D->cs; /* this block's new cache rows */
    void *vn = (char *)D->cache_v[i] + (size_t)pos * D->kv * D->cs;
    kern_rmsnorm_fwd(k, D->n1, D->rstd, D->x, AT(b->w, b->ln1), n, h, D->eps); /* n1 [n,h] */
    linear(D, D->qb, D->n1, AT(b->w, b->wq), n, D->q, h, 0.0f);               /* q [n,q] */
    linear(D, kn, D->n1, AT(b->w, b->wk), n, D->kv, h, 0.0f);                 /* K[pos..pos+n) [n,kv] */
    linear(D, vn, D->n1, AT(b->w, b->wv), n, D->kv, h, 0.0f);                 /* V[pos..pos+n) [n,kv] */
    kern_rope_fwd_scaled(k, D->qb, 1, n, D->nh, D->hd, pos, D->theta, &D->L->cfg.rope_scaling, NULL); /* at positions pos.. */
    kern_rope_fwd_scaled(k, kn, 1, n, D->nkv, D->hd, pos, D->theta, &D->L->cfg.rope_scaling, NULL);
    kern_attention_fwd(k, D->att, D->lse, D->qb, D->cache_k[i], D->cache_v[i], 1, n, pos + n, D->nh, D->nkv,
                       D->hd, NULL);                                                 /* att [n,q] over pos+n keys */
    kern_copy(k, D->x1, D->x, (size_t)n * h * D->cs);                          /* x1 = x */
    linear(D, D->x1, D->att, AT(b->w, b->wo), n, h, D->q, 1.0f);              /* x1 += att @ Wo^T */
    kern_rmsnorm_fwd(k, D->n2, D->rstd, D->x1, AT(b->w, b->ln2), n, h, D->eps); /* n2 [n,h] */
    linear(D, D->gate, D->n2, AT(b->w, b->wg), n, D->f, h, 0.0f);             /* gate [n,f] */
    linear(D, D->up, D->n2, AT(b->w, b->wu), n, D->f, h, 0.0f);               /* up [n,f] */
    kern_swiglu_fwd(k, D->sw, D->gate, D->up, (size_t)n * D->f);              /* sw [n,f] */
    kern_copy(k, D->x, D->x1, (size_t)n * h * D->cs);                          /* x = x1 */
    linear(D, D->x, D->sw, AT(b->w, b->wd), n, h, D->f, 1.0f);                /* x += sw @ Wd^T */
}

/* Logits of row r of the final norm's output (kept in n1) into host dst [V]. */
static void head_row(wp_decoder *D, int r, float *dst) {
    const void *row = (const char *)D->n1 + (size_t)r * D->h * D->cs;
    kern_gemm(D->k, false, true, 1, (int)D->V, D->h, 1.0f, row, D->h, D->head, D->h, 0.0f, D->logits, WP_F32,
              (int)D->V);                                                      /* logits [1,V] fp32 */
    kern_to_host(D->k, dst, D->logits, (size_t)D->V * sizeof(float));
}

/* One block of n <= WP_DECODE_ROWS positions. */
static wp_result run_rows(wp_decoder *D, const int32_t *tokens, int n, float *logits, bool all_rows) {
    wp_kern *k = D->k;
    kern_to_device(k, D->tokens, tokens, (size_t)n * sizeof(int32_t));
    kern_embedding_fwd(k, D->x, D->tokens, D->embed, n, D->h);                 /* x [n,h] = wte[tokens] */
    for (int i = 0; i < D->L->cfg.n_layers; i++) block_step(D, i, n);
    kern_rmsnorm_fwd(k, D->n1, D->rstd, D->x, D->norm, n, D->h, D->eps);       /* final norm [n,h] */
    if (logits && all_rows)
        for (int r = 0; r < n; r++) head_row(D, r, logits + (size_t)r * D->V);
    if (kern_error(k)) return 1;
    D->pos += n;
    return 0;
}

wp_result decoder_run(wp_decoder *D, const int32_t *tokens, int n, float *logits, bool all_rows, char *err, size_t errlen) {
    if (kern_error(D->k)) return wp_fail(WP_FAILED, err, errlen, "decoder: %s", kern_error(D->k));
    if (n < 1 || n > D->max_pos - D->pos) return wp_fail(WP_BAD_INPUT, err, errlen, "decoder: %d tokens at position %d, the cache holds %d positions", n, D->pos, D->max_pos);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= D->V) return wp_fail(WP_BAD_INPUT, err, errlen, "decoder: token %d at %d is outside the vocabulary [0, %lld)", (int)tokens[t], t,
                     (long long)D->V);
    const int pos0 = D->pos;
    for (int t = 0; t < n; t += WP_DECODE_ROWS) {
        int rows = n - t < WP_DECODE_ROWS ? n - t : WP_DECODE_ROWS;
        if (run_rows(D, tokens + t, rows, all_rows && logits ? logits + (size_t)t * D->V : NULL, all_rows) != 0) {
            D->pos = pos0; /* the cache rows written are beyond pos: as if never appended */
            return wp_fail(WP_FAILED, err, errlen, "decoder: %s", kern_error(D->k) ? kern_error(D->k) : "kernel failure");
        }
    }
    if (logits && !all_rows) {
        int last = (n - 1) % WP_DECODE_ROWS; /* row of the last token in the last block */
        head_row(D, last, logits);
        kern_sync(D->k);
    }
    if (kern_error(D->k)) return wp_fail(WP_FAILED, err, errlen, "decoder: %s", kern_error(D->k));
    return 0;
}

/* ---- choosing the next token ---- */

struct wp_sampler {
    int64_t V;
    wp_sampling s;
    wp_rng rng;
    int32_t *idx;  /* [V] ids by falling probability */
    double *p;     /* [V] */
};

wp_sampler *sampler_create(int64_t vocab, const wp_sampling *s, uint64_t seed) {
    wp_sampler *S = calloc(1, sizeof *S);
    if (!S) return NULL;
    S->V = vocab;
    S->s = *s;
    S->rng = rng_seeded(seed);
    S->idx = malloc((size_t)vocab * sizeof *S->idx);
    S->p = malloc((size_t)vocab * sizeof *S->p);
    if (!S->idx || !S->p) {
        sampler_destroy(S);
        return NULL;
    }
    return S;
}

void sampler_destroy(wp_sampler *S) {
    if (!S) return;
    free(S->idx);
    free(S->p);
    free(S);
}

static int32_t argmax(const float *x, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (x[i] > x[best]) best = i; /* strictly greater: ties keep the lowest id */
    return (int32_t)best;
}

/* qsort has no context argument in C17: the logits being sorted sit in a thread-local. */
static _Thread_local const float *sort_logits;

static int by_logit_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_logits[i], y = sort_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : i > j; /* ties in order of id */
}

int32_t sampler_pick(wp_sampler *S, const float *logits) {
    const int64_t V = S->V;
    if (S->s.temperature <= 0) return argmax(logits, V);
    for (int64_t i = 0; i < V; i++) S->idx[i] = (int32_t)i;
    sort_logits = logits;
    qsort(S->idx, (size_t)V, sizeof *S->idx, by_logit_desc);
    int64_t n = S->s.top_k > 0 && S->s.top_k < V ? S->s.top_k : V;
    /* softmax of logits / T over the n most likely, from the largest (no overflow) */
    const double top = logits[S->idx[0]], T = S->s.temperature;
    double sum = 0;
    for (int64_t r = 0; r < n; r++) sum += S->p[r] = exp(((double)logits[S->idx[r]] - top) / T);
    /* top-p: the smallest prefix reaching top_p of the probability (at least one id) */
    double kept = 0;
    int64_t m = 0;
    while (m < n) {
        kept += S->p[m++] / sum;
        if (kept >= S->s.top_p) break;
    }
    double mass = 0;
    for (int64_t r = 0; r < m; r++) mass += S->p[r];
    double u = rng_uniform(&S->rng) * mass, acc = 0;
    for (int64_t r = 0; r < m; r++) {
        acc += S->p[r];
        if (u < acc) return S->idx[r];
    }
    return S->idx[m - 1]; /* u within rounding of the total */
}

static bool is_eos(int32_t id, const int32_t *eos, int n_eos) {
    for (int i = 0; i < n_eos; i++)
        if (id == eos[i]) return true;
    return false;
}

int decoder_generate(wp_decoder *D, wp_sampler *S, const int32_t *prompt, int P, int max_new, const int32_t *eos, int n_eos,
                     int32_t *out, int *n_out, void (*on_token)(int32_t id, void *ctx), void *ctx, char *err,
                     size_t errlen) {
    *n_out = 0;
    float *logits = malloc((size_t)D->V * sizeof *logits);
    if (!logits) return wp_fail(WP_FAILED, err, errlen, "decoder: out of host memory for %lld logits", (long long)D->V);
    wp_result rc = decoder_run(D, prompt, P, logits, false, err, errlen);
    while (rc == 0 && *n_out < max_new) {
        int32_t id = sampler_pick(S, logits);
        out[(*n_out)++] = id;
        if (on_token) on_token(id, ctx);
        if (is_eos(id, eos, n_eos) || *n_out == max_new || D->pos == D->max_pos) break; /* its logits are not needed */
        rc = decoder_run(D, &id, 1, logits, false, err, errlen);
    }
    free(logits);
    return rc;
}
