/* Weight gradients accumulated in bf16 agree with fp32 ones within bf16's rounding: each
 * gradient tensor is one accumulation into a zeroed buffer, so every element is rounded to
 * bf16 about once (unit roundoff u = 2^-9) and the per-tensor relative error
 * ||g_bf16 - g_f32|| / ||g_f32|| must stay below 2u = 2^-8 (the embedding, which adds one token
 * at a time, sees repeated tokens rounded again; the bound leaves room for a few). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "harness.h"

static void compare(const wp_model_cfg *cfg) {
    harness f32, b16;
    harness_open(&f32, cfg, 5, WP_F32);
    harness_open(&b16, cfg, 5, WP_BF16);
    float *g32 = xmalloc_floats(f32.N), *g16 = xmalloc_floats(f32.N);
    harness_step(&f32, false, g32);
    harness_step(&b16, false, g16);
    const double bound = 0x1p-8;
    double worst = 0, sum_err = 0;
    const char *worst_name = "";
    int before = check_failures();
    for (int i = 0; i < f32.L.n_params; i++) {
        const wp_param *p = &f32.L.params[i];
        size_t off = f32.L.chunk_offset[p->chunk] + p->offset, n = (size_t)p->rows * p->cols;
        double num = 0, den = 0;
        for (size_t j = off; j < off + n; j++) {
            num += ((double)g16[j] - g32[j]) * ((double)g16[j] - g32[j]);
            den += (double)g32[j] * g32[j];
        }
        double rel = den > 0 ? sqrt(num / den) : INFINITY;
        sum_err += rel;
        EXPECT(rel <= bound, "%s: bf16 vs fp32 relative error %.3e > %.3e", p->name, rel, bound);
        if (rel > worst) worst = rel, worst_name = p->name;
    }
    /* identical results would mean the bf16 path never rounded: also a defect */
    EXPECT(sum_err != 0, "chunks %s: bf16 gradients equal fp32 ones exactly", chunks_str(cfg));
    if (check_failures() == before)
        printf("ok   L=%d h=%d chunks %s: worst bf16/fp32 relative error %.3e (%s), mean %.3e, bound %.3e\n",
               cfg->n_layers, cfg->h, chunks_str(cfg), worst, worst_name, sum_err / f32.L.n_params, bound);
    free(g32);
    free(g16);
    harness_close(&f32);
    harness_close(&b16);
}

int main(void) {
    wp_model_cfg a = shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), b = shape_cfg(3, 24, 3, 1, 50, 13, 3, 37);
    wp_model_cfg c = shape_cfg(2, 32, 4, 2, 72, 100, 3, 50); /* T = 300: several head row blocks */
    const int two[] = {2, 2}, odd[] = {2, 1};
    set_chunks(&a, two, 2);
    set_chunks(&b, odd, 2);
    compare(&a);
    compare(&b);
    compare(&c);
    return check_result("model/gw_bf16");
}
