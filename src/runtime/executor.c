/* The executor's actions (executor.h): one function per IR op, run in list order. */
#include "executor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nonfinite.h"
#include "clock.h"
#include "memlimit.h"
#include "rt_impl.h"
#include "units.h"

static size_t tokens_per_mb(const wp_layout *L) { return (size_t)L->cfg.micro_batch * (size_t)L->cfg.seq; }

wp_result rt_create(wp_rt **out, const rt_config *cfg, char *err, size_t errlen) {
    wp_rt *rt = calloc(1, sizeof *rt);
    if (!rt) return snprintf(err, errlen, "executor: out of memory"), 1;
    rt->c = *cfg;
    rt->k = model_kern(cfg->m);
    rt->ai = -1;
    rt->t_origin = cfg->t_origin > 0 ? cfg->t_origin : wp_now();
    pool_init(&rt->pool, rt->k, cfg->L);
    if (rt_seg_init(rt, err, errlen)) return 1;
    pace_init(&rt->pace, cfg->L, cfg->s->nranks, cfg->device_tflops);
    const wp_layout *L = cfg->L;
    size_t T = tokens_per_mb(L);
    rt->blocked = calloc((size_t)cfg->s->nranks * WP_MAX_CHANNELS, sizeof *rt->blocked);
    rt->h_tok = malloc(T * sizeof *rt->h_tok);
    rt->h_tgt = malloc(T * sizeof *rt->h_tgt);
    rt->scratch_out = kern_alloc(rt->k, T * (size_t)L->cfg.h * wp_dtype_size(kern_compute_dtype(rt->k)));
    *out = rt;
    if (!rt->blocked || !rt->h_tok || !rt->h_tgt || !rt->scratch_out) { return wp_fail(WP_FAILED, err, errlen, "executor: out of memory for its scratch buffers"); }
    return 0;
}

void rt_destroy(wp_rt *rt) {
    if (!rt) return;
    for (int i = 0; i < rt->n_acts; i++) {
        rt_act *a = &rt->acts[i];
        if (a->a) model_acts_destroy(rt->c.m, a->a);
        if (a->d_tok) kern_free(rt->k, a->d_tok);
        if (a->d_tgt) kern_free(rt->k, a->d_tgt);
    }
    pool_free(&rt->pool);
    if (rt->scratch_out) kern_free(rt->k, rt->scratch_out);
    free(rt->acts);
    free(rt->def);
    free(rt->blocked);
    free(rt->h_tok);
    free(rt->h_tgt);
    free(rt->ev);
    free(rt->xev);
    for (int i = 0; i < rt->n_tm; i++) kern_timer_destroy(rt->k, rt->tm[i]);
    kern_timer_destroy(rt->k, rt->ref);
    free(rt->tm);
    free(rt->timed);
    for (int i = 0; i < rt->n_rp; i++) kern_replay_destroy(rt->k, rt->rp[i]);
    free(rt->rp);
    free(rt);
}

wp_loss_scaler rt_scaler(const wp_rt *rt) { return rt->c.scaler; }

void rt_op_times(const wp_rt *rt, double *sum_s, double *count) {
    for (int op = 0; op < WP_OP_COUNT; op++)
        for (int c = 0; c < WP_MAX_CHUNKS; c++) {
            bool later = rt->op_n[op][c] > 0; /* the first step's only where no later step ran the op */
            sum_s[op * WP_MAX_CHUNKS + c] = later ? rt->op_sum[op][c] : rt->op_warm[op][c];
            count[op * WP_MAX_CHUNKS + c] = later ? rt->op_n[op][c] : rt->op_warm_n[op][c];
        }
}

const rt_event *rt_events(const wp_rt *rt, int *n) {
    *n = rt->n_ev;
    return rt->ev;
}

void rt_peak_buffers(const wp_rt *rt, int peak[WP_BUF_KINDS]) {
    for (int k = 0; k < WP_BUF_KINDS; k++) peak[k] = rt->pool.peak[k];
}

/* ---- activation states ---- */

static rt_act *act_find(wp_rt *rt, int chunk, int mb) {
    for (int i = 0; i < rt->n_acts; i++)
        if (rt->acts[i].used && rt->acts[i].chunk == chunk && rt->acts[i].mb == mb) return &rt->acts[i];
    return NULL;
}

/* A free state of this chunk (its memory reused), or a new one. */
static rt_act *act_take(wp_rt *rt, int chunk, int mb) {
    rt_act *a = NULL;
    for (int i = 0; i < rt->n_acts && !a; i++)
        if (!rt->acts[i].used && rt->acts[i].chunk == chunk && rt_seg_same_shape(rt, rt->acts[i].mb, mb)) a = &rt->acts[i];
    if (!a) {
        if (rt->n_acts == rt->cap_acts) {
            int cap = rt->cap_acts ? 2 * rt->cap_acts : 16;
            rt_act *n = realloc(rt->acts, (size_t)cap * sizeof *n);
            if (!n) return NULL;
            rt->acts = n;
            rt->cap_acts = cap;
        }
        a = &rt->acts[rt->n_acts++];
        memset(a, 0, sizeof *a);
        a->chunk = chunk;
        size_t tb = tokens_per_mb(rt->c.L) * sizeof(int32_t);
        a->a = rt_seg_acts_create(rt, chunk, mb);
        a->d_tok = kern_alloc(rt->k, tb);
        a->d_tgt = kern_alloc(rt->k, tb);
        if (!a->a || !a->d_tok || !a->d_tgt) return NULL;
    }
    a->used = true;
    a->mb = mb;
    return a;
}

/* ---- buffers read and written by compute ---- */

static wp_result input(wp_rt *rt, wp_buf b, void **view, char *err, size_t errlen) {
    char name[64];
    rt_entry *e = pool_find(&rt->pool, b);
    if (!e) return rt_fail(rt, err, errlen, "reads %s, which this rank does not hold", buf_name(b, name, sizeof name));
    if (rt_wait(rt, e, false, err, errlen)) return 1;
    *view = pool_view(&rt->pool, e);
    if (!*view) return rt_fail(rt, err, errlen, "out of memory converting %s", buf_name(b, name, sizeof name));
    return 0;
}

/* An output A/GA buffer: the model writes compute dtype, the buffer holds the wire dtype. */
static rt_entry *output(wp_rt *rt, wp_buf b, void **dst, char *err, size_t errlen) {
    char why[300];
    rt_entry *e = pool_create(&rt->pool, b, why, sizeof why);
    if (!e) {
        rt_fail(rt, err, errlen, "%s", why);
        return NULL;
    }
    *dst = e->wire == rt->pool.compute ? e->data : rt->scratch_out;
    return e;
}

static void output_done(wp_rt *rt, rt_entry *e, void *dst) {
    if (dst != e->data) kern_convert(rt->k, e->data, e->wire, dst, rt->pool.compute, e->bytes / wp_dtype_size(e->wire));
    e->arrived = true;
    pool_touch(e);
}

static wp_result kern_check(wp_rt *rt, int rc, const char *what, char *err, size_t errlen) {
    const char *ke = kern_error(rt->k);
    if (rc == 0 && !ke) return 0;
    return rt_fail(rt, err, errlen, "%s failed: %s", what, ke ? ke : "model error");
}

static int last_chunk(const wp_rt *rt) { return rt->c.L->cfg.n_chunks - 1; }

/* dloss: gradients of all micro-batches add up to the mean loss's gradient, times the scale:
 * the mean over the step's targets (all micro-batches, all ranks), as one forward over the
 * whole batch with labels -100 at the masked positions. A step without a target has no
 * gradient (0, not a division by zero). */
static float dloss_of(const wp_rt *rt) {
    double n = rt_seg_step_tokens(rt);
    return n > 0 ? (float)(rt->c.scaler.scale / n) : 0.0f;
}

/* ---- the model's part of a compute action: called directly, or through a replay (--graphs) ---- */

typedef struct {
    wp_rt *rt;
    const wp_action *x;
    rt_act *a;
    void *w, *x_in, *x_out; /* F */
    void *g_out, *g_in, *gw; /* B, W, BW */
    wp_dtype gt;
} model_call;

static bool reads_tokens(const wp_rt *rt, int chunk);

/* Issues the action's model work: under a replay (kernels/replay.h) a host read would end the
 * recording, so the loss is read after it (do_forward). */
static wp_result call_model(void *p) {
    const model_call *mc = p;
    wp_rt *rt = mc->rt;
    const int c = mc->x->chunk, last = last_chunk(rt);
    wp_acts *a = mc->a->a;
    switch (mc->x->op) {
    case WP_OP_F: /* the training forward: the head's backward runs in F, with the dloss its B gets */
        return model_forward_train(rt->c.m, c, mc->w, a, mc->x_in, reads_tokens(rt, c) ? mc->a->d_tok : NULL,
                                   c == last ? mc->a->d_tgt : NULL, mc->x_out, NULL, dloss_of(rt));
    case WP_OP_BW: return model_backward(rt->c.m, c, mc->w, a, mc->g_out, dloss_of(rt), mc->g_in, mc->gw, mc->gt);
    case WP_OP_B: return model_backward_input(rt->c.m, c, mc->w, a, mc->g_out, dloss_of(rt), mc->g_in);
    default: return model_backward_weight(rt->c.m, c, a, mc->gw, mc->gt);
    }
}

/* Each action of the rank's list has its own replay: the list is the same every step, so the
 * same action issues the same calls, unless its buffers or scalars moved (another key). */
static wp_result run_model(wp_rt *rt, model_call *mc) {
    if (!rt->c.graphs) return call_model(mc);
    const int n = rt->c.s->rank[rt->c.rank].n;
    if (!rt->rp) {
        if (!(rt->rp = calloc((size_t)n, sizeof *rt->rp))) return kern_set_error(rt->k, "executor: out of memory for the replays"), 1;
        rt->n_rp = n;
    }
    if (rt->ai < 0 || rt->ai >= rt->n_rp) return call_model(mc);
    if (!rt->rp[rt->ai] && !(rt->rp[rt->ai] = kern_replay_create(rt->k))) return 1;
    wp_replay_how how;
    const char *why;
    wp_result rc = kern_replay_run(rt->k, rt->rp[rt->ai], call_model, mc, &how, &why);
    rt->rp_count[how]++;
    if (how == WP_REPLAY_EAGER && rt->steps_run > 1 && !rt->rp_why[0])
        snprintf(rt->rp_why, sizeof rt->rp_why, "%s (%s of chunk %d)", why, op_name(mc->x->op), mc->x->chunk);
    return rc;
}

void rt_replay_counts(const wp_rt *rt, int64_t counts[3], const char **why) {
    for (int i = 0; i < 3; i++) counts[i] = rt->rp_count[i];
    *why = rt->rp_why;
}

/* The micro-batch's tokens for the first chunk (the embedding), the last (the targets) and,
 * with document masks, every chunk: each stage finds the documents from the tokens itself,
 * from the same deterministic loader, so no strategy passes boundaries along. */
static bool reads_tokens(const wp_rt *rt, int chunk) {
    return chunk == 0 || chunk == last_chunk(rt) || rt->c.L->cfg.doc_mask;
}

static wp_result load_tokens(wp_rt *rt, rt_act *a, int chunk, int mb, char *err, size_t errlen) {
    if (!reads_tokens(rt, chunk)) return 0;
    if (!rt->c.data) return rt_fail(rt, err, errlen, "no training data");
    if (loader_get(rt->c.data, rt->step, rt_seg_sample(rt, mb), rt->h_tok, rt->h_tgt))
        return rt_fail(rt, err, errlen, "%s", loader_error(rt->c.data));
    rt_seg_upload(rt, mb, a->d_tok, a->d_tgt);
    return 0;
}

static wp_result do_forward(wp_rt *rt, const wp_action *x, char *err, size_t errlen) {
    const int c = x->chunk, mb = x->mb, last = last_chunk(rt);
    void *w, *x_in = NULL, *x_out = NULL;
    if (input(rt, x->buf, &w, err, errlen)) return 1;
    if (c > 0 && input(rt, buf_a(c - 1, mb), &x_in, err, errlen)) return 1;
    rt_act *a = act_take(rt, c, mb);
    if (!a) return rt_fail(rt, err, errlen, "out of memory for an activation state");
    rt_act *prev = rt_seg_has_prev(rt, mb) ? act_find(rt, c, mb - 1) : NULL;
    if (rt_seg_link(rt, a->a, mb, prev ? prev->a : NULL, err, errlen)) return 1;
    if (load_tokens(rt, a, c, mb, err, errlen)) return 1;
    rt_entry *out = c < last ? output(rt, buf_a(c, mb), &x_out, err, errlen) : NULL;
    if (c < last && !out) return 1;
    double loss = 0;
    model_call mc = {.rt = rt, .x = x, .a = a, .w = w, .x_in = x_in, .x_out = x_out};
    wp_result rc = run_model(rt, &mc);
    if (!rc && c == last) rc = model_loss_sum(rt->c.m, a->a, &loss);
    if (out) output_done(rt, out, x_out);
    if (c == last) {
        rt->loss_sum += loss;
        rt->tokens += rt_seg_tokens(rt, mb);
    }
    return kern_check(rt, rc, "forward", err, errlen);
}

/* Where the W-pass adds: the owner's fp32 accumulator, or the travelling GW[c]. */
static wp_result grad_target(wp_rt *rt, const wp_action *x, void **gw, wp_dtype *gt, rt_entry **ge, char *err,
                       size_t errlen) {
    *ge = NULL;
    if (x->to_master) {
        *gw = optim_grad(rt->c.o, x->chunk);
        *gt = WP_F32;
        if (!*gw) return rt_fail(rt, err, errlen, "to_master on a chunk this rank does not own");
        return 0;
    }
    *ge = pool_find(&rt->pool, buf_gw(x->chunk));
    if (!*ge) return rt_fail(rt, err, errlen, "GW[%d] is not held here", x->chunk);
    if (rt_wait(rt, *ge, true, err, errlen)) return 1;
    *gw = (*ge)->data;
    *gt = (*ge)->wire;
    return 0;
}

static void act_release(rt_act *a) { a->used = false; }

static wp_result do_backward(wp_rt *rt, const wp_action *x, char *err, size_t errlen) {
    const int c = x->chunk, mb = x->mb, last = last_chunk(rt);
    bool input_part = x->op != WP_OP_W, weight_part = x->op != WP_OP_B;
    rt_act *a = act_find(rt, c, mb);
    if (!a) return rt_fail(rt, err, errlen, "no activation state of (%d,%d) on this rank", c, mb);
    void *w = NULL, *g_out = NULL, *g_in = NULL, *gw = NULL;
    wp_dtype gt = WP_F32;
    rt_entry *ge = NULL, *out = NULL;
    if (input_part) {
        if (input(rt, x->buf, &w, err, errlen)) return 1;
        if (c < last && input(rt, buf_ga(c, mb), &g_out, err, errlen)) return 1;
    }
    if (weight_part && grad_target(rt, x, &gw, &gt, &ge, err, errlen)) return 1;
    if (input_part && c > 0 && !(out = output(rt, buf_ga(c - 1, mb), &g_in, err, errlen))) return 1;
    model_call mc = {.rt = rt, .x = x, .a = a, .w = w, .g_out = g_out, .g_in = g_in, .gw = gw, .gt = gt};
    int rc = run_model(rt, &mc);
    if (out) output_done(rt, out, g_in);
    if (ge) pool_touch(ge);
    if (weight_part) act_release(a);
    return kern_check(rt, rc, op_name(x->op), err, errlen);
}

/* ---- owner and bookkeeping actions ---- */

/* The master elements a LOAD or an ACC names (a whole chunk or a slice, ir.h) must be exactly
 * those this rank's optimizer holds. */
static wp_result owned_range_check(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64];
    size_t off, len, o_off, o_len;
    pool_elem_range(&rt->pool, b, &off, &len);
    if (!optim_range(rt->c.o, b.chunk, &o_off, &o_len) || o_off != off || o_len != len)
        return rt_fail(rt, err, errlen, "%s is not the part of chunk %d this rank's optimizer holds",
                       buf_name(b, name, sizeof name), b.chunk);
    return 0;
}

static wp_result do_load(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char why[300];
    rt_entry *e = pool_create(&rt->pool, b, why, sizeof why);
    if (!e) return rt_fail(rt, err, errlen, "%s", why);
    if (owned_range_check(rt, b, err, errlen)) return 1;
    if (optim_working_copy(rt->c.o, b.chunk, e->data, e->wire))
        return rt_fail(rt, err, errlen, "LOAD: %s", optim_error(rt->c.o));
    pool_mark_arrived(&rt->pool, e);
    return 0;
}

static wp_result do_zero(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char why[300];
    rt_entry *e = pool_create(&rt->pool, b, why, sizeof why);
    if (!e) return rt_fail(rt, err, errlen, "%s", why);
    kern_zero(rt->k, e->data, e->bytes);
    pool_mark_arrived(&rt->pool, e);
    return kern_check(rt, 0, "ZERO", err, errlen);
}

/* ACC drains the GW buffer it names (the whole GW[c], a slice or a partial sum of one). */
static wp_result do_acc(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64];
    rt_entry *e = pool_find(&rt->pool, b);
    if (!e) return rt_fail(rt, err, errlen, "%s is not held here", buf_name(b, name, sizeof name));
    if (owned_range_check(rt, b, err, errlen)) return 1;
    if (rt_wait(rt, e, true, err, errlen)) return 1;
    if (optim_accumulate(rt->c.o, b.chunk, e->data, e->wire)) return rt_fail(rt, err, errlen, "%s", optim_error(rt->c.o));
    kern_zero(rt->k, e->data, e->bytes);
    pool_touch(e);
    return kern_check(rt, 0, "ACC", err, errlen);
}

/* One hop of a reduce-scatter: the partial sum b gets this rank's own GW slice of the same
 * elements added, in fp32 and rounded once to the grad dtype (kern_accumulate). */
static wp_result do_fold(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64];
    wp_buf own_name = b;
    own_name.lane = WP_LANE_OWN;
    rt_entry *part = pool_find(&rt->pool, b), *own = pool_find(&rt->pool, own_name);
    if (!part || !own)
        return rt_fail(rt, err, errlen, "%s is not held here", buf_name(part ? own_name : b, name, sizeof name));
    if (rt_wait(rt, own, false, err, errlen) || rt_wait(rt, part, true, err, errlen)) return 1;
    if (own->bytes / wp_dtype_size(own->wire) != part->bytes / wp_dtype_size(part->wire))
        return rt_fail(rt, err, errlen, "FOLD: the partial and the own slice differ in size");
    kern_accumulate(rt->k, part->data, part->wire, own->data, own->wire, part->bytes / wp_dtype_size(part->wire));
    pool_touch(part);
    return kern_check(rt, 0, "FOLD", err, errlen);
}

/* A second lane's copy of weights held on lane F (ir.h: DUP), whole or one slice; or a step sum's
 * slice (fp32) as a partial in the grad dtype, rounded once. */
static wp_result do_dup(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64], why[300];
    const bool sum = b.kind == WP_BUF_GW;
    wp_buf src_name = b;
    src_name.lane = sum ? WP_LANE_SUM : WP_LANE_F;
    rt_entry *src = pool_find(&rt->pool, src_name);
    if (!src) return rt_fail(rt, err, errlen, "%s is not held here", buf_name(src_name, name, sizeof name));
    if (rt_wait(rt, src, false, err, errlen)) return 1;
    rt_entry *e = pool_create(&rt->pool, b, why, sizeof why);
    if (!e) return rt_fail(rt, err, errlen, "%s", why);
    const size_t n = e->bytes / wp_dtype_size(e->wire);
    if (n != src->bytes / wp_dtype_size(src->wire)) return rt_fail(rt, err, errlen, "DUP: the two lanes differ in size");
    if (sum)
        kern_convert(rt->k, e->data, e->wire, src->data, src->wire, n);
    else
        kern_copy(rt->k, e->data, src->data, e->bytes);
    pool_mark_arrived(&rt->pool, e);
    pool_touch(src);
    return kern_check(rt, 0, "DUP", err, errlen);
}

/* Tied embeddings (ir.h: TOUT, TIN; tie.c): where piece b lies in chunk c, the tensor starting at
 * element `at` of the chunk (the optimizer checks it is in this rank's part). */
static size_t tie_at(wp_rt *rt, wp_buf b, size_t at, size_t *len) {
    size_t off;
    tie_piece(rt->c.L, rt->c.s->nslices, tie_piece_k(b), tie_piece_j(b), &off, len);
    return at + off;
}

/* TOUT: T.g from the head's accumulated gradient (then zeroed: the embedding's owner steps the
 * sum), T.w from the embedding's updated master. */
static wp_result do_tout(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char why[300];
    size_t eo, ho, numel, len;
    if (!tie_offsets(rt->c.L, &eo, &ho, &numel)) return rt_fail(rt, err, errlen, "TOUT in an untied model");
    bool grad = b.lane == WP_TIE_GRAD;
    size_t at = tie_at(rt, b, grad ? ho : eo, &len);
    rt_entry *e = pool_create(&rt->pool, b, why, sizeof why);
    if (!e) return rt_fail(rt, err, errlen, "%s", why);
    if (e->bytes != len * sizeof(float)) return rt_fail(rt, err, errlen, "TOUT: the piece's size disagrees");
    if (optim_piece_get(rt->c.o, grad ? last_chunk(rt) : 0, grad ? WP_OPT_GRAD : WP_OPT_MASTER, at, len, e->data, grad))
        return rt_fail(rt, err, errlen, "TOUT: %s", optim_error(rt->c.o));
    pool_mark_arrived(&rt->pool, e);
    return kern_check(rt, 0, "TOUT", err, errlen);
}

/* TIN: T.g added in fp32 into the embedding's accumulator, T.w copied over the head's master. */
static wp_result do_tin(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64];
    size_t eo, ho, numel, len;
    if (!tie_offsets(rt->c.L, &eo, &ho, &numel)) return rt_fail(rt, err, errlen, "TIN in an untied model");
    rt_entry *e = pool_find(&rt->pool, b);
    if (!e) return rt_fail(rt, err, errlen, "reads %s, which this rank does not hold", buf_name(b, name, sizeof name));
    if (rt_wait(rt, e, false, err, errlen)) return 1; /* the fp32 data itself, never a compute-dtype view */
    bool grad = b.lane == WP_TIE_GRAD;
    size_t at = tie_at(rt, b, grad ? eo : ho, &len);
    if (e->bytes != len * sizeof(float)) return rt_fail(rt, err, errlen, "TIN: the piece's size disagrees");
    if (optim_piece_put(rt->c.o, grad ? 0 : last_chunk(rt), grad ? WP_OPT_GRAD : WP_OPT_MASTER, at, len, e->data, grad))
        return rt_fail(rt, err, errlen, "TIN: %s", optim_error(rt->c.o));
    pool_touch(e);
    return kern_check(rt, 0, "TIN", err, errlen);
}

#define MEM_RANKS 256 /* ranks whose memory the step's exchange carries (2 doubles each) */

/* The global exchange (decision.h's protocol): per-chunk sums of squares from their owners,
 * the loss sum and the token count, summed over ranks; then every rank decides alike. */
static wp_result do_reduce(wp_rt *rt, char *err, size_t errlen) {
    const int C = rt->c.L->cfg.n_chunks, world = ctl_world(rt->c.ctl);
    /* and, up to MEM_RANKS ranks, every rank's resident and allocated high-water in its own
     * slots (zero elsewhere, so the sum is the table): what the others name it by if it dies */
    const int M = world <= MEM_RANKS ? world : 0;
    double v[WP_MAX_CHUNKS + 2 + 2 * MEM_RANKS];
    if (rt_drain_deferred(rt, err, errlen)) return 1;
    nonfinite_inject(rt->c.o, C, rt->c.rank, rt->step); /* test hook (nonfinite.h); off unless set */
    for (int c = 0; c < C; c++) v[c] = optim_owns(rt->c.o, c) ? optim_chunk_sumsq(rt->c.o, c) : 0.0;
    v[C] = rt->loss_sum;
    v[C + 1] = (double)rt->tokens;
    if (M) {
        size_t now, peak;
        kern_memory(rt->k, &now, &peak);
        memset(v + C + 2, 0, 2 * (size_t)M * sizeof *v);
        v[C + 2 + rt->c.rank] = memlimit_vmhwm();
        v[C + 2 + M + rt->c.rank] = (double)peak;
    }
    char why[300];
    ctl_set_status(rt->c.ctl, "step %lld action %d REDUCE: waiting for every rank", (long long)rt->step, rt->ai);
    double t0 = wp_now();
    if (ctl_allreduce(rt->c.ctl, CTL_SUM, v, C + 2 + 2 * M, why, sizeof why)) return rt_fail(rt, err, errlen, "%s", why);
    if (M) ctl_note_memory(rt->c.ctl, v + C + 2, v + C + 2 + M, (long long)rt->step);
    double t1 = wp_now();
    rt->wait_s += t1 - t0;
    rt_wait_event(rt, "REDUCE: every rank", t0, t1);
    rt->d = step_decide(grad_total_sumsq(v, C), rt->c.scaler.scale, rt->c.clip);
    rt->loss_sum = v[C];
    rt->tokens = (int64_t)v[C + 1];
    return 0;
}

/* The step writes no working copy: the next LOAD of the chunk makes the one that travels. */
static wp_result do_update(wp_rt *rt, int chunk, char *err, size_t errlen) {
    if (!rt->d.skip && optim_step_chunk(rt->c.o, chunk, (float)rt->lr, rt->d.grad_scale))
        return rt_fail(rt, err, errlen, "UPDATE: %s", optim_error(rt->c.o));
    if (!optim_owns(rt->c.o, chunk)) return rt_fail(rt, err, errlen, "UPDATE of a chunk this rank does not own");
    if (optim_zero_chunk_grad(rt->c.o, chunk)) return rt_fail(rt, err, errlen, "UPDATE: %s", optim_error(rt->c.o));
    return kern_check(rt, 0, "UPDATE", err, errlen);
}

static wp_result do_free(wp_rt *rt, wp_buf b, char *err, size_t errlen) {
    char name[64];
    rt_entry *e = pool_find(&rt->pool, b);
    if (!e) return rt_fail(rt, err, errlen, "FREE of %s, which this rank does not hold", buf_name(b, name, sizeof name));
    /* a whole name of a sliced buffer drops the slices held, once each has arrived and left */
    for (int i = 0; e->nslices && i < rt->pool.n; i++) {
        rt_entry *part = rt->pool.e[i];
        if (part->used && part->parent == e && rt_wait(rt, part, true, err, errlen)) return 1;
    }
    if (!e->nslices && rt_wait(rt, e, true, err, errlen)) return 1;
    pool_release(&rt->pool, e);
    return 0;
}

/* ---- the step ---- */

/* Actions that run on the rank's device stream (ir.h): F, B, W, BW, LOAD, ZERO, ACC, FOLD, DUP, UPDATE. */
static bool on_device(int op) {
    return op_is_compute(op) || op == WP_OP_LOAD || op == WP_OP_ZERO || op == WP_OP_ACC || op == WP_OP_FOLD ||
           op == WP_OP_DUP || op == WP_OP_UPDATE || op == WP_OP_TOUT || op == WP_OP_TIN;
}

/* A trace event of [t0, t1] (wp_now() times) for action x; its index, or -1 when none was
 * recorded (recording off, or no memory: a trace is best effort, training goes on). */
static int record(wp_rt *rt, const wp_action *x, double t0, double t1) {
    if (!rt->c.record) return -1;
    if (rt->n_ev == rt->cap_ev) {
        int cap = rt->cap_ev ? 2 * rt->cap_ev : 256;
        rt_event *e = realloc(rt->ev, (size_t)cap * sizeof *e);
        if (!e) return -1;
        rt->ev = e;
        rt->cap_ev = cap;
    }
    rt->ev[rt->n_ev] = (rt_event){.a = *x, .index = rt->ai, .step = rt->step,
                                  .t0 = t0 - rt->t_origin, .t1 = t1 - rt->t_origin};
    return rt->n_ev++;
}

/* ---- device time: a timer pair around each device action, read once the step is over ---- */

/* The step's reference mark, at a host time the device agrees with: the queue is drained first,
 * so the device reaches the mark as it is recorded (within a launch's latency). */
static wp_result timers_begin(wp_rt *rt, int n_actions, char *err, size_t errlen) {
    if (2 * n_actions > rt->n_tm) { /* the rank's list is the same every step: once */
        wp_kern_timer **t = realloc(rt->tm, 2 * (size_t)n_actions * sizeof *t);
        if (!t) return rt_fail(rt, err, errlen, "out of memory for the op timers");
        memset(t + rt->n_tm, 0, (size_t)(2 * n_actions - rt->n_tm) * sizeof *t);
        rt->tm = t;
        rt->n_tm = 2 * n_actions;
    }
    if (!rt->ref && !(rt->ref = kern_timer_create(rt->k))) return kern_check(rt, 1, "timer", err, errlen);
    rt->n_timed = 0;
    kern_sync(rt->k);
    rt->ref_s = wp_now();
    kern_timer_record(rt->k, rt->ref);
    return kern_check(rt, 0, "timer", err, errlen);
}

/* Mark i of action ai (0: before it, 1: after it), the timer made on the action's first run. */
static void timer_mark(wp_rt *rt, int ai, int i) {
    wp_kern_timer **t = &rt->tm[2 * ai + i];
    if (!*t) *t = kern_timer_create(rt->k);
    if (*t) kern_timer_record(rt->k, *t);
}

static wp_result timed_push(wp_rt *rt, const wp_action *x, int ev, double waited, char *err, size_t errlen) {
    if (rt->n_timed == rt->cap_timed) {
        int cap = rt->cap_timed ? 2 * rt->cap_timed : 64;
        rt_timed *n = realloc(rt->timed, (size_t)cap * sizeof *n);
        if (!n) return rt_fail(rt, err, errlen, "out of memory for the op timers");
        rt->timed = n;
        rt->cap_timed = cap;
    }
    rt->timed[rt->n_timed++] = (rt_timed){.x = x, .ai = rt->ai, .ev = ev, .waited = waited};
    return 0;
}

/* Every device action of the step has been synced: its timers are complete. Each one's device
 * time, less what it waited on the host for peers (the device idled then), per whole micro-batch
 * as costs are, into the op sums (the first step's apart); its device span into its trace event. */
static wp_result timers_end(wp_rt *rt, rt_step_stats *st, char *err, size_t errlen) {
    const bool dev = kern_timer_on_device(rt->k);
    const bool first = rt->steps_run == 0;
    for (int i = 0; i < rt->n_timed; i++) {
        const rt_timed *d = &rt->timed[i];
        const wp_kern_timer *a = rt->tm[2 * d->ai], *b = rt->tm[2 * d->ai + 1];
        double s = kern_timer_elapsed(rt->k, a, b), from = kern_timer_elapsed(rt->k, rt->ref, a);
        if (s < 0 || from < 0) return kern_check(rt, 1, "timer", err, errlen);
        double busy = s > d->waited ? s - d->waited : 0;
        st->device_s += busy;
        const wp_action *x = d->x;
        if (x->chunk >= 0 && x->chunk < WP_MAX_CHUNKS) {
            double per_mb = busy / rt_seg_share(rt, x);
            if (first) rt->op_warm[x->op][x->chunk] += per_mb, rt->op_warm_n[x->op][x->chunk] += 1;
            else rt->op_sum[x->op][x->chunk] += per_mb, rt->op_n[x->op][x->chunk] += 1;
        }
        if (dev && d->ev >= 0) {
            rt_event *e = &rt->ev[d->ev];
            e->device = true;
            e->d1 = rt->ref_s + from + s - rt->t_origin;
            e->d0 = e->d1 - busy;
        }
    }
    return 0;
}

static wp_result run_action(wp_rt *rt, const wp_action *x, char *err, size_t errlen) {
    switch (x->op) {
    case WP_OP_F: return do_forward(rt, x, err, errlen);
    case WP_OP_B:
    case WP_OP_W:
    case WP_OP_BW: return do_backward(rt, x, err, errlen);
    case WP_OP_SEND: return rt_send(rt, x, err, errlen);
    case WP_OP_RECV: return rt_recv(rt, x, err, errlen);
    case WP_OP_LOAD: return do_load(rt, x->buf, err, errlen);
    case WP_OP_ZERO: return do_zero(rt, x->buf, err, errlen);
    case WP_OP_ACC: return do_acc(rt, x->buf.kind == WP_BUF_GW ? x->buf : buf_gw(x->chunk), err, errlen);
    case WP_OP_FOLD: return do_fold(rt, x->buf, err, errlen);
    case WP_OP_DUP: return do_dup(rt, x->buf, err, errlen);
    case WP_OP_TOUT: return do_tout(rt, x->buf, err, errlen);
    case WP_OP_TIN: return do_tin(rt, x->buf, err, errlen);
    case WP_OP_REDUCE: return do_reduce(rt, err, errlen);
    case WP_OP_UPDATE: return do_update(rt, x->chunk, err, errlen);
    case WP_OP_FREE: return do_free(rt, x->buf, err, errlen);
    default: return rt_fail(rt, err, errlen, "unknown op %d", x->op);
    }
}

wp_result rt_load_carry(wp_rt *rt, char *err, size_t errlen) {
    const wp_rank_prog *p = &rt->c.s->rank[rt->c.rank];
    for (int i = 0; i < p->n_carry; i++)
        if (do_load(rt, p->carry[i], err, errlen)) return 1;
    kern_sync(rt->k);
    return kern_check(rt, 0, "LOAD", err, errlen);
}

/* Carried weights were named relative to the step that ended (@1): the next step calls them @0. */
static void shift_versions(wp_rt *rt) {
    for (int i = 0; i < rt->pool.n; i++) {
        rt_entry *e = rt->pool.e[i];
        if (e->used && e->name.kind == WP_BUF_W) e->name.idx--;
    }
    for (int i = 0; i < rt->n_def; i++)
        if (rt->def[i].b.kind == WP_BUF_W) rt->def[i].b.idx--;
}

static void begin_step(wp_rt *rt, int64_t step, double lr, rt_step_stats *st) {
    memset(st, 0, sizeof *st);
    rt->step = step;
    rt->lr = lr;
    rt->loss_sum = 0;
    rt->tokens = 0;
    rt->wait_s = 0;
    rt->d = (wp_step_decision){.skip = false, .grad_norm = 0, .clip_factor = 1, .grad_scale = 1};
    st->loss_scale = rt->c.scaler.scale;
}

wp_result rt_step(wp_rt *rt, int64_t step, double lr, rt_step_stats *st, char *err, size_t errlen) {
    const wp_rank_prog *p = &rt->c.s->rank[rt->c.rank];
    wp_transport_stats s0 = {0}, s1 = {0};
    begin_step(rt, step, lr, st);
    if (rt->c.t) tp_stats(rt->c.t, &s0);
    if (timers_begin(rt, p->n, err, errlen)) return 1;
    double t_start = wp_now();
    for (rt->ai = 0; rt->ai < p->n; rt->ai++) {
        const wp_action *x = &p->a[rt->ai];
        if (rt_progress(rt, err, errlen)) return 1;
        bool device = on_device(x->op);
        double w0 = rt->wait_s, t0 = wp_now(), issued = t0;
        if (device) timer_mark(rt, rt->ai, 0), issued = wp_now(); /* issue_s: between the marks */
        if (run_action(rt, x, err, errlen)) return 1;
        if (device) {
            st->issue_s += wp_now() - issued - (rt->wait_s - w0);
            timer_mark(rt, rt->ai, 1);
            kern_sync(rt->k); /* device actions finish before the next starts (ir.h) */
            if (kern_check(rt, 0, "timer", err, errlen)) return 1;
            double waited = rt->wait_s - w0, budget = pace_min_s(&rt->pace, x->op, x->chunk) * rt_seg_share(rt, x);
            if (budget > 0 && rt_pace_hold(rt, t0 + waited + budget, err, errlen)) return 1;
            double t1 = wp_now();
            if (op_is_compute(x->op)) st->compute_s += t1 - t0 - waited;
            if (timed_push(rt, x, record(rt, x, t0 + waited, t1), waited, err, errlen)) return 1;
        }
    }
    rt->ai = -1;
    if (timers_end(rt, st, err, errlen)) return 1;
    rt->steps_run++;
    if (rt_progress(rt, err, errlen)) return 1;
    shift_versions(rt);
    ctl_set_status(rt->c.ctl, "step %lld done", (long long)step);
    st->step_s = wp_now() - t_start;
    st->wait_s = rt->wait_s;
    if (rt->c.t) {
        tp_stats(rt->c.t, &s1);
        st->sent = s1.payload_sent - s0.payload_sent;
        st->recv = s1.payload_recv - s0.payload_recv;
    }
    st->d = rt->d;
    st->targets = rt->tokens; /* summed over ranks by REDUCE */
    st->tokens = (int64_t)sched_samples(rt->c.s) * rt->c.L->cfg.micro_batch * rt->c.L->cfg.seq;
    st->masked = rt->c.data && loader_masked(rt->c.data);
    st->loss = rt->tokens > 0 ? rt->loss_sum / (double)rt->tokens : NAN;
    rt->c.scaler = loss_scaler_next(rt->c.scaler, !rt->d.skip);
    return 0;
}
