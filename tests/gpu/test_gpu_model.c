/* A whole training step (forward over every chunk, fused backward) on the GPU against the
 * CPU backend, through src/model's whole-model runner: tiny Llama shapes with grouped KV
 * heads, one and two chunks, head sizes on both attention paths (16 and 64: tensor cores;
 * 24: SIMT), each in fp32, bf16 and fp16 compute. Both backends start from the same weights,
 * rounded to the compute dtype.
 *
 * Bounds, u the compute dtype's unit roundoff. fp32: loss 1e-5 relative, gradient 1e-4
 * (relative L2 over all parameters), 1e-3 per tensor. fp16/bf16: every activation is stored
 * rounded, so the step differs from the fp32 CPU one by a few roundings per layer: loss 2u,
 * gradient 16u overall and 32u per tensor; a bf16 gradient buffer adds one bf16 rounding.
 * On the GPU alone, bit for bit: the same step twice, B + W-pass vs the fused backward,
 * and recompute on vs off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "layout.h"
#include "whole.h"

typedef struct {
    const char *name;
    int layers, h, heads, kv_heads, ffn, seq, batch, vocab;
    int chunks[2]; /* layers per chunk; chunks[1] == 0: one chunk */
} model_case;

static wp_model_cfg make_cfg(const model_case *mc, bool recompute) {
    wp_model_cfg c;
    memset(&c, 0, sizeof c);
    c.n_layers = mc->layers;
    c.h = mc->h;
    c.ffn = mc->ffn;
    c.n_heads = mc->heads;
    c.n_kv_heads = mc->kv_heads;
    c.head_dim = mc->h / mc->heads;
    c.seq = mc->seq;
    c.micro_batch = mc->batch;
    c.vocab = mc->vocab;
    c.rope_theta = 10000;
    c.norm_eps = 1e-5;
    c.init_std = 0.02;
    c.recompute = recompute;
    c.precision = WP_PREC_FP32;
    c.n_chunks = mc->chunks[1] ? 2 : 1;
    c.chunk_layers[0] = mc->chunks[0];
    c.chunk_layers[1] = mc->chunks[1];
    return c;
}

typedef struct {
    wp_layout L;
    float *params; /* rounded to the GPU's compute dtype */
    int32_t *inputs, *targets;
    size_t T, N;
} model_data;

static void data_open(model_data *d, const model_case *mc, bool recompute, wp_dtype ct) {
    char err[256];
    wp_model_cfg cfg = make_cfg(mc, recompute);
    CHECK(layout_build(&cfg, &d->L, err, sizeof err) == 0, "%s: %s", mc->name, err);
    d->N = d->L.total_numel;
    d->T = (size_t)mc->batch * mc->seq;
    d->params = gh_floats(d->N);
    for (int c = 0; c < cfg.n_chunks; c++) layout_init_chunk(&d->L, c, 42, d->params + d->L.chunk_offset[c]);
    for (size_t i = 0; i < d->N; i++) d->params[i] = wp_round_to(d->params[i], ct);
    d->inputs = malloc(2 * d->T * sizeof(int32_t));
    d->targets = d->inputs + d->T;
    wp_rng g = rng_seeded(99);
    for (size_t t = 0; t < 2 * d->T; t++) d->inputs[t] = (int32_t)rng_below(&g, (uint64_t)mc->vocab);
}

static void data_close(model_data *d) {
    layout_free(&d->L);
    free(d->params);
    free(d->inputs);
}

/* One step on backend k: loss and host fp32 gradients. */
static double step(wp_kern *k, model_data *d, wp_dtype gw, bool split, float *grads) {
    char err[512];
    wp_whole *W = whole_create(&d->L, k, gw, err, sizeof err);
    CHECK(W, "whole_create: %s", err);
    double loss = 0;
    CHECK(!whole_set_params(W, d->params) && !whole_set_tokens(W, d->inputs, d->targets) && !whole_step(W, split, &loss) &&
              !whole_get_grads(W, grads),
          "step: %s", kern_error(k) ? kern_error(k) : "failed");
    whole_destroy(W);
    return loss;
}

/* overall and worst per-tensor relative L2 error of got against ref */
static void compare_grads(const char *what, const wp_layout *L, const float *got, const float *ref, double bound_all,
                          double bound_tensor) {
    gh_expect(what, got, ref, L->total_numel, bound_all);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < L->n_params; i++) {
        const wp_param *p = &L->params[i];
        size_t off = L->chunk_offset[p->chunk] + p->offset, n = (size_t)p->rows * p->cols;
        double e = gh_rel_l2(got + off, ref + off, n);
        if (!(e <= worst)) {
            worst = e;
            worst_name = p->name;
        }
        if (isnan(worst)) break; /* a NaN tensor stays the worst */
    }
    check_say(worst <= bound_tensor, "%s: worst tensor %s, rel L2 %.3g (bound %.3g)", what, worst_name, worst, bound_tensor);
}

static void check_model(const model_case *mc, wp_dtype ct) {
    gh_pair p;
    gh_open(&p, ct);
    model_data d;
    data_open(&d, mc, false, ct);
    const double u = gh_unit_roundoff(ct);
    const bool f32 = ct == WP_F32;
    float *ref = gh_floats(d.N), *got = gh_floats(d.N), *again = gh_floats(d.N);
    char what[160];

    double loss_cpu = step(p.cpu, &d, WP_F32, false, ref);
    double loss_gpu = step(p.gpu, &d, WP_F32, false, got);
    double rel = fabs(loss_gpu - loss_cpu) / fabs(loss_cpu), bound = f32 ? 1e-5 : 2 * u;
    check_say(rel <= bound, "%s %s: loss %.7f vs CPU %.7f, rel %.3g (bound %.3g)", mc->name, wp_dtype_name(ct), loss_gpu,
              loss_cpu, rel, bound);
    snprintf(what, sizeof what, "%s %s gradients vs CPU", mc->name, wp_dtype_name(ct));
    compare_grads(what, &d.L, got, ref, f32 ? 1e-4 : 16 * u, f32 ? 1e-3 : 32 * u);

    step(p.gpu, &d, WP_F32, false, again);
    snprintf(what, sizeof what, "%s %s: the same step twice", mc->name, wp_dtype_name(ct));
    gh_expect_same_bits(what, got, again, d.N * sizeof(float));
    step(p.gpu, &d, WP_F32, true, again);
    snprintf(what, sizeof what, "%s %s: B + W-pass vs fused backward", mc->name, wp_dtype_name(ct));
    gh_expect_same_bits(what, got, again, d.N * sizeof(float));

    model_data dr;
    data_open(&dr, mc, true, ct);
    step(p.gpu, &dr, WP_F32, false, again);
    snprintf(what, sizeof what, "%s %s: recompute on vs off", mc->name, wp_dtype_name(ct));
    gh_expect_same_bits(what, got, again, d.N * sizeof(float));
    data_close(&dr);

    if (!f32) { /* the paper's mixed precision: fp16/bf16 compute, bf16 gradients */
        step(p.gpu, &d, WP_BF16, false, got);
        snprintf(what, sizeof what, "%s %s compute, bf16 gradients vs CPU", mc->name, wp_dtype_name(ct));
        double ub = gh_unit_roundoff(WP_BF16);
        compare_grads(what, &d.L, got, ref, 16 * u + ub, 32 * u + 2 * ub);
    }
    free(ref), free(got), free(again);
    data_close(&d);
    gh_close(&p);
}

int main(void) {
    int rc = gh_require_gpu("gpu/model");
    if (rc) return rc;
    const model_case cases[] = {
        {"tiny (hd 16, 2 chunks)", 4, 64, 4, 2, 160, 32, 2, 256, {3, 1}},
        {"h256 (hd 64, 2 chunks)", 2, 256, 4, 2, 704, 96, 1, 300, {1, 1}},
        {"odd (hd 24, SIMT attention)", 2, 96, 4, 4, 200, 45, 3, 77, {2, 0}},
    };
    const wp_dtype cts[] = {WP_F32, WP_BF16, WP_F16};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int t = 0; t < 3; t++) check_model(&cases[c], cts[t]);
    return check_result("gpu/model");
}
