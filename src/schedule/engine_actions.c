/* The schedule engine's actions (engine_impl.h): every op's rules under ir.h's semantics:
 * transfers posted and matched in order per (src, dst, channel), computes that occupy the
 * device, the gradient and optimizer pieces, and a rank's program counter. */
#include <stdlib.h>
#include <string.h>

#include "engine_impl.h"
#include "model.h"
#include "seq_split.h"

/* ---------- transfers ---------- */

chan *engine_get_chan(eng *e, int src, int dst, int ch) {
    chan **slot = &e->ch[((size_t)src * e->N + dst) * WP_SCH_COUNT + ch];
    if (!*slot) {
        if (engine_grow((void **)&e->chans, &e->cap_chans, e->n_chans + 1, sizeof *e->chans)) return NULL;
        if (!(*slot = calloc(1, sizeof **slot))) return NULL;
        (*slot)->src = src;
        (*slot)->dst = dst;
        (*slot)->ch = ch;
        e->chans[e->n_chans++] = *slot;
    }
    return *slot;
}




static int match(eng *e, chan *c) {
    while (c->s_n > 0 && c->r_n > 0) {
        post *sp = &c->sends[c->s_head], *rp = &c->recvs[c->r_head];
        if (!buf_eq(sp->b, rp->b) || sp->step != rp->step) {
            char sn[48], rn[48], at[96];
            action_text(&e->s->rank[sp->rank].a[sp->index], at, sizeof at);
            eng_rel_name(sp->b, sp->step, sn, sizeof sn);
            eng_rel_name(rp->b, rp->step, rn, sizeof rn);
            return eng_fail_at(e, rp->rank, rp->step, rp->index,
                           "in FIFO order on channel %s from rank %d this receive pairs with rank %d, action %d (%s)%s, "
                           "which sends %s, not %s", channel_name(c->ch), c->src, sp->rank, sp->index, at,
                           eng_step_note(e, sp->step), sn, rn);
        }
        xfer *x = calloc(1, sizeof *x);
        if (!x || engine_grow((void **)&c->q, &c->q_cap, c->q_head + c->q_n + 1, sizeof *c->q)) {
            free(x);
            return eng_oom(e);
        }
        *x = (xfer){.src = c->src, .dst = c->dst, .ch = c->ch, .step = sp->step, .s_index = sp->index,
                    .r_index = rp->index, .b = sp->b, .bytes = sp->in->bytes, .from = sp->in, .to = rp->in,
                    .gstep = -1, .state = X_WAIT};
        c->q[c->q_head + c->q_n++] = x;
        c->s_head++, c->s_n--;
        c->r_head++, c->r_n--;
    }
    return elink_start(e, c) ? eng_oom(e) : DONE;
}

static int post_xfer(eng *e, bool is_send, int r, int step, int idx, int peer, int ch, wp_buf b, inst *in) {
    chan *c = is_send ? engine_get_chan(e, r, peer, ch) : engine_get_chan(e, peer, r, ch);
    if (!c) return eng_oom(e);
    post p = {r, step, idx, b, in};
    if (is_send) {
        if (engine_grow((void **)&c->sends, &c->s_cap, c->s_head + c->s_n + 1, sizeof *c->sends)) return eng_oom(e);
        c->sends[c->s_head + c->s_n++] = p;
    } else {
        if (engine_grow((void **)&c->recvs, &c->r_cap, c->r_head + c->r_n + 1, sizeof *c->recvs)) return eng_oom(e);
        c->recvs[c->r_head + c->r_n++] = p;
    }
    return match(e, c);
}




/* ---------- actions ---------- */

static wp_result rec_comp(eng *e, int r, int step, int idx, const wp_action *a, double t0, double t1) {
    wp_run *run = e->run;
    if (!run->record) return 0;
    if (engine_grow((void **)&run->comp, &run->cap_comp, run->n_comp + 1, sizeof *run->comp)) return WP_FAILED;
    run->comp[run->n_comp++] = (wp_comp_event){r, step, idx, a->op, a->chunk, a->mb, t0, t1};
    return 0;
}

/* costs are per whole chunk: an action on one slice, or a sliced owner's UPDATE, does 1/S */
static double chunk_share(const eng *e, const wp_action *a) {
    return e->S && ((a->buf.nslices && !op_is_compute(a->op)) || a->op == WP_OP_UPDATE) ? 1.0 / e->S : 1;
}

/* The owner's pieces that costs.host moves off the device stream (engine_host.c). */
static bool on_host(const eng *e, const wp_action *a) {
    return e->costs.host && (a->op == WP_OP_LOAD || a->op == WP_OP_ACC || a->op == WP_OP_UPDATE);
}

/* Occupy the device for the op's duration. */
static int run_for(eng *e, int r, int step, int idx, const wp_action *a) {
    double d = a->chunk >= 0 && a->chunk < e->C && !on_host(e, a) ? e->costs.op_s[a->op][a->chunk] : 0;
    d *= chunk_share(e, a);
    /* costs are per whole micro-batch: a segment does its share (seq_split.h) */
    if (e->K > 1 && op_is_compute(a->op)) {
        int j = a->mb % e->K;
        d *= seqsplit_cost_share(e->sz ? e->sz->L : NULL, a->chunk, a->op, e->seg_t[j], e->seg_t[j + 1], e->seg_t[e->K]);
    }
    e->r[r].busy_until = e->now + d;
    if (step == e->steps - 1) {
        if (op_is_compute(a->op)) e->run->rank[r].busy += d;
        else e->run->rank[r].other += d;
    }
    return rec_comp(e, r, step, idx, a, e->now, e->now + d) ? eng_oom(e) : DONE;
}

static int weights_ok(eng *e, int r, int step, int idx, const wp_action *a, inst **w) {
    char nm[48];
    if (a->buf.kind != WP_BUF_W || a->buf.chunk != a->chunk)
        return eng_fail_at(e, r, step, idx, "reads %s as the weights of chunk %d", buf_name(a->buf, nm, sizeof nm), a->chunk);
    if (a->buf.idx != 0)
        return eng_fail_at(e, r, step, idx, "reads %s, but a step computes with its own weights, version @0",
                       buf_name(a->buf, nm, sizeof nm));
    return eng_need(e, r, step, idx, absolute(a->buf, step), false, w);
}


static int do_forward(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    inst *w, *x = NULL;
    if (AT(f_rank, c, mb) >= 0)
        return eng_fail_at(e, r, step, idx, "F(%d,%d) runs a second time (first on rank %d, action %d)", c, mb,
                       AT(f_rank, c, mb), AT(f_idx, c, mb));
    if ((rc = weights_ok(e, r, step, idx, a, &w)) != DONE) return rc;
    if (c > 0 && (rc = eng_need(e, r, step, idx, buf_a(c - 1, mb), false, &x)) != DONE) return rc;
    eng_mark_read(e, r, w);
    eng_mark_read(e, r, x);
    if (c > 0 && AT(f_rank, c - 1, mb) < 0) return eng_fail_at(e, r, step, idx, "runs before F(%d,%d)", c - 1, mb);
    if (mb % e->K > 0 && (AT(f_rank, c, mb - 1) != r || AT(w_rank, c, mb - 1) >= 0))
        return eng_fail_at(e, r, step, idx, "attends to the keys and values of F(%d,%d), the segment before it, which this rank "
                       "does not hold", c, mb - 1);
    if (c < e->C - 1) {
        char nm[48];
        if (eng_find(&e->r[r], buf_a(c, mb)))
            return eng_fail_at(e, r, step, idx, "writes %s, which rank %d already holds", buf_name(buf_a(c, mb), nm, sizeof nm), r);
        if (!eng_create(e, r, buf_a(c, mb), true, step, idx)) return eng_oom(e);
    }
    AT(f_rank, c, mb) = r;
    AT(f_idx, c, mb) = idx;
    rstate *R = &e->r[r];
    R->n_acts++;
    size_t ab = eng_acts_bytes_of(e, c, mb, false);
    R->acts_bytes += ab;
    R->bytes += ab;
    eng_note_peaks(e, r);
    return run_for(e, r, step, idx, a);
}

static int backward_input(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    inst *w, *g = NULL;
    if (AT(f_rank, c, mb) != r)
        return AT(f_rank, c, mb) < 0 ? eng_fail_at(e, r, step, idx, "runs before F(%d,%d)", c, mb)
                                     : eng_fail_at(e, r, step, idx, "needs the activations of F(%d,%d), which ran on rank %d",
                                               c, mb, AT(f_rank, c, mb));
    if (AT(b_rank, c, mb) >= 0)
        return eng_fail_at(e, r, step, idx, "the input gradient of (%d,%d) runs a second time (first at action %d)", c, mb,
                       AT(b_idx, c, mb));
    if ((rc = weights_ok(e, r, step, idx, a, &w)) != DONE) return rc;
    if (c < e->C - 1 && (rc = eng_need(e, r, step, idx, buf_ga(c, mb), false, &g)) != DONE) return rc;
    eng_mark_read(e, r, w);
    eng_mark_read(e, r, g);
    if (c < e->C - 1 && AT(b_rank, c + 1, mb) < 0)
        return eng_fail_at(e, r, step, idx, "runs before the backward of (%d,%d)", c + 1, mb);
    if (mb % e->K < e->K - 1 && AT(b_rank, c, mb + 1) < 0)
        return eng_fail_at(e, r, step, idx, "runs before the backward of (%d,%d), the segment after it, which hands this one "
                       "its dK/dV (last in, first out)", c, mb + 1);
    if (c > 0) {
        char nm[48];
        if (eng_find(&e->r[r], buf_ga(c - 1, mb)))
            return eng_fail_at(e, r, step, idx, "writes %s, which rank %d already holds", buf_name(buf_ga(c - 1, mb), nm, sizeof nm), r);
        if (!eng_create(e, r, buf_ga(c - 1, mb), true, step, idx)) return eng_oom(e);
    }
    AT(b_rank, c, mb) = r;
    AT(b_idx, c, mb) = idx;
    if (a->op == WP_OP_B) {
        rstate *R = &e->r[r];
        size_t kb = eng_acts_bytes_of(e, c, mb, true);
        R->acts_bytes += kb;
        R->bytes += kb;
        eng_note_peaks(e, r);
    }
    return DONE;
}

/* The W part: where this micro-batch's gW goes. Checked before anything changes. */
/* *ng instances of GW[c] (its slices in a sliced schedule), or none for the fp32 accumulator. */
static int gradient_target(eng *e, int r, int step, int idx, const wp_action *a, inst **g, int *ng) {
    *ng = 0;
    if (a->to_master) {
        if (!sched_owns(e->s, r, a->chunk, -1))
            return e->S ? eng_fail_at(e, r, step, idx, "adds gW to the fp32 accumulator of chunk %d, whose %d slices "
                                  "rank %d does not all own", a->chunk, e->S, r)
                        : eng_fail_at(e, r, step, idx, "adds gW to the fp32 accumulator of chunk %d, which rank %d owns, "
                                  "not rank %d", a->chunk, e->s->owner[a->chunk], r);
        return DONE;
    }
    return eng_need_all(e, r, step, idx, buf_gw(a->chunk), true, g, ng);
}

static int add_contribution(eng *e, int r, int step, int idx, const wp_action *a, inst **g, int ng) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, n = ng ? ng : e->SL;
    for (int k = 0; k < n; k++) {
        uint64_t *set = ng ? g[k]->mbs : &st->acc[((size_t)c * e->SL + k) * e->words];
        if (ng && g[k]->gstep >= 0 && g[k]->gstep != step)
            return eng_fail_at(e, r, step, idx, "adds to GW[%d], which still holds gradients of another step", c);
        if (bit(set, mb))
            return eng_fail_at(e, r, step, idx, "adds micro-batch %d's gW of chunk %d a second time", mb, c);
    }
    for (int k = 0; k < n; k++) {
        set_bit(ng ? g[k]->mbs : &st->acc[((size_t)c * e->SL + k) * e->words], mb);
        if (ng) g[k]->gstep = step;
    }
    AT(w_rank, c, mb) = r;
    AT(w_idx, c, mb) = idx;
    rstate *R = &e->r[r];
    size_t ab = eng_acts_bytes_of(e, c, mb, false) + (a->op == WP_OP_W ? eng_acts_bytes_of(e, c, mb, true) : 0);
    R->n_acts--;
    R->acts_bytes -= ab;
    R->bytes -= ab;
    return DONE;
}

static int do_compute(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    if (c < 0 || c >= e->C || mb < 0 || mb >= e->M)
        return eng_fail_at(e, r, step, idx, "chunk %d or micro-batch %d out of range", c, mb);
    if (a->op == WP_OP_F) return do_forward(e, r, step, idx, a);
    inst *g[WP_MAX_CHUNKS];
    int ng = 0;
    if (a->op == WP_OP_W) {
        if (AT(b_rank, c, mb) != r || AT(w_rank, c, mb) >= 0) {
            if (AT(w_rank, c, mb) >= 0)
                return eng_fail_at(e, r, step, idx, "the W-pass of (%d,%d) runs a second time (first on rank %d, action %d)",
                               c, mb, AT(w_rank, c, mb), AT(w_idx, c, mb));
            return eng_fail_at(e, r, step, idx, "needs B(%d,%d) on this rank first", c, mb);
        }
        if ((rc = gradient_target(e, r, step, idx, a, g, &ng)) != DONE) return rc;
        if ((rc = add_contribution(e, r, step, idx, a, g, ng)) != DONE) return rc;
        return run_for(e, r, step, idx, a);
    }
    if (a->op == WP_OP_BW) {
        if (AT(w_rank, c, mb) >= 0)
            return eng_fail_at(e, r, step, idx, "the W-pass of (%d,%d) runs a second time (first on rank %d, action %d)", c,
                           mb, AT(w_rank, c, mb), AT(w_idx, c, mb));
        if ((rc = gradient_target(e, r, step, idx, a, g, &ng)) != DONE) return rc;
    }
    if ((rc = backward_input(e, r, step, idx, a)) != DONE) return rc;
    if (a->op == WP_OP_BW && (rc = add_contribution(e, r, step, idx, a, g, ng)) != DONE) return rc;
    return run_for(e, r, step, idx, a);
}

static int do_xfer(eng *e, int r, int step, int idx, const wp_action *a) {
    rstate *R = &e->r[r];
    char nm[48], note[96];
    if (a->peer < 0 || a->peer >= e->N || a->peer == r || a->channel >= WP_SCH_COUNT)
        return eng_fail_at(e, r, step, idx, "peer %d or channel %d is not valid", a->peer, a->channel);
    wp_buf b = absolute(a->buf, step), one[WP_MAX_CHUNKS];
    if (eng_expand(e, b, one) != 1)
        return eng_fail_at(e, r, step, idx, "%s: in a sliced schedule a transfer moves one slice",
                       buf_name(a->buf, nm, sizeof nm));
    inst *in = eng_find(R, b);
    if (a->op == WP_OP_RECV) {
        if (in)
            return eng_fail_at(e, r, step, idx, "receives %s, which rank %d already holds (since action %d%s)",
                           buf_name(a->buf, nm, sizeof nm), r, in->born, eng_step_note(e, in->born_step));
        if (!(in = eng_create(e, r, b, false, step, idx))) return eng_oom(e);
        return post_xfer(e, false, r, step, idx, a->peer, a->channel, b, in);
    }
    if (!in)
        return eng_fail_at(e, r, step, idx, "sends %s, which rank %d does not hold%s", buf_name(a->buf, nm, sizeof nm), r,
                       eng_freed_note(e, R, b, step, note, sizeof note));
    in->sends++;
    return post_xfer(e, true, r, step, idx, a->peer, a->channel, b, in);
}

/* "the owner of chunk 3 (rank 1)" or "the owner of slice 2 of chunk 3 (rank 2)". */
static const char *owner_text(const eng *e, int c, int k, char *out, size_t len) {
    if (e->S) snprintf(out, len, "the owner of slice %d of chunk %d (rank %d)", k, c, k);
    else snprintf(out, len, "the owner of chunk %d (rank %d)", c, e->s->owner[c]);
    return out;
}

static int do_load(eng *e, int r, int step, int idx, const wp_action *a, wp_buf b) {
    char nm[48], who[80];
    int c = b.chunk;
    if (b.kind != WP_BUF_W) return eng_fail_at(e, r, step, idx, "LOAD creates weights only");
    for (int k = 0; k < e->SL; k++) {
        if (b.nslices && k != b.slice) continue;
        if (!sched_owns(e->s, r, c, e->S ? k : -1))
            return eng_fail_at(e, r, step, idx, "only %s can load it from its master", owner_text(e, c, k, who, sizeof who));
        if (b.idx != e->master[c * e->SL + k])
            return eng_fail_at(e, r, step, idx, "loads %s, but the master of chunk %d holds version @%d now",
                           buf_name(a->buf, nm, sizeof nm), c, e->master[c * e->SL + k] - step);
        int upd = b.idx - 1; /* the step whose UPDATE made this version */
        if (e->s->tied && c == e->C - 1 && upd >= 0 && upd < e->steps && e->st[upd].tie_in[k] != e->tie_expect[k])
            return eng_fail_at(e, r, step, idx, "loads %s before the updated embedding reached the tied head (%d of %d "
                           "T.w pieces taken in)", buf_name(a->buf, nm, sizeof nm), e->st[upd].tie_in[k], e->tie_expect[k]);
    }
    return DONE;
}

/* b (whole or its slices) comes into being on rank r, none of it held already; then a runs. */
static int create_parts(eng *e, int r, int step, int idx, const wp_action *a, wp_buf b) {
    char nm[48];
    wp_buf parts[WP_MAX_CHUNKS];
    int n = eng_expand(e, b, parts);
    if (n < 0) return eng_bad_slicing(e, r, step, idx, a->buf);
    for (int i = 0; i < n; i++)
        if (eng_find(&e->r[r], parts[i]))
            return eng_fail_at(e, r, step, idx, "creates %s, which rank %d already holds",
                           eng_rel_name(parts[i], step, nm, sizeof nm), r);
    inst *made[WP_MAX_CHUNKS];
    for (int i = 0; i < n; i++)
        if (!(made[i] = eng_create(e, r, parts[i], true, step, idx))) return eng_oom(e);
    if (on_host(e, a) && ehost_load(e, r, step, a, made, n, chunk_share(e, a))) return eng_oom(e);
    return run_for(e, r, step, idx, a);
}

static int do_create(eng *e, int r, int step, int idx, const wp_action *a) {
    wp_buf b = absolute(a->buf, step);
    int c = a->buf.chunk, rc;
    if (c < 0 || c >= e->C) return eng_fail_at(e, r, step, idx, "chunk %d out of range", c);
    if (a->op == WP_OP_LOAD) {
        if ((rc = do_load(e, r, step, idx, a, b)) != DONE) return rc;
    } else if (a->buf.kind != WP_BUF_GW) {
        return eng_fail_at(e, r, step, idx, "ZERO creates gradients only");
    }
    return create_parts(e, r, step, idx, a, b);
}

/* ACC drains a GW (whole, a slice, or a travelling partial) into the owner's fp32 accumulators. */
static int do_acc(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, rc, n;
    char who[80];
    if (c < 0 || c >= e->C) return eng_fail_at(e, r, step, idx, "chunk %d out of range", c);
    wp_buf b = a->buf.kind == WP_BUF_GW && a->buf.chunk == c ? a->buf : buf_gw(c);
    inst *g[WP_MAX_CHUNKS];
    if ((rc = eng_need_all(e, r, step, idx, b, true, g, &n)) != DONE) return rc;
    for (int i = 0; i < n; i++) {
        int k = slice_of(g[i]->b);
        if (!sched_owns(e->s, r, c, e->S ? k : -1))
            return eng_fail_at(e, r, step, idx, "the accumulator belongs to %s", owner_text(e, c, k, who, sizeof who));
        if (g[i]->gstep >= 0 && g[i]->gstep != step)
            return eng_fail_at(e, r, step, idx, "GW[%d] holds gradients of another step", c);
        int dup = eng_first_common(&st->acc[((size_t)c * e->SL + k) * e->words], g[i]->mbs, e->M);
        if (dup >= 0)
            return eng_fail_at(e, r, step, idx, "GW[%d] brings micro-batch %d's contribution to the owner a second time", c,
                           dup);
    }
    for (int i = 0; i < n; i++) {
        uint64_t *acc = &st->acc[((size_t)c * e->SL + slice_of(g[i]->b)) * e->words];
        for (int w = 0; w < e->words; w++) {
            acc[w] |= g[i]->mbs[w];
            g[i]->mbs[w] = 0;
        }
        g[i]->gstep = -1;
    }
    if (on_host(e, a) && ehost_acc(e, r, step, a, g, n, chunk_share(e, a))) return eng_oom(e);
    return run_for(e, r, step, idx, a);
}

/* FOLD: the own GW[c] slice k into the partial GW[c]/k.p (one hop of a reduce-scatter), or the
 * own GW[c] (whole or slice k) into the step sum GW[c].s of the same part. */
static int do_fold(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    wp_buf p = a->buf;
    inst *part[WP_MAX_CHUNKS], *own[WP_MAX_CHUNKS];
    int rc, n = 0, m = 0;
    bool partial = p.lane == WP_LANE_PART && e->S && p.nslices == e->S && p.slice < e->S;
    if (p.kind != WP_BUF_GW || p.chunk < 0 || p.chunk >= e->C || (!partial && p.lane != WP_LANE_SUM))
        return eng_fail_at(e, r, step, idx, "FOLD needs a partial slice GW[c]/k:%d.p of a sliced schedule or a step sum "
                       "GW[c].s, not %s", e->S, buf_name(p, nm, sizeof nm));
    wp_buf mine = p;
    mine.lane = WP_LANE_OWN;
    if ((rc = eng_need_all(e, r, step, idx, p, true, part, &n)) != DONE) return rc;
    if ((rc = eng_need_all(e, r, step, idx, mine, false, own, &m)) != DONE) return rc;
    for (int i = 0; i < n; i++) {
        if ((part[i]->gstep >= 0 && part[i]->gstep != step) || (own[i]->gstep >= 0 && own[i]->gstep != step))
            return eng_fail_at(e, r, step, idx, "folds gradients of another step");
        int dup = eng_first_common(part[i]->mbs, own[i]->mbs, e->M);
        if (dup >= 0)
            return eng_fail_at(e, r, step, idx, "%s already holds micro-batch %d's gW of slice %d",
                           buf_name(p, nm, sizeof nm), dup, slice_of(part[i]->b));
    }
    for (int i = 0; i < n; i++) {
        for (int w = 0; w < e->words; w++) part[i]->mbs[w] |= own[i]->mbs[w];
        if (own[i]->gstep >= 0) part[i]->gstep = step;
    }
    return run_for(e, r, step, idx, a);
}

/* DUP of a step sum's slice into a partial slice in the grad dtype (ir.h): the contributions go
 * with the copy; the sum keeps them too until it is freed (ACC counts a micro-batch once). */
static int dup_sum(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    wp_buf b = a->buf, src = b;
    inst *from;
    int rc;
    if (!e->S || b.nslices != e->S || b.slice >= e->S || b.chunk < 0 || b.chunk >= e->C)
        return eng_fail_at(e, r, step, idx, "DUP makes one partial slice GW[c]/k:%d.p of a sliced schedule, not %s", e->S,
                       buf_name(b, nm, sizeof nm));
    src.lane = WP_LANE_SUM;
    if ((rc = eng_need_one(e, r, step, idx, src, false, &from)) != DONE) return rc;
    if (eng_find(&e->r[r], b))
        return eng_fail_at(e, r, step, idx, "creates %s, which rank %d already holds", buf_name(b, nm, sizeof nm), r);
    inst *in = eng_create(e, r, b, true, step, idx);
    if (!in) return eng_oom(e);
    memcpy(in->mbs, from->mbs, (size_t)e->words * sizeof *in->mbs);
    in->gstep = from->gstep;
    return run_for(e, r, step, idx, a);
}

/* DUP: a second lane's copy of weights held here on lane F (whole or one slice), or a step sum's
 * slice in the grad dtype (dup_sum). */
static int do_dup(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    wp_buf b = absolute(a->buf, step), src = b;
    inst *from[WP_MAX_CHUNKS];
    int rc;
    if (b.kind == WP_BUF_GW && b.lane == WP_LANE_PART) return dup_sum(e, r, step, idx, a);
    if (b.kind != WP_BUF_W || b.lane == WP_LANE_F || b.chunk < 0 || b.chunk >= e->C)
        return eng_fail_at(e, r, step, idx, "DUP copies weights from lane F to another lane or a step sum's slice to a partial, not into %s",
                       buf_name(a->buf, nm, sizeof nm));
    src.lane = WP_LANE_F;
    if ((rc = eng_need_all(e, r, step, idx, src, false, from, NULL)) != DONE) return rc;
    return create_parts(e, r, step, idx, a, b);
}

/* Tied embeddings (ir.h: T, TOUT, TIN; tie.c). Which end a rank is, and when. */
static int tie_check(eng *e, int r, int step, int idx, const wp_action *a, bool out) {
    char nm[48], who[80];
    wp_buf b = a->buf;
    if (!e->s->tied || b.kind != WP_BUF_T || b.chunk != 0 || b.lane > WP_TIE_WEIGHT || b.nslices)
        return eng_fail_at(e, r, step, idx, "%s needs a T.g or T.w piece of a tied schedule, not %s", op_name(a->op),
                       buf_name(b, nm, sizeof nm));
    int k = tie_piece_k(b), j = tie_piece_j(b), last = e->C - 1;
    if (k >= e->SL || j >= e->SL) return eng_fail_at(e, r, step, idx, "%s: no such piece", buf_name(b, nm, sizeof nm));
    bool grad = b.lane == WP_TIE_GRAD, head_side = grad == out; /* T.g leaves the head, T.w reaches it */
    int c = head_side ? last : 0, sl = head_side ? k : j;
    if (!sched_owns(e->s, r, c, e->S ? sl : -1))
        return eng_fail_at(e, r, step, idx, "%s of %s belongs to %s", op_name(a->op), buf_name(b, nm, sizeof nm),
                       owner_text(e, c, sl, who, sizeof who));
    const stepst *st = &e->st[step];
    if (grad && e->r[r].arrived[step])
        return eng_fail_at(e, r, step, idx, "%s after REDUCE: the norm must count the tied gradient once", op_name(a->op));
    if (grad && out)
        for (int mb = 0; mb < e->M; mb++)
            if (!bit(&st->acc[((size_t)last * e->SL + k) * e->words], mb))
                return eng_fail_at(e, r, step, idx, "takes the head's gradient before micro-batch %d's arrived", mb);
    if (!grad && !st->updated[c * e->SL + sl])
        return eng_fail_at(e, r, step, idx, "%s of %s before UPDATE(%d)", op_name(a->op), buf_name(b, nm, sizeof nm), c);
    return DONE;
}

static int do_tout(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    int rc = tie_check(e, r, step, idx, a, true);
    if (rc != DONE || (e->costs.host && (rc = ehost_wait(e, r, e->hr[r].cpu)) != DONE)) return rc; /* from host state */
    if (eng_find(&e->r[r], a->buf))
        return eng_fail_at(e, r, step, idx, "creates %s, which rank %d already holds", buf_name(a->buf, nm, sizeof nm), r);
    if (!eng_create(e, r, a->buf, true, step, idx)) return eng_oom(e);
    return run_for(e, r, step, idx, a);
}

static int do_tin(eng *e, int r, int step, int idx, const wp_action *a) {
    inst *in;
    int rc = tie_check(e, r, step, idx, a, false);
    if (rc != DONE || (rc = eng_need_one(e, r, step, idx, a->buf, false, &in)) != DONE) return rc;
    if (e->costs.host && (rc = ehost_wait(e, r, e->hr[r].cpu)) != DONE) return rc; /* into host state */
    if (a->buf.lane == WP_TIE_WEIGHT) e->st[step].tie_in[tie_piece_k(a->buf)]++;
    else e->st[step].tie_gin[tie_piece_j(a->buf)]++;
    return run_for(e, r, step, idx, a);
}

static int do_reduce(eng *e, int r, int step, int idx) {
    stepst *st = &e->st[step];
    rstate *R = &e->r[r];
    int rc;
    /* costs.host: the norm reads the accumulators, which the host's ACCs complete */
    if (!R->arrived[step] && e->costs.host && (rc = ehost_reduce(e, r, step)) != DONE) return rc;
    if (!R->arrived[step]) {
        for (int j = 0; e->s->tied && j < e->SL; j++)
            if (sched_owns(e->s, r, 0, e->S ? j : -1) && st->tie_gin[j] != e->tie_expect_g[j])
                return eng_fail_at(e, r, step, idx, "REDUCE before the head's gradient reached the tied embedding (slice %d: "
                               "%d of %d T.g pieces taken in)", j, st->tie_gin[j], e->tie_expect_g[j]);
        for (int c = 0; c < e->C; c++)
            for (int k = 0; k < e->SL; k++) {
                if (!sched_owns(e->s, r, c, e->S ? k : -1)) continue;
                for (int mb = 0; mb < e->M; mb++)
                    if (!bit(&st->acc[((size_t)c * e->SL + k) * e->words], mb))
                        return e->S ? eng_fail_at(e, r, step, idx, "slice %d of chunk %d's accumulator lacks micro-batch "
                                              "%d's gradient", k, c, mb)
                                    : eng_fail_at(e, r, step, idx, "chunk %d's accumulator lacks micro-batch %d's gradient",
                                              c, mb);
            }
        R->arrived[step] = true;
        R->reduce_t0[step] = e->now;
        st->arrived++;
        if (e->now > st->arrive_max) st->arrive_max = e->now;
        if (st->arrived == e->N) {
            st->scheduled = true;
            st->done_at = st->arrive_max + e->costs.reduce_s;
        }
        e->progress = true;
    }
    if (!st->done) {
        eng_wait_for(R, WHY_REDUCE, NULL, buf_gw(0), step);
        return BLOCKED;
    }
    R->passed[step] = true;
    wp_action red = {.op = WP_OP_REDUCE, .chunk = -1, .mb = -1};
    return rec_comp(e, r, step, idx, &red, R->reduce_t0[step], e->now) ? eng_oom(e) : DONE;
}

static int do_update(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk;
    if (c < 0 || c >= e->C) return eng_fail_at(e, r, step, idx, "chunk %d out of range", c);
    int k = e->S ? r : 0;
    if (e->S ? r >= e->S : e->s->owner[c] != r)
        return e->S ? eng_fail_at(e, r, step, idx, "rank %d owns no slice of chunk %d", r, c)
                    : eng_fail_at(e, r, step, idx, "chunk %d is owned by rank %d", c, e->s->owner[c]);
    if (!e->r[r].passed[step])
        return eng_fail_at(e, r, step, idx, "updates before this rank's REDUCE (clipping and the inf/NaN skip need the "
                       "global norm first)");
    if (st->updated[c * e->SL + k]++) return eng_fail_at(e, r, step, idx, "chunk %d is updated a second time", c);
    e->master[c * e->SL + k]++;
    memset(&st->acc[((size_t)c * e->SL + k) * e->words], 0, (size_t)e->words * sizeof *st->acc);
    if (on_host(e, a)) ehost_update(e, r, step, c, k, chunk_share(e, a));
    return run_for(e, r, step, idx, a);
}

/* FREE of a whole name in a sliced schedule drops every slice of it held here. */
static int do_free(eng *e, int r, int step, int idx, const wp_action *a) {
    rstate *R = &e->r[r];
    char nm[48], note[96];
    wp_buf b = absolute(a->buf, step), parts[WP_MAX_CHUNKS];
    inst *in[WP_MAX_CHUNKS];
    int n = eng_expand(e, b, parts), held = 0;
    if (n < 0) return eng_bad_slicing(e, r, step, idx, a->buf);
    for (int i = 0; i < n; i++)
        if ((in[held] = eng_find(R, parts[i]))) held++;
    if (!held)
        return eng_fail_at(e, r, step, idx, "frees %s, which rank %d does not hold%s", buf_name(a->buf, nm, sizeof nm), r,
                       eng_freed_note(e, R, n == 1 ? b : parts[0], step, note, sizeof note));
    for (int i = 0; i < held; i++)
        if (!in[i]->present || in[i]->sends > 0) {
            eng_wait_for(R, in[i]->present ? WHY_SEND : WHY_ARRIVE, in[i], in[i]->b, step);
            return BLOCKED;
        }
    for (int i = 0; i < held; i++)
        if (eng_destroy(e, r, in[i], step, idx)) return eng_oom(e);
    return DONE;
}

static int engine_action(eng *e, int r, int step, int idx) {
    const wp_action *a = &e->s->rank[r].a[idx];
    switch (a->op) {
    case WP_OP_F:
    case WP_OP_B:
    case WP_OP_W:
    case WP_OP_BW: return do_compute(e, r, step, idx, a);
    case WP_OP_SEND:
    case WP_OP_RECV: return do_xfer(e, r, step, idx, a);
    case WP_OP_LOAD:
    case WP_OP_ZERO: return do_create(e, r, step, idx, a);
    case WP_OP_ACC: return do_acc(e, r, step, idx, a);
    case WP_OP_REDUCE: return do_reduce(e, r, step, idx);
    case WP_OP_UPDATE: return do_update(e, r, step, idx, a);
    case WP_OP_FREE: return do_free(e, r, step, idx, a);
    case WP_OP_FOLD: return do_fold(e, r, step, idx, a);
    case WP_OP_DUP: return do_dup(e, r, step, idx, a);
    case WP_OP_TOUT: return do_tout(e, r, step, idx, a);
    case WP_OP_TIN: return do_tin(e, r, step, idx, a);
    default: return eng_fail_at(e, r, step, idx, "unknown op %d", a->op);
    }
}

void eng_advance_rank(eng *e, int r) {
    rstate *R = &e->r[r];
    const int n = e->s->rank[r].n;
    while (!R->done && !e->failed && R->busy_until <= e->now) {
        /* Blocked on one instance that has not changed: a retry would block on it again (the
         * checks before it concern what this rank holds, and it is blocked, so they pass again).
         * Skipping it keeps the loop from re-running every blocked action whenever anything
         * anywhere moves: with 32 ranks that was most of a simulation's time. */
        const inst *w = R->why_in;
        if (w && (R->why == WHY_ARRIVE ? !w->present : w->sends > 0)) break;
        if (R->pc == n * e->steps) {
            R->done = true;
            e->progress = true;
            break;
        }
        int step = R->pc / n, idx = R->pc % n;
        if (engine_action(e, r, step, idx) != DONE) break;
        R->why = WHY_NONE;
        R->why_in = NULL;
        R->pc++;
        e->progress = true;
        if (R->pc % n == 0) {
            double end = R->busy_until > e->now ? R->busy_until : e->now;
            if (end > e->run->step_end[step]) e->run->step_end[step] = end;
        }
    }
}
