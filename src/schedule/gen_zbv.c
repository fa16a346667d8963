/* ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, section 6;
 * and "Pipeline Parallelism with Controllable Memory", 2024, its V-ZB): C = 2N chunks placed in a
 * V, chunk c on rank c for c < N and on rank 2N-1-c for c >= N, so rank r holds its "down" chunk r
 * and its "up" chunk 2N-1-r, and rank 0 holds both the embedding (chunk 0) and the loss (chunk
 * 2N-1). The backward is split into B (input gradient) and W (weight gradient) as in zb-h1/h2.
 * Each chunk is half a 1F1B stage; with F = B = W per chunk every rank's 6M computes run without
 * an idle slot from its first forward (the paper's zero bubble), and no rank ever holds more than
 * 2 min(N, M) chunk states, min(N, M) stages' worth: 1F1B's peak (rank 0's), on every rank.
 *
 * The compute order is built in unit time (F = B = W = 1 per chunk, free links: the timing
 * act_build uses too), placing each compute at the earliest time its rank is free and its input
 * has arrived, in this order:
 *   1. fill    every rank runs one down forward, rank 0 first.
 *   2. turn    from rank N-1 down to 0: rank r runs its first up forward once it can; before it,
 *              ranks 0..r run more down forwards while they end before that up input arrives and
 *              leave room for the up forwards still to come (2(r+1) states).
 *   3. even    for r = 1..N-1, while rank r has run fewer forwards than rank r-1 (or no more up
 *              forwards, with some left): ranks N-1..r each run one forward of the current leg,
 *              the legs alternating.
 *   4. rounds  2M rounds of one B then one F on every rank. B: the up leg while the down leg has
 *              caught up with it, else the down leg once its input exists (always on rank N-1).
 *              Down Bs are placed from rank N-1 to 0, then up Bs from rank 0 to N-1, the order
 *              their inputs travel. F: the down leg while the up leg has caught up, else the up
 *              leg once its input exists, else the down leg once its input exists. A rank that
 *              would wait for an input runs its oldest pending W-passes meanwhile, and one when a
 *              forward would exceed 2N states.
 *   5. drain   the remaining W-passes.
 * Step with unit costs and free links: 6M + N - 1 for M >= N (tests/schedule/test_baselines.c
 * checks it, and the bubble (N-1)/(6M+N-1): inside a rank the paper's zero, plus the fill of the
 * step barrier that zb-h2's section explains). Any M >= 1. The phases are those of the authors'
 * greedy V scheduler (sail-sg/zero-bubble-pipeline-parallelism, scheduler/zbv.py), studied and
 * written anew here, without its pass that trades idle time between ranks: with unit costs the
 * step is already the least, 6M + N - 1, for every N <= 12 and M >= N tried. */
#include <stdlib.h>

#include "act_build.h"
#include "gen_common.h"

enum { KF = 0, KB = 1, KW = 2, DOWN = 0, UP = 1 };

typedef struct {
    act_plan *p;
    int N, M;
    int *end;                   /* [kind F/B][leg][rank][mb]: unit end time, -1 not placed */
    int (*cnt)[3][2];           /* [rank][kind][leg]: computes placed */
    int *cur, *mem;             /* [rank]: when it is free; activation states it holds */
    unsigned char *pend;        /* [rank][2M]: pending W legs, a FIFO */
    int *ph, *pt;               /* [rank]: its head and tail */
    bool broken;
} vb;

static int *end_at(const vb *v, int kind, int leg, int r, int mb) {
    return &v->end[((size_t)(kind * 2 + leg) * v->N + r) * v->M + mb];
}

static int chunk_of(const vb *v, int leg, int r) { return leg == DOWN ? r : 2 * v->N - 1 - r; }

/* The compute whose output (kind, leg) on rank r needs for micro-batch mb: *q its rank; false
 * when it has none (the first forward). */
static bool input_of(const vb *v, int kind, int leg, int r, int *q, int *qkind, int *qleg) {
    const int N = v->N;
    *qkind = kind;
    *qleg = leg;
    if (kind == KF && leg == DOWN) {
        *q = r - 1;
        return r > 0;
    }
    if (kind == KF) { /* up: from rank r+1, or the turn at rank N-1 */
        *q = r < N - 1 ? r + 1 : r;
        if (r == N - 1) *qleg = DOWN;
        return true;
    }
    if (leg == UP) { /* B up: from rank r-1, or rank 0's own loss forward */
        *q = r > 0 ? r - 1 : r;
        if (r == 0) *qkind = KF;
        return true;
    }
    *q = r < N - 1 ? r + 1 : r; /* B down: from rank r+1, or the turn at rank N-1 */
    if (r == N - 1) *qleg = UP;
    return true;
}

/* When the input of the next (kind, leg) on rank r ends: -1 when it has none or is not placed. */
static int input_end(const vb *v, int kind, int leg, int r) {
    int q, qk, ql, mb = v->cnt[r][kind][leg];
    if (mb >= v->M || !input_of(v, kind, leg, r, &q, &qk, &ql)) return -1;
    return *end_at(v, qk, ql, q, mb);
}

static void put(vb *v, int kind, int leg, int r) {
    const int mb = v->cnt[r][kind][leg];
    if (mb >= v->M) {
        v->broken = true;
        return;
    }
    int t = v->cur[r], in = kind == KW ? *end_at(v, KB, leg, r, mb) : input_end(v, kind, leg, r);
    int q, qk, ql;
    if (kind != KW && input_of(v, kind, leg, r, &q, &qk, &ql) && in < 0) v->broken = true; /* input not placed */
    if (kind == KW && in < 0) v->broken = true;
    if (in > t) t = in;
    if (kind != KW) *end_at(v, kind, leg, r, mb) = t + 1;
    v->cur[r] = t + 1;
    v->cnt[r][kind][leg]++;
    v->mem[r] += kind == KF ? 1 : kind == KW ? -1 : 0;
    if (kind == KB) v->pend[(size_t)r * 2 * v->M + v->pt[r]++] = (unsigned char)leg;
    act_add(v->p, r, kind == KF ? WP_OP_F : kind == KB ? WP_OP_B : WP_OP_W, chunk_of(v, leg, r), mb);
}

static bool pending_w(const vb *v, int r) { return v->ph[r] < v->pt[r]; }

static void put_w(vb *v, int r) {
    if (!pending_w(v, r)) {
        v->broken = true;
        return;
    }
    put(v, KW, v->pend[(size_t)r * 2 * v->M + v->ph[r]++], r);
}

/* Run W-passes while the next (kind, leg)'s input from another rank is still on its way, then it. */
static void put_filled(vb *v, int kind, int leg, int r) {
    int q, qk, ql;
    bool remote = input_of(v, kind, leg, r, &q, &qk, &ql) && q != r;
    while (remote && pending_w(v, r) && input_end(v, kind, leg, r) >= v->cur[r] + 1) put_w(v, r);
    put(v, kind, leg, r);
}

static bool placed(const vb *v, int kind, int leg, int r, int mb) {
    return mb < v->M && *end_at(v, kind, leg, r, mb) >= 0;
}

/* Phases 1-3 (the header): every rank's forwards before its first B. */
static void warm_up(vb *v) {
    const int N = v->N, M = v->M;
    for (int r = 0; r < N; r++) put(v, KF, DOWN, r);
    for (int r = N - 1; r >= 0; r--) {
        if (r < N - 1) {
            const int arrives = *end_at(v, KF, UP, r + 1, 0);
            while (v->mem[r] + 2 * (r + 1) <= 2 * N && v->cur[r] + 1 <= arrives && v->cnt[r][KF][DOWN] < M)
                for (int j = 0; j <= r; j++) put(v, KF, DOWN, j);
        }
        put(v, KF, UP, r);
    }
    int leg = DOWN;
    for (int r = 1; r < N; r++) {
        int(*c)[3][2] = v->cnt;
        while (c[r][KF][DOWN] + c[r][KF][UP] < c[r - 1][KF][DOWN] + c[r - 1][KF][UP] ||
               (c[r][KF][UP] <= c[r - 1][KF][UP] && c[r - 1][KF][UP] < M)) {
            for (int j = N - 1; j >= r; j--)
                if (c[j][KF][leg] < M) put(v, KF, leg, j);
            leg = 1 - leg;
            if (v->broken) return;
        }
    }
}

/* The leg of rank r's next B (phase 4): decided for every rank before any is placed. */
static int b_leg(const vb *v, int r) {
    const int bu = v->cnt[r][KB][UP], bd = v->cnt[r][KB][DOWN];
    if (bd < bu && (r == v->N - 1 || placed(v, KB, DOWN, r + 1, bd) || bu >= v->M)) return DOWN;
    return UP;
}

/* One round of phase 4: a B, then an F, on every rank. */
static void round_bf(vb *v) {
    const int N = v->N, M = v->M;
    int(*c)[3][2] = v->cnt;
    unsigned char leg_of[WP_MAX_CHUNKS];
    for (int r = 0; r < N; r++) leg_of[r] = (unsigned char)b_leg(v, r);
    for (int pass = 0; pass < 2; pass++) /* down Bs from rank N-1 to 0, then up Bs from 0 to N-1 */
        for (int k = 0; k < N; k++) {
            const int r = pass == 0 ? N - 1 - k : k, leg = leg_of[r];
            if (leg != (pass == 0 ? DOWN : UP) || c[r][KB][leg] >= M) continue;
            put_filled(v, KB, leg, r);
        }
    for (int r = 0; r < N; r++) {
        const int fd = c[r][KF][DOWN], fu = c[r][KF][UP];
        if (fu >= M) continue;
        int leg;
        if (fu >= fd) leg = DOWN;
        else if (r == N - 1 || placed(v, KF, UP, r + 1, fu)) leg = UP;
        else if (fd < M && (r == 0 || placed(v, KF, DOWN, r - 1, fd))) leg = DOWN;
        else continue;
        while (v->mem[r] + 1 > 2 * N && !v->broken) put_w(v, r);
        put_filled(v, KF, leg, r);
    }
}

static int build_order(vb *v) {
    warm_up(v);
    for (int i = 0; i < 2 * v->M && !v->broken; i++) round_bf(v);
    for (int r = 0; r < v->N && !v->broken; r++)
        while (pending_w(v, r) && !v->broken) put_w(v, r);
    for (int r = 0; r < v->N; r++)
        for (int k = 0; k < 3; k++)
            if (v->cnt[r][k][DOWN] != v->M || v->cnt[r][k][UP] != v->M) v->broken = true;
    return v->broken;
}

wp_result gen_zbv(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)opt;
    const int N = s->nranks, M = s->nmb;
    act_plan p;
    act_plan_init(&p, s);
    s->split = true;
    for (int c = 0; c < s->nchunks; c++) s->owner[c] = c < N ? c : 2 * N - 1 - c;
    vb v = {.p = &p, .N = N, .M = M};
    v.end = malloc((size_t)4 * N * M * sizeof *v.end);
    v.cnt = calloc((size_t)N, sizeof *v.cnt);
    v.cur = calloc((size_t)N, sizeof *v.cur);
    v.mem = calloc((size_t)N, sizeof *v.mem);
    v.ph = calloc((size_t)N, sizeof *v.ph);
    v.pt = calloc((size_t)N, sizeof *v.pt);
    v.pend = malloc((size_t)N * 2 * M);
    const char *why = "schedule: out of memory";
    if (v.end && v.cnt && v.cur && v.mem && v.ph && v.pt && v.pend) {
        for (size_t i = 0; i < (size_t)4 * N * M; i++) v.end[i] = -1;
        why = build_order(&v) || p.oom ? "generator: zb-v did not place every compute (a bug)" : NULL;
    }
    free(v.end);
    free(v.cnt);
    free(v.cur);
    free(v.mem);
    free(v.ph);
    free(v.pt);
    free(v.pend);
    if (why) {
        p.oom = true; /* act_build then only frees the plan */
        act_build(&p, err, errlen);
        return wp_fail(WP_FAILED, err, errlen, "%s (N=%d M=%d)", why, N, M);
    }
    return act_build(&p, err, errlen);
}

/* C = 2N exactly: the shared check lets any multiple of N through (WP_CHUNKS_V_PER_RANK); the V
 * has two legs. Any M. */
wp_result gen_check_zbv(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nmb;
    (void)opt;
    if (nchunks == 2 * nranks) return WP_OK;
    return gen_bad(err, errlen, "--num-chunks: zb-v needs two chunks per rank (%d), not %d", 2 * nranks, nchunks);
}
