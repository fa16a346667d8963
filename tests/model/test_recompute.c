/* Recompute on and off give identical losses, weight gradients and input gradients: the
 * recomputed forward runs the same kernels on the same inputs. Checked with the fused and
 * the split backward (where B must keep the recomputed W-pass inputs past the scratch). */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "harness.h"

static void compare(wp_model_cfg cfg, bool split) {
    harness off, on;
    cfg.recompute = false;
    harness_open(&off, &cfg, 7, WP_F32);
    cfg.recompute = true;
    harness_open(&on, &cfg, 7, WP_F32);
    size_t act = off.T * (size_t)cfg.h;
    float *g0 = xmalloc_floats(off.N), *g1 = xmalloc_floats(off.N), *i0 = xmalloc_floats(act), *i1 = xmalloc_floats(act);
    int before = check_failures();
    for (int rep = 0; rep < 2; rep++) { /* twice: reused activations must not carry state over */
        double l0 = harness_step(&off, split, g0), l1 = harness_step(&on, split, g1);
        long at = first_difference(g0, g1, off.N);
        EXPECT(l0 == l1 && at < 0, "chunks %s %s rep %d: loss %.17g vs %.17g, first gradient difference at %ld",
               chunks_str(&cfg), split ? "split" : "fused", rep, l0, l1, at);
        for (int c = 1; c < cfg.n_chunks; c++) {
            harness_input_grad(&off, c, i0);
            harness_input_grad(&on, c, i1);
            EXPECT(first_difference(i0, i1, act) < 0, "chunks %s %s: chunk %d input gradient differs", chunks_str(&cfg),
                   split ? "split" : "fused", c);
        }
        if (check_failures() == before && rep == 1)
            printf("ok   L=%d h=%d s=%d chunks %-7s %s: loss %.7f and %zu gradients identical with recompute\n",
                   cfg.n_layers, cfg.h, cfg.seq, chunks_str(&cfg), split ? "split" : "fused", l0, off.N);
    }
    free(g0);
    free(g1);
    free(i0);
    free(i1);
    harness_close(&off);
    harness_close(&on);
}

int main(void) {
    const int one[] = {4}, uneven[] = {3, 1}, odd[] = {1, 2};
    wp_model_cfg a = shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), b = shape_cfg(3, 24, 3, 1, 50, 13, 3, 37);
    set_chunks(&a, one, 1);
    compare(a, false);
    compare(a, true);
    set_chunks(&a, uneven, 2);
    compare(a, false);
    compare(a, true);
    set_chunks(&b, odd, 2);
    compare(b, false);
    compare(b, true);
    return check_result("model/recompute");
}
