/* The simulator against closed forms:
 *   - 1F1B with uniform stages and free links: bubble (N-1)/(M+N-1), step (M+N-1)(F+B);
 *   - WeiPipe-Interleave in steady state: per turn a rank receives two weight chunks and one
 *     gradient chunk (36h^2 values per Llama layer), less what it owns;
 *   - activation passing sends bytes proportional to b*s, weight passing the same for any b*s;
 *   - a link-bound 1F1B step lasts about bytes on the link / bandwidth;
 *   - the link model: transfers of two channels share a link's bandwidth, transfers of one channel
 *     queue, each arrives one latency after its last byte left;
 *   - costs from FLOPs: B includes a forward when recomputing, BW = B + W. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"
#include "validate.h"

static int checks;


static wp_schedule gen(wp_strategy st, int N, int M) {
    wp_schedule s;
    char err[512];
    if (schedule_generate(st, N, M, N, NULL, &s, err, sizeof err)) EXPECT(0, "%s: %s", strategy_name(st), err);
    return s;
}

/* A Llama-shaped layout: ffn = 8h/3 and one key/value head per query head, so a layer has
 * 12h^2 + 2h parameters. */
static wp_layout llama(int layers, int chunks, int h, int seq, int mb, int vocab) {
    wp_model_cfg c = {.n_layers = layers, .h = h, .ffn = 8 * h / 3, .n_heads = 4, .n_kv_heads = 4, .head_dim = h / 4,
                      .seq = seq, .mb = mb, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = WP_PREC_MIXED};
    model_cfg_even_chunks(&c, chunks);
    wp_layout L;
    char err[256];
    if (layout_build(&c, &L, err, sizeof err)) EXPECT(0, "layout: %s", err);
    return L;
}

static void bubble_1f1b(void) {
    static const double ratios[][2] = {{1, 2}, {1, 1.3}, {2.5, 1}};
    for (int N = 1; N <= 6; N++)
        for (int mi = 0; mi < 4; mi++) {
            int M = (int[]){1, 3, N, 2 * N + 1}[mi];
            for (int q = 0; q < 3; q++) {
                double f = ratios[q][0], b = ratios[q][1];
                wp_schedule s = gen(WP_STRAT_1F1B, N, M);
                wp_costs c;
                costs_unit(&c, N, 0);
                for (int k = 0; k < N; k++) costs_set_measured(&c, k, f, b, 0);
                wp_sim sim;
                char err[512];
                int rc = simulate(&s, NULL, &c, false, &sim, err, sizeof err);
                double want = (double)(N - 1) / (M + N - 1);
                EXPECT(rc == 0 && check_close(sim.step_s, (M + N - 1) * (f + b), 1e-12) && fabs(sim.bubble - want) < 1e-12,
                       "1f1b N=%d M=%d F=%g B=%g: step %g (want %g), bubble %.15f (want %.15f) %s", N, M, f, b, sim.step_s,
                       (M + N - 1) * (f + b), sim.bubble, want, rc ? err : "");
                checks++;
                sim_free(&sim);
                sched_free(&s);
            }
        }
}

/* Elements rank w receives in each turn (RECVs posted in turn t bring turn t+1's buffers). */
static void interleave_traffic(int N, int layers_per_chunk) {
    const int h = 96, M = 4 * N;
    wp_layout L = llama(N * layers_per_chunk, N, h, 8, 1, 2);
    wp_schedule s = gen(WP_STRAT_INTERLEAVE, N, M);
    int steady = 0;
    for (int w = 0; w < N; w++) {
        const wp_rank_prog *p = &s.rank[w];
        for (int i = 0; i < p->n; i++) {
            if (i > 0 && p->a[i].turn == p->a[i - 1].turn) continue;
            int t = p->a[i].turn, cf = -1, cb = -1, lap_before = 0;
            size_t got = 0;
            for (int j = 0; j < p->n; j++) {
                const wp_action *a = &p->a[j];
                if (a->turn == t && a->op == WP_OP_RECV) got += L.chunk_numel[a->buf.chunk];
                if (a->turn == t + 1 && a->op == WP_OP_F) cf = a->chunk;
                if (a->turn == t + 1 && a->op == WP_OP_BW) cb = a->chunk;
                if (a->turn == t + 1 - N && a->op == WP_OP_BW) lap_before = 1;
            }
            /* steady: turn t+1 interleaves, and the backward stream has made a full lap before it
             * (in a rank's first backward lap rank 0 starts every gradient instead of receiving it) */
            if (cf < 0 || cb < 0 || !lap_before) continue;
            size_t want = (s.owner[cf] == w ? 0 : L.chunk_numel[cf]) + (s.owner[cb] == w ? 0 : L.chunk_numel[cb]) +
                          (s.owner[cb] == (w + N - 1) % N ? 0 : L.chunk_numel[cb]);
            EXPECT(got == want, "interleave N=%d rank %d turn %d: received %zu values, want %zu", N, w, t, got, want);
            steady++;
        }
    }
    /* laps 2 .. M/N - 1 of each rank's interleaved turns: 2 laps of N turns with M = 4N */
    EXPECT(steady == 2 * N * N, "interleave N=%d: %d steady turns, want %d", N, steady, 2 * N * N);
    /* a middle chunk is l layers of 12h^2 + 2h: three of them are the paper's 36h^2 per layer */
    if (N >= 3) {
        size_t three = 3 * L.chunk_numel[1];
        EXPECT(three == (size_t)layers_per_chunk * (36 * h * h + 6 * h), "3 chunks = %zu values, want %d(36h^2 + 6h)", three,
               layers_per_chunk);
    }
    checks++;
    sched_free(&s);
    layout_free(&L);
}

static size_t sent_total(const wp_run *rep, int N) {
    size_t sum = 0;
    for (int r = 0; r < N; r++)
        for (int k = 0; k < WP_BUF_KINDS; k++) sum += rep->rank[r].sent[k];
    return sum;
}

static void traffic_vs_tokens(void) {
    static const int bs[][2] = {{1, 16}, {2, 16}, {1, 32}, {3, 32}};
    const int N = 4, M = 8;
    size_t act0 = 0, wei0 = 0;
    for (int i = 0; i < 4; i++) {
        wp_layout L = llama(8, N, 64, bs[i][1], bs[i][0], 256);
        size_t sent[2];
        for (int k = 0; k < 2; k++) {
            wp_schedule s = gen(k ? WP_STRAT_INTERLEAVE : WP_STRAT_1F1B, N, M);
            wp_run rep;
            char err[512];
            int rc = sched_validate(&s, &L, &rep, err, sizeof err);
            EXPECT(rc == 0, "%s", err);
            sent[k] = sent_total(&rep, N);
            run_free(&rep);
            sched_free(&s);
        }
        size_t tokens = (size_t)bs[i][0] * bs[i][1];
        if (i == 0) act0 = sent[0], wei0 = sent[1];
        EXPECT(sent[0] * 16 == act0 * tokens, "1f1b b=%d s=%d sends %zu bytes, want %zu * %zu/16", bs[i][0], bs[i][1],
               sent[0], act0, tokens);
        EXPECT(sent[0] == 2 * (size_t)(N - 1) * M * tokens * 64 * 2, "1f1b sends %zu bytes, want 2(N-1)M b s h 2", sent[0]);
        EXPECT(sent[1] == wei0, "interleave b=%d s=%d sends %zu bytes, want %zu as for any b*s", bs[i][0], bs[i][1],
               sent[1], wei0);
        checks++;
        layout_free(&L);
    }
}

static void link_bound(void) {
    const int N = 2, M = 32;
    wp_layout L = llama(2, N, 64, 64, 2, 256);
    wp_schedule s = gen(WP_STRAT_1F1B, N, M);
    wp_costs c;
    costs_unit(&c, N, 0);
    for (int k = 0; k < N; k++) costs_set_measured(&c, k, 1e-9, 1e-9, 1e-9);
    c.link_bw = c.node_bw = 1e8;
    wp_sim sim;
    char err[512];
    int rc = simulate(&s, &L, &c, false, &sim, err, sizeof err);
    double a = (double)buf_bytes(&L, buf_a(0, 0)), bound = M * a / 1e8; /* one link direction carries M activations */
    EXPECT(rc == 0 && sim.step_s >= bound && sim.step_s <= bound * (1 + 2.0 / M),
           "link-bound 1f1b: step %g s, bytes/bandwidth %g s (%s)", sim.step_s, bound, rc ? err : "");
    checks++;
    sim_free(&sim);
    sched_free(&s);
    layout_free(&L);
}

/* Rank 1 computes micro-batch 0 through chunks 0 and 1, both owned by rank 0, which lends the
 * weights on two channels at once and gets both gradients back on one channel. */
static void link_model(void) {
    wp_layout L = llama(2, 2, 64, 8, 1, 256);
    wp_schedule s;
    char err[512];
    sched_init(&s, WP_STRAT_NAIVE, 2, 1, 2, err, sizeof err);
    s.owner[0] = s.owner[1] = 0;
    wp_buf w0 = buf_w(0, 0, 0), w1 = buf_w(1, 0, 0), g0 = buf_gw(0), g1 = buf_gw(1);
    wp_action r0[] = {
        act_buf(WP_OP_LOAD, w0, 0), act_buf(WP_OP_LOAD, w1, 0),
        act_xfer(WP_OP_SEND, w0, 1, WP_SCH_WFWD, 0), act_xfer(WP_OP_SEND, w1, 1, WP_SCH_WBWD, 0),
        act_xfer(WP_OP_RECV, g0, 1, WP_SCH_GRAD, 0), act_xfer(WP_OP_RECV, g1, 1, WP_SCH_GRAD, 0),
        act_buf(WP_OP_FREE, w0, 0), act_buf(WP_OP_FREE, w1, 0),
        act_chunk(WP_OP_ACC, 0, 0), act_chunk(WP_OP_ACC, 1, 0), act_buf(WP_OP_FREE, g0, 0), act_buf(WP_OP_FREE, g1, 0),
        act_chunk(WP_OP_REDUCE, 0, 0), act_chunk(WP_OP_UPDATE, 0, 0), act_chunk(WP_OP_UPDATE, 1, 0),
    };
    wp_action r1[] = {
        act_xfer(WP_OP_RECV, w0, 0, WP_SCH_WFWD, 0), act_xfer(WP_OP_RECV, w1, 0, WP_SCH_WBWD, 0),
        act_compute(WP_OP_F, 0, 0, 0, false, 0), act_compute(WP_OP_F, 1, 0, 0, false, 0), act_buf(WP_OP_FREE, buf_a(0, 0), 0),
        act_buf(WP_OP_ZERO, g0, 0), act_buf(WP_OP_ZERO, g1, 0),
        act_compute(WP_OP_BW, 1, 0, 0, false, 0), act_compute(WP_OP_BW, 0, 0, 0, false, 0), act_buf(WP_OP_FREE, buf_ga(0, 0), 0),
        act_xfer(WP_OP_SEND, g0, 0, WP_SCH_GRAD, 0), act_xfer(WP_OP_SEND, g1, 0, WP_SCH_GRAD, 0),
        act_buf(WP_OP_FREE, w0, 0), act_buf(WP_OP_FREE, w1, 0), act_buf(WP_OP_FREE, g0, 0), act_buf(WP_OP_FREE, g1, 0),
        act_chunk(WP_OP_REDUCE, 0, 0),
    };
    for (size_t i = 0; i < sizeof r0 / sizeof r0[0]; i++) sched_push(&s, 0, r0[i], err, sizeof err);
    for (size_t i = 0; i < sizeof r1 / sizeof r1[0]; i++) sched_push(&s, 1, r1[i], err, sizeof err);
    wp_costs c;
    memset(&c, 0, sizeof c);
    c.link_bw = c.node_bw = 1e6;
    c.link_lat = c.node_lat = 1e-3;
    wp_sim sim;
    int rc = simulate(&s, &L, &c, true, &sim, err, sizeof err);
    EXPECT(rc == 0, "link model: %s", err);
    double S0 = (double)buf_bytes(&L, w0) / 1e6, S1 = (double)buf_bytes(&L, w1) / 1e6; /* seconds alone on the link */
    double G0 = (double)buf_bytes(&L, g0) / 1e6, G1 = (double)buf_bytes(&L, g1) / 1e6;
    /* the smaller weights leave after twice their own time (sharing), the larger after both */
    double small = fmin(S0, S1), w_done = S0 + S1 + 1e-3;
    double want[4] = {S0 < S1 ? 2 * small + 1e-3 : w_done, S0 < S1 ? w_done : 2 * small + 1e-3, 0, 0};
    want[2] = w_done + G0 + 1e-3;      /* one channel: GW[0] first ... */
    want[3] = w_done + G0 + G1 + 1e-3; /* ... then GW[1] */
    for (int i = 0; i < sim.run.n_xfer && i < 8; i++) {
        const wp_xfer_event *x = &sim.run.xfer[i];
        if (x->step != 0) continue;
        int k = x->buf.kind == WP_BUF_W ? x->buf.chunk : 2 + x->buf.chunk;
        EXPECT(check_close(x->t1, want[k], 1e-9), "link model: %s of chunk %d arrives at %.9f, want %.9f",
               x->buf.kind == WP_BUF_W ? "W" : "GW", x->buf.chunk, x->t1, want[k]);
    }
    checks++;
    sim_free(&sim);
    sched_free(&s);
    layout_free(&L);
}

static void flop_costs(void) {
    wp_layout L = llama(4, 2, 64, 32, 2, 256);
    wp_machine m = {.flops = 1e12};
    for (int rec = 0; rec < 2; rec++) {
        L.cfg.recompute = rec;
        wp_costs c;
        costs_from_layout(&c, &L, 2, &m);
        for (int k = 0; k < 2; k++) {
            wp_flops f = layout_chunk_flops(&L, k);
            EXPECT(check_close(c.op_s[WP_OP_B][k], (f.bwd_input + rec * f.fwd) / 1e12, 1e-12) &&
                       check_close(c.op_s[WP_OP_BW][k], c.op_s[WP_OP_B][k] + c.op_s[WP_OP_W][k], 1e-12) &&
                       check_close(c.op_s[WP_OP_F][k], f.fwd / 1e12, 1e-12),
                   "flop costs chunk %d recompute %d", k, rec);
        }
    }
    checks++;
    layout_free(&L);
}

int main(void) {
    bubble_1f1b();
    for (int N = 2; N <= 6; N++) interleave_traffic(N, N % 2 + 1);
    traffic_vs_tokens();
    link_bound();
    link_model();
    flop_costs();
    printf("%d closed-form checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
