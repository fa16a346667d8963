/* GPU benchmark (a meson benchmark() target; run by scripts/gpu-check.sh): forward +
 * backward of one transformer block and of a small model at the paper's width, h = 4096
 * (32 heads, ffn 11008, V = 32000, b = 1), at s = 4096 and 16384, plus the attention kernels
 * alone and a large GEMM as the ceiling.
 *
 * "block": the middle chunk of a 3-chunk, 3-layer model (one block, no embedding or head),
 * timed through model_forward / model_backward exactly as a pipeline rank runs it.
 * "model": 4 layers with embedding and LM head, one chunk, through the whole-model runner.
 * Attention: --attention auto (cuDNN's fused attention where built); the "native" rows run
 * the block and attention with weipipe's own kernels (the ablation).
 * Gradients accumulate in bf16 (the paper's gW). FLOPs are layout_chunk_flops (2 per
 * multiply-add, causal attention counted once per visible pair, no recompute).
 *
 * usage: bench_gpu [bf16|fp16] [--quick] [--seq S ...]   (--quick: s = 1024 only, for a smoke
 * run; --seq: these sequence lengths instead of 4096 and 16384)
 * Prints a markdown table; MFU against the device's nominal dense fp16/bf16 peak (from its
 * name, or WP_PEAK_TFLOPS) and against the measured GEMM ceiling. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_harness.h"
#include "layout.h"
#include "model.h"
#include "whole.h"

#define WARMUP 2
#define MIN_ITERS 3
#define MIN_SECONDS 1.5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The context's error, or "failed" (for the message of a failed call). */
static const char *why(wp_kern *k) { return kern_error(k) ? kern_error(k) : "failed"; }

/* Nominal dense fp16/bf16 tensor-core peak by device name (TFLOP/s); 0 when unknown. */
static double nominal_peak(const char *name) {
    const char *env = getenv("WP_PEAK_TFLOPS");
    if (env && atof(env) > 0) return atof(env);
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 756;
    if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800") || strstr(name, "GH200")) return 989;
    if (strstr(name, "A100") || strstr(name, "A800")) return 312;
    if (strstr(name, "L40S")) return 362;
    return 0;
}

typedef double (*timed_fn)(void *ctx);

/* best seconds per call of fn over enough calls to last MIN_SECONDS */
static double best_time(wp_kern *k, timed_fn fn, void *ctx) {
    for (int i = 0; i < WARMUP; i++) fn(ctx);
    kern_sync(k);
    double best = INFINITY, total = 0;
    for (int i = 0; i < MIN_ITERS || total < MIN_SECONDS; i++) {
        double t0 = now_s();
        fn(ctx);
        kern_sync(k);
        double dt = now_s() - t0;
        total += dt;
        if (dt < best) best = dt;
        CHECK(!kern_error(k), "timed call: %s", why(k));
    }
    return best;
}

static void *random_device(wp_kern *k, size_t n, float scale, uint64_t seed) {
    wp_rng g = rng_seeded(seed);
    float *h = gh_floats(n);
    gh_fill(&g, h, n, scale, WP_F32);
    void *staging = gh_upload(k, h, n, WP_F32);
    void *d = kern_alloc(k, n * wp_dtype_size(kern_compute_dtype(k)));
    CHECK(d, "alloc: %s", why(k));
    kern_convert(k, d, kern_compute_dtype(k), staging, WP_F32, n);
    kern_free(k, staging);
    free(h);
    return d;
}

static wp_model_cfg paper_cfg(int layers, int seq, int chunks) {
    wp_model_cfg c;
    memset(&c, 0, sizeof c);
    c.n_layers = layers;
    c.h = 4096;
    c.ffn = 11008;
    c.n_heads = 32;
    c.n_kv_heads = 32;
    c.head_dim = 128;
    c.seq = seq;
    c.micro_batch = 1;
    c.vocab = 32000;
    c.rope_theta = 10000;
    c.norm_eps = 1e-5;
    c.init_std = 0.02;
    c.precision = WP_PREC_BF16;
    model_cfg_even_chunks(&c, chunks);
    return c;
}

typedef struct {
    const char *what;
    int seq;
    double seconds, flops;
} row;

static void print_row(const row *r, double peak, double ceiling) {
    double tflops = r->flops / r->seconds / 1e12;
    char mfu[16] = "-";
    if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * tflops / peak);
    printf("| %-16s | %6d | %9.2f | %10.0f | %7.1f | %8s | %10.1f%% |\n", r->what, r->seq, 1e3 * r->seconds,
           r->seq / r->seconds, tflops, mfu, 100 * tflops / ceiling);
}

/* ---- one block: chunk 1 of a 3-chunk model ---- */
typedef struct {
    wp_model *m;
    wp_acts *a;
    void *w, *x_in, *x_out, *g_out, *g_in, *gw;
    int32_t *tokens;
    float dloss;
} block_ctx;

static double block_step(void *p) {
    block_ctx *b = p;
    double loss = 0;
    model_forward(b->m, 1, b->w, b->a, b->x_in, b->tokens, b->tokens, b->x_out, &loss);
    model_backward(b->m, 1, b->w, b->a, b->g_out, b->dloss, b->g_in, b->gw, WP_BF16);
    return loss;
}

static row bench_block(wp_kern *k, int seq) {
    char err[512];
    wp_model_cfg cfg = paper_cfg(3, seq, 3);
    wp_layout L;
    CHECK(layout_build(&cfg, &L, err, sizeof err) == 0, "%s", err);
    block_ctx b = {0};
    const size_t T = (size_t)seq, es = wp_dtype_size(kern_compute_dtype(k)), n = L.chunk_numel[1];
    b.m = model_create(&L, k, err, sizeof err);
    CHECK(b.m, "%s", err);
    b.a = model_acts_create(b.m, 1);
    b.w = random_device(k, n, 0.02f, 1);
    b.x_in = random_device(k, T * cfg.h, 1.0f, 2);
    b.g_out = random_device(k, T * cfg.h, 1e-3f, 3);
    b.x_out = kern_alloc(k, T * cfg.h * es);
    b.g_in = kern_alloc(k, T * cfg.h * es);
    b.gw = kern_alloc(k, n * 2);
    b.tokens = kern_alloc(k, T * sizeof(int32_t));
    b.dloss = 1.0f / (float)T;
    CHECK(b.a && b.gw && b.tokens, "block buffers: %s", why(k));
    wp_flops f = layout_chunk_flops(&L, 1);
    row r = {"block", seq, best_time(k, block_step, &b), f.fwd + f.bwd_input + f.bwd_weight};
    void *bufs[] = {b.w, b.x_in, b.g_out, b.x_out, b.g_in, b.gw, b.tokens};
    for (int i = 0; i < 7; i++) kern_free(k, bufs[i]);
    model_acts_destroy(b.m, b.a);
    model_destroy(b.m);
    layout_free(&L);
    return r;
}

/* ---- a 4-layer model with embedding and head ---- */
static double model_step(void *p) {
    double loss = 0;
    whole_step(p, false, &loss);
    return loss;
}

static row bench_model(wp_kern *k, int seq) {
    char err[512];
    wp_model_cfg cfg = paper_cfg(4, seq, 1);
    wp_layout L;
    CHECK(layout_build(&cfg, &L, err, sizeof err) == 0, "%s", err);
    wp_whole *W = whole_create(&L, k, WP_BF16, err, sizeof err);
    CHECK(W, "%s", err);
    /* uniform weights: cheaper than layout_init_chunk's normals for a billion parameters,
     * and the speed does not depend on the values */
    float *params = gh_floats(L.total_numel);
    wp_rng pg = rng_seeded(7);
    gh_fill(&pg, params, L.total_numel, 0.03f, WP_F32);
    int32_t *tok = malloc(2 * (size_t)seq * sizeof *tok);
    wp_rng g = rng_seeded(5);
    for (int t = 0; t < 2 * seq; t++) tok[t] = (int32_t)rng_below(&g, (uint64_t)cfg.vocab);
    CHECK(!whole_set_params(W, params) && !whole_set_tokens(W, tok, tok + seq), "model setup: %s", why(k));
    free(params);
    free(tok);
    wp_flops f = layout_chunk_flops(&L, 0);
    row r = {"model (4 layers)", seq, best_time(k, model_step, W), f.fwd + f.bwd_input + f.bwd_weight};
    whole_destroy(W);
    layout_free(&L);
    return r;
}

/* ---- attention alone, 32 heads of 128 ---- */
typedef struct {
    wp_kern *k;
    void *q, *kk, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    int s;
    bool backward;
} attn_ctx;

static double attn_call(void *p) {
    attn_ctx *a = p;
    if (a->backward)
        kern_attention_bwd(a->k, a->dq, a->dk, a->dv, a->dout, a->q, a->kk, a->v, a->o, a->lse, 1, a->s, a->s, 32, 32, 128, NULL);
    else
        kern_attention_fwd(a->k, a->o, a->lse, a->q, a->kk, a->v, 1, a->s, a->s, 32, 32, 128, NULL);
    return 0;
}

static void bench_attention(wp_kern *k, int seq, row *fwd, row *bwd, const char *fwd_name, const char *bwd_name) {
    const size_t n = (size_t)seq * 4096, es = wp_dtype_size(kern_compute_dtype(k));
    attn_ctx a = {.k = k, .s = seq};
    a.q = random_device(k, n, 1.0f, 11);
    a.kk = random_device(k, n, 1.0f, 12);
    a.v = random_device(k, n, 1.0f, 13);
    a.dout = random_device(k, n, 1.0f, 14);
    a.o = kern_alloc(k, n * es);
    a.dq = kern_alloc(k, n * es);
    a.dk = kern_alloc(k, n * es);
    a.dv = kern_alloc(k, n * es);
    a.lse = kern_alloc(k, (size_t)32 * seq * 4);
    double pairs = (double)seq * (seq + 1) / 2, f = 4.0 * pairs * 128 * 32; /* QK^T and PV */
    *fwd = (row){fwd_name, seq, best_time(k, attn_call, &a), f};
    a.backward = true;
    *bwd = (row){bwd_name, seq, best_time(k, attn_call, &a), 2 * f};
    void *bufs[] = {a.q, a.kk, a.v, a.dout, a.o, a.dq, a.dk, a.dv, a.lse};
    for (int i = 0; i < 9; i++) kern_free(k, bufs[i]);
}

/* ---- the ceiling: C[8192, 8192] = A B^T in the compute dtype, fp32 accumulation ---- */
typedef struct {
    wp_kern *k;
    void *A, *B, *C;
    int n;
} gemm_ctx;

static double gemm_call(void *p) {
    gemm_ctx *g = p;
    kern_gemm(g->k, false, true, g->n, g->n, g->n, 1.0f, g->A, g->n, g->B, g->n, 0.0f, g->C, kern_compute_dtype(g->k), g->n);
    return 0;
}

static double gemm_ceiling(wp_kern *k) {
    gemm_ctx g = {.k = k, .n = 8192};
    size_t n = (size_t)g.n * g.n;
    g.A = random_device(k, n, 1.0f, 21);
    g.B = random_device(k, n, 1.0f, 22);
    g.C = kern_alloc(k, n * wp_dtype_size(kern_compute_dtype(k)));
    double t = best_time(k, gemm_call, &g);
    kern_free(k, g.A), kern_free(k, g.B), kern_free(k, g.C);
    return 2.0 * g.n * (double)g.n * g.n / t / 1e12;
}

int main(int argc, char **argv) {
    wp_dtype ct = WP_BF16;
    bool quick = false;
    int given[8], ngiven = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "fp16") == 0) ct = WP_F16;
        else if (strcmp(argv[i], "bf16") == 0) ct = WP_BF16;
        else if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc && ngiven < 8 && atoi(argv[i + 1]) >= 64 &&
                 atoi(argv[i + 1]) <= 262144)
            given[ngiven++] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gpu [bf16|fp16] [--quick] [--seq S (64..262144, up to 8 times)]\n");
            return 2;
        }
    }
    int rc = gh_require_gpu("bench_gpu");
    if (rc) return rc;
    char err[512];
    wp_kern_opts o = {.kind = WP_BACKEND_CUDA, .compute = ct, .threads = 1, .device = 0};
    wp_kern *k = kern_create(&o, err, sizeof err);
    CHECK(k, "%s", err);
    /* the same kernels with weipipe's own attention: the ablation of cuDNN's */
    o.attention = WP_ATTN_NATIVE;
    wp_kern *kn = kern_create(&o, err, sizeof err);
    CHECK(kn, "%s", err);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "unknown");
    double peak = nominal_peak(prop.name), ceiling = gemm_ceiling(k);
    printf("device: %s; compute %s, fp32 accumulation, bf16 gradients\n", prop.name, wp_dtype_name(ct));
    printf("GEMM ceiling (8192^3, %s): %.1f TFLOP/s; nominal peak: ", wp_dtype_name(ct), ceiling);
    if (peak > 0) printf("%.0f TFLOP/s\n\n", peak);
    else printf("unknown (set WP_PEAK_TFLOPS)\n\n");
    printf("| %-16s | %6s | %9s | %10s | %7s | %8s | %10s |\n", "what", "s", "ms", "tokens/s", "TFLOP/s", "MFU",
           "of GEMM");
    printf("|------------------|--------|-----------|------------|---------|----------|-------------|\n");
    const int quick_seqs[] = {1024}, full_seqs[] = {4096, 16384};
    const int *seqs = ngiven ? given : quick ? quick_seqs : full_seqs, nseq = ngiven ? ngiven : quick ? 1 : 2;
    for (int i = 0; i < nseq; i++) {
        row fwd, bwd, nfwd, nbwd, blk = bench_block(k, seqs[i]), mdl = bench_model(k, seqs[i]);
        row nblk = bench_block(kn, seqs[i]);
        nblk.what = "block (native)";
        bench_attention(k, seqs[i], &fwd, &bwd, "attention fwd", "attention bwd");
        bench_attention(kn, seqs[i], &nfwd, &nbwd, "attn fwd native", "attn bwd native");
        const row *rows[] = {&blk, &mdl, &fwd, &bwd, &nblk, &nfwd, &nbwd};
        for (int r = 0; r < 7; r++) print_row(rows[r], peak, ceiling);
        fflush(stdout);
    }
    printf("\nattention kernels: %s\n", kern_notes(k)[0] ? kern_notes(k) : "(none noted)");
    kern_destroy(kn);
    kern_destroy(k);
    return 0;
}
