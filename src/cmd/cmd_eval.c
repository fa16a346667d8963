/* weipipe eval CKPT_DIR|MODEL.gguf --data PATH [--seq-length S] [--batches K]: mean next-token loss of
 * the checkpoint's masters (or a GGUF file's weights) over the first K sequences of the data read in order (sequence i is
 * tokens [i*S, (i+1)*S]), one rank, the whole model as one chunk. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "cli.h"
#include "commands.h"
#include "checkpoint.h"
#include "gguf.h"
#include "loader.h"
#include "log.h"
#include "model.h"

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

static wp_precision precision_of(const wp_opts *o, wp_precision ckpt) {
    if (!o->set[FLAG_precision]) return ckpt;
    return strcmp(o->precision, "fp32") == 0 ? WP_PREC_FP32 : strcmp(o->precision, "bf16") == 0 ? WP_PREC_BF16 : WP_PREC_MIXED;
}

/* The checkpoint's shape with this evaluation's sequence length, batch and precision. */
static int eval_cfg(const wp_opts *o, const wp_ckpt *c, wp_model_cfg *cfg, char *err, size_t errlen) {
    *cfg = ckpt_info(c)->cfg;
    if (o->set[FLAG_seq_length]) cfg->seq = (int)o->seq_length;
    cfg->mb = o->set[FLAG_micro_batch_size] ? (int)o->micro_batch_size : 1;
    cfg->precision = precision_of(o, cfg->precision);
    model_cfg_even_chunks(cfg, 1);
    if (cfg->seq < 1 || cfg->mb < 1) return io_fail(err, errlen, 2, "--seq-length/--micro-batch-size: must be at least 1");
    if (o->batches < 1) return io_fail(err, errlen, 2, "--batches: %lld must be at least 1", (long long)o->batches);
    return 0;
}

/* A llama.cpp GGUF file in place of a checkpoint (gguf.h): its shape with this evaluation's
 * --seq-length, --micro-batch-size and --precision (fp32 by default: the file's weights as they
 * are), and its weights through a CPU optimizer's masters, as `weipipe sample` reads one. */
static int gguf_cfg(const wp_opts *given, wp_model_cfg *cfg, char *err, size_t errlen) {
    static wp_opts o; /* large; a copy the file's config fills */
    o = *given;
    int rc = hf_config_apply(given->args[0], &o, err, errlen);
    o.micro_batch_size = given->set[FLAG_micro_batch_size] ? given->micro_batch_size : 1;
    o.num_chunks = 1;
    o.chunk_layers[0] = '\0';
    if (rc == 0) rc = model_cfg_from_opts(&o, 1, cfg, err, errlen);
    cfg->precision = precision_of(given, WP_PREC_FP32);
    model_cfg_even_chunks(cfg, 1);
    return rc;
}

static int gguf_masters(const wp_layout *L, const char *path, float *host, char *err, size_t errlen) {
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    char kerr[512];
    wp_kern *k = kern_create(&ko, kerr, sizeof kerr);
    if (!k) return io_fail(err, errlen, 1, "eval: %s", kerr);
    wp_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    wp_optim *opt = optim_create(layout_optim_model(L), k, (int[]){0}, 1, &hp, err, errlen);
    int rc = opt ? gguf_load_masters(path, opt, err, errlen) : 1;
    if (rc == 0 && optim_get(opt, 0, WP_OPT_MASTER, host) != 0) rc = io_fail(err, errlen, 1, "eval: %s", optim_error(opt));
    optim_destroy(opt);
    kern_destroy(k);
    return rc;
}

/* Masters (a checkpoint's, or gguf's when c is NULL) rounded through the wire dtype (what
 * training computes with), then to compute dtype. */
static int load_weights(eval_state *e, const wp_ckpt *c, const char *gguf, char *err, size_t errlen) {
    size_t n = e->L.chunk_numel[0];
    float *host = malloc(n * sizeof *host);
    if (!host) return io_fail(err, errlen, 1, "eval: out of memory for %zu weights", n);
    int rc = c ? 0 : gguf_masters(&e->L, gguf, host, err, errlen);
    for (int i = 0; c && rc == 0 && i < e->L.n_params; i++)
        rc = ckpt_read_master(c, &e->L.params[i], host + e->L.params[i].offset, err, errlen);
    wp_dtype wire = precision_weight_dtype(e->L.cfg.precision), ct = kern_compute_dtype(e->k);
    for (size_t i = 0; rc == 0 && i < n; i++) host[i] = wp_round_to(host[i], wire);
    float *f32 = rc ? NULL : kern_alloc(e->k, n * sizeof *f32);
    e->w = rc ? NULL : kern_alloc(e->k, n * wp_dtype_size(ct));
    if (f32 && e->w) {
        kern_to_device(e->k, f32, host, n * sizeof *host);
        kern_convert(e->k, e->w, ct, f32, WP_F32, n);
        kern_sync(e->k);
    }
    if (f32) kern_free(e->k, f32);
    free(host);
    if (rc == 0 && kern_error(e->k)) rc = io_fail(err, errlen, 1, "eval: %s", kern_error(e->k));
    return rc;
}

static int open_backend(eval_state *e, const wp_opts *o, char *err, size_t errlen) {
    wp_kern_opts ko;
    char kerr[512];
    if (kern_opts_from_opts(o, precision_act_dtype(e->L.cfg.precision), (int)o->threads, 0 /* one process: local rank 0 */,
                            &ko, kerr, sizeof kerr))
        return io_fail(err, errlen, 2, "%s", kerr);
    e->k = kern_create(&ko, kerr, sizeof kerr);
    if (!e->k) return io_fail(err, errlen, 1, "--backend %s: %s", o->backend, kerr);
    e->m = model_create(&e->L, e->k, kerr, sizeof kerr);
    if (!e->m) return io_fail(err, errlen, 1, "eval: %s", kerr);
    e->a = model_acts_create(e->m, 0);
    size_t tokens = (size_t)e->L.cfg.mb * e->L.cfg.seq;
    e->h_in = malloc(tokens * sizeof *e->h_in);
    e->h_tgt = malloc(tokens * sizeof *e->h_tgt);
    e->d_in = kern_alloc(e->k, tokens * sizeof *e->d_in);
    e->d_tgt = kern_alloc(e->k, tokens * sizeof *e->d_tgt);
    if (!e->a || !e->h_in || !e->h_tgt || !e->d_in || !e->d_tgt)
        return io_fail(err, errlen, 1, "eval: %s", kern_error(e->k) ? kern_error(e->k) : "out of memory");
    return 0;
}

/* Micro-batch of sequences first .. first+b-1; rows past the last sequence carry no loss. */
static int run_batch(eval_state *e, int64_t first, int64_t count, double *loss_sum, char *err, size_t errlen) {
    const int b = e->L.cfg.mb, s = e->L.cfg.seq;
    for (int r = 0; r < b; r++) {
        int32_t *in = e->h_in + (size_t)r * s, *tgt = e->h_tgt + (size_t)r * s;
        if (first + r < count) {
            if (loader_sequential(e->data, first + r, in, tgt)) return io_fail(err, errlen, 2, "%s", loader_error(e->data));
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
        return io_fail(err, errlen, 1, "eval: forward failed: %s", kern_error(e->k) ? kern_error(e->k) : "unknown error");
    return 0;
}

static int evaluate(eval_state *e, const wp_opts *o, double *mean, char *err, size_t errlen) {
    wp_loader_cfg lc = {.b = 1, .s = e->L.cfg.seq, .vocab = e->L.cfg.vocab, .micro_batches = 1, .seed = (uint64_t)o->seed};
    int rc = loader_open(&e->data, o->data, WP_SPLIT_VAL, &lc, err, errlen);
    if (rc) return rc;
    int64_t count = o->batches;
    if (count > loader_windows(e->data))
        return io_fail(err, errlen, 2, "--batches: %lld sequences of %d tokens asked, %s holds %lld", (long long)count,
                       e->L.cfg.seq, o->data, (long long)loader_windows(e->data));
    double loss_sum = 0;
    for (int64_t first = 0; rc == 0 && first < count; first += e->L.cfg.mb) rc = run_batch(e, first, count, &loss_sum, err, errlen);
    *mean = loss_sum / ((double)count * e->L.cfg.seq);
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
        wp_error("eval: expected one CKPT_DIR, got %d arguments", o->nargs);
        return 2;
    }
    if (!o->data[0]) {
        wp_error("--data: eval needs a token shard or a directory of shards");
        return 2;
    }
    char err[2 * WP_PATH_MAX], dir[WP_PATH_MAX];
    wp_ckpt *c = NULL;
    eval_state e = {0};
    wp_model_cfg cfg;
    double mean = NAN;
    bool gguf = gguf_is_file(o->args[0]); /* a llama.cpp file: its weights, step 0 */
    int rc = gguf ? gguf_cfg(o, &cfg, err, sizeof err) : ckpt_resolve(o->args[0], NULL, dir, sizeof dir, err, sizeof err);
    if (rc == 0 && !gguf) rc = ckpt_open(&c, dir, err, sizeof err);
    if (rc == 0 && !gguf) rc = eval_cfg(o, c, &cfg, err, sizeof err);
    if (rc == 0 && o->batches < 1) rc = io_fail(err, sizeof err, 2, "--batches: %lld must be at least 1", (long long)o->batches);
    if (rc == 0) rc = layout_build(&cfg, &e.L, err, sizeof err);
    if (rc == 0) rc = open_backend(&e, o, err, sizeof err);
    if (rc == 0) rc = load_weights(&e, c, o->args[0], err, sizeof err);
    if (rc == 0) rc = evaluate(&e, o, &mean, err, sizeof err);
    if (rc == 0)
        printf("eval: loss %.8f over %lld sequences of %d tokens (%s, step %" PRId64 ", %s weights)\n", mean,
               (long long)o->batches, cfg.seq, o->data, c ? ckpt_info(c)->step : 0, precision_name(cfg.precision));
    else
        wp_error("%s", err);
    eval_free(&e);
    ckpt_close(c);
    return rc;
}
