/* The model split into 1, 2, 3 or 4 chunks (even and uneven) computes the same loss and the
 * same gradients, bit for bit: chunk boundaries only decide where an activation is copied,
 * never the arithmetic, and the init depends on tensor names, not on chunks. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "harness.h"

static void compare_to_whole(wp_model_cfg cfg, const int *layers, int n, const float *g_ref, double l_ref) {
    set_chunks(&cfg, layers, n);
    harness H;
    harness_open(&H, &cfg, 99, WP_F32);
    float *g = xmalloc_floats(H.N);
    double l = harness_step(&H, false, g);
    long at = first_difference(g, g_ref, H.N);
    bool same = l == l_ref && at < 0;
    EXPECT(same, "chunks %s: loss %.17g vs %.17g, first gradient difference at %ld", chunks_str(&cfg), l, l_ref, at);
    if (same)
        printf("ok   L=%d h=%d chunks %-9s loss %.9f, %zu gradients bit-identical to one chunk\n", cfg.n_layers, cfg.h,
               chunks_str(&cfg), l, H.N);
    free(g);
    harness_close(&H);
}

static void check_shape(wp_model_cfg cfg, const int (*splits)[5], int n_splits) {
    harness H;
    harness_open(&H, &cfg, 99, WP_F32);
    float *g_ref = xmalloc_floats(H.N);
    double l_ref = harness_step(&H, false, g_ref);
    harness_close(&H);
    for (int i = 0; i < n_splits; i++) {
        int n = 0;
        while (n < 5 && splits[i][n]) n++;
        compare_to_whole(cfg, splits[i], n, g_ref, l_ref);
    }
    free(g_ref);
}

int main(void) {
    const int four[][5] = {{2, 2}, {1, 3}, {3, 1}, {2, 1, 1}, {1, 1, 2}, {1, 1, 1, 1}};
    const int three[][5] = {{1, 2}, {2, 1}, {1, 1, 1}};
    check_shape(shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), four, 6);
    check_shape(shape_cfg(3, 24, 3, 1, 50, 13, 3, 37), three, 3);
    check_shape(shape_cfg(3, 32, 4, 2, 72, 100, 3, 50), three, 3); /* T = 300 */
    return check_result("model/chunking");
}
