/* Validation loss across the ranks' owned chunks (evaluate.h). */
#include "evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_eval {
    const wp_schedule *s;
    int rank;
    wp_model *m;
    wp_kern *k;
    wp_optim *o;
    wp_transport *t;
    wp_control *ctl;
    wp_loader *data;
    int batches;
    double timeout;
    wp_acts *acts[WP_MAX_CHUNKS]; /* owned chunks only */
    void *w;                      /* compute dtype, largest chunk: one chunk's weights at a time */
    void *wire;                   /* weight wire dtype, largest chunk */
    void *x[2];                   /* compute dtype [T*h]: a chunk's input and output */
    int32_t *h_tok, *h_tgt, *d_tok, *d_tgt;
};

static wp_result fail(char *err, size_t errlen, const char *what) { return wp_fail(WP_FAILED, err, errlen, "evaluation: %s", what); }

wp_result eval_create(rt_eval **out, const wp_schedule *s, int rank, wp_model *m, wp_optim *o, wp_transport *t,
                wp_control *ctl, wp_loader *data, int batches, double timeout, char *err, size_t errlen) {
    rt_eval *e = calloc(1, sizeof *e);
    *out = e;
    if (!e) return fail(err, errlen, "out of memory");
    *e = (rt_eval){.s = s, .rank = rank, .m = m, .k = model_kern(m), .o = o, .t = t, .ctl = ctl, .data = data,
                   .batches = batches, .timeout = timeout};
    const wp_layout *L = model_layout(m);
    size_t T = (size_t)L->cfg.micro_batch * L->cfg.seq, most = 0;
    wp_dtype ct = kern_compute_dtype(e->k), wt = precision_weight_dtype(L->cfg.precision);
    for (int c = 0; c < s->nchunks; c++) {
        if (s->nslices && L->chunk_numel[c] > most) most = L->chunk_numel[c]; /* every rank stages its slice */
        if (s->owner[c] != rank) continue;
        if (L->chunk_numel[c] > most) most = L->chunk_numel[c];
        if (!(e->acts[c] = model_acts_create(m, c))) return fail(err, errlen, "out of memory for activations");
    }
    for (int i = 0; i < 2; i++) e->x[i] = kern_alloc(e->k, T * (size_t)L->cfg.h * wp_dtype_size(ct));
    e->w = kern_alloc(e->k, (most ? most : 1) * wp_dtype_size(ct));
    e->wire = kern_alloc(e->k, (most ? most : 1) * wp_dtype_size(wt));
    e->h_tok = malloc(T * sizeof *e->h_tok);
    e->h_tgt = malloc(T * sizeof *e->h_tgt);
    e->d_tok = kern_alloc(e->k, T * sizeof *e->d_tok);
    e->d_tgt = kern_alloc(e->k, T * sizeof *e->d_tgt);
    if (!e->x[0] || !e->x[1] || !e->w || !e->wire || !e->h_tok || !e->h_tgt || !e->d_tok || !e->d_tgt)
        return fail(err, errlen, "out of memory");
    return 0;
}

void eval_destroy(rt_eval *e) {
    if (!e) return;
    for (int c = 0; c < WP_MAX_CHUNKS; c++)
        if (e->acts[c]) model_acts_destroy(e->m, e->acts[c]);
    void *dev[] = {e->x[0], e->x[1], e->w, e->wire, e->d_tok, e->d_tgt};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i]) kern_free(e->k, dev[i]);
    free(e->h_tok);
    free(e->h_tgt);
    free(e);
}

/* Micro-batch i: sequences i*b .. i*b+b-1 of the split in reading order. */
static wp_result load_batch(rt_eval *e, int i, char *err, size_t errlen) {
    const wp_layout *L = model_layout(e->m);
    const int b = L->cfg.micro_batch, s = L->cfg.seq;
    for (int r = 0; r < b; r++)
        if (loader_sequential(e->data, (int64_t)i * b + r, e->h_tok + (size_t)r * s, e->h_tgt + (size_t)r * s))
            return fail(err, errlen, loader_error(e->data));
    size_t bytes = (size_t)b * s * sizeof(int32_t);
    kern_to_device(e->k, e->d_tok, e->h_tok, bytes);
    kern_to_device(e->k, e->d_tgt, e->h_tgt, bytes);
    return 0;
}

static wp_result move(rt_eval *e, bool send, int peer, void *buf, size_t bytes, char *err, size_t errlen) {
    wp_request *req;
    char why[300];
    int rc = send ? tp_post_send(e->t, peer, WP_EVAL_CHANNEL, buf, bytes, "eval activations", &req, why, sizeof why)
                  : tp_post_recv(e->t, peer, WP_EVAL_CHANNEL, buf, bytes, "eval activations", &req, why, sizeof why);
    if (!rc) {
        ctl_set_status(e->ctl, "evaluation: %s activations %s rank %d", send ? "sending" : "receiving", send ? "to" : "from", peer);
        rc = tp_wait(&req, e->timeout, why, sizeof why);
    }
    return rc ? fail(err, errlen, why) : 0;
}

/* The working copy of chunk c, whole, on the rank that forwards it (s->owner[c]), in e->wire.
 * Sliced weights (ir.h) are gathered there: every rank sends the working copy of the slice it
 * holds, as a LOAD would make it, so the forward reads the weights training reads. */
static wp_result gather_weights(rt_eval *e, int c, char *err, size_t errlen) {
    const wp_layout *L = model_layout(e->m);
    wp_dtype wt = precision_weight_dtype(L->cfg.precision);
    const size_t es = wp_dtype_size(wt);
    const int owner = e->s->owner[c], n = e->s->nslices;
    size_t off = 0, len = L->chunk_numel[c];
    if (n && !optim_range(e->o, c, &off, &len)) return fail(err, errlen, "a rank holds no slice of a chunk");
    char *mine = (char *)e->wire + (e->rank == owner ? off * es : 0);
    if ((n || e->rank == owner) && optim_working_copy(e->o, c, mine, wt)) return fail(err, errlen, optim_error(e->o));
    if (!n) return 0;
    if (e->rank != owner) return move(e, true, owner, mine, len * es, err, errlen);
    for (int k = 0; k < n; k++) {
        if (k == owner) continue;
        slice_range(L->chunk_numel[c], k, n, &off, &len);
        if (move(e, false, k, (char *)e->wire + off * es, len * es, err, errlen)) return 1;
    }
    return 0;
}

/* The forward of chunk c for the current micro-batch on its owner; x[0] holds its input and
 * e->wire the chunk's weights. */
static wp_result forward_chunk(rt_eval *e, int c, double *loss, char *err, size_t errlen) {
    const wp_layout *L = model_layout(e->m);
    const int last = e->s->nchunks - 1;
    size_t act_bytes = (size_t)L->cfg.micro_batch * L->cfg.seq * L->cfg.h * wp_dtype_size(kern_compute_dtype(e->k));
    int prev = c > 0 ? e->s->owner[c - 1] : e->rank;
    if (prev != e->rank && move(e, false, prev, e->x[0], act_bytes, err, errlen)) return 1;
    wp_dtype wt = precision_weight_dtype(L->cfg.precision);
    kern_convert(e->k, e->w, kern_compute_dtype(e->k), e->wire, wt, L->chunk_numel[c]);
    if (model_forward(e->m, c, e->w, e->acts[c], c > 0 ? e->x[0] : NULL, c == 0 || L->cfg.doc_mask ? e->d_tok : NULL,
                      c == last ? e->d_tgt : NULL, c < last ? e->x[1] : NULL, loss) != 0 || kern_error(e->k))
        return fail(err, errlen, kern_error(e->k) ? kern_error(e->k) : "forward failed");
    kern_sync(e->k);
    if (c == last) return 0;
    int next = e->s->owner[c + 1];
    if (next != e->rank) return move(e, true, next, e->x[1], act_bytes, err, errlen);
    void *t = e->x[0]; /* the next chunk is ours too: its input is this output */
    e->x[0] = e->x[1];
    e->x[1] = t;
    return 0;
}

wp_result eval_run(rt_eval *e, double *mean_loss, char *err, size_t errlen) {
    const wp_layout *L = model_layout(e->m);
    double v[2] = {0, 0};
    for (int i = 0; i < e->batches; i++) {
        for (int c = 0; c < e->s->nchunks; c++) {
            if (gather_weights(e, c, err, errlen)) return 1;
            if (e->s->owner[c] != e->rank) continue;
            /* tokens, or targets; every chunk's documents with document masks */
            bool reads_data = c == 0 || c == e->s->nchunks - 1 || model_layout(e->m)->cfg.doc_mask;
            if (reads_data && load_batch(e, i, err, errlen)) return 1;
            if (c == e->s->nchunks - 1) /* the targets that carry a loss (-1: masked) */
                for (size_t t = 0; t < (size_t)L->cfg.micro_batch * L->cfg.seq; t++) v[1] += e->h_tgt[t] >= 0;
            if (forward_chunk(e, c, &v[0], err, errlen)) return 1;
        }
    }
    char why[300];
    if (ctl_allreduce(e->ctl, CTL_SUM, v, 2, why, sizeof why)) return fail(err, errlen, why);
    *mean_loss = v[1] > 0 ? v[0] / v[1] : NAN;
    return 0;
}
