/* weipipe-hier (gen_hier.c) on K nodes x G ranks, and the bytes that cross nodes per step:
 *   - validates over two consecutive steps for K = 1..4, G = 1, 2, 4, 8 (N <= 16) and M = N, 2N,
 *     4N, in fp32 and mixed precision, on a Llama-shaped layout whose chunk sizes do not divide
 *     by N (uneven slices);
 *   - bytes sent from node j to other nodes in a step, from the validator's transfer events,
 *     exactly: the gather sends K-1 copies of each of the node's ranks' slices of every chunk (in
 *     the weight dtype) and the drain sends, for each chunk the node holds, every slice of its
 *     step sum that another node's rank owns, rounded to the grad dtype. Summed, that is the
 *     closed form (K-1)/K * P * (weight bytes + grad bytes) per node (P parameters of the
 *     decoder chunks; 8 bytes in fp32, 4 in mixed precision), checked
 *     within one element per slice moved, and the same for M = N and 4N (independent of M);
 *   - tawpipe (gen_tawpipe.c), exactly: per round of N micro-batches every chunk its node owns
 *     goes to the K-1 other nodes for the forward and for the backward (the last chunk once),
 *     and the node sends one fp32 node sum of every chunk owned elsewhere: about
 *     (M/N)(K-1)/K P (2w + 4) per node, growing with M;
 *   - against the same model on the same cluster: 1f1b sends, per node, M activations forward
 *     and M activation gradients back across each node boundary it has (exactly), and
 *     weipipe-interleave's one ring over all N ranks sends across each boundary, in every round
 *     of M/N micro-batches, the forward and backward weights and the gradient of every chunk
 *     whose owner is not the next rank: 3 (N-1) chunks of P/N per round (checked within one
 *     round, which the first and last rounds and the uneven chunks stay within: staging,
 *     returning gradients), growing with M; docs/schedules.md has the table HIER_TABLE=1 prints (node 0
 *     for the weight-passing strategies, the busiest node for 1f1b; fp32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"
#include "validate.h"

static int checks;

static wp_layout layout(int layers, int chunks, int h, wp_precision prec) {
    wp_model_cfg c = {.n_layers = layers, .h = h, .ffn = 8 * h / 3 + 1, .n_heads = 3, .n_kv_heads = 3, .head_dim = h / 3,
                      .seq = 16, .micro_batch = 2, .vocab = 101, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = prec};
    model_cfg_even_chunks(&c, chunks);
    wp_layout L;
    char err[256];
    if (layout_build(&c, &L, err, sizeof err)) EXPECT(0, "layout: %s", err);
    return L;
}

/* Bytes sent in the second step from node j (ranks j*G ..) to ranks of other nodes. */
static void egress(const wp_run *run, int G, int K, double *out) {
    for (int j = 0; j < K; j++) out[j] = 0;
    for (int i = 0; i < run->n_xfer; i++) {
        const wp_xfer_event *x = &run->xfer[i];
        if (x->step == 1 && x->src / G != x->dst / G) out[x->src / G] += (double)x->bytes;
    }
}

static int run_lists(wp_strategy st, int N, int M, int C, int G, wp_precision prec, wp_layout *L, wp_run *run,
                     wp_schedule *s) {
    char err[1024];
    wp_gen_opts o = {.ranks_per_node = G};
    int rc = schedule_generate(st, N, M, C, &o, s, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d G=%d M=%d: %s", strategy_name(st), N, G, M, err);
    if (rc) return 1;
    *L = layout(8, C, 48 + 3 * N, prec);
    wp_sizes sz;
    sizes_from_layout(&sz, L, s->split);
    rc = engine_run(s, &sz, NULL, 2, true, run, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d G=%d M=%d: %s", strategy_name(st), N, G, M, err);
    checks++;
    if (rc) {
        run_free(run);
        sched_free(s);
        layout_free(L);
    }
    return rc;
}

/* Decoder parameters: what the chunks hold (the closed forms count P). */
static double params(const wp_layout *L) {
    double P = 0;
    for (int c = 0; c < L->cfg.n_chunks; c++) P += (double)L->chunk_numel[c];
    return P;
}

/* weipipe-hier's egress per node, exactly and against the closed form; returns node 0's. */
static double hier_case(int K, int G, int M, wp_precision prec) {
    const int N = K * G, C = G;
    wp_schedule s;
    wp_layout L;
    wp_run run;
    if (run_lists(WP_STRAT_HIER, N, M, C, G, prec, &L, &run, &s)) return -1;
    double got[WP_MAX_CHUNKS];
    egress(&run, G, K, got);
    double wsize = (double)wp_dtype_size(precision_weight_dtype(prec));
    double gsize = (double)wp_dtype_size(precision_grad_dtype(prec));
    double closed = (double)(K - 1) / K * params(&L) * (wsize + gsize);
    for (int j = 0; j < K; j++) {
        double want = 0, slack = 0;
        for (int c = 0; c < C && N > 1; c++) {
            for (int r = j * G; r < (j + 1) * G; r++) /* the gather: r's slice to K-1 other nodes */
                want += (double)(K - 1) * (double)buf_bytes(&L, buf_slice(buf_w(c, 0, WP_LANE_F), r, N));
            wp_buf sum = buf_gw(c);
            sum.lane = WP_LANE_PART; /* across nodes a slice of the step sum travels in the grad dtype */
            for (int k = 0; k < N; k++) /* the drain: node j's step sum of c, slices owned elsewhere */
                if (k / G != j) want += (double)buf_bytes(&L, buf_slice(sum, k, N));
            slack += 2.0 * N * (wsize + gsize); /* slices differ by one element at most */
        }
        EXPECT(got[j] == want, "weipipe-hier K=%d G=%d M=%d node %d: %.0f bytes across nodes, want %.0f", K, G, M, j,
               got[j], want);
        EXPECT(got[j] >= closed - slack && got[j] <= closed + slack,
               "weipipe-hier K=%d G=%d M=%d node %d: %.0f bytes, closed form (K-1)/K*P*(w+g) = %.0f +- %.0f", K, G, M,
               j, got[j], closed, slack);
        checks += 2;
    }
    double r = got[0];
    run_free(&run);
    sched_free(&s);
    layout_free(&L);
    return r;
}

/* 1f1b: node j sends M activations to node j+1 and M activation gradients to node j-1. */
static double f1b_case(int K, int G, int M, wp_precision prec) {
    const int N = K * G;
    wp_schedule s;
    wp_layout L;
    wp_run run;
    if (run_lists(WP_STRAT_1F1B, N, M, N, G, prec, &L, &run, &s)) return -1;
    double got[WP_MAX_CHUNKS], A = (double)buf_bytes(&L, buf_a(0, 0));
    egress(&run, G, K, got);
    for (int j = 0; j < K; j++) {
        double want = (j < K - 1 ? M * A : 0) + (j > 0 ? M * A : 0);
        EXPECT(got[j] == want, "1f1b K=%d G=%d M=%d node %d: %.0f bytes across nodes, want %.0f", K, G, M, j, got[j],
               want);
        checks++;
    }
    double r = 0;
    for (int j = 0; j < K; j++) r = got[j] > r ? got[j] : r;
    run_free(&run);
    sched_free(&s);
    layout_free(&L);
    return r;
}

/* tawpipe (gen_tawpipe.c): per round of N micro-batches, an owner sends its chunk to the K-1
 * other nodes for the forward and again for the backward (the last chunk stays from its forward),
 * and every other node sends it its fp32 node sum of the chunk's gradient. */
static double tawpipe_case(int K, int G, int M, wp_precision prec) {
    const int N = K * G, C = N;
    wp_schedule s;
    wp_layout L;
    wp_run run;
    if (run_lists(WP_STRAT_TAWPIPE, N, M, C, G, prec, &L, &run, &s)) return -1;
    double got[WP_MAX_CHUNKS], rounds = (double)M / N;
    egress(&run, G, K, got);
    for (int j = 0; j < K; j++) {
        double want = 0;
        for (int c = 0; c < C; c++) {
            wp_buf sum = buf_gw(c);
            sum.lane = WP_LANE_SUM;
            if (s.owner[c] / G == j)
                want += (K - 1) * (c == C - 1 ? 1.0 : 2.0) * (double)buf_bytes(&L, buf_w(c, 0, WP_LANE_F));
            else
                want += (double)buf_bytes(&L, sum);
        }
        want *= rounds;
        EXPECT(got[j] == want, "tawpipe K=%d G=%d M=%d node %d: %.0f bytes across nodes, want %.0f", K, G, M, j,
               got[j], want);
        checks++;
    }
    double r = got[0];
    run_free(&run);
    sched_free(&s);
    layout_free(&L);
    return r;
}

/* weipipe-interleave over all N ranks: about 3 (N-1)/N chunk-sized payloads of the whole model
 * cross each boundary per round of N micro-batches (forward weights, backward weights, gradient). */
static double interleave_case(int K, int G, int M, wp_precision prec) {
    const int N = K * G;
    wp_schedule s;
    wp_layout L;
    wp_run run;
    if (run_lists(WP_STRAT_INTERLEAVE, N, M, N, G, prec, &L, &run, &s)) return -1;
    double got[WP_MAX_CHUNKS];
    egress(&run, G, K, got);
    double wsize = (double)wp_dtype_size(precision_weight_dtype(prec));
    double gsize = (double)wp_dtype_size(precision_grad_dtype(prec));
    double chunk = params(&L) / N, rounds = (double)M / N;
    double closed = rounds * (N - 1) * chunk * (2 * wsize + gsize);
    for (int j = 0; j < K && K > 1; j++) {
        /* the first and last rounds differ by less than one round: staging, returning gradients */
        EXPECT(got[j] >= closed * (1 - 1 / rounds) && got[j] <= closed * (1 + 1 / rounds),
               "weipipe-interleave K=%d G=%d M=%d node %d: %.0f bytes across nodes, closed form %.0f (+ one round)", K, G,
               M, j, got[j], closed);
        checks++;
    }
    double r = K > 1 ? got[0] : 0;
    run_free(&run);
    sched_free(&s);
    layout_free(&L);
    return r;
}

int main(void) {
    static const int KG[][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 2}, {2, 4}, {3, 1}, {3, 2}, {4, 2}, {2, 8}, {4, 4}};
    bool table = getenv("HIER_TABLE") != NULL;
    if (table)
        printf("| K | G | M | weipipe-hier | closed form | tawpipe | weipipe-interleave | 1f1b |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int p = 0; p < 2; p++) {
        wp_precision prec = p ? WP_PREC_MIXED : WP_PREC_FP32;
        for (size_t i = 0; i < sizeof KG / sizeof KG[0]; i++) {
            int K = KG[i][0], G = KG[i][1], N = K * G;
            double first = -1;
            for (int m = 1; m <= 4; m *= 2) {
                double h = hier_case(K, G, m * N, prec);
                if (first < 0) first = h;
                EXPECT(h == first, "weipipe-hier K=%d G=%d: %.0f bytes at M=%d, %.0f at M=%d", K, G, h, m * N, first, N);
                double il = interleave_case(K, G, m * N, prec), f = f1b_case(K, G, m * N, prec);
                double tw = tawpipe_case(K, G, m * N, prec);
                if (table && p == 0 && K > 1) {
                    wp_layout L = layout(8, G, 48 + 3 * N, prec);
                    printf("| %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f |\n", K, G, m * N, h,
                           (double)(K - 1) / K * params(&L) * 8, tw, il, f);
                    layout_free(&L);
                }
                checks++;
            }
        }
    }
    printf("%d weipipe-hier checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
