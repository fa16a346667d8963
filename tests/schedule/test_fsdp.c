/* FSDP (ZeRO-3) as a sliced schedule (gen_fsdp.c, ir.h):
 *   - validates for N = 1..8 and M = N, 2N, 3N over two consecutive steps, on a Llama-shaped
 *     layout whose chunk sizes do not divide by N (uneven slices); also C = 1 and C = 2N+1 chunks;
 *   - bytes per rank per step, exactly, slice by slice: the all-gather sends every slice of a
 *     chunk but the one its successor owns and receives every slice but its own, per use (two
 *     uses per micro-batch, one for the last chunk, which stays gathered from F to B); the
 *     reduce-scatter sends every partial but its own slice's and receives every one but its
 *     predecessor's, once per micro-batch. Summed, that is the closed form
 *     (N-1)/N * M/N * sum_c (u_c * weight bytes_c + grad bytes_c), u_c = 2 (1 for the last chunk),
 *     which is checked too, within one element per slice moved;
 *   - memory: two gathered chunks at most, one micro-batch's activations, 1/N of the optimizer
 *     state per rank;
 *   - slice rules broken on purpose are caught: a dropped FOLD or own-slice ACC (a contribution
 *     missing), a doubled FOLD (a contribution twice), a dropped slice RECV (a whole read without
 *     every slice), a LOAD of a slice another rank owns, a transfer of a whole sliced buffer, a
 *     sliced name in an unsliced schedule. */
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

static size_t slice_bytes(const wp_layout *L, int kind, int c, int k, int N) {
    wp_buf b = kind == WP_BUF_W ? buf_w(c, 0, WP_LANE_F) : buf_gw(c);
    return buf_bytes(L, buf_slice(b, ((k % N) + N) % N, N));
}

static void check_bytes(const wp_schedule *s, const wp_layout *L, const wp_run *rep) {
    const int N = s->nranks, C = s->nchunks, k = s->nmb / N;
    for (int r = 0; r < N; r++) {
        size_t want_ws = 0, want_wr = 0, want_gs = 0, want_gr = 0;
        double closed = 0, slack = 0;
        for (int c = 0; c < C && N > 1; c++) {
            int uses = c == C - 1 ? 1 : 2;
            size_t W = buf_bytes(L, buf_w(c, 0, WP_LANE_F)), G = buf_bytes(L, buf_gw(c));
            want_ws += (size_t)k * uses * (W - slice_bytes(L, WP_BUF_W, c, r + 1, N));
            want_wr += (size_t)k * uses * (W - slice_bytes(L, WP_BUF_W, c, r, N));
            want_gs += (size_t)k * (G - slice_bytes(L, WP_BUF_GW, c, r, N));
            want_gr += (size_t)k * (G - slice_bytes(L, WP_BUF_GW, c, r - 1, N));
            closed += (double)(N - 1) / N * k * (uses * (double)W + (double)G);
            slack += (double)k * (uses + 1) * 4; /* one element (at most 4 bytes) per slice */
        }
        const wp_rank_report *q = &rep->rank[r];
        EXPECT(q->sent[WP_BUF_W] == want_ws && q->recv[WP_BUF_W] == want_wr && q->sent[WP_BUF_GW] == want_gs &&
                   q->recv[WP_BUF_GW] == want_gr,
               "fsdp N=%d M=%d rank %d: W sent %zu recv %zu (want %zu %zu), GW sent %zu recv %zu (want %zu %zu)", N,
               s->nmb, r, q->sent[WP_BUF_W], q->recv[WP_BUF_W], want_ws, want_wr, q->sent[WP_BUF_GW], q->recv[WP_BUF_GW],
               want_gs, want_gr);
        EXPECT(q->sent[WP_BUF_A] == 0 && q->sent[WP_BUF_GA] == 0, "fsdp rank %d sends activations", r);
        double sent = (double)(q->sent[WP_BUF_W] + q->sent[WP_BUF_GW]);
        EXPECT(sent >= closed - slack && sent <= closed + slack, "fsdp N=%d M=%d rank %d: %g bytes, closed form %g +- %g",
               N, s->nmb, r, sent, closed, slack);
        checks += 2;
    }
}

static void check_memory(const wp_schedule *s, const wp_layout *L, const wp_run *rep) {
    const int N = s->nranks;
    for (int r = 0; r < N; r++) {
        const wp_rank_report *q = &rep->rank[r];
        size_t owned = 0, off, part;
        for (int c = 0; c < s->nchunks; c++) {
            slice_range(16 * L->chunk_numel[c], r, N, &off, &part);
            owned += part;
        }
        EXPECT(q->peak_n[WP_BUF_W] <= 2 && q->peak_n[WP_BUF_A] <= 2 && q->peak_n[WP_BUF_GA] <= 2 &&
                   q->peak_acts == s->nchunks && q->owner_bytes == owned,
               "fsdp N=%d rank %d: W %d A %d GA %d buffers, %d activation states, %zu owner bytes (want %zu)", N, r,
               q->peak_n[WP_BUF_W], q->peak_n[WP_BUF_A], q->peak_n[WP_BUF_GA], q->peak_acts, q->owner_bytes, owned);
        checks++;
    }
}

static void one(int N, int M, int C, wp_precision prec) {
    char err[1024];
    wp_schedule s;
    int rc = schedule_generate(WP_STRAT_FSDP, N, M, C, NULL, &s, err, sizeof err);
    EXPECT(rc == 0, "fsdp N=%d M=%d C=%d: %s", N, M, C, err);
    if (rc) return;
    wp_layout L = layout(C + 1, C, 48 + 3 * N, prec);
    wp_run rep;
    rc = sched_validate(&s, &L, &rep, err, sizeof err);
    EXPECT(rc == 0, "fsdp N=%d M=%d C=%d: %s", N, M, C, err);
    checks++;
    if (!rc) {
        check_bytes(&s, &L, &rep);
        check_memory(&s, &L, &rep);
    }
    run_free(&rep);
    sched_free(&s);
    layout_free(&L);
}

/* C = N (the default) and other chunk counts: one chunk, and more chunks than ranks. */
static void valid_shapes(wp_precision prec) {
    for (int N = 1; N <= 8; N++)
        for (int k = 1; k <= 3; k++) one(N, k * N, N, prec);
    for (int N = 1; N <= 5; N++) {
        one(N, 2 * N, 1, prec);
        one(N, N, 2 * N + 1, prec);
    }
}

/* Index of the n-th (0-based) action on rank r that satisfies op and, when kind >= 0, names a
 * buffer of that kind and lane; -1 when none. */
static int nth(const wp_schedule *s, int r, int op, int kind, int lane, int n) {
    for (int i = 0; i < s->rank[r].n; i++) {
        const wp_action *a = &s->rank[r].a[i];
        if (a->op == op && (kind < 0 || (a->buf.kind == kind && a->buf.lane == lane)) && n-- == 0) return i;
    }
    return -1;
}

typedef enum { B_DROP_FOLD, B_DOUBLE_FOLD, B_DROP_OWN_ACC, B_DROP_SLICE_RECV, B_FOREIGN_LOAD, B_WHOLE_SEND, B_COUNT } breakage;

static const char *const expect[B_COUNT] = {
    "lacks micro-batch", "already holds micro-batch", "lacks micro-batch", "does not hold",
    "only the owner of slice", "moves one slice",
};

static int apply(wp_schedule *s, breakage b) {
    const int r = 1; /* a middle rank */
    int i;
    char err[256];
    switch (b) {
    case B_DROP_FOLD:
        if ((i = nth(s, r, WP_OP_FOLD, -1, 0, 1)) < 0) return -1;
        sched_delete(s, r, i);
        return 0;
    case B_DOUBLE_FOLD:
        if ((i = nth(s, r, WP_OP_FOLD, -1, 0, 1)) < 0) return -1;
        return sched_insert(s, r, i + 1, s->rank[r].a[i], err, sizeof err);
    case B_DROP_OWN_ACC:
        if ((i = nth(s, r, WP_OP_ACC, WP_BUF_GW, WP_LANE_OWN, 0)) < 0) return -1;
        sched_delete(s, r, i);
        return 0;
    case B_DROP_SLICE_RECV:
        if ((i = nth(s, r, WP_OP_RECV, WP_BUF_W, WP_LANE_F, 0)) < 0) return -1;
        sched_delete(s, r, i);
        return 0;
    case B_FOREIGN_LOAD:
        if ((i = nth(s, r, WP_OP_LOAD, -1, 0, 0)) < 0) return -1;
        s->rank[r].a[i].buf.slice = (uint16_t)((r + 1) % s->nranks);
        return 0;
    case B_WHOLE_SEND:
        if ((i = nth(s, r, WP_OP_SEND, WP_BUF_W, WP_LANE_F, 0)) < 0) return -1;
        s->rank[r].a[i].buf = buf_w(s->rank[r].a[i].buf.chunk, 0, WP_LANE_F);
        return 0;
    default: return -1;
    }
}

static void broken(void) {
    for (int N = 3; N <= 5; N++)
        for (int b = 0; b < B_COUNT; b++) {
            char err[1024] = "";
            wp_schedule s;
            if (schedule_generate(WP_STRAT_FSDP, N, 2 * N, N, NULL, &s, err, sizeof err)) {
                EXPECT(0, "fsdp N=%d: %s", N, err);
                return;
            }
            int applied = apply(&s, (breakage)b);
            EXPECT(applied == 0, "fsdp N=%d: breakage %d found no target", N, b);
            wp_run rep;
            int rc = applied ? 1 : sched_validate(&s, NULL, &rep, err, sizeof err);
            if (!applied) run_free(&rep);
            EXPECT(applied || (rc == 1 && strstr(err, expect[b])), "fsdp N=%d breakage %d: rc %d, '%s' lacks '%s'", N,
                   b, rc, err, expect[b]);
            checks++;
            sched_free(&s);
        }
    /* a slice named in a schedule that is not sliced */
    char err[1024] = "";
    wp_schedule s;
    if (schedule_generate(WP_STRAT_NAIVE, 2, 2, 2, NULL, &s, err, sizeof err) == 0) {
        int i = nth(&s, 0, WP_OP_LOAD, -1, 0, 0);
        if (i >= 0) s.rank[0].a[i].buf = buf_slice(s.rank[0].a[i].buf, 0, 2);
        wp_run rep;
        int rc = sched_validate(&s, NULL, &rep, err, sizeof err);
        run_free(&rep);
        EXPECT(i >= 0 && rc == 1 && strstr(err, "does not fit the schedule's slicing"), "unsliced: rc %d '%s'", rc, err);
        checks++;
        sched_free(&s);
    }
}

/* The simulator moves the same bytes as the validator counts, and with free compute and one link
 * speed a step cannot be shorter than the busiest rank's bytes over the bandwidth. */
static void simulated(void) {
    const int N = 4;
    char err[1024];
    wp_schedule s;
    if (schedule_generate(WP_STRAT_FSDP, N, 2 * N, N, NULL, &s, err, sizeof err)) {
        EXPECT(0, "fsdp: %s", err);
        return;
    }
    wp_layout L = layout(N, N, 60, WP_PREC_MIXED);
    wp_machine m = {.flops = 1e12, .mem_bw = 1e11, .link_bw = 1e8, .node_bw = 1e8};
    wp_costs c;
    costs_from_layout(&c, &L, N, &m);
    wp_sim sim;
    wp_run rep;
    int rc = simulate(&s, &L, &c, false, &sim, err, sizeof err);
    int rv = sched_validate(&s, &L, &rep, err, sizeof err);
    size_t sent = rv ? 0 : rep.rank[0].sent[WP_BUF_W] + rep.rank[0].sent[WP_BUF_GW];
    EXPECT(rc == 0 && rv == 0 && sim.rank_sent[0] == sent && sim.step_s >= (double)sim.max_sent / m.link_bw,
           "fsdp simulate: rc %d/%d, sent %zu vs %zu, step %g s < %g s", rc, rv, rc ? 0 : sim.rank_sent[0], sent,
           rc ? 0 : sim.step_s, (double)sim.max_sent / m.link_bw);
    checks++;
    if (!rc) sim_free(&sim);
    run_free(&rep);
    sched_free(&s);
    layout_free(&L);
}

int main(void) {
    valid_shapes(WP_PREC_MIXED);
    valid_shapes(WP_PREC_FP32);
    broken();
    simulated();
    printf("%d fsdp checks, %d failures\n", checks, check_failures());
    return check_failures() ? 1 : 0;
}
