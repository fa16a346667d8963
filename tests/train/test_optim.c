/* Optimizer pieces: AdamW against a double-precision reference over several steps (decay on
 * matrices and embeddings, none on norms), the working copy in each wire dtype, learning-rate
 * schedules against closed forms, the clip factor and the loss-scaler state machine on scripted
 * sequences, and a skipped step leaving everything bit-identical. */
#include <float.h>

#include "adapters.h"
#include "decision.h"
#include "lr_schedule.h"
#include "optim.h"
#include "tu.h"

typedef struct {
    double *p, *m, *v;
    double *m_size; /* m with every term's magnitude: the scale its rounding errors live on */
} ref_state;

/* AdamW as Loshchilov & Hutter with PyTorch's bias correction, in double. */
static void ref_step(ref_state *r, const float *grad, size_t n, const wp_layout *L, int chunk, double lr, double scale,
                     const wp_adamw_hparams *hp, int t) {
    int first, end;
    layout_chunk_params(L, chunk, &first, &end);
    for (int i = first; i < end; i++) {
        const wp_param *p = &L->params[i];
        double wd = p->kind == WP_PARAM_NORM ? 0.0 : hp->weight_decay;
        for (size_t j = p->offset; j < p->offset + (size_t)p->rows * p->cols && j < n; j++) {
            double g = (double)grad[j] * scale;
            r->m[j] = hp->beta1 * r->m[j] + (1 - hp->beta1) * g;
            r->m_size[j] = hp->beta1 * r->m_size[j] + (1 - hp->beta1) * fabs(g);
            r->v[j] = hp->beta2 * r->v[j] + (1 - hp->beta2) * g * g;
            double mhat = r->m[j] / (1 - pow(hp->beta1, t)), vhat = r->v[j] / (1 - pow(hp->beta2, t));
            r->p[j] -= lr * (mhat / (sqrt(vhat) + hp->eps) + wd * r->p[j]);
        }
    }
}

/* Worst |x - ref| / (|ref| + floor) over a buffer. */
static double rel_err(const float *x, const double *ref, size_t n, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)x[i] - ref[i]) / (fabs(ref[i]) + floor));
    return worst;
}

/* Worst |x - ref| / size: m is a signed sum that can cancel, so its error is judged against
 * the sum of its terms' magnitudes. */
static double err_vs_size(const float *x, const double *ref, const double *size, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)x[i] - ref[i]) / size[i]);
    return worst;
}

/* The 3-layer tiny model cut into `chunks` chunks. */
static void tiny_layout(wp_layout *L, int chunks) {
    wp_model_cfg cfg;
    tu_model(&cfg, 3, 12, 2, 1, 20, 37);
    model_cfg_even_chunks(&cfg, chunks);
    char err[256];
    EXPECT(layout_build(&cfg, L, err, sizeof err) == 0, "layout: %s", err);
}

static void test_adamw(wp_kern *k, double wd, int chunks) {
    wp_layout L;
    tiny_layout(&L, chunks);
    char err[256];
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, wd};
    int owned[8];
    for (int c = 0; c < chunks; c++) owned[c] = chunks - 1 - c; /* any order */
    wp_optim *o = optim_create(layout_optim_model(&L), k, owned, chunks, &hp, err, sizeof err);
    EXPECT(o != NULL, "optim_create: %s", err);
    EXPECT(optim_init_from_seed(o, 7) == 0, "init: %s", optim_error(o));
    uint64_t rng = 1000 + (uint64_t)chunks;
    double worst_p = 0, worst_mv = 0;
    for (int c = 0; c < chunks; c++) {
        size_t n = L.chunk_numel[c];
        ref_state r = {calloc(n, 8), calloc(n, 8), calloc(n, 8), calloc(n, 8)};
        float *host = malloc(n * 4), *grad = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
        optim_get(o, c, WP_OPT_MASTER, host);
        for (size_t j = 0; j < n; j++) r.p[j] = host[j];
        for (int t = 1; t <= 6; t++) {
            double lr = 1e-2 / t, scale = 1.0 / (1 << t); /* scale: 1/loss_scale times a clip factor */
            for (size_t j = 0; j < n; j++) grad[j] = (float)(tu_normal(&rng) * (1 << t) * 0.1);
            optim_set(o, c, WP_OPT_GRAD, grad);
            wp_dtype wt = t % 3 == 0 ? WP_F16 : t % 3 == 1 ? WP_BF16 : WP_F32;
            EXPECT(optim_step_chunk(o, c, (float)lr, (float)scale) == 0, "step: %s", optim_error(o));
            ref_step(&r, grad, n, &L, c, (float)lr, (float)scale, &hp, t);
            optim_get(o, c, WP_OPT_MASTER, host);
            optim_get(o, c, WP_OPT_EXP_AVG, m);
            optim_get(o, c, WP_OPT_EXP_AVG_SQ, v);
            /* fp32 arithmetic against double: a few ulp (6e-8 each) per step on m, v and the
             * update, so 6 steps stay far below 1e-5; the masters' floor is the size of one
             * update (lr), so values crossing zero are judged fairly */
            worst_p = fmax(worst_p, rel_err(host, r.p, n, lr));
            worst_mv = fmax(worst_mv, fmax(err_vs_size(m, r.m, r.m_size, n), rel_err(v, r.v, n, 1e-30)));
            /* the working copy is the master rounded once to the wire dtype */
            void *w = malloc(n * 4);
            optim_working_copy(o, c, w, wt);
            int bad = 0;
            for (size_t j = 0; j < n; j++) {
                float want = wp_round_to(host[j], wt);
                float got = wt == WP_F32 ? ((float *)w)[j] : wt == WP_F16 ? wp_f16_to_f32(((uint16_t *)w)[j]) : wp_bf16_to_f32(((uint16_t *)w)[j]);
                bad += got != want;
            }
            EXPECT(bad == 0, "working copy in %s: %d elements differ from the rounded master", wp_dtype_name(wt), bad);
            free(w);
        }
        free(r.p), free(r.m), free(r.v), free(r.m_size), free(host), free(grad), free(m), free(v);
    }
    EXPECT(optim_steps(o) == 6, "step count %lld, want 6", (long long)optim_steps(o));
    EXPECT(worst_p < 1e-5, "masters: worst relative error %.3g against the fp64 reference (tolerance 1e-5)", worst_p);
    EXPECT(worst_mv < 1e-5, "moments: worst relative error %.3g (tolerance 1e-5)", worst_mv);
    printf("adamw wd=%.2f chunks=%d: masters rel err %.2e, moments %.2e over 6 steps\n", wd, chunks, worst_p, worst_mv);
    optim_destroy(o);
    layout_free(&L);
}

/* A 2-layer model with tied word embeddings over `chunks` even chunks. */
static void tied_layout(wp_layout *L, int chunks) {
    wp_model_cfg cfg;
    tu_model(&cfg, 2, 12, 2, 1, 20, 37);
    cfg.tied = true;
    model_cfg_even_chunks(&cfg, chunks);
    char err[256];
    EXPECT(layout_build(&cfg, L, err, sizeof err) == 0, "tied over %d chunk(s): %s", chunks, err);
}

/* Tied word embeddings (wp_optim_model.tied from layout_optim_model): the head starts as the
 * embedding; the norm counts the summed gradient g_embed + g_head once; AdamW steps the embedding
 * with that sum (fp64 reference fed the folded gradient) and the head's master and working copy
 * are then the embedding's, bit for bit. Across two chunks, and for an optimizer of slices, the
 * optimizer leaves the tie alone (the schedule moves it, schedule_tie): no fold there. */
static void test_tied(wp_kern *k) {
    wp_layout L;
    char err[256];
    tied_layout(&L, 2);
    wp_optim_model m2 = layout_optim_model(&L);
    size_t d0, s0, n0;
    EXPECT(!m2.tied(m2.ctx, 0, &d0, &s0, &n0) && !m2.tied(m2.ctx, 1, &d0, &s0, &n0),
           "tied over 2 chunks: the optimizer must not fold inside a chunk");
    layout_free(&L);
    tied_layout(&L, 1);
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    int owned = 0;
    wp_optim *o = optim_create(layout_optim_model(&L), k, &owned, 1, &hp, err, sizeof err);
    EXPECT(o != NULL, "optim_create: %s", err);
    EXPECT(optim_init_from_seed(o, 9) == 0, "init: %s", optim_error(o));
    const wp_param *e = layout_find(&L, "model.embed_tokens.weight"), *h = layout_find(&L, "lm_head.weight");
    size_t n = L.chunk_numel[0], ne = (size_t)e->rows * e->cols;
    float *host = malloc(n * 4), *grad = malloc(n * 4), *folded = malloc(n * 4), *w = malloc(n * 4);
    ref_state r = {calloc(n, 8), calloc(n, 8), calloc(n, 8), calloc(n, 8)};
    optim_get(o, 0, WP_OPT_MASTER, host);
    EXPECT(memcmp(host + h->offset, host + e->offset, ne * 4) == 0, "tied init: the head is not the embedding");
    for (size_t j = 0; j < n; j++) r.p[j] = host[j];
    uint64_t rng = 77;
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        for (size_t j = 0; j < n; j++) grad[j] = (float)(0.1 * tu_normal(&rng));
        memcpy(folded, grad, n * 4);
        for (size_t j = 0; j < ne; j++) folded[e->offset + j] += grad[h->offset + j], folded[h->offset + j] = 0;
        double want = 0;
        for (size_t j = 0; j < n; j++) want += (double)folded[j] * folded[j];
        optim_set(o, 0, WP_OPT_GRAD, grad);
        double got = optim_chunk_sumsq(o, 0);
        EXPECT(fabs(got - want) <= 1e-6 * want, "tied sumsq %.9g, want %.9g (the summed gradient, counted once)", got, want);
        EXPECT(optim_step_chunk(o, 0, 1e-2f, 0.5f) == 0 && optim_working_copy(o, 0, w, WP_F32) == 0, "step: %s",
               optim_error(o));
        ref_step(&r, folded, n, &L, 0, (float)1e-2, 0.5, &hp, t);
        optim_get(o, 0, WP_OPT_MASTER, host);
        for (size_t j = 0; j < ne; j++) r.p[h->offset + j] = r.p[e->offset + j]; /* the head is the embedding */
        worst = fmax(worst, rel_err(host, r.p, n, 1e-2));
        EXPECT(memcmp(host + h->offset, host + e->offset, ne * 4) == 0, "step %d: head master != embedding master", t);
        EXPECT(memcmp(w + h->offset, w + e->offset, ne * 4) == 0, "step %d: head working copy != embedding's", t);
    }
    EXPECT(worst < 1e-5, "tied AdamW: worst relative error %.3g against the fp64 reference of the summed gradient", worst);
    printf("tied embeddings: 3 steps, masters rel err %.2e against AdamW on g_embed + g_head\n", worst);
    { /* slice 1 of 2 holds the head's end: its sum of squares is its own gradient's, unfolded */
        int c0 = 0;
        wp_optim *os = optim_create_slices(layout_optim_model(&L), k, &c0, 1, 1, 2, &hp, NULL, err, sizeof err);
        EXPECT(os != NULL, "tied slices: %s", err);
        size_t off, len;
        if (os && optim_range(os, 0, &off, &len)) {
            double want = 0;
            for (size_t j = 0; j < len; j++) want += (double)grad[off + j] * grad[off + j];
            optim_set(os, 0, WP_OPT_GRAD, grad + off);
            double got = optim_chunk_sumsq(os, 0);
            EXPECT(fabs(got - want) <= 1e-6 * want, "tied slice sumsq %.9g, want the unfolded %.9g", got, want);
        }
        optim_destroy(os);
    }
    free(host), free(grad), free(folded), free(w), free(r.p), free(r.m), free(r.v), free(r.m_size);
    optim_destroy(o);
    layout_free(&L);
}

/* With zero gradients and fresh moments the update is pure decay: norms must not move,
 * matrices shrink by exactly (1 - lr*wd) in fp32. */
static void test_no_decay_on_norms(wp_kern *k) {
    wp_model_cfg cfg;
    tu_model(&cfg, 2, 8, 2, 2, 24, 11);
    wp_layout L;
    char err[256];
    layout_build(&cfg, &L, err, sizeof err);
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.5};
    int c0 = 0;
    wp_optim *o = optim_create(layout_optim_model(&L), k, &c0, 1, &hp, err, sizeof err);
    optim_init_from_seed(o, 3);
    size_t n = L.chunk_numel[0];
    float *before = malloc(n * 4), *after = malloc(n * 4);
    uint64_t rng = 5;
    for (size_t j = 0; j < n; j++) before[j] = (float)(1 + tu_normal(&rng));
    optim_set(o, 0, WP_OPT_MASTER, before);
    optim_step_chunk(o, 0, 0.1f, 1.0f);
    optim_get(o, 0, WP_OPT_MASTER, after);
    int norm_moved = 0, matrix_wrong = 0, norms = 0;
    for (int i = 0; i < L.n_params; i++) {
        const wp_param *p = &L.params[i];
        for (size_t j = p->offset; j < p->offset + (size_t)p->rows * p->cols; j++) {
            if (p->kind == WP_PARAM_NORM) norms++, norm_moved += after[j] != before[j];
            else matrix_wrong += fabsf(after[j] - before[j] * (1 - 0.1f * 0.5f)) > 2 * FLT_EPSILON * fabsf(before[j]);
        }
    }
    EXPECT(norms > 0 && norm_moved == 0, "%d of %d norm weights decayed", norm_moved, norms);
    EXPECT(matrix_wrong == 0, "%d matrix/embedding weights did not decay by (1 - lr*wd)", matrix_wrong);
    free(before), free(after);
    optim_destroy(o);
    layout_free(&L);
}

static void check_lr(const wp_lr_schedule *s, int64_t step, double want, const char *what) {
    double got = lr_at(s, step);
    EXPECT(fabs(got - want) <= 1e-12 * fmax(1e-3, fabs(want)), "%s at step %lld: %.15g, want %.15g", what, (long long)step, got, want);
}

static void test_schedule(void) {
    wp_lr_schedule s = {.lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 10, .total_steps = 110, .decay = WP_LR_COSINE};
    check_lr(&s, 0, 3e-4, "warm-up");            /* lr * 1/10 */
    check_lr(&s, 4, 1.5e-3, "warm-up");          /* lr * 5/10 */
    check_lr(&s, 9, 3e-3, "warm-up end");
    check_lr(&s, 10, 3e-3, "cosine start");
    check_lr(&s, 60, (3e-3 + 3e-4) / 2, "cosine midpoint");
    check_lr(&s, 35, 3e-4 + 2.7e-3 * (1 + cos(M_PI / 4)) / 2, "cosine quarter");
    check_lr(&s, 110, 3e-4, "cosine end");
    check_lr(&s, 500, 3e-4, "beyond the end");
    s.decay = WP_LR_LINEAR;
    check_lr(&s, 85, 3e-4 + 2.7e-3 * 0.25, "linear 3/4");
    check_lr(&s, 110, 3e-4, "linear end");
    s.decay = WP_LR_CONSTANT;
    check_lr(&s, 85, 3e-3, "constant");
    check_lr(&s, 3, 1.2e-3, "constant warm-up");
    s.warmup_steps = 0;
    s.decay = WP_LR_COSINE;
    check_lr(&s, 0, 3e-3, "no warm-up");
    int monotone = 1;
    for (int64_t k = 1; k <= 110; k++) monotone &= lr_at(&s, k) <= lr_at(&s, k - 1);
    EXPECT(monotone, "cosine decay is not monotone");
}

/* The flags reach the schedule and the optimizer; bad values are refused naming the flag. */
static void test_flags(void) {
    static wp_opts o;
    char err[256];
    char *good[] = {"train", "--lr", "6e-4", "--min-lr", "6e-5", "--warmup-steps", "7", "--steps", "70", "--lr-decay-style", "linear"};
    EXPECT(cli_parse(11, good, &o, err, sizeof err) == 0, "parse: %s", err);
    wp_lr_schedule s;
    EXPECT(lr_schedule_from_opts(&o, &s, err, sizeof err) == 0 && s.lr == 6e-4 && s.min_lr == 6e-5 && s.warmup_steps == 7 &&
               s.total_steps == 70 && s.decay == WP_LR_LINEAR,
           "schedule from flags: %s", err);
    wp_adamw_hparams hp;
    EXPECT(adamw_hparams_from_opts(&o, &hp, err, sizeof err) == 0 && hp.beta2 == 0.95 && hp.weight_decay == 0.1, "hparams: %s", err);
    o.warmup_steps = -1;
    int rc = lr_schedule_from_opts(&o, &s, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--warmup-steps");
    o.warmup_steps = 0;
    o.min_lr = NAN;
    rc = lr_schedule_from_opts(&o, &s, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--min-lr");
    /* the default floor follows --lr (0.1 x), so a low --lr still decays */
    char *low[] = {"train", "--lr", "1e-5"};
    EXPECT(cli_parse(3, low, &o, err, sizeof err) == 0 && lr_schedule_from_opts(&o, &s, err, sizeof err) == 0 &&
               s.min_lr == 0.1 * 1e-5,
           "default --min-lr with --lr 1e-5: %g, want 1e-6 (%s)", s.min_lr, err);
    o.min_lr = 2e-5; /* a floor above the peak would climb */
    rc = lr_schedule_from_opts(&o, &s, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--min-lr");
    o.min_lr = 1e-5; /* equal: constant after warm-up, allowed */
    EXPECT(lr_schedule_from_opts(&o, &s, err, sizeof err) == 0, "--min-lr = --lr: %s", err);
    o.adam_beta1 = 1.0;
    rc = adamw_hparams_from_opts(&o, &hp, err, sizeof err);
    EXPECT_REFUSED(rc, err, "--adam-beta1");
}

static void test_clip(void) {
    /* norm of the true gradient = sqrt(sumsq) / loss_scale */
    wp_step_decision d = step_decide(16.0 * 1024 * 1024, 1024, 1.0);
    EXPECT(!d.skip && fabs(d.grad_norm - 4.0) < 1e-15, "norm %g, want 4", d.grad_norm);
    EXPECT(fabs(d.clip_factor - 1.0 / (4.0 + 1e-6)) < 1e-15, "clip factor %.17g", d.clip_factor);
    EXPECT(d.grad_scale == (float)(d.clip_factor / 1024), "grad_scale %.9g", (double)d.grad_scale);
    d = step_decide(0.25, 1, 1.0);
    EXPECT(d.clip_factor == 1.0 && d.grad_scale == 1.0f, "a norm of 0.5 under clip 1 must not be clipped (%g)", d.clip_factor);
    d = step_decide(100, 1, 0);
    EXPECT(d.clip_factor == 1.0 && d.grad_norm == 10.0, "clip 0 disables clipping (%g)", d.clip_factor);
    EXPECT(step_decide(INFINITY, 8, 1).skip && step_decide(NAN, 8, 1).skip && step_decide(-INFINITY, 1, 1).skip,
           "a non-finite norm must skip");
    /* per-chunk slots summed across ranks in any order give the chunk-order sum exactly */
    double chunk[5] = {1e-3, 7.25, 3e8, 1e-12, 42.0}, ranks[3][5] = {{0}}, a[5] = {0}, b[5] = {0};
    for (int c = 0; c < 5; c++) ranks[c % 3][c] = chunk[c];
    for (int c = 0; c < 5; c++) a[c] = (ranks[0][c] + ranks[1][c]) + ranks[2][c], b[c] = ranks[2][c] + (ranks[1][c] + ranks[0][c]);
    EXPECT(grad_total_sumsq(a, 5) == grad_total_sumsq(chunk, 5) && grad_total_sumsq(b, 5) == grad_total_sumsq(chunk, 5),
           "per-chunk exchange is not order-independent");
}

static void test_scaler(void) {
    wp_loss_scaler s = loss_scaler_init(true, 1024, 3);
    /* script: finite x3 -> double; inf -> halve; finite x2; nan -> halve; finite x3 -> double */
    const bool finite[] = {1, 1, 1, 0, 1, 1, 0, 1, 1, 1};
    const double want[] = {1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024};
    for (int i = 0; i < 10; i++) {
        wp_step_decision d = step_decide(finite[i] ? 4.0 : INFINITY, s.scale, 1.0);
        EXPECT(d.skip == !finite[i], "step %d: skip %d", i, d.skip);
        s = loss_scaler_next(s, !d.skip);
        EXPECT(s.scale == want[i], "step %d: scale %g, want %g", i, s.scale, want[i]);
    }
    s = loss_scaler_init(true, 2, 1000);
    for (int i = 0; i < 5; i++) s = loss_scaler_next(s, false);
    EXPECT(s.scale == WP_LOSS_SCALE_MIN, "scale backs off to the floor %g, got %g", WP_LOSS_SCALE_MIN, s.scale);
    s = loss_scaler_init(true, WP_LOSS_SCALE_MAX, 1);
    s = loss_scaler_next(s, true);
    EXPECT(s.scale == WP_LOSS_SCALE_MAX, "scale grows past the cap: %g", s.scale);
    for (int p = WP_PREC_BF16; p <= WP_PREC_FP32; p++) {
        s = loss_scaler_init((wp_precision)p == WP_PREC_MIXED, 65536, 2);
        for (int i = 0; i < 6; i++) s = loss_scaler_next(s, i % 2 == 0);
        EXPECT(s.scale == 1.0 && !s.dynamic, "%s: scale %g, want a static 1", precision_name((wp_precision)p), s.scale);
    }
}

/* A NaN in one chunk's gradient skips the step on every chunk: bit-identical state. */
static void test_skip(wp_kern *k) {
    wp_model_cfg cfg;
    tu_model(&cfg, 4, 16, 4, 2, 40, 29);
    model_cfg_even_chunks(&cfg, 3);
    wp_layout L;
    char err[256];
    layout_build(&cfg, &L, err, sizeof err);
    wp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    int owned[3] = {0, 1, 2};
    wp_optim *o = optim_create(layout_optim_model(&L), k, owned, 3, &hp, err, sizeof err);
    optim_init_from_seed(o, 11);
    uint64_t rng = 17;
    float *before[3][3], *after = malloc(L.total_numel * 4);
    for (int c = 0; c < 3; c++) {
        size_t n = L.chunk_numel[c];
        float *g = malloc(n * 4);
        for (size_t j = 0; j < n; j++) g[j] = (float)tu_normal(&rng);
        optim_set(o, c, WP_OPT_GRAD, g);
        free(g);
    }
    wp_step_decision d = step_decide(1.0, 1, 1.0); /* one real step so moments are non-zero */
    EXPECT(optim_apply(o, &d, 1e-3f) == 0, "apply: %s", optim_error(o));
    float nan_grad = NAN;
    float *g1 = malloc(L.chunk_numel[1] * 4);
    optim_get(o, 1, WP_OPT_GRAD, g1);
    g1[L.chunk_numel[1] / 2] = nan_grad;
    optim_set(o, 1, WP_OPT_GRAD, g1);
    double sumsq[3];
    for (int c = 0; c < 3; c++) sumsq[c] = optim_chunk_sumsq(o, c);
    EXPECT(isfinite(sumsq[0]) && isnan(sumsq[1]) && isfinite(sumsq[2]), "NaN must show in chunk 1's sum of squares only");
    d = step_decide(grad_total_sumsq(sumsq, 3), 1, 1.0);
    EXPECT(d.skip, "a NaN gradient must skip the step");
    for (int c = 0; c < 3; c++)
        for (int b = 0; b < 3; b++) {
            before[c][b] = malloc(L.chunk_numel[c] * 4);
            optim_get(o, c, (wp_optim_buf)b, before[c][b]);
        }
    int64_t t = optim_steps(o);
    EXPECT(optim_apply(o, &d, 1e-3f) == 0, "apply (skip)");
    EXPECT(optim_steps(o) == t, "a skipped step changed the step count");
    for (int c = 0; c < 3; c++)
        for (int b = 0; b < 3; b++) {
            optim_get(o, c, (wp_optim_buf)b, after);
            EXPECT(memcmp(after, before[c][b], L.chunk_numel[c] * 4) == 0, "skip changed chunk %d buffer %d", c, b);
            free(before[c][b]);
        }
    free(after), free(g1);
    optim_destroy(o);
    layout_free(&L);
}

/* optim_create_weights: the masters round-trip (what hf_load_masters and its kin need), the
 * step count resets, and whatever needs moments or a gradient is refused with an error, never a
 * write through a missing buffer. Its own backend: the refusals leave a sticky error there. */
static void test_weights_only(void) {
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    char err[256];
    wp_kern *k = kern_create(&ko, err, sizeof err);
    wp_model_cfg cfg;
    tu_model(&cfg, 2, 8, 2, 2, 24, 11);
    wp_layout L;
    layout_build(&cfg, &L, err, sizeof err);
    int c0 = 0;
    wp_optim *o = optim_create_weights(layout_optim_model(&L), k, &c0, 1, err, sizeof err);
    EXPECT(o != NULL, "optim_create_weights: %s", err);
    if (!o) return;
    size_t n = L.chunk_numel[0];
    float *in = malloc(n * 4), *out = malloc(n * 4);
    uint64_t rng = 9;
    for (size_t j = 0; j < n; j++) in[j] = (float)tu_normal(&rng), out[j] = NAN;
    EXPECT(optim_set(o, 0, WP_OPT_MASTER, in) == 0 && optim_reset(o) == 0 && optim_get(o, 0, WP_OPT_MASTER, out) == 0,
           "weights-only masters: %s", optim_error(o) ? optim_error(o) : "");
    EXPECT(memcmp(in, out, n * 4) == 0, "weights-only masters do not round-trip");
    EXPECT(optim_buffer(o, 0, WP_OPT_MASTER) != NULL && optim_buffer(o, 0, WP_OPT_EXP_AVG) == NULL, "weights-only buffers");
    EXPECT(optim_grad(o, 0) == NULL && optim_error(o) && strstr(optim_error(o), "weights-only"),
           "optim_grad on a weights-only optimizer: %s", optim_error(o) ? optim_error(o) : "no error");
    EXPECT(optim_step_chunk(o, 0, 0.1f, 1.0f) != 0 && optim_zero_grad(o) != 0 &&
           optim_get(o, 0, WP_OPT_EXP_AVG, out) != 0, "a step, zero_grad or a moment of a weights-only optimizer: refused");
    free(in), free(out);
    optim_destroy(o);
    layout_free(&L);
    kern_destroy(k);
}

int main(void) {
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    char err[256];
    wp_kern *k = kern_create(&ko, err, sizeof err);
    if (!k) {
        fprintf(stderr, "cpu backend: %s\n", err);
        return 1;
    }
    test_adamw(k, 0.1, 1);
    test_adamw(k, 0.0, 3);
    test_no_decay_on_norms(k);
    test_tied(k);
    test_schedule();
    test_flags();
    test_clip();
    test_scaler();
    test_skip(k);
    test_weights_only();
    EXPECT(kern_error(k) == NULL, "kernel error: %s", kern_error(k));
    kern_destroy(k);
    return check_result("train/optim");
}
