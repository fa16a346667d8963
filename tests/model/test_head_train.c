/* The training forward (model_forward_train: the LM head's backward in F, kern_lmhead_ce_fwd_bwd)
 * against the plain forward followed by the head's backward in B, with the fused backward and
 * with B + W-pass: the loss, every input gradient and every weight gradient but the head's the
 * same bits (the head's input gradient comes from the same GEMMs on the same rows); the head's
 * weight gradient within 1e-6 relative (||a-b||/||b||) in fp32, because it sums its rows in
 * the kernel's row blocks (128 on the CPU) where B sums the model's 256-row blocks: the same
 * terms in another fp32 order. With bf16 gradients both round that fp32 sum once, so the head
 * is held to bf16's unit roundoff (2^-8) instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"

/* the plain forward, then the backward (split or fused), gradients to host */
static double plain_step(harness *H, bool split, float *grads) {
    double loss = 0;
    CHECK(whole_zero_grads(H->W) == 0 && whole_forward(H->W, &loss) == 0 && whole_backward(H->W, split) == 0 &&
              whole_get_grads(H->W, grads) == 0,
          "plain step: %s", harness_why(H));
    return loss;
}

static void compare_case(const wp_model_cfg *cfg, wp_dtype gt, bool split) {
    harness H;
    harness_open(&H, cfg, 7, gt);
    const int n = cfg->n_chunks;
    size_t act = H.T * (size_t)cfg->h;
    float *gp = xmalloc_floats(H.N), *gt_ = xmalloc_floats(H.N), *ip = xmalloc_floats(act), *it = xmalloc_floats(act);
    double lp = plain_step(&H, split, gp);
    if (n > 1) harness_input_grad(&H, n - 1, ip);
    for (size_t i = 0; i < H.N; i++) gt_[i] = NAN; /* poisoned: harness_step must write every one */
    double lt = harness_step(&H, split, gt_);
    if (n > 1) harness_input_grad(&H, n - 1, it);
    const wp_param *head = layout_find(&H.L, "lm_head.weight");
    CHECK(head != NULL, "no lm_head.weight");
    size_t h0 = H.L.chunk_offset[head->chunk] + head->offset, hn = (size_t)head->rows * head->cols;
    long other = first_difference(gp, gt_, h0);
    if (other < 0) {
        long tail = first_difference(gp + h0 + hn, gt_ + h0 + hn, H.N - h0 - hn);
        other = tail < 0 ? -1 : (long)(h0 + hn) + tail;
    }
    double d2 = 0, r2 = 0;
    for (size_t i = h0; i < h0 + hn; i++) d2 += ((double)gp[i] - gt_[i]) * ((double)gp[i] - gt_[i]), r2 += (double)gp[i] * gp[i];
    double rel = sqrt(d2 / r2), tol = gt == WP_F32 ? 1e-6 : 0x1p-8;
    int before = check_failures();
    EXPECT(lp == lt, "chunks %s: loss plain %.17g train %.17g", chunks_str(cfg), lp, lt);
    EXPECT(other < 0, "chunks %s %s: gradient %ld differs: plain %.9g train %.9g", chunks_str(cfg), wp_dtype_name(gt),
           other, other < 0 ? 0.0 : gp[other], other < 0 ? 0.0 : gt_[other]);
    EXPECT(r2 > 0 && rel <= tol, "chunks %s %s: head gradient relative difference %.2e (tol %.0e)", chunks_str(cfg),
           wp_dtype_name(gt), rel, tol);
    EXPECT(n == 1 || first_difference(ip, it, act) < 0, "chunks %s: chunk %d's input gradient differs", chunks_str(cfg),
           n - 1);
    if (check_failures() == before)
        printf("ok   T=%zu V=%d chunks %-4s gW %s %s: loss, input and non-head gradients bit-identical, head %.2e\n", H.T,
               cfg->vocab, chunks_str(cfg), wp_dtype_name(gt), split ? "B+W" : "fused", rel);
    free(gp), free(gt_), free(ip), free(it);
    harness_close(&H);
}

int main(void) {
    wp_model_cfg cases[] = {
        shape_cfg(2, 24, 3, 1, 50, 13, 3, 37),  /* T = 39: one row block */
        shape_cfg(2, 32, 4, 2, 72, 100, 3, 50), /* T = 300: several, the last partial */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int chunking = 0; chunking < 2; chunking++) {
            wp_model_cfg cfg = cases[i];
            set_chunks(&cfg, chunking ? (const int[]){1, 1} : (const int[]){2}, chunking ? 2 : 1);
            for (int split = 0; split < 2; split++) {
                compare_case(&cfg, WP_F32, split);
                compare_case(&cfg, WP_BF16, split);
            }
        }
    return check_result("model/head_train");
}
