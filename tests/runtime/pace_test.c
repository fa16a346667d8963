/* The pacing arithmetic (runtime/compute_pace.h): each compute action's least duration is its FLOPs at
 * the device speed, exactly the simulator's cost (B includes the forward redone under
 * --recompute, BW = B + W); other ops and pacing off give 0. Several shapes, odd sizes, uneven
 * chunks, three speeds. Tolerance: 1e-12 relative (double arithmetic on the same FLOP counts). */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "compute_pace.h"
#include "link_model.h"

static int checks;

static void same(double got, double want, const char *what, int c) {
    checks++;
    EXPECT(fabs(got - want) <= 1e-12 * fabs(want) && (want > 0 || got == 0), "%s of chunk %d: %.17g s, want %.17g s",
           what, c, got, want);
}

static void one(int layers, int h, int heads, int kv, int ffn, int seq, int mb, int vocab, int chunks, bool recompute,
                double tflops) {
    wp_model_cfg cfg = {.n_layers = layers, .h = h, .ffn = ffn, .n_heads = heads, .n_kv_heads = kv, .head_dim = h / heads,
                        .seq = seq, .micro_batch = mb, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                        .recompute = recompute, .precision = WP_PREC_MIXED};
    model_cfg_even_chunks(&cfg, chunks);
    wp_layout L;
    char err[256];
    int rc = layout_build(&cfg, &L, err, sizeof err);
    EXPECT(rc == 0, "layout: %s", err);
    if (rc) return;
    rt_pace p;
    pace_init(&p, &L, chunks, tflops);
    double speed = tflops * 1e12;
    for (int c = 0; c < chunks; c++) {
        wp_flops f = layout_chunk_flops(&L, c);
        double b = f.bwd_input + (recompute ? f.fwd : 0);
        same(pace_min_s(&p, WP_OP_F, c), f.fwd / speed, "F", c);
        same(pace_min_s(&p, WP_OP_B, c), b / speed, "B", c);
        same(pace_min_s(&p, WP_OP_W, c), f.bwd_weight / speed, "W", c);
        same(pace_min_s(&p, WP_OP_BW, c), (b + f.bwd_weight) / speed, "BW", c);
        same(pace_min_s(&p, WP_OP_BW, c), pace_min_s(&p, WP_OP_B, c) + pace_min_s(&p, WP_OP_W, c), "BW = B + W", c);
        for (int op = WP_OP_SEND; op < WP_OP_COUNT; op++) same(pace_min_s(&p, op, c), 0, op_name(op), c);
    }
    same(pace_min_s(&p, WP_OP_F, -1), 0, "F of chunk -1", -1);
    rt_pace off;
    pace_init(&off, &L, chunks, 0);
    checks++;
    EXPECT(!off.on, "pacing on at 0 TFLOP/s");
    for (int c = 0; c < chunks; c++) same(pace_min_s(&off, WP_OP_BW, c), 0, "BW unpaced", c);
    layout_free(&L);
}

int main(void) {
    static const double speeds[] = {0.0021, 3.7, 312};
    for (int i = 0; i < 3; i++) {
        one(4, 64, 4, 2, 160, 32, 2, 256, 4, false, speeds[i]);
        one(7, 96, 6, 3, 250, 47, 3, 301, 3, true, speeds[i]);   /* odd sizes, uneven chunks */
        one(5, 128, 8, 8, 344, 129, 1, 1000, 5, false, speeds[i]);
    }
    if (!check_failures()) printf("pacing budgets: %d checks, each equal to FLOPs / speed within 1e-12 relative\n", checks);
    return check_result("runtime/pace");
}
