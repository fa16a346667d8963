/* The schedule engine: all ranks' lists at once, under ir.h's semantics, with checks and (optional)
 * time. This file is the IR's semantics: per rank a program counter, the buffers held (each an
 * instance that may still be arriving) and memory counters; per (src, dst, channel) FIFOs of
 * posted sends and receives matched in order; every action's rules and the checks before and
 * after. How long things take (links shared by their transfers, latency, the event clock) is
 * engine_links.c; the state both share is engine_impl.h. */
#include "engine.h"
#include "engine_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "seq_split.h"

/* ---------- small helpers ---------- */

int engine_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int oom(eng *e) {
    if (!e->failed) {
        snprintf(e->err, e->errlen, "schedule: out of memory");
        e->failed = 1;
    }
    return ERROR;
}

static const char *step_note(const eng *e, int step) {
    static const char *const notes[MAX_STEPS] = {"", " in the second step", " in the third step", " in the fourth step"};
    return e->steps > 1 ? notes[step] : "";
}

/* "rank R, action I (TEXT): message" — every error names where it happened. */
static int fail_at(eng *e, int rank, int step, int idx, const char *fmt, ...) {
    if (e->failed) return ERROR;
    char at[96], msg[400];
    action_text(&e->s->rank[rank].a[idx], at, sizeof at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(e->err, e->errlen, "rank %d, action %d (%s)%s: %s", rank, idx, at, step_note(e, step), msg);
    e->failed = 1;
    return ERROR;
}

static int fail_plain(eng *e, const char *fmt, ...) {
    if (e->failed) return ERROR;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
    e->failed = 1;
    return ERROR;
}

static wp_buf absolute(wp_buf b, int step) {
    if (b.kind == WP_BUF_W) b.idx += step;
    return b;
}

/* Name with the version relative to `step`, as the lists write it. */
static char *rel_name(wp_buf b, int step, char *out, size_t len) {
    if (b.kind == WP_BUF_W) b.idx -= step;
    return buf_name(b, out, len);
}

static inst *find(rstate *R, wp_buf b) {
    for (int i = 0; i < R->n_held; i++)
        if (buf_eq(R->held[i]->b, b)) return R->held[i];
    return NULL;
}

/* ---------- slices (ir.h: a sliced schedule holds W and GW as slices) ---------- */

static bool sliceable(wp_buf b) { return b.kind == WP_BUF_W || b.kind == WP_BUF_GW; }
static wp_buf whole_of(wp_buf b) { return buf_slice(b, 0, 0); }
static int slice_of(wp_buf b) { return b.nslices ? b.slice : 0; }

/* The instances a name stands for: a whole W or GW in a sliced schedule is its S slices, any
 * other name itself. Returns the count, or -1 when the name's slicing does not fit the schedule. */
static int expand(const eng *e, wp_buf b, wp_buf *out) {
    if (b.nslices && (!sliceable(b) || b.nslices != e->S || b.slice >= b.nslices)) return -1;
    if (!e->S || !sliceable(b) || b.nslices) {
        out[0] = b;
        return 1;
    }
    for (int k = 0; k < e->S; k++) out[k] = buf_slice(b, k, e->S);
    return e->S;
}

static int bad_slicing(eng *e, int r, int step, int idx, wp_buf b) {
    char nm[48];
    return fail_at(e, r, step, idx, "%s does not fit the schedule's slicing (%d slices per W and GW buffer)",
                   rel_name(b, step, nm, sizeof nm), e->S);
}

/* Whether R holds a slice of b's whole other than `except` (slot pools count whole buffers). */
static bool holds_sibling(const rstate *R, wp_buf b, const inst *except) {
    if (!b.nslices) return false;
    for (int i = 0; i < R->n_held; i++)
        if (R->held[i] != except && buf_eq(whole_of(R->held[i]->b), whole_of(b))) return true;
    return false;
}

static void wait_for(rstate *R, int why, wp_buf b, int step) {
    R->why = why;
    R->why_buf = b;
    R->why_step = step;
}

/* " (it was freed at action 12)" when it was, for use-after-free messages. */
static const char *freed_note(const eng *e, const rstate *R, wp_buf b, int step, char *out, size_t len) {
    out[0] = '\0';
    for (int i = R->n_freed - 1; i >= 0; i--)
        if (buf_eq(R->freed[i].b, b)) {
            snprintf(out, len, " (it was freed at action %d%s)", R->freed[i].index,
                     R->freed[i].step != step ? step_note(e, R->freed[i].step) : "");
            break;
        }
    return out;
}

static size_t bytes_of(const eng *e, wp_buf b) {
    return e->sz && e->sz->L ? sched_buf_bytes(e->s, e->seg_t, e->sz->L, b) : 0;
}

/* One activation state of (c, mb) as F leaves it (kept = false), or what a separate B adds to it
 * for the W-pass (kept = true; model_acts_bytes: the runtime reserves that at B and releases it at
 * W, so charging it from F would count memory no rank holds): a segment's own size when the
 * schedule has segments. */
static size_t acts_bytes_of(const eng *e, int c, int mb, bool kept) {
    if (!e->sz) return 0;
    if (kept && !e->s->split) return 0;
    if (e->K == 1 || !e->sz->L) return kept ? e->sz->kept_bytes[c] : e->sz->acts_bytes[c];
    int j = mb % e->K;
    wp_dtype dt = precision_act_dtype(e->sz->L->cfg.precision);
    size_t fwd = model_acts_bytes_segment(e->sz->L, c, dt, false, e->seg_t[j], e->seg_t[j + 1]);
    return kept ? model_acts_bytes_segment(e->sz->L, c, dt, true, e->seg_t[j], e->seg_t[j + 1]) - fwd : fwd;
}

static void note_peaks(eng *e, int r) {
    rstate *R = &e->r[r];
    wp_rank_report *rep = &e->run->rank[r];
    for (int k = 0; k < WP_BUF_KINDS; k++)
        if (R->n_kind[k] > rep->peak_n[k]) rep->peak_n[k] = R->n_kind[k];
    if (R->n_acts > rep->peak_acts) rep->peak_acts = R->n_acts;
    if (R->acts_bytes > rep->peak_acts_bytes) rep->peak_acts_bytes = R->acts_bytes;
    if (R->bytes > rep->peak_bytes) rep->peak_bytes = R->bytes;
}

/* One more (or one fewer, d = -1) buffer of this size held: the pool model of engine_impl.h. */
static int slot_count(eng *e, int r, const inst *in, int d) {
    rstate *R = &e->r[r];
    if (!in->bytes) return 0;
    int i = 0;
    while (i < R->n_slots && R->slots[i].bytes != in->bytes) i++;
    if (i == R->n_slots) {
        if (d < 0 || engine_grow((void **)&R->slots, &R->cap_slots, R->n_slots + 1, sizeof *R->slots)) return d < 0 ? 0 : -1;
        R->slots[R->n_slots++] = (struct eng_slot){.bytes = in->bytes, .kind = in->b.kind};
    }
    struct eng_slot *sl = &R->slots[i];
    sl->held += d;
    if (sl->held > sl->peak) sl->peak = sl->held, e->run->rank[r].pool_bytes[sl->kind] += sl->bytes;
    return 0;
}

static inst *create(eng *e, int r, wp_buf b, bool present, int step, int idx) {
    rstate *R = &e->r[r];
    inst *in = calloc(1, sizeof *in);
    if (!in || engine_grow((void **)&R->held, &R->cap_held, R->n_held + 1, sizeof *R->held)) {
        free(in);
        return NULL;
    }
    if (b.kind == WP_BUF_GW && !(in->mbs = calloc((size_t)e->words, sizeof *in->mbs))) {
        free(in);
        return NULL;
    }
    in->b = b;
    in->present = present;
    in->gstep = -1;
    in->born = idx;
    in->born_step = step;
    in->bytes = bytes_of(e, b);
    if (!holds_sibling(R, b, NULL)) R->n_kind[b.kind]++;
    R->held[R->n_held++] = in;
    R->bytes += in->bytes;
    if (slot_count(e, r, in, 1)) return NULL; /* it is held: teardown frees it */
    note_peaks(e, r);
    return in;
}

static int destroy(eng *e, int r, inst *in, int step, int idx) {
    rstate *R = &e->r[r];
    if (!holds_sibling(R, in->b, in)) R->n_kind[in->b.kind]--;
    for (int i = 0; i < R->n_held; i++)
        if (R->held[i] == in) {
            R->held[i] = R->held[--R->n_held];
            break;
        }
    R->bytes -= in->bytes;
    slot_count(e, r, in, -1);
    if (engine_grow((void **)&R->freed, &R->cap_freed, R->n_freed + 1, sizeof *R->freed)) return -1;
    R->freed[R->n_freed++] = (freed_rec){in->b, step, idx};
    free(in->mbs);
    free(in);
    return 0;
}

static bool bit(const uint64_t *s, int i) { return s[i / 64] >> (i % 64) & 1; }
static void set_bit(uint64_t *s, int i) { s[i / 64] |= 1ull << (i % 64); }
static int first_common(const uint64_t *a, const uint64_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (bit(a, i) && bit(b, i)) return i;
    return -1;
}

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
            rel_name(sp->b, sp->step, sn, sizeof sn);
            rel_name(rp->b, rp->step, rn, sizeof rn);
            return fail_at(e, rp->rank, rp->step, rp->index,
                           "in FIFO order on channel %s from rank %d this receive pairs with rank %d, action %d (%s)%s, "
                           "which sends %s, not %s", channel_name(c->ch), c->src, sp->rank, sp->index, at,
                           step_note(e, sp->step), sn, rn);
        }
        xfer *x = calloc(1, sizeof *x);
        if (!x || engine_grow((void **)&c->q, &c->q_cap, c->q_head + c->q_n + 1, sizeof *c->q)) {
            free(x);
            return oom(e);
        }
        *x = (xfer){.src = c->src, .dst = c->dst, .ch = c->ch, .step = sp->step, .s_index = sp->index,
                    .r_index = rp->index, .b = sp->b, .bytes = sp->in->bytes, .from = sp->in, .to = rp->in,
                    .gstep = -1, .state = X_WAIT};
        c->q[c->q_head + c->q_n++] = x;
        c->s_head++, c->s_n--;
        c->r_head++, c->r_n--;
    }
    return elink_start(e, c) ? oom(e) : DONE;
}

static int post_xfer(eng *e, bool is_send, int r, int step, int idx, int peer, int ch, wp_buf b, inst *in) {
    chan *c = is_send ? engine_get_chan(e, r, peer, ch) : engine_get_chan(e, peer, r, ch);
    if (!c) return oom(e);
    post p = {r, step, idx, b, in};
    if (is_send) {
        if (engine_grow((void **)&c->sends, &c->s_cap, c->s_head + c->s_n + 1, sizeof *c->sends)) return oom(e);
        c->sends[c->s_head + c->s_n++] = p;
    } else {
        if (engine_grow((void **)&c->recvs, &c->r_cap, c->r_head + c->r_n + 1, sizeof *c->recvs)) return oom(e);
        c->recvs[c->r_head + c->r_n++] = p;
    }
    return match(e, c);
}




/* ---------- actions ---------- */

static int rec_comp(eng *e, int r, int step, int idx, const wp_action *a, double t0, double t1) {
    wp_run *run = e->run;
    if (!run->record) return 0;
    if (engine_grow((void **)&run->comp, &run->cap_comp, run->n_comp + 1, sizeof *run->comp)) return -1;
    run->comp[run->n_comp++] = (wp_comp_event){r, step, idx, a->op, a->chunk, a->mb, t0, t1};
    return 0;
}

/* Occupy the device for the op's duration. */
static int run_for(eng *e, int r, int step, int idx, const wp_action *a) {
    double d = a->chunk >= 0 && a->chunk < e->C ? e->costs.op_s[a->op][a->chunk] : 0;
    /* costs are per whole chunk: an action on one slice, or a sliced owner's UPDATE, does 1/S */
    if (e->S && ((a->buf.nslices && !op_is_compute(a->op)) || a->op == WP_OP_UPDATE)) d /= e->S;
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
    return rec_comp(e, r, step, idx, a, e->now, e->now + d) ? oom(e) : DONE;
}

/* A buffer an action reads: ERROR if not held, BLOCKED while it arrives (or, for writes, while
 * earlier sends of it are on the wire), else DONE with *out set. */
static int need_one(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out) {
    rstate *R = &e->r[r];
    char nm[48], note[96];
    inst *in = find(R, b);
    if (!in)
        return fail_at(e, r, step, idx, "needs %s, which rank %d does not hold%s", rel_name(b, step, nm, sizeof nm), r,
                       freed_note(e, R, b, step, note, sizeof note));
    if (!in->present) {
        wait_for(R, WHY_ARRIVE, b, step);
        return BLOCKED;
    }
    if (write && in->sends > 0) {
        wait_for(R, WHY_SEND, b, step);
        return BLOCKED;
    }
    *out = in;
    return DONE;
}

/* Every instance b stands for (all slices of a whole in a sliced schedule): out[0..*n). */
static int need_all(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out, int *n) {
    wp_buf parts[WP_MAX_CHUNKS];
    int k = expand(e, b, parts), rc;
    if (k < 0) return bad_slicing(e, r, step, idx, b);
    for (int i = 0; i < k; i++)
        if ((rc = need_one(e, r, step, idx, parts[i], write, &out[i])) != DONE) return rc;
    if (n) *n = k;
    return DONE;
}

static int need(eng *e, int r, int step, int idx, wp_buf b, bool write, inst **out) {
    inst *all[WP_MAX_CHUNKS];
    int rc = need_all(e, r, step, idx, b, write, all, NULL);
    if (rc == DONE) *out = all[0];
    return rc;
}

static int weights_ok(eng *e, int r, int step, int idx, const wp_action *a, inst **w) {
    char nm[48];
    if (a->buf.kind != WP_BUF_W || a->buf.chunk != a->chunk)
        return fail_at(e, r, step, idx, "reads %s as the weights of chunk %d", buf_name(a->buf, nm, sizeof nm), a->chunk);
    if (a->buf.idx != 0)
        return fail_at(e, r, step, idx, "reads %s, but a step computes with its own weights, version @0",
                       buf_name(a->buf, nm, sizeof nm));
    return need(e, r, step, idx, absolute(a->buf, step), false, w);
}

#define AT(arr, c, mb) (st->arr[(c) * e->M + (mb)])

static int do_forward(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    inst *w, *x = NULL;
    if (AT(f_rank, c, mb) >= 0)
        return fail_at(e, r, step, idx, "F(%d,%d) runs a second time (first on rank %d, action %d)", c, mb,
                       AT(f_rank, c, mb), AT(f_idx, c, mb));
    if ((rc = weights_ok(e, r, step, idx, a, &w)) != DONE) return rc;
    if (c > 0 && (rc = need(e, r, step, idx, buf_a(c - 1, mb), false, &x)) != DONE) return rc;
    if (c > 0 && AT(f_rank, c - 1, mb) < 0) return fail_at(e, r, step, idx, "runs before F(%d,%d)", c - 1, mb);
    if (mb % e->K > 0 && (AT(f_rank, c, mb - 1) != r || AT(w_rank, c, mb - 1) >= 0))
        return fail_at(e, r, step, idx, "attends to the keys and values of F(%d,%d), the segment before it, which this rank "
                       "does not hold", c, mb - 1);
    if (c < e->C - 1) {
        char nm[48];
        if (find(&e->r[r], buf_a(c, mb)))
            return fail_at(e, r, step, idx, "writes %s, which rank %d already holds", buf_name(buf_a(c, mb), nm, sizeof nm), r);
        if (!create(e, r, buf_a(c, mb), true, step, idx)) return oom(e);
    }
    AT(f_rank, c, mb) = r;
    AT(f_idx, c, mb) = idx;
    rstate *R = &e->r[r];
    R->n_acts++;
    size_t ab = acts_bytes_of(e, c, mb, false);
    R->acts_bytes += ab;
    R->bytes += ab;
    note_peaks(e, r);
    return run_for(e, r, step, idx, a);
}

static int backward_input(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    inst *w, *g = NULL;
    if (AT(f_rank, c, mb) != r)
        return AT(f_rank, c, mb) < 0 ? fail_at(e, r, step, idx, "runs before F(%d,%d)", c, mb)
                                     : fail_at(e, r, step, idx, "needs the activations of F(%d,%d), which ran on rank %d",
                                               c, mb, AT(f_rank, c, mb));
    if (AT(b_rank, c, mb) >= 0)
        return fail_at(e, r, step, idx, "the input gradient of (%d,%d) runs a second time (first at action %d)", c, mb,
                       AT(b_idx, c, mb));
    if ((rc = weights_ok(e, r, step, idx, a, &w)) != DONE) return rc;
    if (c < e->C - 1 && (rc = need(e, r, step, idx, buf_ga(c, mb), false, &g)) != DONE) return rc;
    if (c < e->C - 1 && AT(b_rank, c + 1, mb) < 0)
        return fail_at(e, r, step, idx, "runs before the backward of (%d,%d)", c + 1, mb);
    if (mb % e->K < e->K - 1 && AT(b_rank, c, mb + 1) < 0)
        return fail_at(e, r, step, idx, "runs before the backward of (%d,%d), the segment after it, which hands this one "
                       "its dK/dV (last in, first out)", c, mb + 1);
    if (c > 0) {
        char nm[48];
        if (find(&e->r[r], buf_ga(c - 1, mb)))
            return fail_at(e, r, step, idx, "writes %s, which rank %d already holds", buf_name(buf_ga(c - 1, mb), nm, sizeof nm), r);
        if (!create(e, r, buf_ga(c - 1, mb), true, step, idx)) return oom(e);
    }
    AT(b_rank, c, mb) = r;
    AT(b_idx, c, mb) = idx;
    if (a->op == WP_OP_B) {
        rstate *R = &e->r[r];
        size_t kb = acts_bytes_of(e, c, mb, true);
        R->acts_bytes += kb;
        R->bytes += kb;
        note_peaks(e, r);
    }
    return DONE;
}

/* The W part: where this micro-batch's gW goes. Checked before anything changes. */
/* *ng instances of GW[c] (its slices in a sliced schedule), or none for the fp32 accumulator. */
static int gradient_target(eng *e, int r, int step, int idx, const wp_action *a, inst **g, int *ng) {
    *ng = 0;
    if (a->to_master) {
        if (!sched_owns(e->s, r, a->chunk, -1))
            return e->S ? fail_at(e, r, step, idx, "adds gW to the fp32 accumulator of chunk %d, whose %d slices "
                                  "rank %d does not all own", a->chunk, e->S, r)
                        : fail_at(e, r, step, idx, "adds gW to the fp32 accumulator of chunk %d, which rank %d owns, "
                                  "not rank %d", a->chunk, e->s->owner[a->chunk], r);
        return DONE;
    }
    return need_all(e, r, step, idx, buf_gw(a->chunk), true, g, ng);
}

static int add_contribution(eng *e, int r, int step, int idx, const wp_action *a, inst **g, int ng) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, n = ng ? ng : e->SL;
    for (int k = 0; k < n; k++) {
        uint64_t *set = ng ? g[k]->mbs : &st->acc[((size_t)c * e->SL + k) * e->words];
        if (ng && g[k]->gstep >= 0 && g[k]->gstep != step)
            return fail_at(e, r, step, idx, "adds to GW[%d], which still holds gradients of another step", c);
        if (bit(set, mb))
            return fail_at(e, r, step, idx, "adds micro-batch %d's gW of chunk %d a second time", mb, c);
    }
    for (int k = 0; k < n; k++) {
        set_bit(ng ? g[k]->mbs : &st->acc[((size_t)c * e->SL + k) * e->words], mb);
        if (ng) g[k]->gstep = step;
    }
    AT(w_rank, c, mb) = r;
    AT(w_idx, c, mb) = idx;
    rstate *R = &e->r[r];
    size_t ab = acts_bytes_of(e, c, mb, false) + (a->op == WP_OP_W ? acts_bytes_of(e, c, mb, true) : 0);
    R->n_acts--;
    R->acts_bytes -= ab;
    R->bytes -= ab;
    return DONE;
}

static int do_compute(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, mb = a->mb, rc;
    if (c < 0 || c >= e->C || mb < 0 || mb >= e->M)
        return fail_at(e, r, step, idx, "chunk %d or micro-batch %d out of range", c, mb);
    if (a->op == WP_OP_F) return do_forward(e, r, step, idx, a);
    inst *g[WP_MAX_CHUNKS];
    int ng = 0;
    if (a->op == WP_OP_W) {
        if (AT(b_rank, c, mb) != r || AT(w_rank, c, mb) >= 0) {
            if (AT(w_rank, c, mb) >= 0)
                return fail_at(e, r, step, idx, "the W-pass of (%d,%d) runs a second time (first on rank %d, action %d)",
                               c, mb, AT(w_rank, c, mb), AT(w_idx, c, mb));
            return fail_at(e, r, step, idx, "needs B(%d,%d) on this rank first", c, mb);
        }
        if ((rc = gradient_target(e, r, step, idx, a, g, &ng)) != DONE) return rc;
        if ((rc = add_contribution(e, r, step, idx, a, g, ng)) != DONE) return rc;
        return run_for(e, r, step, idx, a);
    }
    if (a->op == WP_OP_BW) {
        if (AT(w_rank, c, mb) >= 0)
            return fail_at(e, r, step, idx, "the W-pass of (%d,%d) runs a second time (first on rank %d, action %d)", c,
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
        return fail_at(e, r, step, idx, "peer %d or channel %d is not valid", a->peer, a->channel);
    wp_buf b = absolute(a->buf, step), one[WP_MAX_CHUNKS];
    if (expand(e, b, one) != 1)
        return fail_at(e, r, step, idx, "%s: in a sliced schedule a transfer moves one slice",
                       buf_name(a->buf, nm, sizeof nm));
    inst *in = find(R, b);
    if (a->op == WP_OP_RECV) {
        if (in)
            return fail_at(e, r, step, idx, "receives %s, which rank %d already holds (since action %d%s)",
                           buf_name(a->buf, nm, sizeof nm), r, in->born, step_note(e, in->born_step));
        if (!(in = create(e, r, b, false, step, idx))) return oom(e);
        return post_xfer(e, false, r, step, idx, a->peer, a->channel, b, in);
    }
    if (!in)
        return fail_at(e, r, step, idx, "sends %s, which rank %d does not hold%s", buf_name(a->buf, nm, sizeof nm), r,
                       freed_note(e, R, b, step, note, sizeof note));
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
    if (b.kind != WP_BUF_W) return fail_at(e, r, step, idx, "LOAD creates weights only");
    for (int k = 0; k < e->SL; k++) {
        if (b.nslices && k != b.slice) continue;
        if (!sched_owns(e->s, r, c, e->S ? k : -1))
            return fail_at(e, r, step, idx, "only %s can load it from its master", owner_text(e, c, k, who, sizeof who));
        if (b.idx != e->master[c * e->SL + k])
            return fail_at(e, r, step, idx, "loads %s, but the master of chunk %d holds version @%d now",
                           buf_name(a->buf, nm, sizeof nm), c, e->master[c * e->SL + k] - step);
        int upd = b.idx - 1; /* the step whose UPDATE made this version */
        if (e->s->tied && c == e->C - 1 && upd >= 0 && upd < e->steps && e->st[upd].tie_in[k] != e->tie_expect[k])
            return fail_at(e, r, step, idx, "loads %s before the updated embedding reached the tied head (%d of %d "
                           "T.w pieces taken in)", buf_name(a->buf, nm, sizeof nm), e->st[upd].tie_in[k], e->tie_expect[k]);
    }
    return DONE;
}

static int do_create(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    wp_buf b = absolute(a->buf, step), parts[WP_MAX_CHUNKS];
    int c = a->buf.chunk, rc;
    if (c < 0 || c >= e->C) return fail_at(e, r, step, idx, "chunk %d out of range", c);
    if (a->op == WP_OP_LOAD) {
        if ((rc = do_load(e, r, step, idx, a, b)) != DONE) return rc;
    } else if (a->buf.kind != WP_BUF_GW) {
        return fail_at(e, r, step, idx, "ZERO creates gradients only");
    }
    int n = expand(e, b, parts);
    if (n < 0) return bad_slicing(e, r, step, idx, a->buf);
    for (int i = 0; i < n; i++)
        if (find(&e->r[r], parts[i]))
            return fail_at(e, r, step, idx, "creates %s, which rank %d already holds",
                           rel_name(parts[i], step, nm, sizeof nm), r);
    for (int i = 0; i < n; i++)
        if (!create(e, r, parts[i], true, step, idx)) return oom(e);
    return run_for(e, r, step, idx, a);
}

/* ACC drains a GW (whole, a slice, or a travelling partial) into the owner's fp32 accumulators. */
static int do_acc(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk, rc, n;
    char who[80];
    if (c < 0 || c >= e->C) return fail_at(e, r, step, idx, "chunk %d out of range", c);
    wp_buf b = a->buf.kind == WP_BUF_GW && a->buf.chunk == c ? a->buf : buf_gw(c);
    inst *g[WP_MAX_CHUNKS];
    if ((rc = need_all(e, r, step, idx, b, true, g, &n)) != DONE) return rc;
    for (int i = 0; i < n; i++) {
        int k = slice_of(g[i]->b);
        if (!sched_owns(e->s, r, c, e->S ? k : -1))
            return fail_at(e, r, step, idx, "the accumulator belongs to %s", owner_text(e, c, k, who, sizeof who));
        if (g[i]->gstep >= 0 && g[i]->gstep != step)
            return fail_at(e, r, step, idx, "GW[%d] holds gradients of another step", c);
        int dup = first_common(&st->acc[((size_t)c * e->SL + k) * e->words], g[i]->mbs, e->M);
        if (dup >= 0)
            return fail_at(e, r, step, idx, "GW[%d] brings micro-batch %d's contribution to the owner a second time", c,
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
        return fail_at(e, r, step, idx, "FOLD needs a partial slice GW[c]/k:%d.p of a sliced schedule or a step sum "
                       "GW[c].s, not %s", e->S, buf_name(p, nm, sizeof nm));
    wp_buf mine = p;
    mine.lane = WP_LANE_OWN;
    if ((rc = need_all(e, r, step, idx, p, true, part, &n)) != DONE) return rc;
    if ((rc = need_all(e, r, step, idx, mine, false, own, &m)) != DONE) return rc;
    for (int i = 0; i < n; i++) {
        if ((part[i]->gstep >= 0 && part[i]->gstep != step) || (own[i]->gstep >= 0 && own[i]->gstep != step))
            return fail_at(e, r, step, idx, "folds gradients of another step");
        int dup = first_common(part[i]->mbs, own[i]->mbs, e->M);
        if (dup >= 0)
            return fail_at(e, r, step, idx, "%s already holds micro-batch %d's gW of slice %d",
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
        return fail_at(e, r, step, idx, "DUP makes one partial slice GW[c]/k:%d.p of a sliced schedule, not %s", e->S,
                       buf_name(b, nm, sizeof nm));
    src.lane = WP_LANE_SUM;
    if ((rc = need_one(e, r, step, idx, src, false, &from)) != DONE) return rc;
    if (find(&e->r[r], b))
        return fail_at(e, r, step, idx, "creates %s, which rank %d already holds", buf_name(b, nm, sizeof nm), r);
    inst *in = create(e, r, b, true, step, idx);
    if (!in) return oom(e);
    memcpy(in->mbs, from->mbs, (size_t)e->words * sizeof *in->mbs);
    in->gstep = from->gstep;
    return run_for(e, r, step, idx, a);
}

/* DUP: a second lane's copy of weights held here on lane F (whole or one slice), or a step sum's
 * slice in the grad dtype (dup_sum). */
static int do_dup(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    wp_buf b = absolute(a->buf, step), src = b, parts[WP_MAX_CHUNKS];
    inst *from[WP_MAX_CHUNKS];
    int rc;
    if (b.kind == WP_BUF_GW && b.lane == WP_LANE_PART) return dup_sum(e, r, step, idx, a);
    if (b.kind != WP_BUF_W || b.lane == WP_LANE_F || b.chunk < 0 || b.chunk >= e->C)
        return fail_at(e, r, step, idx, "DUP copies weights from lane F to another lane or a step sum's slice to a partial, not into %s",
                       buf_name(a->buf, nm, sizeof nm));
    src.lane = WP_LANE_F;
    if ((rc = need_all(e, r, step, idx, src, false, from, NULL)) != DONE) return rc;
    int n = expand(e, b, parts);
    if (n < 0) return bad_slicing(e, r, step, idx, a->buf);
    for (int i = 0; i < n; i++)
        if (find(&e->r[r], parts[i]))
            return fail_at(e, r, step, idx, "creates %s, which rank %d already holds",
                           rel_name(parts[i], step, nm, sizeof nm), r);
    for (int i = 0; i < n; i++)
        if (!create(e, r, parts[i], true, step, idx)) return oom(e);
    return run_for(e, r, step, idx, a);
}

/* Tied embeddings (ir.h: T, TOUT, TIN; tie.c). Which end a rank is, and when. */
static int tie_check(eng *e, int r, int step, int idx, const wp_action *a, bool out) {
    char nm[48], who[80];
    wp_buf b = a->buf;
    if (!e->s->tied || b.kind != WP_BUF_T || b.chunk != 0 || b.lane > WP_TIE_WEIGHT || b.nslices)
        return fail_at(e, r, step, idx, "%s needs a T.g or T.w piece of a tied schedule, not %s", op_name(a->op),
                       buf_name(b, nm, sizeof nm));
    int k = tie_piece_k(b), j = tie_piece_j(b), last = e->C - 1;
    if (k >= e->SL || j >= e->SL) return fail_at(e, r, step, idx, "%s: no such piece", buf_name(b, nm, sizeof nm));
    bool grad = b.lane == WP_TIE_GRAD, head_side = grad == out; /* T.g leaves the head, T.w reaches it */
    int c = head_side ? last : 0, sl = head_side ? k : j;
    if (!sched_owns(e->s, r, c, e->S ? sl : -1))
        return fail_at(e, r, step, idx, "%s of %s belongs to %s", op_name(a->op), buf_name(b, nm, sizeof nm),
                       owner_text(e, c, sl, who, sizeof who));
    const stepst *st = &e->st[step];
    if (grad && e->r[r].arrived[step])
        return fail_at(e, r, step, idx, "%s after REDUCE: the norm must count the tied gradient once", op_name(a->op));
    if (grad && out)
        for (int mb = 0; mb < e->M; mb++)
            if (!bit(&st->acc[((size_t)last * e->SL + k) * e->words], mb))
                return fail_at(e, r, step, idx, "takes the head's gradient before micro-batch %d's arrived", mb);
    if (!grad && !st->updated[c * e->SL + sl])
        return fail_at(e, r, step, idx, "%s of %s before UPDATE(%d)", op_name(a->op), buf_name(b, nm, sizeof nm), c);
    return DONE;
}

static int do_tout(eng *e, int r, int step, int idx, const wp_action *a) {
    char nm[48];
    int rc = tie_check(e, r, step, idx, a, true);
    if (rc != DONE) return rc;
    if (find(&e->r[r], a->buf))
        return fail_at(e, r, step, idx, "creates %s, which rank %d already holds", buf_name(a->buf, nm, sizeof nm), r);
    if (!create(e, r, a->buf, true, step, idx)) return oom(e);
    return run_for(e, r, step, idx, a);
}

static int do_tin(eng *e, int r, int step, int idx, const wp_action *a) {
    inst *in;
    int rc = tie_check(e, r, step, idx, a, false);
    if (rc != DONE || (rc = need_one(e, r, step, idx, a->buf, false, &in)) != DONE) return rc;
    if (a->buf.lane == WP_TIE_WEIGHT) e->st[step].tie_in[tie_piece_k(a->buf)]++;
    else e->st[step].tie_gin[tie_piece_j(a->buf)]++;
    return run_for(e, r, step, idx, a);
}

static int do_reduce(eng *e, int r, int step, int idx) {
    stepst *st = &e->st[step];
    rstate *R = &e->r[r];
    if (!R->arrived[step]) {
        for (int j = 0; e->s->tied && j < e->SL; j++)
            if (sched_owns(e->s, r, 0, e->S ? j : -1) && st->tie_gin[j] != e->tie_expect_g[j])
                return fail_at(e, r, step, idx, "REDUCE before the head's gradient reached the tied embedding (slice %d: "
                               "%d of %d T.g pieces taken in)", j, st->tie_gin[j], e->tie_expect_g[j]);
        for (int c = 0; c < e->C; c++)
            for (int k = 0; k < e->SL; k++) {
                if (!sched_owns(e->s, r, c, e->S ? k : -1)) continue;
                for (int mb = 0; mb < e->M; mb++)
                    if (!bit(&st->acc[((size_t)c * e->SL + k) * e->words], mb))
                        return e->S ? fail_at(e, r, step, idx, "slice %d of chunk %d's accumulator lacks micro-batch "
                                              "%d's gradient", k, c, mb)
                                    : fail_at(e, r, step, idx, "chunk %d's accumulator lacks micro-batch %d's gradient",
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
        wait_for(R, WHY_REDUCE, buf_gw(0), step);
        return BLOCKED;
    }
    R->passed[step] = true;
    wp_action red = {.op = WP_OP_REDUCE, .chunk = -1, .mb = -1};
    return rec_comp(e, r, step, idx, &red, R->reduce_t0[step], e->now) ? oom(e) : DONE;
}

static int do_update(eng *e, int r, int step, int idx, const wp_action *a) {
    stepst *st = &e->st[step];
    int c = a->chunk;
    if (c < 0 || c >= e->C) return fail_at(e, r, step, idx, "chunk %d out of range", c);
    int k = e->S ? r : 0;
    if (e->S ? r >= e->S : e->s->owner[c] != r)
        return e->S ? fail_at(e, r, step, idx, "rank %d owns no slice of chunk %d", r, c)
                    : fail_at(e, r, step, idx, "chunk %d is owned by rank %d", c, e->s->owner[c]);
    if (!e->r[r].passed[step])
        return fail_at(e, r, step, idx, "updates before this rank's REDUCE (clipping and the inf/NaN skip need the "
                       "global norm first)");
    if (st->updated[c * e->SL + k]++) return fail_at(e, r, step, idx, "chunk %d is updated a second time", c);
    e->master[c * e->SL + k]++;
    memset(&st->acc[((size_t)c * e->SL + k) * e->words], 0, (size_t)e->words * sizeof *st->acc);
    return run_for(e, r, step, idx, a);
}

/* FREE of a whole name in a sliced schedule drops every slice of it held here. */
static int do_free(eng *e, int r, int step, int idx, const wp_action *a) {
    rstate *R = &e->r[r];
    char nm[48], note[96];
    wp_buf b = absolute(a->buf, step), parts[WP_MAX_CHUNKS];
    inst *in[WP_MAX_CHUNKS];
    int n = expand(e, b, parts), held = 0;
    if (n < 0) return bad_slicing(e, r, step, idx, a->buf);
    for (int i = 0; i < n; i++)
        if ((in[held] = find(R, parts[i]))) held++;
    if (!held)
        return fail_at(e, r, step, idx, "frees %s, which rank %d does not hold%s", buf_name(a->buf, nm, sizeof nm), r,
                       freed_note(e, R, n == 1 ? b : parts[0], step, note, sizeof note));
    for (int i = 0; i < held; i++)
        if (!in[i]->present || in[i]->sends > 0) {
            wait_for(R, in[i]->present ? WHY_SEND : WHY_ARRIVE, in[i]->b, step);
            return BLOCKED;
        }
    for (int i = 0; i < held; i++)
        if (destroy(e, r, in[i], step, idx)) return oom(e);
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
    default: return fail_at(e, r, step, idx, "unknown op %d", a->op);
    }
}

static void advance_rank(eng *e, int r) {
    rstate *R = &e->r[r];
    const int n = e->s->rank[r].n;
    while (!R->done && !e->failed && R->busy_until <= e->now) {
        if (R->pc == n * e->steps) {
            R->done = true;
            e->progress = true;
            break;
        }
        int step = R->pc / n, idx = R->pc % n;
        if (engine_action(e, r, step, idx) != DONE) break;
        R->why = WHY_NONE;
        R->pc++;
        e->progress = true;
        if (R->pc % n == 0) {
            double end = R->busy_until > e->now ? R->busy_until : e->now;
            if (end > e->run->step_end[step]) e->run->step_end[step] = end;
        }
    }
}



/* ---------- checks before and after ---------- */

static int check_structure(eng *e) {
    const wp_schedule *s = e->s;
    for (int c = 0; c < e->C; c++)
        if (s->owner[c] < 0 || s->owner[c] >= e->N) return fail_plain(e, "owner of chunk %d is rank %d, not a rank", c, s->owner[c]);
    for (int r = 0; r < e->N; r++) {
        int reduces = 0;
        for (int i = 0; i < s->rank[r].n; i++) reduces += s->rank[r].a[i].op == WP_OP_REDUCE;
        if (reduces != 1) return fail_plain(e, "rank %d has %d REDUCE actions; every rank runs exactly one per step", r, reduces);
        for (int i = 0; i < s->rank[r].n_carry; i++) {
            wp_buf b = s->rank[r].carry[i];
            char nm[48];
            if (b.kind != WP_BUF_W || b.idx != 0 || b.chunk < 0 || b.chunk >= e->C ||
                (b.nslices && (b.nslices != e->S || b.slice >= e->S)) ||
                !sched_owns(s, r, b.chunk, b.nslices ? b.slice : e->S ? -1 : 0))
                return fail_plain(e, "rank %d carries %s into a step: only an owner's weights of the step (@0) can be "
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
            return fail_at(e, p->rank, p->step, p->index, "never received: rank %d posts no matching RECV on channel %s",
                           c->dst, channel_name(c->ch));
        }
        if (c->r_n) {
            post *p = &c->recvs[c->r_head];
            return fail_at(e, p->rank, p->step, p->index, "never sent: rank %d posts no matching SEND on channel %s",
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
                    return fail_plain(e, "step %d: the %s of chunk %d, micro-batch %d never runs", s + 1, missing, c, mb);
            }
            for (int k = 0; k < e->SL; k++)
                if (c == 0 && e->s->tied && st->tie_in[k] != e->tie_expect[k])
                    return fail_plain(e, "step %d: the updated embedding reached the tied head's slice %d in %d of %d "
                                      "T.w pieces", s + 1, k, st->tie_in[k], e->tie_expect[k]);
            for (int k = 0; k < e->SL; k++)
                if (st->updated[c * e->SL + k] != 1)
                    return fail_plain(e, "step %d: chunk %d is never updated (its owner, rank %d, lacks UPDATE(%d))",
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
            if (!find(R, want))
                return fail_plain(e, "rank %d should end the step holding %s to carry into the next one, but does not",
                                  r, buf_name(absolute(p->carry[i], 1), nm, sizeof nm));
        }
        if (R->n_held != p->n_carry) {
            for (int i = 0; i < R->n_held; i++) {
                bool carried = false;
                for (int j = 0; j < p->n_carry; j++) carried |= buf_eq(R->held[i]->b, absolute(p->carry[j], e->steps));
                if (!carried)
                    return fail_at(e, r, R->held[i]->born_step, R->held[i]->born,
                                   "%s is never freed (and is not carried into the next step)",
                                   rel_name(R->held[i]->b, R->held[i]->born_step, nm, sizeof nm));
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
        rel_name(R->why_buf, R->why_step, nm, sizeof nm);
        if (R->why == WHY_ARRIVE) snprintf(why, sizeof why, "%s to arrive", nm);
        else if (R->why == WHY_SEND) snprintf(why, sizeof why, "its send of %s to complete", nm);
        else if (R->why == WHY_REDUCE)
            snprintf(why, sizeof why, "the REDUCE of every rank (%d of %d arrived)", e->st[R->why_step].arrived, e->N);
        else snprintf(why, sizeof why, "its peer");
        if (n < (int)sizeof msg)
            n += snprintf(msg + n, sizeof msg - (size_t)n, "%s rank %d, action %d (%s)%s waits for %s", shown ? ";" : "",
                          r, idx, at, step_note(e, step), why);
        shown++;
    }
    if (blocked > shown && n < (int)sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, "; %d more ranks wait", blocked - shown);
    return fail_plain(e, "%s", msg);
}

/* ---------- setup and main loop ---------- */

static int setup(eng *e) {
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
    if (!e->r || !e->ch || !e->ln || !e->busy_links || !e->nic_cap || !e->nic_cnt || !run->rank || !run->step_end || !run->reduce_at) return -1;
    for (int s = 0; s < e->steps; s++) {
        stepst *st = &e->st[s];
        int **arrs[6] = {&st->f_rank, &st->b_rank, &st->w_rank, &st->f_idx, &st->b_idx, &st->w_idx};
        for (int k = 0; k < 6; k++) {
            if (!(*arrs[k] = malloc(cm * sizeof(int)))) return -1;
            for (size_t i = 0; i < cm; i++) (*arrs[k])[i] = -1;
        }
        if (!(st->acc = calloc((size_t)e->C * e->SL * e->words, sizeof *st->acc))) return -1;
        if (!(st->updated = calloc((size_t)e->C * e->SL, sizeof *st->updated))) return -1;
    }
    if (!(e->master = calloc((size_t)e->C * e->SL, sizeof *e->master))) return -1;
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
        for (int i = 0; i < e->s->rank[r].n_carry; i++)
            if (!create(e, r, e->s->rank[r].carry[i], true, 0, 0)) return -1;
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
            free(e->r[r].freed);
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
            for (int r = 0; r < e->N && !e->failed; r++) advance_rank(e, r);
        } while (e->progress && !e->failed);
        if (e->failed) return;
        double t = elink_next_time(e);
        if (isinf(t)) {
            if (!all_done(e)) deadlock(e);
            return;
        }
        if (elink_advance_time(e, t)) {
            oom(e);
            return;
        }
    }
}

int engine_run(const wp_schedule *s, const wp_sizes *sz, const wp_costs *costs, int steps, bool record, wp_run *run,
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
        e.S > e.N) {
        snprintf(err, errlen, "schedule: bad shape (N %d, M %d, C %d, steps %d)", e.N, e.M, e.C, steps);
        return 1;
    }
    if (setup(&e)) {
        oom(&e);
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
