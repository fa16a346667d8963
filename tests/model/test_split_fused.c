/* B followed by the W-pass gives the same bits as the fused backward: every weight-gradient
 * element, every chunk's input gradient and the loss, for several shapes (odd sizes, grouped
 * KV heads) and chunkings (one chunk, even, uneven), with fp32 and bf16 gradients. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "harness.h"

typedef struct {
    wp_model_cfg cfg;
    int chunkings[4][5]; /* layer counts, 0-terminated */
} shape_case;

/* The name of the tensor holding element at of the parameter vector. */
static const char *param_at(const wp_layout *L, long at) {
    for (int i = 0; i < L->n_params; i++) {
        size_t off = L->chunk_offset[L->params[i].chunk] + L->params[i].offset;
        if ((size_t)at >= off && (size_t)at < off + (size_t)L->params[i].rows * L->params[i].cols) return L->params[i].name;
    }
    return "?";
}

static void compare_case(const wp_model_cfg *cfg, wp_dtype gt) {
    harness H;
    harness_open(&H, cfg, 42, gt);
    const int n = cfg->n_chunks;
    size_t act = H.T * (size_t)cfg->h;
    float *gs = xmalloc_floats(H.N), *gf = xmalloc_floats(H.N);
    float *is = xmalloc_floats(act * (size_t)n), *inf = xmalloc_floats(act * (size_t)n);
    double ls = harness_step(&H, true, gs);
    for (int c = 1; c < n; c++) harness_input_grad(&H, c, is + act * (size_t)c);
    double lf = harness_step(&H, false, gf);
    for (int c = 1; c < n; c++) harness_input_grad(&H, c, inf + act * (size_t)c);
    int before = check_failures();
    long at = first_difference(gs, gf, H.N);
    EXPECT(at < 0, "chunks %s %s: weight gradient differs at %ld (%s): split %.9g fused %.9g", chunks_str(cfg),
           wp_dtype_name(gt), at, param_at(&H.L, at), gs[at], gf[at]);
    for (int c = 1; c < n; c++) {
        long d = first_difference(is + act * (size_t)c, inf + act * (size_t)c, act);
        EXPECT(d < 0, "chunks %s: chunk %d input gradient differs at %ld", chunks_str(cfg), c, d);
    }
    EXPECT(ls == lf, "chunks %s: loss split %.17g fused %.17g", chunks_str(cfg), ls, lf);
    double norm2 = 0;
    for (size_t i = 0; i < H.N; i++) norm2 += (double)gf[i] * gf[i];
    EXPECT(norm2 > 0, "chunks %s: gradient is zero or not finite (%g)", chunks_str(cfg), norm2);
    if (check_failures() == before)
        printf("ok   L=%d h=%d s=%d b=%d V=%d chunks %-8s gW %s: %zu gradients and %d input gradients bit-identical, "
               "loss %.7f\n",
               cfg->n_layers, cfg->h, cfg->seq, cfg->micro_batch, cfg->vocab, chunks_str(cfg), wp_dtype_name(gt), H.N, n - 1, lf);
    free(gs);
    free(gf);
    free(is);
    free(inf);
    harness_close(&H);
}

int main(void) {
    shape_case cases[] = {
        {shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), {{4}, {2, 2}, {3, 1}, {1, 1, 1, 1}}},
        {shape_cfg(3, 24, 3, 1, 50, 13, 3, 37), {{3}, {1, 2}, {2, 1}, {1, 1, 1}}},
        {shape_cfg(2, 16, 2, 2, 40, 7, 1, 19), {{2}, {1, 1}}},
        /* T = 300 tokens: the head's backward runs in several row blocks, the last one partial */
        {shape_cfg(2, 32, 4, 2, 72, 100, 3, 50), {{2}, {1, 1}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int j = 0; j < 4 && cases[i].chunkings[j][0]; j++) {
            wp_model_cfg cfg = cases[i].cfg;
            int n = 0;
            while (n < 5 && cases[i].chunkings[j][n]) n++;
            set_chunks(&cfg, cases[i].chunkings[j], n);
            compare_case(&cfg, WP_F32);
            compare_case(&cfg, WP_BF16);
        }
    return check_result("model/split_fused");
}
