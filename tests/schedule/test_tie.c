/* Tied word embeddings in the schedule (schedule_tie, src/schedule/tie.c):
 *   - every strategy on N = 1..4 ranks, M = N and 2N (fsdp also over 1 and 2 chunks, sliced or
 *     not): the tied lists validate over two steps, and the T bytes the validator moves in a step
 *     equal, element by element of the V*h tensor, 4 bytes each way for every element whose head
 *     owner (owner of the last chunk, or of the slice of it holding the element) is not its
 *     embedding owner — counted here from slice_range alone, not from tie_piece;
 *   - the pieces of every slicing partition the tensor (each element in exactly one piece);
 *   - the validator refuses a T.g sent after REDUCE (a wait in a circle) and a lost TIN of
 *     either lane; schedule_tie on an untied layout changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "schedule.h"
#include "validate.h"

static int checks;

static wp_layout layout(int chunks, bool tied) {
    wp_model_cfg c = {.n_layers = 8, .h = 51, .ffn = 137, .n_heads = 3, .n_kv_heads = 3, .head_dim = 17, .seq = 16,
                      .micro_batch = 2, .vocab = 101, .rope_theta = 1e4, .norm_eps = 1e-5, .init_std = 0.02,
                      .precision = WP_PREC_MIXED, .tied = tied};
    model_cfg_even_chunks(&c, chunks);
    wp_layout L;
    char err[256];
    if (layout_build(&c, &L, err, sizeof err)) EXPECT(0, "layout: %s", err);
    return L;
}

/* Which slice of n (0: whole, owner given) holds element x of a chunk of E elements. */
static int holder(size_t E, size_t x, int n) {
    for (int k = 0; k < n; k++) {
        size_t off, len;
        slice_range(E, k, n, &off, &len);
        if (x >= off && x < off + len) return k;
    }
    return 0;
}

static int gen_tied(wp_strategy st, int N, int M, int C, const wp_layout *L, wp_schedule *s) {
    char err[1024];
    int rc = schedule_generate(st, N, M, C, NULL, s, err, sizeof err);
    if (rc == 2) return 2; /* a shape this strategy does not take */
    EXPECT(rc == 0, "%s N=%d M=%d C=%d: %s", strategy_name(st), N, M, C, err);
    if (rc) return 1;
    rc = schedule_tie(s, L, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d C=%d: tie: %s", strategy_name(st), N, M, C, err);
    if (rc) sched_free(s);
    return rc;
}

static void one(wp_strategy st, int N, int M, int C) {
    wp_layout L = layout(C, true);
    wp_schedule s;
    if (gen_tied(st, N, M, C, &L, &s)) {
        layout_free(&L);
        return;
    }
    wp_sizes sz;
    sizes_from_layout(&sz, &L, s.split);
    wp_run run;
    char err[1024];
    int rc = engine_run(&s, &sz, NULL, 2, true, &run, err, sizeof err);
    EXPECT(rc == 0, "tied %s N=%d M=%d C=%d: %s", strategy_name(st), N, M, C, err);
    checks++;
    if (rc == 0) {
        double got = 0, want = 0;
        for (int i = 0; i < run.n_xfer; i++)
            if (run.xfer[i].step == 1 && run.xfer[i].buf.kind == WP_BUF_T) got += (double)run.xfer[i].bytes;
        const wp_param *e = layout_find(&L, "model.embed_tokens.weight"), *h = layout_find(&L, "lm_head.weight");
        const int last = C - 1, n = s.nslices;
        for (size_t x = 0; x < (size_t)e->rows * e->cols; x++) {
            int ho = n ? holder(L.chunk_numel[last], h->offset + x, n) : s.owner[last];
            int eo = n ? holder(L.chunk_numel[0], e->offset + x, n) : s.owner[0];
            if (ho != eo) want += 2 * 4;
        }
        EXPECT(got == want, "tied %s N=%d M=%d C=%d: %.0f T bytes a step, want %.0f", strategy_name(st), N, M, C, got,
               want);
        checks++;
    }
    run_free(&run);
    sched_free(&s);
    layout_free(&L);
}

static void partition(int C, int n) {
    wp_layout L = layout(C, true);
    size_t eo, ho, numel;
    CHECK(tie_offsets(&L, &eo, &ho, &numel), "tie_offsets on a tied layout");
    unsigned char *seen = calloc(numel, 1);
    for (int k = 0; k < (n ? n : 1); k++)
        for (int j = 0; j < (n ? n : 1); j++) {
            size_t off, len;
            tie_piece(&L, n, k, j, &off, &len);
            for (size_t x = off; x < off + len; x++) seen[x]++;
        }
    size_t bad = 0;
    for (size_t x = 0; x < numel; x++) bad += seen[x] != 1;
    EXPECT(bad == 0, "C=%d n=%d: %zu of %zu elements not in exactly one piece", C, n, bad, numel);
    checks++;
    free(seen);
    layout_free(&L);
}

/* Index of the first action of rank r with op and T lane (-1: none). */
static int find_t(const wp_schedule *s, int r, int op, int lane) {
    for (int i = 0; i < s->rank[r].n; i++)
        if (s->rank[r].a[i].op == op && s->rank[r].a[i].buf.kind == WP_BUF_T && s->rank[r].a[i].buf.lane == lane) return i;
    return -1;
}

static int find_op(const wp_schedule *s, int r, int op, int chunk) {
    for (int i = 0; i < s->rank[r].n; i++)
        if (s->rank[r].a[i].op == op && (chunk < 0 || s->rank[r].a[i].chunk == chunk)) return i;
    return -1;
}

static void refused(const char *what, wp_schedule *s, const wp_layout *L, const char *want) {
    wp_sizes sz;
    sizes_from_layout(&sz, L, s->split);
    char err[1024] = "";
    wp_run run;
    int rc = engine_run(s, &sz, NULL, 2, false, &run, err, sizeof err);
    EXPECT(rc != 0 && strstr(err, want), "%s: want a refusal naming '%s', got rc %d: %s", what, want, rc, err);
    checks++;
    run_free(&run); /* engine_run leaves what it allocated on failure too */
}

static void mutations(void) {
    const int N = 3, M = 3, last = N - 1;
    wp_layout L = layout(N, true);
    wp_schedule s;
    char err[256];
    if (gen_tied(WP_STRAT_NAIVE, N, M, N, &L, &s)) return;
    int hr = s.owner[last];
    /* the head's owner never takes T.w in (its FREE stays): the head keeps its old weights */
    int tin = find_t(&s, hr, WP_OP_TIN, WP_TIE_WEIGHT);
    CHECK(tin >= 0, "naive: no TIN T.w on rank %d", hr);
    sched_delete(&s, hr, tin);
    refused("a lost TIN T.w", &s, &L, "the updated embedding reached the tied head");
    sched_free(&s);
    wp_action a;
    /* the head's gradient leaves after REDUCE */
    if (gen_tied(WP_STRAT_NAIVE, N, M, N, &L, &s)) return;
    int tout = find_t(&s, hr, WP_OP_TOUT, WP_TIE_GRAD), red = find_op(&s, hr, WP_OP_REDUCE, -1);
    CHECK(tout >= 0 && red > tout, "naive: TOUT T.g (%d) before REDUCE (%d)", tout, red);
    a = s.rank[hr].a[red]; /* REDUCE moved ahead of TOUT, SEND and FREE of T.g */
    sched_delete(&s, hr, red);
    CHECK(sched_insert(&s, hr, tout, a, err, sizeof err) == 0, "insert: %s", err);
    refused("T.g after REDUCE", &s, &L, "deadlock"); /* the embedding's owner waits for it before its REDUCE */
    sched_free(&s);
    /* the embedding's owner never takes the gradient in */
    if (gen_tied(WP_STRAT_NAIVE, N, M, N, &L, &s)) return;
    int er = s.owner[0];
    tin = find_t(&s, er, WP_OP_TIN, WP_TIE_GRAD);
    CHECK(tin >= 0, "naive: no TIN T.g on rank %d", er);
    sched_delete(&s, er, tin);
    refused("a lost TIN T.g", &s, &L, "before the head's gradient reached the tied embedding");
    sched_free(&s);
    layout_free(&L);
    /* untied: nothing added */
    wp_layout U = layout(N, false);
    wp_schedule a1, a2;
    CHECK(schedule_generate(WP_STRAT_NAIVE, N, M, N, NULL, &a1, err, sizeof err) == 0, "%s", err);
    CHECK(schedule_generate(WP_STRAT_NAIVE, N, M, N, NULL, &a2, err, sizeof err) == 0, "%s", err);
    CHECK(schedule_tie(&a2, &U, err, sizeof err) == 0 && !a2.tied, "untied: %s", err);
    for (int r = 0; r < N; r++)
        EXPECT(a1.rank[r].n == a2.rank[r].n && !memcmp(a1.rank[r].a, a2.rank[r].a, (size_t)a1.rank[r].n * sizeof *a1.rank[r].a),
               "untied: rank %d's list changed", r);
    checks++;
    sched_free(&a1);
    sched_free(&a2);
    layout_free(&U);
}

int main(void) {
    for (int st = 0; st < WP_STRAT_COUNT; st++)
        for (int N = 1; N <= 4; N++)
            for (int M = N; M <= 2 * N; M += N) {
                int C = strategy_default_chunks((wp_strategy)st, N, 0);
                one((wp_strategy)st, N, M, C);
                if (st == WP_STRAT_FSDP) {
                    one(WP_STRAT_FSDP, N, M, 1);
                    one(WP_STRAT_FSDP, N, M, 2);
                }
            }
    for (int C = 1; C <= 4; C++)
        for (int n = 0; n <= 5; n++) partition(C, n);
    mutations();
    printf("tie: %d checks passed\n", checks);
    return check_failures() ? 1 : 0;
}
