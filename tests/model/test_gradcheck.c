/* The gradient of the mean loss against finite differences of fp32 forwards, summed in
 * double, with the fourth-order central stencil
 *     f'(0) ~ (8 (f(e) - f(-e)) - (f(2e) - f(-2e))) / 12e     (truncation O(e^4)),
 * which lets e be large enough that the forward's rounding noise (loss differences of
 * ~1e-8 here) stays far below the signal.
 *  1. Random unit directions d over all parameters: |fd - <g,d>| <= 1e-3 max(|<g,d>|, ||g||/sqrt(N)),
 *     with the step |e d| = 5e-3 ||w||. ||g||/sqrt(N) is the typical size of <g,d> for a random
 *     unit d; it keeps a direction nearly orthogonal to g from asking for more than the noise
 *     allows. Measured: 3e-5..2e-4 on these shapes.
 *  2. Single elements of every tensor kind (embedding, both norms, q, k, v, o, gate, up, down,
 *     final norm, head) of randomly chosen layers, at random positions whose gradient is at
 *     least half the tensor's RMS (so each carries signal): |fd - g| <= 2e-3 |g| + 1e-6, with
 *     steps of 2^-4 (2^-7 for the embedding, whose rows move the loss fastest, 2^-5 for the
 *     head). Rows of the embedding whose token never occurs must have exactly zero gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"
#include "rng.h"

static double stencil(harness *H, const float *d, size_t only, double e, float *p) {
    const double steps[4] = {1, -1, 2, -2};
    double f[4];
    for (int q = 0; q < 4; q++) {
        if (d)
            for (size_t i = 0; i < H->N; i++) p[i] = (float)(H->params[i] + steps[q] * e * d[i]);
        else {
            memcpy(p, H->params, H->N * sizeof(float));
            p[only] = (float)(H->params[only] + steps[q] * e);
        }
        f[q] = harness_loss_at(H, p);
    }
    return (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * e);
}

static void check_directions(harness *H, const float *g, int count) {
    float *d = xmalloc_floats(H->N), *p = xmalloc_floats(H->N);
    double wn = 0, gn = 0;
    for (size_t i = 0; i < H->N; i++) {
        wn += (double)H->params[i] * H->params[i];
        gn += (double)g[i] * g[i];
    }
    double e = 5e-3 * sqrt(wn), typical = sqrt(gn / (double)H->N), worst = 0;
    int before = check_failures();
    for (int j = 0; j < count; j++) {
        wp_rng r = rng_seeded(1000 + (uint64_t)j);
        double n2 = 0, dot = 0;
        for (size_t i = 0; i < H->N; i++) {
            d[i] = (float)rng_normal(&r);
            n2 += (double)d[i] * d[i];
        }
        for (size_t i = 0; i < H->N; i++) {
            d[i] = (float)(d[i] / sqrt(n2));
            dot += (double)g[i] * d[i];
        }
        double fd = stencil(H, d, 0, e, p), rel = fabs(fd - dot) / fmax(fabs(dot), typical);
        EXPECT(rel <= 1e-3, "direction %d: <g,d> %.9e, finite difference %.9e, rel err %.2e > 1e-3", j, dot, fd, rel);
        worst = fmax(worst, rel);
    }
    printf("%s %d random directions over %zu parameters (chunks %s): worst rel err %.2e (bound 1e-3)\n",
           check_failures() > before ? "FAIL" : "ok  ", count, H->N, chunks_str(&H->L.cfg), worst);
    free(d);
    free(p);
}

static double step_for(const wp_param *p) {
    if (strcmp(p->name, "model.embed_tokens.weight") == 0) return 0x1p-7;
    if (strcmp(p->name, "lm_head.weight") == 0) return 0x1p-5;
    return 0x1p-4;
}

/* A random element of tensor p with |g| >= rms/2; for the embedding, in a row of a token
 * that occurs in the inputs. */
static size_t pick_element(const harness *H, const wp_param *p, const float *g, wp_rng *r) {
    size_t off = H->L.chunk_offset[p->chunk] + p->offset, n = (size_t)p->rows * p->cols;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[off + i] * g[off + i];
    double rms = sqrt(ss / (double)n);
    for (;;) {
        size_t i = strcmp(p->name, "model.embed_tokens.weight") == 0
                       ? (size_t)H->inputs[rng_below(r, H->T)] * (size_t)p->cols + rng_below(r, (uint64_t)p->cols)
                       : rng_below(r, n);
        if (fabs(g[off + i]) >= 0.5 * rms) return off + i;
    }
}

static void check_elements(harness *H, const float *g, int per_tensor) {
    static const char *kinds[] = {"model.embed_tokens.weight", "input_layernorm", "q_proj", "k_proj", "v_proj", "o_proj",
                                  "post_attention_layernorm", "gate_proj", "up_proj", "down_proj", "model.norm.weight",
                                  "lm_head.weight"};
    float *p = xmalloc_floats(H->N);
    wp_rng r = rng_seeded(77);
    int before = check_failures(), checked = 0;
    double worst = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int layer = (int)rng_below(&r, (uint64_t)H->L.cfg.n_layers); /* layer checked for per-layer kinds */
        for (int t = 0; t < H->L.n_params; t++) {
            const wp_param *pp = &H->L.params[t];
            if (!strstr(pp->name, kinds[k]) || (pp->layer >= 0 && pp->layer != layer)) continue;
            for (int j = 0; j < per_tensor; j++, checked++) {
                size_t i = pick_element(H, pp, g, &r);
                double fd = stencil(H, NULL, i, step_for(pp), p), tol = 2e-3 * fabs(g[i]) + 1e-6;
                double err = fabs(fd - g[i]);
                EXPECT(err <= tol, "%s[%zu]: gradient %.9e, finite difference %.9e, |diff| %.2e > %.2e", pp->name,
                       i - H->L.chunk_offset[pp->chunk] - pp->offset, g[i], fd, err, tol);
                worst = fmax(worst, err / tol);
            }
        }
    }
    printf("%s %d single elements of 12 tensor kinds: worst |diff| / tolerance %.2f\n",
           check_failures() > before ? "FAIL" : "ok  ", checked, worst);
    free(p);
}

static void check_unused_rows(const harness *H, const float *g) {
    const wp_param *e = layout_find(&H->L, "model.embed_tokens.weight");
    int before = check_failures(), unused = 0;
    for (int v = 0; v < e->rows; v++) {
        bool seen = false;
        for (size_t t = 0; t < H->T; t++) seen |= H->inputs[t] == v;
        if (seen) continue;
        unused++;
        int c = 0;
        while (c < e->cols && g[e->offset + (size_t)v * e->cols + c] == 0.0f) c++;
        EXPECT(c == e->cols, "embedding row %d (token never seen) has gradient %g", v, g[e->offset + (size_t)v * e->cols + c]);
    }
    printf("%s %d embedding rows of unseen tokens have zero gradient\n", check_failures() > before ? "FAIL" : "ok  ",
           unused);
}

static void run(wp_model_cfg cfg, const int *chunks, int n_chunks, int directions, int per_tensor) {
    set_chunks(&cfg, chunks, n_chunks);
    harness H;
    harness_open(&H, &cfg, 11, WP_F32);
    float *g = xmalloc_floats(H.N);
    harness_step(&H, false, g);
    check_directions(&H, g, directions);
    check_elements(&H, g, per_tensor);
    check_unused_rows(&H, g);
    free(g);
    harness_close(&H);
}

int main(void) {
    const int two[] = {1, 1}, three[] = {2, 1};
    run(shape_cfg(2, 16, 4, 2, 40, 9, 2, 29), two, 2, 6, 3);
    run(shape_cfg(3, 24, 3, 1, 50, 13, 3, 37), three, 2, 3, 1);
    return check_result("model/gradcheck");
}
