/* 1F1B (activation passing, DAPPLE): rank r holds and owns chunk r, its weights never move.
 * Rank r runs min(N-r-1 + e, M) warm-up forwards (e: extra before a slow hop, schedule.h), then alternates one forward and one fused
 * backward, then drains the remaining backwards. A[r][mb] goes r -> r+1 after F, GA[r-1][mb]
 * goes r -> r-1 after BW; each rank posts the receive of its next input one op ahead, and frees
 * a sent buffer after its next compute (so it never waits for its own send). With uniform
 * stages the bubble is (N-1)/(M+N-1) of the step. */
#include "gen_common.h"

typedef struct {
    wp_schedule *s;
    int r, turn, rc;
    char *err;
    size_t errlen;
    wp_buf pending[2]; /* sent buffers freed after the next compute */
    int n_pending;
} prog;

static void push(prog *p, wp_action a) {
    a.turn = p->turn;
    if (!p->rc) p->rc = sched_push(p->s, p->r, a, p->err, p->errlen);
}

static void free_pending(prog *p) {
    for (int i = 0; i < p->n_pending; i++) push(p, act_buf(WP_OP_FREE, p->pending[i], p->turn));
    p->n_pending = 0;
}

static void send_after_compute(prog *p, wp_buf b, int peer, int ch) {
    push(p, act_xfer(WP_OP_SEND, b, peer, ch, p->turn));
    p->pending[p->n_pending++] = b;
}

static wp_result gen_rank(wp_schedule *s, const wp_gen_opts *opt, int r, char *err, size_t errlen) {
    const int N = s->nranks, M = s->nmb, last = N - 1;
    const int want = N - r - 1 + gen_warmup_extra(opt, s->strategy, N, r), warm = want < M ? want : M;
    prog p = {.s = s, .r = r, .err = err, .errlen = errlen};
    int nf = 0, nb = 0; /* forwards and backwards emitted */
    push(&p, act_buf(WP_OP_LOAD, buf_w(r, 0, WP_LANE_F), 0));
    if (r > 0) push(&p, act_xfer(WP_OP_RECV, buf_a(r - 1, 0), r - 1, WP_SCH_ACT, 0));
    for (int k = 0; k < 2 * M; k++) {
        /* warm-up forwards, then F B F B ..., then the remaining backwards */
        bool forward = k < warm || (k < 2 * M - warm && (k - warm) % 2 == 0);
        if (k == warm && r < last) /* the first backward's input, posted one op ahead */
            push(&p, act_xfer(WP_OP_RECV, buf_ga(r, 0), r + 1, WP_SCH_ACTGRAD, k));
        p.turn = k;
        if (forward) {
            int mb = nf++;
            push(&p, act_compute(WP_OP_F, r, mb, WP_LANE_F, false, k));
            if (r > 0) push(&p, act_buf(WP_OP_FREE, buf_a(r - 1, mb), k));
            if (r > 0 && nf < M) push(&p, act_xfer(WP_OP_RECV, buf_a(r - 1, nf), r - 1, WP_SCH_ACT, k));
            free_pending(&p); /* after the RECV: a neighbour's FREE may wait for it (extra warm-up) */
            if (r < last) send_after_compute(&p, buf_a(r, mb), r + 1, WP_SCH_ACT);
        } else {
            int mb = nb++;
            push(&p, act_compute(WP_OP_BW, r, mb, WP_LANE_F, true, k));
            if (r < last) push(&p, act_buf(WP_OP_FREE, buf_ga(r, mb), k));
            if (r < last && nb < M) push(&p, act_xfer(WP_OP_RECV, buf_ga(r, nb), r + 1, WP_SCH_ACTGRAD, k));
            free_pending(&p);
            if (r > 0) send_after_compute(&p, buf_ga(r - 1, mb), r - 1, WP_SCH_ACTGRAD);
        }
    }
    p.turn = 2 * M;
    free_pending(&p);
    push(&p, act_buf(WP_OP_FREE, buf_w(r, 0, WP_LANE_F), p.turn));
    push(&p, act_chunk(WP_OP_REDUCE, 0, p.turn));
    push(&p, act_chunk(WP_OP_UPDATE, r, p.turn));
    return p.rc;
}

wp_result gen_1f1b(wp_schedule *s, const wp_gen_opts *opt, char *err, size_t errlen) {
    for (int c = 0; c < s->nchunks; c++) s->owner[c] = c;
    s->split = false;
    for (int r = 0; r < s->nranks; r++) {
        WP_TRY(gen_rank(s, opt, r, err, errlen));
    }
    return 0;
}

/* 1f1b receives one item ahead and frees a sent buffer after its next compute: a rank more than 4
 * warm-up forwards ahead of the next one waits for it in a circle (found by generating every N in
 * {4,8,16}, ranks per node, M in {N,2N,4N}: 3 always runs, 4 never). */
wp_result gen_check_1f1b(int nranks, int nmb, int nchunks, const wp_gen_opts *opt, char *err, size_t errlen) {
    (void)nmb, (void)nchunks;
    if (gen_warmup_extra(opt, WP_STRAT_1F1B, nranks, 0) > 0 && opt->warmup_extra > WP_1F1B_MAX_WARMUP_EXTRA)
        return gen_bad(err, errlen, "--warmup-extra: 1f1b takes at most %d extra warm-up forwards per slow hop, not %d",
                       WP_1F1B_MAX_WARMUP_EXTRA, opt->warmup_extra);
    return 0;
}
