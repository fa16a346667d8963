/* The whole model on one rank, chunk after chunk (see whole.h). */
#include "whole.h"

#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct wp_whole {
    const wp_layout *L;
    wp_kern *k;
    wp_model *m;
    wp_dtype gt;
    int n_chunks;
    size_t T, act_bytes;
    void *w[WP_MAX_CHUNKS];      /* weights of each chunk, compute dtype */
    void *gw[WP_MAX_CHUNKS];     /* weight gradients, gt */
    wp_acts *acts[WP_MAX_CHUNKS];
    void *x[WP_MAX_CHUNKS];      /* x[c]: output of chunk c (c < n-1) */
    void *g[WP_MAX_CHUNKS];      /* g[c]: gradient of chunk c's output (c < n-1) */
    int32_t *inputs, *targets;   /* backend memory, T each */
};

static void free_if(wp_kern *k, void *p) {
    if (p) kern_free(k, p);
}

void whole_destroy(wp_whole *W) {
    if (!W) return;
    for (int c = 0; c < W->n_chunks; c++) {
        if (W->acts[c]) model_acts_destroy(W->m, W->acts[c]);
        free_if(W->k, W->w[c]);
        free_if(W->k, W->gw[c]);
        free_if(W->k, W->x[c]);
        free_if(W->k, W->g[c]);
    }
    free_if(W->k, W->inputs);
    free_if(W->k, W->targets);
    model_destroy(W->m);
    free(W);
}

static wp_result alloc_chunk(wp_whole *W, int c) {
    wp_dtype ct = kern_compute_dtype(W->k);
    size_t n = W->L->chunk_numel[c];
    W->w[c] = kern_alloc(W->k, n * wp_dtype_size(ct));
    W->gw[c] = kern_alloc(W->k, n * wp_dtype_size(W->gt));
    W->acts[c] = W->w[c] && W->gw[c] ? model_acts_create(W->m, c) : NULL;
    if (!W->acts[c]) return WP_FAILED;
    if (c == W->n_chunks - 1) return 0;
    W->x[c] = kern_alloc(W->k, W->act_bytes);
    W->g[c] = W->x[c] ? kern_alloc(W->k, W->act_bytes) : NULL;
    return W->g[c] ? WP_OK : WP_FAILED;
}

wp_whole *whole_create(const wp_layout *L, wp_kern *k, wp_dtype gw_dtype, char *err, size_t errlen) {
    if (gw_dtype != WP_F32 && gw_dtype != WP_BF16) {
        snprintf(err, errlen, "whole model: gradient dtype %s (want f32 or bf16)", wp_dtype_name(gw_dtype));
        return NULL;
    }
    wp_whole *W = calloc(1, sizeof *W);
    if (!W) {
        snprintf(err, errlen, "whole model: out of host memory");
        return NULL;
    }
    W->L = L;
    W->k = k;
    W->gt = gw_dtype;
    W->n_chunks = L->cfg.n_chunks;
    W->T = (size_t)L->cfg.micro_batch * (size_t)L->cfg.seq;
    W->act_bytes = W->T * (size_t)L->cfg.h * wp_dtype_size(kern_compute_dtype(k));
    W->m = model_create(L, k, err, errlen);
    if (!W->m) {
        whole_destroy(W);
        return NULL;
    }
    W->inputs = kern_alloc(k, W->T * sizeof(int32_t));
    W->targets = W->inputs ? kern_alloc(k, W->T * sizeof(int32_t)) : NULL;
    int rc = W->targets ? WP_OK : WP_FAILED;
    for (int c = 0; rc == 0 && c < W->n_chunks; c++) rc = alloc_chunk(W, c);
    if (rc != 0) {
        snprintf(err, errlen, "whole model: %s", kern_error(k) ? kern_error(k) : "out of memory");
        whole_destroy(W);
        return NULL;
    }
    return W;
}

wp_model *whole_model(const wp_whole *W) { return W->m; }

wp_result whole_set_params(wp_whole *W, const float *params) {
    wp_dtype ct = kern_compute_dtype(W->k);
    for (int c = 0; c < W->n_chunks; c++) {
        const float *src = params + W->L->chunk_offset[c];
        size_t n = W->L->chunk_numel[c];
        if (ct == WP_F32) {
            kern_to_device(W->k, W->w[c], src, n * sizeof(float));
            continue;
        }
        /* round on the backend, through an fp32 staging copy */
        float *staging = kern_alloc(W->k, n * sizeof(float));
        if (!staging) return 1;
        kern_to_device(W->k, staging, src, n * sizeof(float));
        kern_convert(W->k, W->w[c], ct, staging, WP_F32, n);
        kern_sync(W->k);
        kern_free(W->k, staging);
    }
    return kern_status(W->k);
}

wp_result whole_set_tokens(wp_whole *W, const int32_t *inputs, const int32_t *targets) {
    kern_to_device(W->k, W->inputs, inputs, W->T * sizeof(int32_t));
    kern_to_device(W->k, W->targets, targets, W->T * sizeof(int32_t));
    return kern_status(W->k);
}

static float dloss_of(const wp_whole *W) { return (float)(1.0 / (double)W->T); }

/* train: the training forward (the head's backward in F), for whole_step */
static wp_result forward_all(wp_whole *W, double *loss_mean, bool train) {
    double loss_sum = 0;
    for (int c = 0; c < W->n_chunks; c++) {
        const void *x_in = c > 0 ? W->x[c - 1] : NULL;
        void *x_out = c < W->n_chunks - 1 ? W->x[c] : NULL;
        if (train)
            WP_TRY(model_forward_train(W->m, c, W->w[c], W->acts[c], x_in, W->inputs, W->targets, x_out, &loss_sum,
                                       dloss_of(W)));
        else
            WP_TRY(model_forward(W->m, c, W->w[c], W->acts[c], x_in, W->inputs, W->targets, x_out, &loss_sum));
    }
    *loss_mean = loss_sum / (double)W->T;
    return 0;
}

wp_result whole_forward(wp_whole *W, double *loss_mean) { return forward_all(W, loss_mean, false); }

wp_result whole_zero_grads(wp_whole *W) {
    for (int c = 0; c < W->n_chunks; c++) kern_zero(W->k, W->gw[c], W->L->chunk_numel[c] * wp_dtype_size(W->gt));
    return kern_status(W->k);
}

wp_result whole_backward(wp_whole *W, bool split) {
    const float dloss = dloss_of(W);
    for (int c = W->n_chunks - 1; c >= 0; c--) {
        const void *g_out = c < W->n_chunks - 1 ? W->g[c] : NULL;
        void *g_in = c > 0 ? W->g[c - 1] : NULL;
        int rc = split ? model_backward_input(W->m, c, W->w[c], W->acts[c], g_out, dloss, g_in)
                       : model_backward(W->m, c, W->w[c], W->acts[c], g_out, dloss, g_in, W->gw[c], W->gt);
        if (rc == 0 && split) rc = model_backward_weight(W->m, c, W->acts[c], W->gw[c], W->gt);
        if (rc != 0) return 1;
    }
    return 0;
}

wp_result whole_step(wp_whole *W, bool split, double *loss_mean) {
    if (whole_zero_grads(W) != 0 || forward_all(W, loss_mean, true) != 0) return 1;
    return whole_backward(W, split);
}

wp_result whole_get_grads(wp_whole *W, float *grads) {
    for (int c = 0; c < W->n_chunks; c++) {
        float *dst = grads + W->L->chunk_offset[c];
        size_t n = W->L->chunk_numel[c];
        if (W->gt == WP_F32) {
            kern_to_host(W->k, dst, W->gw[c], n * sizeof(float));
            continue;
        }
        /* bf16 fits in the upper half of the same host buffer, then widens in place from
         * the front (element i's fp32 slot never overlaps a bf16 element not yet read) */
        uint16_t *half = (uint16_t *)(dst + n) - n;
        kern_to_host(W->k, half, W->gw[c], n * sizeof(uint16_t));
        if (kern_error(W->k)) return 1;
        for (size_t i = 0; i < n; i++) dst[i] = wp_bf16_to_f32(half[i]);
    }
    return kern_status(W->k);
}

const void *whole_input_grad(const wp_whole *W, int c) { return c > 0 && c < W->n_chunks ? W->g[c - 1] : NULL; }

wp_result whole_load_random(wp_whole *W, uint64_t seed, char *err, size_t errlen) {
    const wp_layout *L = W->L;
    size_t T = (size_t)L->cfg.micro_batch * L->cfg.seq;
    float *params = malloc(L->total_numel * sizeof(float));
    int32_t *tok = malloc(2 * T * sizeof(int32_t));
    int rc = 1;
    if (params && tok) {
        for (int c = 0; c < L->cfg.n_chunks; c++) layout_init_chunk(L, c, seed, params + L->chunk_offset[c]);
        wp_rng g = rng_seeded(seed);
        for (size_t t = 0; t < T; t++) { /* input and target of each position in turn */
            tok[t] = (int32_t)rng_below(&g, (uint64_t)L->cfg.vocab);
            tok[T + t] = (int32_t)rng_below(&g, (uint64_t)L->cfg.vocab);
        }
        rc = whole_set_params(W, params) == 0 && whole_set_tokens(W, tok, tok + T) == 0 ? 0 : 1;
        const char *why = kern_error(W->k);
        if (rc) snprintf(err, errlen, "%s", why ? why : "uploading the model failed");
    } else {
        snprintf(err, errlen, "out of host memory for %zu parameters", L->total_numel);
    }
    free(params);
    free(tok);
    return rc;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

wp_result whole_time_step(wp_whole *W, double *fwd_s, double *bwd_s, double *loss) {
    double l;
    if (whole_zero_grads(W) != 0) return 1;
    kern_sync(W->k);
    double t0 = mono_s();
    if (whole_forward(W, loss ? loss : &l) != 0) return 1;
    kern_sync(W->k);
    double t1 = mono_s();
    if (whole_backward(W, false) != 0) return 1;
    kern_sync(W->k);
    *fwd_s = t1 - t0;
    *bwd_s = mono_s() - t1;
    return 0;
}
