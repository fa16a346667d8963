/* weipipe check: one forward and fused backward of the configured model on random tokens,
 * run chunk by chunk on one rank, verified against central finite differences along random
 * directions; optionally dumped for the PyTorch reference (scripts/torch_ref.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters.h"
#include "commands.h"
#include "log.h"
#include "check_dump.h"
#include "rng.h"
#include "whole.h"

/* Directions probed, and the step |eps d| = FD_REL_STEP * ||w||. The fourth-order central
 * stencil (8 (f(e) - f(-e)) - (f(2e) - f(-2e))) / 12e has truncation error O(eps^4), so eps
 * can be large enough that the fp32 forward's rounding noise (loss differences near 1e-8 on
 * tiny.ini, the loss being summed in double) stays far below the signal; measured errors are
 * 1e-5..1e-4 (tests/model/test_gradcheck.c). */
#define FD_DIRECTIONS 4
#define FD_REL_STEP 5e-3
/* Worst accepted error |fd - <g,d>| / max(|<g,d>|, ||g||/sqrt(N)); ||g||/sqrt(N) is the typical
 * |<g,d>| of a random unit d and keeps a direction nearly orthogonal to g from demanding more
 * than the noise allows. A wrong gradient formula leaves errors of order 1. */
#define FD_BOUND 1e-3

typedef struct {
    wp_layout L;
    wp_kern *k;
    wp_whole *W;
    size_t T, N;
    float *params, *grads, *probe;
    int32_t *inputs, *targets;
} check_run;

typedef struct {
    double dot, fd, rel_err;
} fd_probe;

typedef struct {
    double loss, grad_norm, weight_norm, eps, max_rel_err;
    fd_probe probes[FD_DIRECTIONS];
} check_result;

static void check_free(check_run *r) {
    whole_destroy(r->W);
    if (r->k) kern_destroy(r->k);
    layout_free(&r->L);
    free(r->params);
    free(r->grads);
    free(r->probe);
    free(r->inputs);
    free(r->targets);
}

/* Random tokens [b, s+1] fixed by the seed: inputs are the first s of each row, targets the
 * last s (next-token prediction on one random sequence). With --doc-mask about one token in 8
 * is the boundary, so that every sequence holds several documents of uneven lengths. */
static void make_tokens(check_run *r, uint64_t seed) {
    const wp_model_cfg *cfg = &r->L.cfg;
    wp_rng g = rng_seeded(seed ^ 0x746f6b656e73ull); /* "tokens" */
    for (int b = 0; b < cfg->micro_batch; b++) {
        int32_t prev = (int32_t)rng_below(&g, (uint64_t)cfg->vocab);
        for (int t = 0; t < cfg->seq; t++) {
            int32_t next = (int32_t)rng_below(&g, (uint64_t)cfg->vocab);
            if (cfg->doc_mask && rng_below(&g, 8) == 0) next = cfg->doc_boundary;
            r->inputs[(size_t)b * cfg->seq + t] = prev;
            r->targets[(size_t)b * cfg->seq + t] = next;
            prev = next;
        }
    }
}

/* Returns the exit code: 0, 2 for a bad model config, 1 when the backend or memory fails. */
static wp_result check_setup(const wp_opts *o, check_run *r, char *err, size_t errlen) {
    wp_model_cfg cfg;
    if (model_cfg_from_opts(o, 1, &cfg, err, errlen) != 0) return WP_BAD_INPUT;
    WP_TRY(layout_build(&cfg, &r->L, err, errlen));
    /* finite differences need fp32 forwards, whatever --precision the run would use */
    wp_kern_opts ko;
    if (kern_opts_from_opts(o, WP_F32, (int)o->threads, 0 /* one process: local rank 0 */, &ko, err, errlen)) return WP_BAD_INPUT;
    r->k = kern_create(&ko, err, errlen);
    if (!r->k) return WP_FAILED;
    r->W = whole_create(&r->L, r->k, WP_F32, err, errlen);
    if (!r->W) return WP_FAILED;
    r->T = (size_t)cfg.micro_batch * cfg.seq;
    r->N = r->L.total_numel;
    r->params = malloc(r->N * sizeof(float));
    r->grads = malloc(r->N * sizeof(float));
    r->probe = malloc(r->N * sizeof(float));
    r->inputs = malloc(r->T * sizeof(int32_t));
    r->targets = malloc(r->T * sizeof(int32_t));
    if (!r->params || !r->grads || !r->probe || !r->inputs || !r->targets) {
        return wp_fail(WP_FAILED, err, errlen, "check: out of host memory for %zu parameters", r->N);
    }
    for (int c = 0; c < cfg.n_chunks; c++) layout_init_chunk(&r->L, c, (uint64_t)o->seed, r->params + r->L.chunk_offset[c]);
    make_tokens(r, (uint64_t)o->seed);
    return 0;
}

static wp_result kern_fail(check_run *r, char *err, size_t errlen) {
    return wp_fail(WP_FAILED, err, errlen, "%s", kern_error(r->k) ? kern_error(r->k) : "kernel failure");
}

static wp_result loss_at(check_run *r, const float *direction, double step, double *loss) {
    for (size_t i = 0; i < r->N; i++) r->probe[i] = (float)((double)r->params[i] + step * direction[i]);
    return whole_set_params(r->W, r->probe) == 0 && whole_forward(r->W, loss) == 0 ? WP_OK : WP_FAILED;
}

/* The fourth-order central difference of the loss along d. */
static wp_result directional_fd(check_run *r, const float *d, double eps, double *fd) {
    const double steps[4] = {1, -1, 2, -2};
    double f[4];
    for (int q = 0; q < 4; q++)
        WP_TRY(loss_at(r, d, steps[q] * eps, &f[q]));
    *fd = (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * eps);
    return 0;
}

/* Compare <g, d> with the finite difference along d for random unit directions d. */
static wp_result probe_directions(check_run *r, uint64_t seed, check_result *res, char *err, size_t errlen) {
    float *d = malloc(r->N * sizeof(float));
    if (!d) return wp_fail(WP_FAILED, err, errlen, "check: out of host memory for a direction");
    res->max_rel_err = 0;
    const double typical = res->grad_norm / sqrt((double)r->N);
    int rc = 0;
    for (int j = 0; rc == 0 && j < FD_DIRECTIONS; j++) {
        wp_rng g = rng_seeded(seed ^ (0x646972ull + (uint64_t)j)); /* "dir" + j */
        double norm2 = 0, dot = 0;
        for (size_t i = 0; i < r->N; i++) {
            d[i] = (float)rng_normal(&g);
            norm2 += (double)d[i] * d[i];
        }
        double inv = 1.0 / sqrt(norm2);
        for (size_t i = 0; i < r->N; i++) {
            d[i] = (float)(d[i] * inv);
            dot += (double)r->grads[i] * d[i];
        }
        fd_probe *p = &res->probes[j];
        p->dot = dot;
        rc = directional_fd(r, d, res->eps, &p->fd);
        p->rel_err = fabs(p->fd - dot) / fmax(fmax(fabs(dot), typical), 1e-30);
        if (!(p->rel_err <= res->max_rel_err)) res->max_rel_err = p->rel_err; /* NaN sticks */
    }
    free(d);
    if (rc == 0) rc = whole_set_params(r->W, r->params);
    return rc == 0 ? WP_OK : kern_fail(r, err, errlen);
}

static double norm_of(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static wp_result check_compute(check_run *r, uint64_t seed, check_result *res, char *err, size_t errlen) {
    if (whole_set_params(r->W, r->params) != 0 || whole_set_tokens(r->W, r->inputs, r->targets) != 0 ||
        whole_step(r->W, false, &res->loss) != 0 || whole_get_grads(r->W, r->grads) != 0)
        return kern_fail(r, err, errlen);
    res->grad_norm = norm_of(r->grads, r->N);
    res->weight_norm = norm_of(r->params, r->N);
    res->eps = FD_REL_STEP * res->weight_norm;
    return probe_directions(r, seed, res, err, errlen);
}

static void print_text(const check_run *r, const wp_opts *o, const check_result *res, bool ok) {
    const wp_model_cfg *c = &r->L.cfg;
    if (!o->quiet) {
        printf("model: %d layers in %d chunk%s, h=%d ffn=%d heads=%d/%d, b=%d s=%d V=%d, %zu parameters\n", c->n_layers,
               c->n_chunks, c->n_chunks == 1 ? "" : "s", c->h, c->ffn, c->n_heads, c->n_kv_heads, c->micro_batch, c->seq, c->vocab, r->N);
        printf("loss %.9g (ln V = %.6g)\ngradient norm %.6g\n", res->loss, log((double)c->vocab), res->grad_norm);
        for (int j = 0; j < FD_DIRECTIONS; j++)
            printf("direction %d: <g,d> = %+.6e  finite difference = %+.6e  rel err %.2e\n", j, res->probes[j].dot,
                   res->probes[j].fd, res->probes[j].rel_err);
    }
    printf("finite differences (eps %.3g): max rel err %.2e, bound %.0e: %s\n", res->eps, res->max_rel_err, FD_BOUND,
           ok ? "ok" : "FAILED");
}

/* A JSON number, or null where the value is not finite (JSON has no NaN or inf). */
static void json_num(const char *key, double v, const char *after) {
    if (isfinite(v))
        printf("\"%s\": %.9g%s", key, v, after);
    else
        printf("\"%s\": null%s", key, after);
}

static void print_json(const check_run *r, const check_result *res, bool ok) {
    const wp_model_cfg *c = &r->L.cfg;
    printf("{\"layers\": %d, \"chunks\": %d, \"parameters\": %zu, \"tokens\": %zu, ", c->n_layers, c->n_chunks, r->N, r->T);
    json_num("loss", res->loss, ", ");
    json_num("ln_vocab", log((double)c->vocab), ", ");
    json_num("grad_norm", res->grad_norm, ", ");
    json_num("eps", res->eps, ", \"directions\": [");
    for (int j = 0; j < FD_DIRECTIONS; j++) {
        printf("%s{", j ? ", " : "");
        json_num("dot", res->probes[j].dot, ", ");
        json_num("fd", res->probes[j].fd, ", ");
        json_num("rel_err", res->probes[j].rel_err, "}");
    }
    printf("], ");
    json_num("max_rel_err", res->max_rel_err, ", ");
    json_num("bound", FD_BOUND, ", ");
    printf("\"ok\": %s}\n", ok ? "true" : "false");
}

/* Tied embeddings: the dump holds the one tensor's gradient, the sum of both uses, under both
 * names, as the optimizer steps it (optim.h, wp_optim_model.tied). */
static void fold_tied(check_run *r) {
    const wp_param *e = layout_find(&r->L, "model.embed_tokens.weight"), *h = layout_find(&r->L, "lm_head.weight");
    size_t n = (size_t)e->rows * e->cols;
    float *ge = r->grads + r->L.chunk_offset[e->chunk] + e->offset, *gh = r->grads + r->L.chunk_offset[h->chunk] + h->offset;
    for (size_t i = 0; i < n; i++) ge[i] += gh[i];
    memcpy(gh, ge, n * sizeof *gh);
}

int cmd_check(const wp_opts *o) {
    char err[512] = "";
    if (o->format == WP_FMT_CSV) {
        wp_error("--format: check prints text or json, not csv");
        return 2;
    }
    int rc = o->out[0] ? check_dump_prepare(o->out, err, sizeof err) : 0;
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    check_run r = {0};
    check_result res = {0};
    rc = check_setup(o, &r, err, sizeof err);
    if (rc == 0 && check_compute(&r, (uint64_t)o->seed, &res, err, sizeof err) != 0) rc = 1;
    if (rc != 0) {
        wp_error("%s", err);
        check_free(&r);
        return rc;
    }
    bool ok = res.max_rel_err <= FD_BOUND;
    rc = ok ? 0 : 1;
    if (r.L.cfg.tied) fold_tied(&r); /* after the finite differences, which probe each use apart */
    check_dump dump = {.dir = o->out, .opts = o, .L = &r.L, .inputs = r.inputs, .targets = r.targets, .tokens = r.T,
                       .params = r.params, .grads = r.grads, .loss = res.loss};
    int wrc = o->out[0] ? check_dump_write(&dump, err, sizeof err) : 0;
    if (wrc) {
        wp_error("%s", err);
        rc = wrc;
    }
    if (o->format == WP_FMT_JSON)
        print_json(&r, &res, ok);
    else
        print_text(&r, o, &res, ok);
    check_free(&r);
    return rc;
}
