/* Test harness for the model tests (see harness.h). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rng.h"

const char *harness_why(const harness *H) {
    const char *e = kern_error(H->k);
    return e ? e : "(no reason)";
}

float *xmalloc_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    CHECK(p, "malloc: out of memory");
    return p;
}

wp_model_cfg shape_cfg(int layers, int h, int heads, int kv_heads, int ffn, int seq, int batch, int vocab) {
    wp_model_cfg c;
    memset(&c, 0, sizeof c);
    c.n_layers = layers;
    c.h = h;
    c.ffn = ffn;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = h / heads;
    c.seq = seq;
    c.micro_batch = batch;
    c.vocab = vocab;
    c.rope_theta = 10000;
    c.norm_eps = 1e-5;
    c.init_std = 0.02;
    c.precision = WP_PREC_FP32;
    c.n_chunks = 1;
    c.chunk_layers[0] = layers;
    return c;
}

void set_chunks(wp_model_cfg *cfg, const int *layers, int n) {
    cfg->n_chunks = n;
    for (int i = 0; i < n; i++) cfg->chunk_layers[i] = layers[i];
}

const char *chunks_str(const wp_model_cfg *cfg) {
    static char buf[256];
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < cfg->n_chunks && at < sizeof buf - 16; i++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%d", i ? "," : "", cfg->chunk_layers[i]);
    return buf;
}

void harness_open(harness *H, const wp_model_cfg *cfg, uint64_t seed, wp_dtype gt) {
    char err[512];
    memset(H, 0, sizeof *H);
    CHECK(layout_build(cfg, &H->L, err, sizeof err) == 0, "layout_build: %s", err);
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1, .device = 0};
    H->k = kern_create(&ko, err, sizeof err);
    CHECK(H->k, "kern_create: %s", err);
    H->W = whole_create(&H->L, H->k, gt, err, sizeof err);
    CHECK(H->W, "whole_create: %s", err);
    H->T = (size_t)cfg->micro_batch * cfg->seq;
    H->N = H->L.total_numel;
    H->params = xmalloc_floats(H->N);
    H->inputs = malloc(2 * H->T * sizeof(int32_t));
    CHECK(H->inputs, "malloc: tokens");
    H->targets = H->inputs + H->T;
    for (int c = 0; c < cfg->n_chunks; c++) layout_init_chunk(&H->L, c, seed, H->params + H->L.chunk_offset[c]);
    /* norms at exactly 1 would hide a swapped weight/input in RMSNorm's gradient */
    wp_rng g = rng_seeded(seed ^ 0x6e6f726dull);
    for (int i = 0; i < H->L.n_params; i++) {
        const wp_param *p = &H->L.params[i];
        if (p->kind != WP_PARAM_NORM) continue;
        float *w = H->params + H->L.chunk_offset[p->chunk] + p->offset;
        for (int j = 0; j < p->rows; j++) w[j] = (float)(1.0 + 0.2 * rng_normal(&g));
    }
    for (size_t t = 0; t < H->T; t++) {
        H->inputs[t] = (int32_t)rng_below(&g, (uint64_t)cfg->vocab);
        H->targets[t] = (int32_t)rng_below(&g, (uint64_t)cfg->vocab);
    }
    CHECK(whole_set_params(H->W, H->params) == 0 && whole_set_tokens(H->W, H->inputs, H->targets) == 0, "upload: %s",
          harness_why(H));
}

void harness_close(harness *H) {
    whole_destroy(H->W);
    kern_destroy(H->k);
    layout_free(&H->L);
    free(H->params);
    free(H->inputs);
}

double harness_step(harness *H, bool split, float *grads) {
    double loss = 0;
    CHECK(whole_set_params(H->W, H->params) == 0 && whole_step(H->W, split, &loss) == 0, "whole_step: %s", harness_why(H));
    CHECK(!grads || whole_get_grads(H->W, grads) == 0, "whole_get_grads: %s", harness_why(H));
    return loss;
}

double harness_loss_at(harness *H, const float *p) {
    double loss = 0;
    CHECK(whole_set_params(H->W, p) == 0 && whole_forward(H->W, &loss) == 0, "whole_forward: %s", harness_why(H));
    return loss;
}

void harness_input_grad(harness *H, int c, float *dst) {
    kern_to_host(H->k, dst, whole_input_grad(H->W, c), H->T * (size_t)H->L.cfg.h * sizeof(float));
    CHECK(!kern_error(H->k), "input grad: %s", harness_why(H));
}

long first_difference(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return (long)i;
    return -1;
}
