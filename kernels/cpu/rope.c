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

/* sign = +1 rotates forward, -1 backward (the transpose of the rotation). Row r's angles are
 * table row pos(r): r % s, or with plo (positions restarting per document) pos0 + r % s - plo[r]
 * in a table that starts at position 0. */
static void rotate(wp_kern *k, float *x, int b, int s, int nheads, int hd, const cpu_rope_cache *c, int pos0,
                   const int32_t *plo, float sign) {
    int half = hd / 2, rows = b * s;
#pragma omp parallel for num_threads(cpu_threads(k)) if (rows >= 16) schedule(static)
    for (int row = 0; row < rows; row++) {
        size_t p = plo ? (size_t)(pos0 + row % s - plo[row]) : (size_t)(row % s);
        const float *cs = c->cos + p * half, *sn = c->sin + p * half;
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

/* plo's positions must fall in the table: a document starts no later than its token and not
 * before the sequence (a wrong plo would read outside the table, not just rotate wrongly). */
static bool plo_ok(wp_kern *k, const char *who, int b, int s, int pos0, const int32_t *plo) {
    for (int row = 0; plo && row < b * s; row++)
        if (plo[row] < 0 || plo[row] > pos0 + row % s) {
            kern_set_error(k, "%s: plo[%d] = %d is outside [0, %d] (a document starting after its token)", who, row,
                           plo[row], pos0 + row % s);
            return false;
        }
    return true;
}

static void rope(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc, const int32_t *plo, float sign, const char *who) {
    if (!plo_ok(k, who, b, s, pos0, plo)) return;
    /* restarting positions reach anywhere in [0, pos0 + s): one table from position 0 */
    const cpu_rope_cache *c = plo ? cpu_rope_tables(k, pos0 + s, hd, 0, theta, sc) : cpu_rope_tables(k, s, hd, pos0, theta, sc);
    if (c) rotate(k, x, b, s, nheads, hd, c, pos0, plo, sign);
}

void cpu_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                  const wp_rope_scaling *sc, const int32_t *plo) {
    rope(k, x, b, s, nheads, hd, pos0, theta, sc, plo, 1.0f, "kern_rope_fwd");
}

void cpu_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                  const wp_rope_scaling *sc, const int32_t *plo) {
    rope(k, x, b, s, nheads, hd, pos0, theta, sc, plo, -1.0f, "kern_rope_bwd");
}
