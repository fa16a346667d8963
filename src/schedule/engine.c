/* The schedule engine: all ranks' lists at once, under ir.h's semantics, with checks and (optional)
 * time. This file is the engine's frame: the checks before (structure) and after (unmatched
 * transfers, work done, end state), deadlock reports, setup and the main loop. The rest, by
 * concept, shares engine_impl.h's state: the buffers a rank holds (engine_bufs.c), what each
 * action does (engine_actions.c), and how long things take (engine_links.c: links shared by
 * their transfers, latency, the event clock). */
#include "engine.h"
#include "engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "seq_split.h"

/* ---------- checks before and after ---------- */

static int check_structure(eng *e) {
    const wp_schedule *s = e->s;
    for (int c = 0; c < e->C; c++)
        if (s->owner[c] < 0 || s->owner[c] >= e->N) return eng_fail_plain(e, "owner of chunk %d is rank %d, not a rank", c, s->owner[c]);
    for (int r = 0; r < e->N; r++) {
        int reduces = 0;
        for (int i = 0; i < s->rank[r].n; i++) reduces += s->rank[r].a[i].op == WP_OP_REDUCE;
        if (reduces != 1) return eng_fail_plain(e, "rank %d has %d REDUCE actions; every rank runs exactly one per step", r, reduces);
        for (int i = 0; i < s->rank[r].n_carry; i++) {
            wp_buf b = s->rank[r].carry[i];
            char nm[48];
            if (b.kind != WP_BUF_W || b.idx != 0 || b.chunk < 0 || b.chunk >= e->C ||
                (b.nslices && (b.nslices != e->S || b.slice >= e->S)) ||
                !sched_owns(s, r, b.chunk, b.nslices ? b.slice : e->S ? -1 : 0))
                return eng_fail_plain(e, "rank %d carries %s into a step: only an owner's weights of the step (@0) can be "
                                  "carried, so that it can create them before the first step", r, buf_name(b, nm, sizeof nm));
        }
    }
    return 0;
}

static int check_unmatched(eng *e) {
    for (int i = 0; i < e->n_chans; i++) {
        chan *c = e->chans[i];
        if (c->s_n) {
            post *p = &c->sends[c->s_head];
            return eng_fail_at(e, p->rank, p->step, p->index, "never received: rank %d posts no matching RECV on channel %s",
                           c->dst, channel_name(c->ch));
        }
        if (c->r_n) {
            post *p = &c->recvs[c->r_head];
            return eng_fail_at(e, p->rank, p->step, p->index, "never sent: rank %d posts no matching SEND on channel %s",
                           c->src, channel_name(c->ch));
        }
    }
    return 0;
}

static int check_work(eng *e) {
    for (int s = 0; s < e->steps; s++) {
        const stepst *st = &e->st[s];
        for (int c = 0; c < e->C; c++) {
            for (int mb = 0; mb < e->M; mb++) {
                const char *missing = AT(f_rank, c, mb) < 0 ? "forward" : AT(b_rank, c, mb) < 0 ? "input gradient"
                                      : AT(w_rank, c, mb) < 0 ? "W-pass" : NULL;
                if (missing)
                    return eng_fail_plain(e, "step %d: the %s of chunk %d, micro-batch %d never runs", s + 1, missing, c, mb);
            }
            for (int k = 0; k < e->SL; k++)
                if (c == 0 && e->s->tied && st->tie_in[k] != e->tie_expect[k])
                    return eng_fail_plain(e, "step %d: the updated embedding reached the tied head's slice %d in %d of %d "
                                      "T.w pieces", s + 1, k, st->tie_in[k], e->tie_expect[k]);
            for (int k = 0; k < e->SL; k++)
                if (st->updated[c * e->SL + k] != 1)
                    return eng_fail_plain(e, "step %d: chunk %d is never updated (its owner, rank %d, lacks UPDATE(%d))",
                                      s + 1, c, e->S ? k : e->s->owner[c], c);
        }
    }
    return 0;
}

static int check_end_state(eng *e) {
    char nm[48];
    for (int r = 0; r < e->N; r++) {
        const wp_rank_prog *p = &e->s->rank[r];
        rstate *R = &e->r[r];
        for (int i = 0; i < p->n_carry; i++) {
            wp_buf want = absolute(p->carry[i], e->steps);
            if (!eng_find(R, want))
                return eng_fail_plain(e, "rank %d should end the step holding %s to carry into the next one, but does not",
                                  r, buf_name(absolute(p->carry[i], 1), nm, sizeof nm));
        }
        if (R->n_held != p->n_carry) {
            for (int i = 0; i < R->n_held; i++) {
                bool carried = false;
                for (int j = 0; j < p->n_carry; j++) carried |= buf_eq(R->held[i]->b, absolute(p->carry[j], e->steps));
                if (!carried)
                    return eng_fail_at(e, r, R->held[i]->born_step, R->held[i]->born,
                                   "%s is never freed (and is not carried into the next step)",
                                   eng_rel_name(R->held[i]->b, R->held[i]->born_step, nm, sizeof nm));
            }
        }
    }
    return 0;
}

static int deadlock(eng *e) {
    char msg[900];
    int n = snprintf(msg, sizeof msg, "deadlock:");
    int shown = 0, blocked = 0;
    for (int r = 0; r < e->N; r++) {
        rstate *R = &e->r[r];
        if (R->done) continue;
        blocked++;
        if (shown == 3) continue;
        int len = e->s->rank[r].n, step = R->pc / len, idx = R->pc % len;
        char at[96], nm[48], why[120];
        action_text(&e->s->rank[r].a[idx], at, sizeof at);
        eng_rel_name(R->why_buf, R->why_step, nm, sizeof nm);
        if (R->why == WHY_ARRIVE) snprintf(why, sizeof why, "%s to arrive", nm);
        else if (R->why == WHY_SEND) snprintf(why, sizeof why, "its send of %s to complete", nm);
        else if (R->why == WHY_REDUCE)
            snprintf(why, sizeof why, "the REDUCE of every rank (%d of %d arrived)", e->st[R->why_step].arrived, e->N);
        else snprintf(why, sizeof why, "its peer");
        if (n < (int)sizeof msg)
            n += snprintf(msg + n, sizeof msg - (size_t)n, "%s rank %d, action %d (%s)%s waits for %s", shown ? ";" : "",
                          r, idx, at, eng_step_note(e, step), why);
        shown++;
    }
    if (blocked > shown && n < (int)sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, "; %d more ranks wait", blocked - shown);
    return eng_fail_plain(e, "%s", msg);
}

/* ---------- setup and main loop ---------- */

static wp_result setup(eng *e) {
    const size_t cm = (size_t)e->C * e->M, NN = (size_t)e->N * e->N;
    wp_run *run = e->run;
    e->r = calloc((size_t)e->N, sizeof *e->r);
    e->ch = calloc(NN * WP_SCH_COUNT, sizeof *e->ch);
    e->ln = calloc(NN, sizeof *e->ln);
    e->busy_links = calloc(NN, sizeof *e->busy_links);
    e->nic_cap = calloc(2 * (size_t)e->N, sizeof *e->nic_cap);
    e->nic_cnt = calloc(2 * (size_t)e->N, sizeof *e->nic_cnt);
    run->rank = calloc((size_t)e->N, sizeof *run->rank);
    run->step_end = calloc((size_t)e->steps, sizeof *run->step_end);
    run->reduce_at = calloc((size_t)e->steps, sizeof *run->reduce_at);
    if (!e->r || !e->ch || !e->ln || !e->busy_links || !e->nic_cap || !e->nic_cnt || !run->rank || !run->step_end || !run->reduce_at) return WP_FAILED;
    for (int s = 0; s < e->steps; s++) {
        stepst *st = &e->st[s];
        int **arrs[6] = {&st->f_rank, &st->b_rank, &st->w_rank, &st->f_idx, &st->b_idx, &st->w_idx};
        for (int k = 0; k < 6; k++) {
            if (!(*arrs[k] = malloc(cm * sizeof(int)))) return WP_FAILED;
            for (size_t i = 0; i < cm; i++) (*arrs[k])[i] = -1;
        }
        if (!(st->acc = calloc((size_t)e->C * e->SL * e->words, sizeof *st->acc))) return WP_FAILED;
        if (!(st->updated = calloc((size_t)e->C * e->SL, sizeof *st->updated))) return WP_FAILED;
    }
    if (!(e->master = calloc((size_t)e->C * e->SL, sizeof *e->master)) || ehost_setup(e)) return WP_FAILED;
    /* tied: the pieces every step must bring, from the layout where there is one (tie_piece),
     * else as the lists name them */
    for (int k = 0; e->s->tied && e->sz && e->sz->L && k < e->SL; k++)
        for (int j = 0; j < e->SL; j++) {
            size_t off, len;
            tie_piece(e->sz->L, e->S, k, j, &off, &len);
            if (len) e->tie_expect[k]++, e->tie_expect_g[j]++;
        }
    for (int r = 0; e->s->tied && !(e->sz && e->sz->L) && r < e->N; r++)
        for (int i = 0; i < e->s->rank[r].n; i++) {
            const wp_action *a = &e->s->rank[r].a[i];
            if (a->op != WP_OP_TIN || a->buf.kind != WP_BUF_T || tie_piece_k(a->buf) >= e->SL || tie_piece_j(a->buf) >= e->SL)
                continue;
            if (a->buf.lane == WP_TIE_WEIGHT) e->tie_expect[tie_piece_k(a->buf)]++;
            else e->tie_expect_g[tie_piece_j(a->buf)]++;
        }
    for (int a = 0; a < e->N; a++)
        for (int b = 0; b < e->N; b++) {
            elink_params(e, a, b, &e->ln[a * e->N + b].bw, &e->ln[a * e->N + b].lat);
            e->ln[a * e->N + b].nic = elink_nic(e, a, b);
        }
    for (int r = 0; r < e->N; r++) {
        for (int c = 0; c < e->C && e->sz; c++) {
            size_t off, part;
            slice_range(e->sz->owner_bytes[c], r, e->S ? e->S : 1, &off, &part);
            if (e->S ? r < e->S : e->s->owner[c] == r) run->rank[r].owner_bytes += e->S ? part : e->sz->owner_bytes[c];
        }
        for (int i = 0; i < e->s->rank[r].n_carry; i++) {
            char nm[48];
            if (eng_find(&e->r[r], e->s->rank[r].carry[i]))
                return eng_fail_plain(e, "rank %d carries %s into the next step twice", r,
                                      buf_name(absolute(e->s->rank[r].carry[i], 1), nm, sizeof nm));
            if (!eng_create(e, r, e->s->rank[r].carry[i], true, 0, 0)) return WP_FAILED;
        }
    }
    return 0;
}

static void teardown(eng *e) {
    if (e->r)
        for (int r = 0; r < e->N; r++) {
            for (int i = 0; i < e->r[r].n_held; i++) {
                free(e->r[r].held[i]->mbs);
                free(e->r[r].held[i]);
            }
            free(e->r[r].held);
            bufmap_free(&e->r[r].by_name);
            bufmap_free(&e->r[r].wholes);
            bufmap_free(&e->r[r].freed);
            free(e->r[r].slots);
        }
    for (int i = 0; i < e->n_chans; i++) {
        chan *c = e->chans[i];
        for (int j = 0; j < c->q_n; j++) free(c->q[c->q_head + j]);
        if (c->busy) {
            free(c->busy->mbs);
            free(c->busy);
        }
        free(c->q);
        free(c->sends);
        free(c->recvs);
        free(c);
    }
    for (int i = 0; i < e->n_flight; i++) {
        free(e->flight[i]->mbs);
        free(e->flight[i]);
    }
    if (e->ln)
        for (int i = 0; i < e->N * e->N; i++) free(e->ln[i].x);
    for (int s = 0; s < MAX_STEPS; s++) {
        stepst *st = &e->st[s];
        free(st->f_rank), free(st->b_rank), free(st->w_rank), free(st->f_idx), free(st->b_idx), free(st->w_idx);
        free(st->acc);
        free(st->updated);
    }
    free(e->master);
    ehost_teardown(e);
    free(e->flight);
    free(e->chans);
    free(e->ch);
    free(e->ln);
    free(e->busy_links);
    free(e->nic_cap);
    free(e->nic_cnt);
    free(e->r);
}

static bool all_done(const eng *e) {
    for (int r = 0; r < e->N; r++)
        if (!e->r[r].done || e->r[r].busy_until > e->now) return false;
    return true;
}

static void loop(eng *e) {
    for (;;) {
        do {
            e->progress = false;
            for (int r = 0; r < e->N && !e->failed; r++) eng_advance_rank(e, r);
        } while (e->progress && !e->failed);
        if (e->failed) return;
        double t = elink_next_time(e);
        if (isinf(t)) {
            if (!all_done(e)) deadlock(e);
            return;
        }
        if (elink_advance_time(e, t)) {
            eng_oom(e);
            return;
        }
    }
}

wp_result engine_run(const wp_schedule *s, const wp_sizes *sz, const wp_costs *costs, int steps, bool record, wp_run *run,
             char *err, size_t errlen) {
    memset(run, 0, sizeof *run);
    eng e = {.s = s, .sz = sz, .N = s->nranks, .M = s->nmb, .C = s->nchunks, .steps = steps, .run = run,
             .err = err, .errlen = errlen};
    run->nranks = s->nranks;
    run->steps = steps;
    run->record = record;
    if (costs) e.costs = *costs;
    e.words = (e.M + 63) / 64;
    e.K = s->nseg > 1 ? s->nseg : 1;
    if (e.M % e.K || seqsplit_bounds(sz ? sz->L : NULL, e.K, e.seg_t, err, errlen)) {
        if (e.M % e.K) snprintf(err, errlen, "schedule: %d units are not whole micro-batches of %d segments", e.M, e.K);
        return 1;
    }
    e.S = s->nslices;
    e.SL = e.S ? e.S : 1;
    if (steps < 1 || steps > MAX_STEPS || e.N < 1 || e.C < 1 || e.C > WP_MAX_CHUNKS || e.M < 1 || e.S < 0 ||
        e.S > e.N) { return wp_fail(WP_FAILED, err, errlen, "schedule: bad shape (N %d, M %d, C %d, steps %d)", e.N, e.M, e.C, steps); }
    if (setup(&e)) {
        eng_oom(&e);
    } else if (!check_structure(&e)) {
        loop(&e);
        if (!e.failed) check_unmatched(&e);
        if (!e.failed) check_work(&e);
        if (!e.failed) check_end_state(&e);
    }
    teardown(&e);
    return e.failed;
}

void run_free(wp_run *run) {
    free(run->rank);
    free(run->step_end);
    free(run->reduce_at);
    free(run->comp);
    free(run->xfer);
    memset(run, 0, sizeof *run);
}

void sizes_from_layout(wp_sizes *sz, const wp_layout *L, bool split_backward) {
    memset(sz, 0, sizeof *sz);
    sz->L = L;
    wp_dtype compute = precision_act_dtype(L->cfg.precision);
    for (int c = 0; c < L->cfg.n_chunks; c++) {
        sz->acts_bytes[c] = model_acts_bytes(L, c, compute, false);
        sz->kept_bytes[c] = split_backward ? model_acts_bytes(L, c, compute, true) - sz->acts_bytes[c] : 0;
        sz->owner_bytes[c] = 16 * L->chunk_numel[c];
    }
}
