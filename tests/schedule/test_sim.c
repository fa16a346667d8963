/* The simulator against closed forms:
 *   - 1F1B with uniform stages and free links: bubble (N-1)/(M+N-1), step (M+N-1)(F+B);
 *   - WeiPipe-Interleave in steady state: per turn a rank receives two weight chunks and one
 *     gradient chunk (36h^2 values per Llama layer), less what it owns;
 *   - activation passing sends bytes proportional to b*s, weight passing the same for any b*s;
 *   - a link-bound 1F1B step lasts about bytes on the link / bandwidth;
 *   - the link model: transfers of two channels share a link's bandwidth, transfers of one channel
 *     queue, each arrives one latency after its last byte left;
 *   - costs from FLOPs: B includes a forward when recomputing, BW = B + W;
 *   - document masks: k equal documents score k len(len+1)/2 pairs, (s/k + 1)/(s + 1) of the
 *     causal s(s+1)/2; any layout of documents its brute-force count of visible (query, key)
 *     pairs; attention's FLOPs (and so the costs --strategy auto ranks by) scale by that share;
 *   - NICs (--ranks-per-node): 4 ranks of node 0 sending X bytes each to node 1 at once take 4X/B,
 *     a lone flow X/B, per-pair links (no --ranks-per-node) X/B for all four; and on generated
 *     schedules no window of time ever sees more than B per second leave (enter) one node. */
#include <math.h>
#include <stdlib.h>
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
                      .seq = seq, .micro_batch = mb, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
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

/* Rank 0 owns the one chunk and lends it, at time 0, to every rank G + r of node 1 with bit r
 * of `which` set (rank 0 -> G + r directly when `spread` is false, else by way of rank r of node
 * 0, which forwards it: then node 0's G ranks each send one flow across); each of them runs
 * micro-batch r through it and gives the gradient back to rank 0. 2 nodes x G ranks. */
static wp_schedule nic_fanout(int G, unsigned which, bool spread) {
    wp_schedule s;
    char err[512];
    int M = __builtin_popcount(which), m = 0;
    sched_init(&s, WP_STRAT_NAIVE, 2 * G, M, 1, err, sizeof err);
    s.owner[0] = 0;
    wp_buf w = buf_w(0, 0, 0), g = buf_gw(0);
    sched_push(&s, 0, act_buf(WP_OP_LOAD, w, 0), err, sizeof err);
    for (int r = 0; r < G; r++) {
        if (!(which >> r & 1)) continue;
        int via = spread ? r : 0;
        if (via != 0) {
            sched_push(&s, 0, act_xfer(WP_OP_SEND, w, via, WP_SCH_WFWD, 0), err, sizeof err);
            sched_push(&s, via, act_xfer(WP_OP_RECV, w, 0, WP_SCH_WFWD, 0), err, sizeof err);
        }
        sched_push(&s, via, act_xfer(WP_OP_SEND, w, G + r, WP_SCH_WFWD, 0), err, sizeof err);
        if (via != 0) sched_push(&s, via, act_buf(WP_OP_FREE, w, 0), err, sizeof err);
        wp_action b[] = {act_xfer(WP_OP_RECV, w, via, WP_SCH_WFWD, 0), act_compute(WP_OP_F, 0, m, 0, false, 0),
                         act_buf(WP_OP_ZERO, g, 0), act_compute(WP_OP_BW, 0, m, 0, false, 0),
                         act_xfer(WP_OP_SEND, g, 0, WP_SCH_GRAD, 0), act_buf(WP_OP_FREE, w, 0), act_buf(WP_OP_FREE, g, 0)};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) sched_push(&s, G + r, b[i], err, sizeof err);
        m++;
    }
    for (int r = 0; r < G; r++) {
        if (!(which >> r & 1)) continue;
        sched_push(&s, 0, act_xfer(WP_OP_RECV, g, G + r, WP_SCH_GRAD, 0), err, sizeof err);
        sched_push(&s, 0, act_chunk(WP_OP_ACC, 0, 0), err, sizeof err);
        sched_push(&s, 0, act_buf(WP_OP_FREE, g, 0), err, sizeof err);
    }
    sched_push(&s, 0, act_buf(WP_OP_FREE, w, 0), err, sizeof err);
    for (int r = 0; r < 2 * G; r++) sched_push(&s, r, act_chunk(WP_OP_REDUCE, 0, 0), err, sizeof err);
    sched_push(&s, 0, act_chunk(WP_OP_UPDATE, 0, 0), err, sizeof err);
    return s;
}

/* When the last weight transfer into node 1 (ranks >= G) of step 0 arrives; n: how many there were. */
static double nic_last(const wp_schedule *s, const wp_layout *L, const wp_costs *c, int G, int *n) {
    wp_sim sim;
    char err[512];
    int rc = simulate(s, L, c, true, &sim, err, sizeof err);
    EXPECT(rc == 0, "nic: %s", err);
    double t = 0;
    *n = 0;
    for (int i = 0; rc == 0 && i < sim.run.n_xfer; i++) {
        const wp_xfer_event *x = &sim.run.xfer[i];
        if (x->step == 0 && x->buf.kind == WP_BUF_W && x->dst >= G) t = fmax(t, x->t1), ++*n;
    }
    if (rc == 0) sim_free(&sim);
    return t;
}

static void nic_hand(void) {
    const int G = 4;
    wp_layout L = llama(4, 1, 64, 8, 1, 256);
    double X = (double)buf_bytes(&L, buf_w(0, 0, 0)), B = 1e6, lat = 1e-3;
    wp_costs c;
    memset(&c, 0, sizeof c); /* compute and the links inside a node take no time */
    c.link_bw = B, c.link_lat = lat;
    const unsigned sets[3] = {1u << 2, 1u << 1 | 1u << 3, 0xf};
    for (int spread = 0; spread < 2; spread++)
        for (int per = 0; per <= G; per += G) {
            c.ranks_per_node = per;
            for (int k = 0; k < 3; k++) {
                int flows = __builtin_popcount(sets[k]), n;
                wp_schedule s = nic_fanout(G, sets[k], spread);
                double t = nic_last(&s, &L, &c, G, &n);
                /* per pair (no --ranks-per-node) every flow has a link of its own: X/B (twice
                 * over when forwarded, every hop being a link then); through node 0's one NIC they
                 * share it: flows * X / B, whoever sends them */
                double want = per ? flows * X / B + lat : spread ? 2 * (X / B + lat) : X / B + lat;
                EXPECT(n == flows && check_close(t, want, 1e-9), "nic %s, --ranks-per-node %d: %d flows of %.0f bytes end at %.9f, want %.9f",
                       spread ? "one sender per rank" : "all from rank 0", per, flows, X, t, want);
                sched_free(&s);
            }
        }
    checks++;
    layout_free(&L);
}

/* On generated schedules, 2 nodes x 4 ranks: in no window [a, b] between a transfer's first byte
 * and another's last do the transfers wholly inside it that leave (enter) one node carry more
 * than B (b - a) bytes. Each transfer's last byte left one latency before it arrived. */
static void nic_never_over(void) {
    const int N = 8, G = 4, M = 8;
    const wp_strategy st[] = {WP_STRAT_INTERLEAVE, WP_STRAT_FSDP, WP_STRAT_HIER, WP_STRAT_TAWPIPE, WP_STRAT_1F1B};
    for (size_t k = 0; k < sizeof st / sizeof st[0]; k++) {
        int C = strategy_default_chunks(st[k], N, G);
        wp_layout L = llama(8, C, 64, 16, 1, 256);
        wp_gen_opts o = {.ranks_per_node = G};
        wp_schedule s;
        char err[512];
        if (schedule_generate(st[k], N, M, C, &o, &s, err, sizeof err)) {
            EXPECT(0, "nic %s: %s", strategy_name(st[k]), err);
            layout_free(&L);
            continue;
        }
        wp_machine m = {.flops = 1e9, .link_bw = 2e6, .link_lat = 1e-4, .node_bw = 1e8, .node_lat = 1e-5, .ranks_per_node = G};
        wp_costs c;
        costs_from_layout(&c, &L, N, &m);
        wp_sim sim;
        int rc = simulate(&s, &L, &c, true, &sim, err, sizeof err);
        EXPECT(rc == 0, "nic %s: %s", strategy_name(st[k]), err);
        int crossing = 0, worst_node = -1;
        double worst = 0;
        wp_xfer_event *x = rc == 0 ? malloc((size_t)sim.run.n_xfer * sizeof *x) : NULL;
        for (int i = 0; x && i < sim.run.n_xfer; i++)
            if (sim.run.xfer[i].src / G != sim.run.xfer[i].dst / G) x[crossing++] = sim.run.xfer[i];
        for (int i = 0; i < crossing; i++)
            for (int j = 0; j < crossing; j++) {
                double t0 = x[i].t0, t1 = x[j].t1 - m.link_lat;
                if (t1 <= t0) continue;
                for (int dir = 0; dir < 2; dir++)
                    for (int node = 0; node < N / G; node++) {
                        double bytes = 0;
                        for (int q = 0; q < crossing; q++)
                            if ((dir ? x[q].dst : x[q].src) / G == node && x[q].t0 >= t0 - 1e-12 && x[q].t1 - m.link_lat <= t1 + 1e-12)
                                bytes += (double)x[q].bytes;
                        double use = bytes / (m.link_bw * (t1 - t0));
                        if (use > worst) worst = use, worst_node = node;
                    }
            }
        free(x);
        EXPECT(rc != 0 || crossing > 0, "nic %s: no transfer crosses nodes", strategy_name(st[k]));
        EXPECT(worst <= 1 + 1e-9, "nic %s: node %d's NIC carries %.3f times its bandwidth in some window", strategy_name(st[k]),
               worst_node, worst);
        checks++;
        if (rc == 0) sim_free(&sim);
        sched_free(&s);
        layout_free(&L);
    }
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

/* (query, key) pairs a query sees: key <= query, key >= the query's document start. */
static double brute_pairs(const int32_t *tok, int s, int32_t boundary) {
    double n = 0;
    int lo = 0;
    for (int i = 0; i < s; i++) {
        if (i > 0 && tok[i] == boundary) lo = i;
        for (int j = 0; j <= i; j++) n += j >= lo;
    }
    return n;
}

static void masked_attention(void) {
    for (int k = 1; k <= 16; k *= 2) {
        int s = 1024, len = s / k;
        double got = attn_pairs_equal_docs(s, len), share = got / attn_pairs_causal(s);
        EXPECT(got == k * (double)len * (len + 1) / 2 && fabs(share - (s / (double)k + 1) / (s + 1)) <= 1e-15,
               "%d equal documents of %d: %.0f pairs, share %.17g (want %.17g)", k, len, got, share,
               (s / (double)k + 1) / (s + 1));
        checks++;
    }
    EXPECT(attn_pairs_equal_docs(1000, 300) == 3 * 300.0 * 301 / 2 + 100.0 * 101 / 2 &&
               attn_pairs_equal_docs(100, 0) == 5050 && attn_pairs_equal_docs(100, 100) == 5050,
           "documents of 300 in 1000 tokens: %.0f pairs", attn_pairs_equal_docs(1000, 300));
    checks++;
    int32_t tok[257];
    uint64_t r = 7;
    for (int trial = 0; trial < 20; trial++) {
        int s = 1 + trial * 13 % 257;
        for (int t = 0; t < s; t++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            tok[t] = (int32_t)((r >> 33) % (trial % 3 == 0 ? 3 : 40)); /* boundary 1: often or rarely */
        }
        double got = attn_pairs_docs(tok, s, 1), want = brute_pairs(tok, s, 1);
        EXPECT(got == want, "documents of trial %d (s = %d): %.0f pairs, brute force %.0f", trial, s, got, want);
        checks++;
    }
    for (int t = 0; t < 256; t++) tok[t] = t % 64 == 0 ? 1 : 5; /* 4 documents of 64 */
    EXPECT(attn_pairs_docs(tok, 256, 1) == attn_pairs_equal_docs(256, 64), "planted documents of 64 differ from equal ones");
    checks++;
    /* attention's FLOPs scale by the share; the matrix products do not move */
    wp_layout L = llama(4, 2, 64, 256, 2, 256);
    wp_machine m = {.flops = 1e12};
    wp_costs full, masked;
    costs_from_layout(&full, &L, 2, &m);
    wp_flops f[2] = {layout_chunk_flops(&L, 0), layout_chunk_flops(&L, 1)};
    L.cfg.doc_mask = true;
    L.cfg.attn_share = attn_pairs_equal_docs(256, 64) / attn_pairs_causal(256);
    costs_from_layout(&masked, &L, 2, &m);
    for (int c = 0; c < 2; c++) {
        wp_flops g = layout_chunk_flops(&L, c);
        double att = f[c].fwd - f[c].bwd_weight, att_m = g.fwd - g.bwd_weight;
        EXPECT(att > 0 && check_close(att_m, L.cfg.attn_share * att, 1e-12) &&
                   check_close(g.bwd_input - g.bwd_weight, 2 * att_m, 1e-12) && g.bwd_weight == f[c].bwd_weight &&
                   check_close(masked.op_s[WP_OP_F][c], g.fwd / 1e12, 1e-12) &&
                   masked.op_s[WP_OP_F][c] < full.op_s[WP_OP_F][c] && masked.op_s[WP_OP_B][c] < full.op_s[WP_OP_B][c] &&
                   masked.op_s[WP_OP_W][c] == full.op_s[WP_OP_W][c],
               "chunk %d: masked attention %.6g FLOPs, unmasked %.6g, share %.6g; F costs %.6g vs %.6g", c, att_m, att,
               L.cfg.attn_share, masked.op_s[WP_OP_F][c], full.op_s[WP_OP_F][c]);
        checks++;
    }
    layout_free(&L);
}

int main(void) {
    bubble_1f1b();
    masked_attention();
    for (int N = 2; N <= 6; N++) interleave_traffic(N, N % 2 + 1);
    traffic_vs_tokens();
    link_bound();
    link_model();
    flop_costs();
    nic_hand();
    nic_never_over();
    printf("%d closed-form checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
