/* Rotary position embedding, Hugging Face "rotate half" layout: element i < hd/2 pairs with
 * i + hd/2 and turns by pos * theta^(-2i/hd). The backward is the inverse rotation. */
#include <stdlib.h>

#include "cpu.h"
#include "rope_freq.h"

/* Angles in double: at position 16k an fp32 angle would already be off by ~1e-3 rad. */
static void fill_tables(cpu_rope_cache *c, int s, int hd, int pos0, float theta, const wp_rope_scaling *sc) {
    int half = hd / 2;
    for (int p = 0; p < s; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos0 + p) * wp_rope_inv_freq(i, hd, (double)theta, sc);
            c->cos[(size_t)p * half + i] = (float)cos(angle);
            c->sin[(size_t)p * half + i] = (float)sin(angle);
        }
}

const cpu_rope_cache *cpu_rope_tables(wp_kern *k, int s, int hd, int pos0, float theta, const wp_rope_scaling *sc) {
    cpu_rope_cache *c = &cpu_of(k)->rope;
    wp_rope_scaling none = {0}, key = sc ? *sc : none;
    if (c->valid && c->s == s && c->hd == hd && c->pos0 == pos0 && c->theta == theta &&
        memcmp(&c->scaling, &key, sizeof key) == 0)
        return c;
    size_t need = (size_t)s * (size_t)(hd / 2);
    if (need > c->cap) {
        free(c->cos);
        free(c->sin);
        c->cap = 0;
        c->valid = false;
        c->cos = cpu_aligned_alloc(k, need * sizeof(float), "kern_rope");
        c->sin = c->cos ? cpu_aligned_alloc(k, need * sizeof(float), "kern_rope") : NULL;
        if (!c->sin) {
            free(c->cos);
            c->cos = NULL;
            return NULL;
        }
        c->cap = need;
    }
    fill_tables(c, s, hd, pos0, theta, sc);
    c->s = s;
    c->scaling = key;
    c->hd = hd;
    c->pos0 = pos0;
    c->theta = theta;
    c->valid = true;
    return c;
}

/* sign = +1 rotates forward, -1 backward (the transpose of the rotation). */
static void rotate(wp_kern *k, float *x, int b, int s, int nheads, int hd, const cpu_rope_cache *c, float sign) {
    int half = hd / 2, rows = b * s;
#pragma omp parallel for num_threads(cpu_threads(k)) if (rows >= 16) schedule(static)
    for (int row = 0; row < rows; row++) {
        const float *cs = c->cos + (size_t)(row % s) * half, *sn = c->sin + (size_t)(row % s) * half;
        for (int hh = 0; hh < nheads; hh++) {
            float *x1 = x + (size_t)row * nheads * hd + (size_t)hh * hd, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], bb = x2[i], sv = sign * sn[i];
                x1[i] = a * cs[i] - bb * sv;
                x2[i] = bb * cs[i] + a * sv;
            }
        }
    }
}

void cpu_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                  const wp_rope_scaling *sc) {
    const cpu_rope_cache *c = cpu_rope_tables(k, s, hd, pos0, theta, sc);
    if (c) rotate(k, x, b, s, nheads, hd, c, 1.0f);
}

void cpu_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                  const wp_rope_scaling *sc) {
    const cpu_rope_cache *c = cpu_rope_tables(k, s, hd, pos0, theta, sc);
    if (c) rotate(k, x, b, s, nheads, hd, c, -1.0f);
}
