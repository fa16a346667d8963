/* Owner-side AdamW state and update, on top of kern_adamw_multi (device placement: one launch
 * per chunk) and kern_adamw (host placement: one call per run of tensors). Every computation on the state runs on its context (o->sk: the
 * compute context, or the host update context with host placement), except host placement's
 * steps, queued to the update worker (update_worker.c), after which every call that touches the
 * chunk's state first takes it back (place_settle); every move between the state and backend
 * memory goes through placement.c. */
#include "optim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_impl.h"

static wp_optim *create(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, int slice, int nslices,
                        const wp_adamw_hparams *hp, const wp_optim_place *place, bool weights_only, char *err,
                        size_t errlen);

static void build_pieces(wp_optim *o);

wp_optim *optim_create(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, const wp_adamw_hparams *hp,
                       char *err, size_t errlen) {
    return optim_create_slices(m, k, chunks, n_chunks, 0, 0, hp, NULL, err, errlen);
}

wp_optim *optim_create_weights(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, char *err, size_t errlen) {
    static const wp_adamw_hparams none = {0};
    return create(m, k, chunks, n_chunks, 0, 0, &none, NULL, true, err, errlen);
}

wp_optim *optim_create_slices(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, int slice, int nslices,
                              const wp_adamw_hparams *hp, const wp_optim_place *place, char *err, size_t errlen) {
    return create(m, k, chunks, n_chunks, slice, nslices, hp, place, false, err, errlen);
}

wp_optim_memory optim_memory(const wp_optim *o) { return o->host ? WP_OPTIM_MEM_HOST : WP_OPTIM_MEM_DEVICE; }

static wp_optim *create(wp_optim_model m, wp_kern *k, const int *chunks, int n_chunks, int slice, int nslices,
                        const wp_adamw_hparams *hp, const wp_optim_place *place, bool weights_only, char *err,
                        size_t errlen) {
    if (nslices < 0 || (nslices > 0 && (slice < 0 || slice >= nslices))) {
        snprintf(err, errlen, "optimizer: slice %d of %d does not exist", slice, nslices);
        return NULL;
    }
    wp_optim *o = calloc(1, sizeof *o);
    if (!o || !(o->owned = calloc((size_t)(n_chunks > 0 ? n_chunks : 1), sizeof *o->owned)) ||
        !(o->slot_of = malloc((size_t)(m.n_chunks > 0 ? m.n_chunks : 1) * sizeof *o->slot_of))) {
        if (o) free(o->owned);
        free(o);
        snprintf(err, errlen, "optimizer: out of memory");
        return NULL;
    }
    o->m = m;
    o->k = o->sk = k;
    o->hp = *hp;
    o->sliced = nslices > 0;
    o->weights_only = weights_only;
    for (int c = 0; c < m.n_chunks; c++) o->slot_of[c] = -1;
    /* the host update context first: the buffers below are allocated where the state lives */
    if (place && place->memory == WP_OPTIM_MEM_HOST && place_host(o, place->threads, err, errlen)) {
        optim_destroy(o);
        return NULL;
    }
    for (int i = 0; i < n_chunks; i++) {
        int c = chunks[i];
        if (c < 0 || c >= m.n_chunks || o->slot_of[c] >= 0) {
            snprintf(err, errlen, "optimizer: chunk %d is out of range (0..%d) or listed twice", c, m.n_chunks - 1);
            optim_destroy(o);
            return NULL;
        }
        owned_chunk *oc = &o->owned[o->n_owned++];
        oc->chunk = c;
        oc->off = 0;
        const size_t E = m.chunk_numel(m.ctx, c);
        oc->numel = E;
        if (nslices > 0) { /* schedule/ir.h's slice_range: sizes differ by at most one element */
            oc->off = E * (size_t)slice / (size_t)nslices;
            oc->numel = E * (size_t)(slice + 1) / (size_t)nslices - oc->off;
        }
        o->slot_of[c] = i;
        for (int b = 0; b < (weights_only ? 1 : 4); b++) oc->buf[b] = place_alloc(o, oc->numel * sizeof(float));
    }
    if (!kern_error(k) && o->host) place_staging(o);
    if (!kern_error(k) && !o->host && !weights_only) build_pieces(o);
    if (kern_error(k)) {
        snprintf(err, errlen, "optimizer: %s", kern_error(k));
        optim_destroy(o);
        return NULL;
    }
    return o;
}

void optim_destroy(wp_optim *o) {
    if (!o) return;
    worker_stop(o->wk); /* the queued steps finish before their state is freed */
    o->wk = NULL;
    for (int i = 0; i < o->n_owned; i++)
        for (int b = 0; b < 4; b++)
            if (o->owned[i].buf[b]) place_free(o, o->owned[i].buf[b]);
    if (o->pieces_dev) kern_free(o->k, o->pieces_dev);
    free(o->pieces);
    place_release(o);
    free(o->owned);
    free(o->slot_of);
    free(o);
}

const wp_optim_model *optim_model(const wp_optim *o) { return &o->m; }
int optim_n_owned(const wp_optim *o) { return o->n_owned; }
int optim_owned_chunk(const wp_optim *o, int i) { return o->owned[i].chunk; }
bool optim_owns(const wp_optim *o, int chunk) { return chunk >= 0 && chunk < o->m.n_chunks && o->slot_of[chunk] >= 0; }
const char *optim_error(const wp_optim *o) {
    if (kern_error(o->k)) return kern_error(o->k);
    if (kern_error(o->sk)) return kern_error(o->sk);
    return o->wk ? worker_error(o->wk) : NULL;
}

bool optim_range(const wp_optim *o, int chunk, size_t *off, size_t *len) {
    if (!optim_owns(o, chunk)) return false;
    *off = o->owned[o->slot_of[chunk]].off;
    *len = o->owned[o->slot_of[chunk]].numel;
    return true;
}

/* The owned chunk, its state back from the update worker (place_settle), or NULL after
 * recording a sticky error naming the caller. */
static owned_chunk *slot(wp_optim *o, int chunk, const char *who) {
    if (optim_owns(o, chunk)) {
        owned_chunk *oc = &o->owned[o->slot_of[chunk]];
        place_settle(o, oc);
        return oc;
    }
    kern_set_error(o->k, "%s: chunk %d is not owned by this optimizer", who, chunk);
    return NULL;
}

/* The same for what needs the moments or the gradient: refused by a weights-only optimizer. */
static owned_chunk *state_slot(wp_optim *o, int chunk, const char *who) {
    if (!o->weights_only) return slot(o, chunk, who);
    kern_set_error(o->k, "%s: a weights-only optimizer holds no moments nor gradient", who);
    return NULL;
}

/* A failed step on the worker counts from the caller's next call on. */
static wp_result status(const wp_optim *o) { return optim_error(o) ? WP_FAILED : WP_OK; }

/* Every chunk's state back from the update worker. */
static void settle_all(wp_optim *o) {
    for (int i = 0; i < o->n_owned; i++) place_settle(o, &o->owned[i]);
}

wp_result optim_sync(wp_optim *o) {
    settle_all(o);
    return status(o);
}

wp_result optim_init_from_seed(wp_optim *o, uint64_t seed) {
    settle_all(o);
    for (int i = 0; i < o->n_owned; i++) {
        owned_chunk *oc = &o->owned[i];
        float *host = malloc(o->m.chunk_numel(o->m.ctx, oc->chunk) * sizeof *host); /* the init is per whole chunk */
        if (!host) {
            kern_set_error(o->k, "optimizer: out of memory initialising chunk %d", oc->chunk);
            return 1;
        }
        o->m.init_chunk(o->m.ctx, oc->chunk, seed, host);
        place_from_host(o, oc->buf[WP_OPT_MASTER], host + oc->off, oc->numel * sizeof *host);
        free(host);
    }
    return optim_reset(o);
}

wp_result optim_reset(wp_optim *o) {
    settle_all(o);
    for (int i = 0; i < o->n_owned; i++) {
        owned_chunk *oc = &o->owned[i];
        for (int b = WP_OPT_EXP_AVG; b <= WP_OPT_GRAD && !o->weights_only; b++) kern_zero(o->sk, oc->buf[b], oc->numel * sizeof(float));
        oc->steps = 0;
        oc->folded = false;
        oc->grad_out = false;
    }
    return status(o);
}

wp_result optim_get(wp_optim *o, int chunk, wp_optim_buf which, float *host) {
    owned_chunk *oc = which == WP_OPT_MASTER ? slot(o, chunk, "optim_get") : state_slot(o, chunk, "optim_get");
    if (oc && which == WP_OPT_GRAD) place_grad_home(o, oc);
    if (oc) place_to_host(o, host, oc->buf[which], oc->numel * sizeof(float));
    return status(o);
}

wp_result optim_set(wp_optim *o, int chunk, wp_optim_buf which, const float *host) {
    owned_chunk *oc = which == WP_OPT_MASTER ? slot(o, chunk, "optim_set") : state_slot(o, chunk, "optim_set");
    if (oc && which == WP_OPT_GRAD) oc->folded = oc->grad_out = false; /* the window is stale now */
    if (oc) place_from_host(o, oc->buf[which], host, oc->numel * sizeof(float));
    return status(o);
}

float *optim_grad(wp_optim *o, int chunk) {
    owned_chunk *oc = state_slot(o, chunk, "optim_grad");
    if (oc) oc->folded = false; /* whoever holds the pointer may add to it */
    return oc ? place_grad_out(o, oc) : NULL;
}

float *optim_buffer(wp_optim *o, int chunk, wp_optim_buf which) {
    owned_chunk *oc = slot(o, chunk, "optim_buffer");
    if (oc && o->host) {
        kern_set_error(o->k, "optim_buffer: chunk %d's state is in host memory (optim_host_view)", chunk);
        return NULL;
    }
    if (oc && which == WP_OPT_GRAD) oc->folded = false;
    return oc && which >= WP_OPT_MASTER && which <= WP_OPT_GRAD ? oc->buf[which] : NULL;
}

const float *optim_host_view(wp_optim *o, int chunk, wp_optim_buf which) {
    if (!o->host) return kern_kind(o->k) == WP_BACKEND_CPU ? optim_buffer(o, chunk, which) : NULL;
    owned_chunk *oc = slot(o, chunk, "optim_host_view");
    if (!oc || which < WP_OPT_MASTER || which > WP_OPT_GRAD || !oc->buf[which]) return NULL;
    if (which == WP_OPT_GRAD) place_grad_home(o, oc);
    return oc->buf[which];
}

wp_result optim_accumulate(wp_optim *o, int chunk, const void *grad, wp_dtype gt) {
    owned_chunk *oc = state_slot(o, chunk, "optim_accumulate");
    if (oc) oc->folded = false;
    if (oc) place_grad_home(o, oc);
    const void *g = oc ? place_in(o, grad, oc->numel * wp_dtype_size(gt)) : NULL;
    if (g) kern_accumulate(o->sk, oc->buf[WP_OPT_GRAD], WP_F32, g, gt, oc->numel);
    return status(o);
}

/* The piece [at, at + n) of the chunk, inside the range held here, or NULL after an error. */
static float *piece(wp_optim *o, owned_chunk *oc, wp_optim_buf which, size_t at, size_t n, const char *who) {
    if (which < WP_OPT_MASTER || which > WP_OPT_GRAD || !oc->buf[which] || at < oc->off || at + n > oc->off + oc->numel) {
        kern_set_error(o->k, "%s: elements %zu..%zu of chunk %d are not held here", who, at, at + n, oc->chunk);
        return NULL;
    }
    if (which == WP_OPT_GRAD) {
        place_grad_home(o, oc);
        oc->folded = false;
    }
    return oc->buf[which] + (at - oc->off);
}

wp_result optim_piece_get(wp_optim *o, int chunk, wp_optim_buf which, size_t at, size_t n, void *dst, bool take) {
    owned_chunk *oc = which == WP_OPT_MASTER ? slot(o, chunk, "optim_piece_get") : state_slot(o, chunk, "optim_piece_get");
    float *p = oc ? piece(o, oc, which, at, n, "optim_piece_get") : NULL;
    if (p) place_out(o, dst, p, n * sizeof(float));
    if (p && take) kern_zero(o->sk, p, n * sizeof(float));
    return status(o);
}

wp_result optim_piece_put(wp_optim *o, int chunk, wp_optim_buf which, size_t at, size_t n, const void *src, bool add) {
    owned_chunk *oc = which == WP_OPT_MASTER ? slot(o, chunk, "optim_piece_put") : state_slot(o, chunk, "optim_piece_put");
    float *p = oc ? piece(o, oc, which, at, n, "optim_piece_put") : NULL;
    const void *in = p && add ? place_in(o, src, n * sizeof(float)) : NULL;
    if (in) kern_accumulate(o->sk, p, WP_F32, in, WP_F32, n);
    else if (p && !add) place_copy_in(o, p, src, n * sizeof(float));
    return status(o);
}

/* The tie of this chunk (wp_optim_model.tied), if any. */
static bool tie_of(const wp_optim *o, int chunk, size_t *dst, size_t *src, size_t *n) {
    return !o->sliced && o->m.tied && o->m.tied(o->m.ctx, chunk, dst, src, n);
}

/* src's gradient into dst's, src's zeroed: the tied parameter's gradient is the sum of both
 * uses, counted once by the norm and stepped once. Once per gradient: a second fold (UPDATE's
 * after REDUCE's) would add zeros (the same bits) for 16 bytes a tied parameter of traffic. */
static void fold_tied(wp_optim *o, owned_chunk *oc) {
    size_t dst, src, n;
    if (oc->folded) return;
    oc->folded = true;
    if (!tie_of(o, oc->chunk, &dst, &src, &n)) return;
    float *g = oc->buf[WP_OPT_GRAD];
    kern_accumulate(o->sk, g + dst, WP_F32, g + src, WP_F32, n);
    kern_zero(o->sk, g + src, n * sizeof(float));
}

double optim_chunk_sumsq(wp_optim *o, int chunk) {
    owned_chunk *oc = state_slot(o, chunk, "optim_chunk_sumsq");
    if (!oc) return NAN;
    place_grad_home(o, oc);
    fold_tied(o, oc);
    return kern_sumsq(o->sk, oc->buf[WP_OPT_GRAD], WP_F32, oc->numel);
}

/* Tensor i of the chunk: where it starts and its weight decay; false past the last. */
static bool tensor(const wp_optim *o, int chunk, int i, size_t *offset, float *wd) {
    bool decay = false;
    if (!o->m.tensor(o->m.ctx, chunk, i, offset, &decay)) return false;
    *wd = decay ? (float)o->hp.weight_decay : 0.0f;
    return true;
}

/* The chunk's kern_adamw pieces, one after another: runs of consecutive tensors with the same
 * decay (norms get none), cut to the elements held here (a slice may start or end inside a
 * tensor). Both the per-piece calls and kern_adamw_multi's pieces come from here. */
typedef struct {
    int i;
    bool more;
    size_t next_off;
    float next_wd;
} run_iter;

static run_iter runs_begin(const wp_optim *o, const owned_chunk *oc) {
    run_iter it = {0};
    it.more = tensor(o, oc->chunk, 0, &it.next_off, &it.next_wd);
    return it;
}

/* The next piece: elements [*off, *off + *n) of the range held here, with decay *wd. */
static bool runs_next(const wp_optim *o, const owned_chunk *oc, run_iter *it, size_t *off, size_t *n, float *wd) {
    const size_t lo = oc->off, hi = oc->off + oc->numel, E = o->m.chunk_numel(o->m.ctx, oc->chunk);
    while (it->more) {
        size_t a = it->next_off;
        *wd = it->next_wd;
        do it->more = tensor(o, oc->chunk, ++it->i, &it->next_off, &it->next_wd);
        while (it->more && it->next_wd == *wd);
        size_t b = it->more ? it->next_off : E;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        *off = a - lo;
        *n = b - a;
        return true;
    }
    return false;
}

/* Device placement: every owned chunk's pieces, in owned order, with their prefix sums, in backend
 * memory once (a step writes no working copy: w_out NULL). Errors in o->k. */
static void build_pieces(wp_optim *o) {
    size_t off, n;
    float wd;
    int count = 0;
    for (int i = 0; i < o->n_owned; i++)
        for (run_iter it = runs_begin(o, &o->owned[i]); runs_next(o, &o->owned[i], &it, &off, &n, &wd);) count++;
    if (count == 0) return;
    o->pieces = calloc((size_t)count, sizeof *o->pieces);
    if (!o->pieces) {
        kern_set_error(o->k, "optimizer: out of memory for %d AdamW pieces", count);
        return;
    }
    size_t first = 0;
    for (int i = 0; i < o->n_owned; i++) {
        owned_chunk *oc = &o->owned[i];
        oc->piece0 = o->n_pieces;
        for (run_iter it = runs_begin(o, oc); runs_next(o, oc, &it, &off, &n, &wd);) {
            o->pieces[o->n_pieces++] = (wp_adamw_piece){.master = oc->buf[WP_OPT_MASTER] + off,
                                                        .m = oc->buf[WP_OPT_EXP_AVG] + off,
                                                        .v = oc->buf[WP_OPT_EXP_AVG_SQ] + off,
                                                        .grad = oc->buf[WP_OPT_GRAD] + off,
                                                        .n = n,
                                                        .first = first,
                                                        .weight_decay = wd};
            first += n;
        }
        oc->npieces = o->n_pieces - oc->piece0;
    }
    o->pieces_dev = kern_alloc(o->k, (size_t)o->n_pieces * sizeof *o->pieces_dev);
    if (o->pieces_dev) kern_to_device(o->k, o->pieces_dev, o->pieces, (size_t)o->n_pieces * sizeof *o->pieces);
}

/* Elements of a run of pieces [p0, p0 + np): their prefix sums' span. */
static size_t pieces_numel(const wp_optim *o, int p0, int np) {
    return np ? o->pieces[p0 + np - 1].first + o->pieces[p0 + np - 1].n - o->pieces[p0].first : 0;
}

/* bias corrections in fp64: beta^t underflows gracefully and stays exact for small t */
static float bias_correction(double beta, int64_t t) { return (float)(1.0 - pow(beta, (double)t)); }

wp_result optim_step_chunk(wp_optim *o, int chunk, float lr, float grad_scale) {
    owned_chunk *oc = state_slot(o, chunk, "optim_step_chunk");
    if (!oc) return 1;
    place_grad_home(o, oc);
    fold_tied(o, oc); /* a no-op when optim_chunk_sumsq folded already */
    oc->steps++;
    update_job j = {.kind = JOB_STEP, .slot = o->slot_of[chunk], .lr = lr, .grad_scale = grad_scale,
                    .bc1 = bias_correction(o->hp.beta1, oc->steps), .bc2 = bias_correction(o->hp.beta2, oc->steps)};
    j.tie = tie_of(o, chunk, &j.tie_dst, &j.tie_src, &j.tie_n);
    if (o->wk) { /* host placement: the worker steps */
        worker_queue(o->wk, &j);
        oc->queued = j.seq;
    } else {
        step_run(o, o->sk, &j);
    }
    return status(o);
}

void step_run(wp_optim *o, wp_kern *k, const update_job *j) {
    const owned_chunk *oc = &o->owned[j->slot];
    const float b1 = (float)o->hp.beta1, b2 = (float)o->hp.beta2, eps = (float)o->hp.eps;
    if (!o->host) { /* device placement (never the worker's): the chunk's pieces in one launch */
        if (oc->npieces > 0)
            kern_adamw_multi(k, o->pieces_dev + oc->piece0, oc->npieces, pieces_numel(o, oc->piece0, oc->npieces),
                             j->grad_scale, WP_F32, j->lr, b1, b2, eps, j->bc1, j->bc2);
    } else { /* host placement, on the worker's CPU context: one call per piece */
        size_t off, n;
        float wd;
        for (run_iter it = runs_begin(o, oc); runs_next(o, oc, &it, &off, &n, &wd);)
            kern_adamw(k, oc->buf[WP_OPT_MASTER] + off, oc->buf[WP_OPT_EXP_AVG] + off, oc->buf[WP_OPT_EXP_AVG_SQ] + off,
                       oc->buf[WP_OPT_GRAD] + off, j->grad_scale, NULL, WP_F32, n, j->lr, b1, b2, eps, wd, j->bc1, j->bc2);
    }
    if (j->tie) /* the stepped dst is the one tensor: src becomes it again */
        kern_copy(k, oc->buf[WP_OPT_MASTER] + j->tie_src, oc->buf[WP_OPT_MASTER] + j->tie_dst, j->tie_n * sizeof(float));
}

wp_result optim_apply(wp_optim *o, const wp_step_decision *d, float lr) {
    if (d->skip) return 0;
    for (int i = 0; i < o->n_owned; i++)
        if (optim_step_chunk(o, o->owned[i].chunk, lr, d->grad_scale)) return 1;
    return 0;
}

wp_result optim_working_copy(wp_optim *o, int chunk, void *w_out, wp_dtype wtype) {
    owned_chunk *oc = slot(o, chunk, "optim_working_copy");
    if (!oc) return status(o);
    const size_t bytes = oc->numel * wp_dtype_size(wtype);
    void *w = place_stage(o, w_out, bytes);
    if (!w) return status(o);
    kern_convert(o->sk, w, wtype, oc->buf[WP_OPT_MASTER], WP_F32, oc->numel);
    place_send(o, w_out, w, bytes);
    return status(o);
}

wp_result optim_zero_grad(wp_optim *o) {
    if (o->weights_only && o->n_owned > 0) return state_slot(o, o->owned[0].chunk, "optim_zero_grad") ? 0 : 1;
    settle_all(o);
    for (int i = 0; i < o->n_owned; i++) {
        kern_zero(o->sk, o->owned[i].buf[WP_OPT_GRAD], o->owned[i].numel * sizeof(float));
        o->owned[i].folded = o->owned[i].grad_out = false; /* the window is stale: refilled when handed out */
    }
    return status(o);
}

wp_result optim_zero_chunk_grad(wp_optim *o, int chunk) {
    owned_chunk *oc = optim_owns(o, chunk) && !o->weights_only ? &o->owned[o->slot_of[chunk]] : NULL;
    if (oc && o->wk && oc->queued && !worker_done(o->wk, oc->queued)) {
        /* the chunk's step still runs (UPDATE zeroes right after it): chained, not waited for */
        update_job j = {.kind = JOB_ZERO_GRAD, .slot = o->slot_of[chunk]};
        worker_queue(o->wk, &j);
        oc->queued = j.seq;
        oc->folded = oc->grad_out = false;
        return status(o);
    }
    oc = state_slot(o, chunk, "optim_zero_chunk_grad");
    if (!oc) return 1;
    kern_zero(o->sk, oc->buf[WP_OPT_GRAD], oc->numel * sizeof(float));
    oc->folded = oc->grad_out = false;
    return status(o);
}

int64_t optim_steps(const wp_optim *o) {
    if (o->n_owned == 0) return 0;
    for (int i = 1; i < o->n_owned; i++)
        if (o->owned[i].steps != o->owned[0].steps) return -1;
    return o->owned[0].steps;
}

void optim_set_steps(wp_optim *o, int64_t t) {
    for (int i = 0; i < o->n_owned; i++) o->owned[i].steps = t;
}
