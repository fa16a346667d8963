/* weipipe eval CKPT_DIR|HF_DIR --data PATH [--seq-length S] [--batches K]: mean next-token loss
 * of a model over the first K sequences of the data read in order (sequence i is tokens
 * [i*S, (i+1)*S]), one rank, the whole model as one chunk. The model is a checkpoint's masters
 * or a Hugging Face directory (the model source, src/runtime/model_source.h: weights only, no
 * optimizer state); a Hugging Face directory needs --seq-length. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "cli.h"
#include "commands.h"
#include "checkpoint.h"
#include "loader.h"
#include "log.h"
#include "memlimit.h"
#include "model.h"
#include "model_source.h"

typedef struct {
    wp_layout L;
    wp_kern *k;
    wp_model *m;
    wp_acts *a;
    void *w;                   /* weights in the compute dtype */
    int32_t *h_in, *h_tgt;     /* host [b*s] */
    int32_t *d_in, *d_tgt;     /* backend [b*s] */
    wp_loader *data;
} eval_state;

static wp_result check_eval_flags(const wp_opts *o, char *err, size_t errlen) {
    if (o->set[FLAG_seq_length] && (o->seq_length < 1 || o->seq_length > INT32_MAX))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--seq-length: %lld must be at least 1", (long long)o->seq_length);
    if (o->set[FLAG_micro_batch_size] && (o->micro_batch_size < 1 || o->micro_batch_size > INT32_MAX))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--micro-batch-size: %lld must be at least 1", (long long)o->micro_batch_size);
    if (o->batches < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "--batches: %lld must be at least 1", (long long)o->batches);
    if (!o->doc_mask && o->doc_positions == WP_DOC_POS_RESTART)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--doc-positions restart: needs --doc-mask (positions restart where the document masks find documents)");
    return 0;
}

/* One tensor of the source into the weights: rounded through the wire dtype (what training
 * computes with), then to the compute dtype on the backend through an fp32 staging copy. */
typedef struct {
    eval_state *e;
    float *staging; /* backend, the largest tensor */
} eval_sink;

static wp_result to_weights(void *ctx, const wp_param *p, size_t first, size_t n, float *vals, char *err, size_t errlen) {
    eval_sink *s = ctx;
    wp_kern *k = s->e->k;
    wp_dtype wire = precision_weight_dtype(s->e->L.cfg.precision), ct = kern_compute_dtype(k);
    for (size_t i = 0; i < n; i++) vals[i] = wp_round_to(vals[i], wire);
    kern_to_device(k, s->staging, vals, n * sizeof *vals);
    kern_convert(k, (char *)s->e->w + (p->offset + first) * wp_dtype_size(ct), ct, s->staging, WP_F32, n);
    kern_sync(k);
    return kern_error(k) ? wp_fail(WP_FAILED, err, errlen, "eval: %s: %s", p->name, kern_error(k)) : 0;
}

static wp_result load_weights(eval_state *e, wp_model_src *src, char *err, size_t errlen) {
    size_t most = 1;
    for (int i = 0; i < e->L.n_params; i++)
        if (layout_param_numel(&e->L.params[i]) > most) most = layout_param_numel(&e->L.params[i]);
    eval_sink s = {.e = e, .staging = kern_alloc(e->k, most * sizeof(float))};
    e->w = kern_alloc(e->k, e->L.chunk_numel[0] * wp_dtype_size(kern_compute_dtype(e->k)));
    wp_result rc = s.staging && e->w ? model_src_read(src, to_weights, &s, err, errlen)
                               : wp_fail(WP_FAILED, err, errlen, "eval: out of memory for %zu weights", e->L.chunk_numel[0]);
    if (s.staging) kern_free(e->k, s.staging);
    return rc;
}

static wp_result open_backend(eval_state *e, const wp_opts *o, char *err, size_t errlen) {
    wp_kern_opts ko;
    char kerr[512];
    if (kern_opts_from_opts(o, precision_act_dtype(e->L.cfg.precision), (int)o->threads, 0 /* one process: local rank 0 */,
                            &ko, kerr, sizeof kerr))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s", kerr);
    e->k = kern_create(&ko, kerr, sizeof kerr);
    if (!e->k) return wp_fail(WP_FAILED, err, errlen, "--backend %s: %s", cli_enum_name(FLAG_backend, o->backend), kerr);
    e->m = model_create(&e->L, e->k, kerr, sizeof kerr);
    if (!e->m) return wp_fail(WP_FAILED, err, errlen, "eval: %s", kerr);
    e->a = model_acts_create(e->m, 0);
    size_t tokens = (size_t)e->L.cfg.micro_batch * e->L.cfg.seq;
    e->h_in = malloc(tokens * sizeof *e->h_in);
    e->h_tgt = malloc(tokens * sizeof *e->h_tgt);
    e->d_in = kern_alloc(e->k, tokens * sizeof *e->d_in);
    e->d_tgt = kern_alloc(e->k, tokens * sizeof *e->d_tgt);
    if (!e->a || !e->h_in || !e->h_tgt || !e->d_in || !e->d_tgt)
        return wp_fail(WP_FAILED, err, errlen, "eval: %s", kern_error(e->k) ? kern_error(e->k) : "out of memory");
    return 0;
}

/* Micro-batch of sequences first .. first+b-1; rows past the last sequence carry no loss. */
static wp_result run_batch(eval_state *e, int64_t first, int64_t count, double *loss_sum, int64_t *targets, char *err,
                           size_t errlen) {
    const int b = e->L.cfg.micro_batch, s = e->L.cfg.seq;
    for (int r = 0; r < b; r++) {
        int32_t *in = e->h_in + (size_t)r * s, *tgt = e->h_tgt + (size_t)r * s;
        if (first + r < count) {
            if (loader_sequential(e->data, first + r, in, tgt)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s", loader_error(e->data));
            for (int t = 0; t < s; t++) *targets += tgt[t] >= 0; /* -1: masked (target masks) */
            continue;
        }
        for (int t = 0; t < s; t++) {
            in[t] = 0;
            tgt[t] = -1;
        }
    }
    size_t bytes = (size_t)b * s * sizeof(int32_t);
    kern_to_device(e->k, e->d_in, e->h_in, bytes);
    kern_to_device(e->k, e->d_tgt, e->h_tgt, bytes);
    if (model_forward(e->m, 0, e->w, e->a, NULL, e->d_in, e->d_tgt, NULL, loss_sum) != 0 || kern_error(e->k))
        return wp_fail(WP_FAILED, err, errlen, "eval: forward failed: %s", kern_error(e->k) ? kern_error(e->k) : "unknown error");
    return 0;
}

/* What the sequence length came from, for messages: the flag and its value, or the model's. */
static void seq_source(const wp_opts *o, int seq, char *out, size_t outlen) {
    if (o->set[FLAG_seq_length]) snprintf(out, outlen, "--seq-length %d", seq);
    else snprintf(out, outlen, "the model's %d positions (no --seq-length given)", seq);
}

/* The request against the data and the machine, before anything large is allocated (issue 42:
 * --seq-length 600000 on 11.5k tokens filled 4.6 GB, then failed a 9.3 GB allocation): the
 * data must hold --batches sequences, and the predicted memory must fit (memlimit.h). */
static wp_result check_request(eval_state *e, const wp_opts *o, char *err, size_t errlen) {
    const int seq = e->L.cfg.seq, b = e->L.cfg.micro_batch;
    char from[96];
    seq_source(o, seq, from, sizeof from);
    /* the data's size first, with sequences of one token (the loader refuses a shard shorter than
     * one sequence, blaming --data where --seq-length asked too much) */
    wp_loader_cfg lc = {.b = 1, .s = 1, .vocab = e->L.cfg.vocab, .micro_batches = 1, .seed = (uint64_t)o->seed};
    WP_TRY(loader_open(&e->data, o->data, WP_SPLIT_VAL, &lc, err, errlen));
    const int64_t tokens = loader_tokens(e->data);
    loader_close(e->data);
    e->data = NULL;
    if (tokens < (int64_t)seq + 1)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: one sequence takes %lld tokens, %s holds %lld", from,
                       (long long)seq + 1, o->data, (long long)tokens);
    lc.s = seq;
    WP_TRY(loader_open(&e->data, o->data, WP_SPLIT_VAL, &lc, err, errlen));
    const int64_t windows = loader_windows(e->data);
    if (o->batches > windows)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--batches: %lld sequences of %d tokens (%s) asked, %s holds %lld",
                       (long long)o->batches, seq, from, o->data, (long long)windows);
    /* open_backend's and load_weights' allocations, as they make them */
    const bool cpu = o->backend == WP_BACKEND_CPU;
    const wp_dtype ct = cpu ? WP_F32 : precision_act_dtype(e->L.cfg.precision);
    size_t most = 1;
    for (int i = 0; i < e->L.n_params; i++)
        if (layout_param_numel(&e->L.params[i]) > most) most = layout_param_numel(&e->L.params[i]);
    const double weights = (double)e->L.chunk_numel[0] * (double)wp_dtype_size(ct) + 2.0 * (double)most * sizeof(float),
                 acts = (double)model_acts_bytes(&e->L, 0, ct, false) + (double)model_scratch_bytes(&e->L, ct),
                 toks = (double)b * seq * (4 * sizeof(int32_t) + sizeof(float));
    char parts[200];
    snprintf(parts, sizeof parts, "activations and scratch %.1f MiB, weights %.1f MiB", acts / 1048576.0, weights / 1048576.0);
    char culprit[160];
    snprintf(culprit, sizeof culprit, "%s%s", from, b > 1 ? " x --micro-batch-size" : "");
    return memlimit_check("eval", acts > weights ? culprit : "the model", weights + acts + toks, parts,
                          (double)o->device_memory, "--device-memory", cpu, err, errlen);
}

/* The mean loss over the targets of the first --batches sequences (all their tokens, or with
 * target masks the answers'); NaN when they hold no target. check_request opened the data. */
static wp_result evaluate(eval_state *e, const wp_opts *o, double *mean, int64_t *targets, char *err, size_t errlen) {
    wp_result rc = WP_OK;
    int64_t count = o->batches;
    double loss_sum = 0;
    *targets = 0;
    for (int64_t first = 0; rc == 0 && first < count; first += e->L.cfg.micro_batch)
        rc = run_batch(e, first, count, &loss_sum, targets, err, errlen);
    *mean = *targets > 0 ? loss_sum / (double)*targets : NAN;
    return rc;
}

static void eval_free(eval_state *e) {
    loader_close(e->data);
    if (e->k) {
        if (e->d_in) kern_free(e->k, e->d_in);
        if (e->d_tgt) kern_free(e->k, e->d_tgt);
        if (e->w) kern_free(e->k, e->w);
        if (e->a) model_acts_destroy(e->m, e->a);
        model_destroy(e->m);
        kern_destroy(e->k);
    }
    free(e->h_in);
    free(e->h_tgt);
    layout_free(&e->L);
}

int cmd_eval(const wp_opts *o) {
    if (o->nargs != 1) {
        wp_error("eval: expected one CKPT_DIR or Hugging Face directory, got %d arguments", o->nargs);
        return 2;
    }
    if (!o->data[0]) {
        wp_error("--data: eval needs a token shard or a directory of shards");
        return 2;
    }
    char err[2 * WP_PATH_MAX], name[2 * WP_PATH_MAX];
    wp_model_src src;
    memset(&src, 0, sizeof src);
    eval_state e = {0};
    double mean = NAN;
    int64_t targets = 0;
    int mb = o->set[FLAG_micro_batch_size] ? (int)o->micro_batch_size : 1;
    int rc = check_eval_flags(o, err, sizeof err);
    if (rc == 0) rc = model_src_open(o->args[0], o, mb, true, &src, err, sizeof err);
    if (rc == 0 && o->doc_mask) { /* documents start at the model's BOS (its EOS without one), as prepare writes */
        wp_model_cfg *c = &src.L.cfg;
        c->doc_mask = true;
        c->doc_boundary = o->doc_boundary_id >= 0 ? (int32_t)o->doc_boundary_id
                          : c->has_bos               ? c->bos_id
                          : c->has_eos               ? c->eos_id
                                                     : 0;
        c->doc_positions = o->doc_positions;
    }
    /* the layout is the source's; eval_free frees its own copy */
    if (rc == 0) rc = layout_build(&src.L.cfg, &e.L, err, sizeof err);
    if (rc == 0) rc = check_request(&e, o, err, sizeof err);
    if (rc == 0) rc = open_backend(&e, o, err, sizeof err);
    if (rc == 0) rc = load_weights(&e, &src, err, sizeof err);
    if (rc == 0) rc = evaluate(&e, o, &mean, &targets, err, sizeof err);
    char of[64] = ""; /* with target masks: the tokens the mean is over */
    if (rc == 0 && loader_masked(e.data)) snprintf(of, sizeof of, ", %lld targets", (long long)targets);
    if (rc == 0)
        printf("eval: loss %.8f over %lld sequences of %d tokens%s (%s, %s, %s weights)\n", mean, (long long)o->batches,
               e.L.cfg.seq, of, o->data, model_src_name(&src, name, sizeof name), precision_name(e.L.cfg.precision));
    else
        wp_error("%s", err);
    eval_free(&e);
    model_src_close(&src);
    return rc;
}
