/* WZB1 against the WeiPipe paper's description (section on figure 3), turn by turn:
 *   - rank 0 of N = 4 runs exactly the paper's sequence: the forward of micro-batch 0 alone, then
 *     "one F + one B" and "one F + one W" alternately while micro-batch 4's forward runs
 *     (t = 4..7), then the remaining two B-passes and two W-passes alternately (t = 8..11), then
 *     micro-batch 8's forward with micro-batch 4's backward (t = 12); written out by hand below;
 *   - every rank runs rank 0's turns shifted by its index (the streams move one hop per turn), for
 *     N = 1..8 and M = N..3N: at most one F and one B-or-W per turn, W(c) the turn after B(c);
 *   - activation states peak at about 1.5 micro-batches (the paper's 1.5·M·b·s·h), against
 *     Interleave's one micro-batch plus one;
 *   - memory accounting: a state costs model_acts_bytes after F and adds what B keeps for the
 *     W-pass only from B to W (what the runtime allocates), checked on a one-rank schedule
 *     whose peak is worked out by hand;
 *   - at the paper's headline shape the largest rank's peak is within 2x Interleave's. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "model.h"
#include "schedule.h"
#include "validate.h"

static wp_schedule gen(wp_strategy st, int N, int M) {
    wp_schedule s;
    char err[512];
    CHECK(schedule_generate(st, N, M, N, NULL, &s, err, sizeof err) == 0, "%s N=%d M=%d: %s", strategy_name(st), N, M,
          err);
    return s;
}

/* Rank r's computes as "t:OP(c,mb)" joined by spaces, turns relative to `shift` and micro-batches
 * less `mb_shift`. */
static void computes(const wp_schedule *s, int r, int shift, int mb_shift, char *out, size_t len) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < s->rank[r].n; i++) {
        const wp_action *a = &s->rank[r].a[i];
        if (!op_is_compute(a->op)) continue;
        int k = snprintf(out + n, len - n, "%s%d:%s(%d,%d)", n ? " " : "", a->turn - shift, op_name(a->op), a->chunk,
                         a->mb - mb_shift);
        CHECK(k > 0 && (size_t)k < len - n, "computes: buffer too small");
        n += (size_t)k;
    }
}

static void paper_turns(void) {
    /* The paper, N = 4, worker 0 (micro-batches 0, 4, 8 with M = 12). */
    static const char *const want =
        "0:F(0,0) 1:F(1,0) 2:F(2,0) 3:F(3,0) "
        "4:F(0,4) 4:B(3,0) 5:F(1,4) 5:W(3,0) 6:F(2,4) 6:B(2,0) 7:F(3,4) 7:W(2,0) "
        "8:B(1,0) 9:W(1,0) 10:B(0,0) 11:W(0,0) "
        "12:F(0,8) 12:B(3,4) 13:F(1,8) 13:W(3,4) 14:F(2,8) 14:B(2,4) 15:F(3,8) 15:W(2,4) "
        "16:B(1,4) 17:W(1,4) 18:B(0,4) 19:W(0,4) "
        "20:B(3,8) 21:W(3,8) 22:B(2,8) 23:W(2,8) 24:B(1,8) 25:W(1,8) 26:B(0,8) 27:W(0,8)";
    wp_schedule s = gen(WP_STRAT_WZB1, 4, 12);
    char got[4096];
    computes(&s, 0, 0, 0, got, sizeof got);
    EXPECT(strcmp(got, want) == 0, "wzb1 N=4 M=12 rank 0:\n got  %s\n want %s", got, want);
    sched_free(&s);
}

static void shifted_ranks(void) {
    for (int N = 1; N <= 8; N++)
        for (int k = 1; k <= 3; k++) {
            wp_schedule s = gen(WP_STRAT_WZB1, N, k * N);
            char r0[8192], rw[8192];
            computes(&s, 0, 0, 0, r0, sizeof r0);
            for (int w = 1; w < N; w++) {
                computes(&s, w, w, w, rw, sizeof rw);
                EXPECT(strcmp(r0, rw) == 0, "wzb1 N=%d M=%d: rank %d is not rank 0 shifted by %d turns", N, k * N, w, w);
            }
            /* per turn at most one F and one B-or-W; W(c, mb) exactly one turn after B(c, mb) */
            int nf[256] = {0}, nbw[256] = {0}, bturn[8][24];
            memset(bturn, -1, sizeof bturn);
            for (int i = 0; i < s.rank[0].n; i++) {
                const wp_action *a = &s.rank[0].a[i];
                if (!op_is_compute(a->op)) continue;
                CHECK(a->turn >= 0 && a->turn < 256 && a->mb < 24, "turn %d mb %d out of the test's range", a->turn, a->mb);
                if (a->op == WP_OP_F) nf[a->turn]++;
                else nbw[a->turn]++;
                if (a->op == WP_OP_B) bturn[a->chunk][a->mb] = a->turn;
                if (a->op == WP_OP_W)
                    EXPECT(bturn[a->chunk][a->mb] == a->turn - 1, "wzb1 N=%d M=%d: W(%d,%d) in turn %d, B in turn %d", N,
                           k * N, a->chunk, a->mb, a->turn, bturn[a->chunk][a->mb]);
                EXPECT(a->op != WP_OP_BW, "wzb1 fuses a backward");
            }
            for (int t = 0; t < 256; t++)
                EXPECT(nf[t] <= 1 && nbw[t] <= 1, "wzb1 N=%d M=%d turn %d: %d F and %d B/W", N, k * N, t, nf[t], nbw[t]);
            sched_free(&s);
        }
}

static int max_peak_acts(const wp_schedule *s) {
    wp_run rep;
    char err[512];
    int rc = sched_validate(s, NULL, &rep, err, sizeof err);
    EXPECT(rc == 0, "%s N=%d M=%d: %s", strategy_name(s->strategy), s->nranks, s->nmb, err);
    int m = 0;
    for (int r = 0; r < s->nranks; r++)
        if (rep.rank[r].peak_acts > m) m = rep.rank[r].peak_acts;
    run_free(&rep);
    return m;
}

static void state_counts(void) {
    for (int N = 2; N <= 8; N++) {
        wp_schedule z = gen(WP_STRAT_WZB1, N, 2 * N), in = gen(WP_STRAT_INTERLEAVE, N, 2 * N);
        int pz = max_peak_acts(&z), pi = max_peak_acts(&in);
        /* 1.5 micro-batches, plus the state whose W-pass follows the turn's F */
        EXPECT(2 * pz <= 3 * N + 2 && pz > N, "wzb1 N=%d peak %d activation states, want (N, 1.5N+1]", N, pz);
        EXPECT(pi == N + 1, "interleave N=%d peak %d activation states, want N+1", N, pi);
        printf("N=%d peak activation states: wzb1 %d, interleave %d\n", N, pz, pi);
        sched_free(&z);
        sched_free(&in);
    }
}

static wp_layout layout(int layers, int chunks, int h, int ffn, int heads, int seq, int vocab, bool recompute) {
    wp_model_cfg c = {.n_layers = layers, .h = h, .ffn = ffn, .n_heads = heads, .n_kv_heads = heads,
                      .head_dim = h / heads, .seq = seq, .micro_batch = 1, .vocab = vocab, .rope_theta = 1e4, .norm_eps = 1e-5,
                      .init_std = 0.02, .recompute = recompute, .precision = WP_PREC_MIXED};
    model_cfg_even_chunks(&c, chunks);
    wp_layout L;
    char err[256];
    CHECK(layout_build(&c, &L, err, sizeof err) == 0, "layout: %s", err);
    return L;
}

/* N = 1, M = 2: F(0,0) | F(0,1) B(0,0) | W(0,0) | B(0,1) | W(0,1). Two states after the second F,
 * one of them with what its B keeps: peak 2 fwd + kept, not 2 (fwd + kept). */
static void kept_from_b_to_w(void) {
    for (int rec = 0; rec < 2; rec++) {
        wp_layout L = layout(2, 1, 64, 172, 4, 32, 256, rec);
        wp_schedule s = gen(WP_STRAT_WZB1, 1, 2);
        wp_run rep;
        char err[512];
        EXPECT(sched_validate(&s, &L, &rep, err, sizeof err) == 0, "wzb1 N=1 M=2: %s", err);
        wp_dtype dt = precision_act_dtype(L.cfg.precision);
        size_t fwd = model_acts_bytes(&L, 0, dt, false), kept = model_acts_bytes(&L, 0, dt, true) - fwd;
        EXPECT(kept > 0 && fwd > 0, "recompute %d: fwd %zu kept %zu", rec, fwd, kept);
        EXPECT(rep.rank[0].peak_acts_bytes == 2 * fwd + kept, "recompute %d: peak activation bytes %zu, want 2*%zu + %zu",
               rec, rep.rank[0].peak_acts_bytes, fwd, kept);
        run_free(&rep);
        sched_free(&s);
        layout_free(&L);
    }
}

/* configs/paper-h4096-s16k.ini: 32 layers, h 4096, ffn 11008, 32 heads, s 16384, b 1, V 32000,
 * recompute, mixed precision; N = 16, M = 32. */
static double headline_peak(wp_strategy st, const wp_layout *L) {
    wp_schedule s = gen(st, 16, 32);
    wp_run rep;
    char err[512];
    EXPECT(sched_validate(&s, L, &rep, err, sizeof err) == 0, "%s headline: %s", strategy_name(st), err);
    double m = 0;
    for (int r = 0; r < 16; r++) {
        double b = (double)rep.rank[r].peak_bytes + (double)rep.rank[r].owner_bytes;
        if (b > m) m = b;
    }
    run_free(&rep);
    sched_free(&s);
    return m;
}

static void headline_memory(void) {
    wp_layout L = layout(32, 16, 4096, 11008, 32, 16384, 32000, true);
    double z = headline_peak(WP_STRAT_WZB1, &L), in = headline_peak(WP_STRAT_INTERLEAVE, &L);
    check_say(z <= 2 * in, "headline peak per rank: wzb1 %.2f GB, interleave %.2f GB (%.2fx, bound 2x)", z / 1e9,
              in / 1e9, z / in);
    layout_free(&L);
}

int main(void) {
    paper_turns();
    shifted_ranks();
    state_counts();
    kept_from_b_to_w();
    headline_memory();
    return check_result("schedule/wzb1");
}
