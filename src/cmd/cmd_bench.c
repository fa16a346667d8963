/* weipipe bench: how fast one rank runs forward + fused backward of the configured model,
 * against the fastest fp32 GEMM the same backend achieves (the ceiling MFU is measured
 * against, since a CPU's nominal peak says little about what BLAS reaches on it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters.h"
#include "bench_phases.h"
#include "commands.h"
#include "log.h"
#include "whole.h"

#define BENCH_WARMUP 2
#define BENCH_MIN_ITERS 3
#define BENCH_MAX_ITERS 50
#define BENCH_MIN_SECONDS 2.0   /* timed iterations run at least this long in total */
#define GEMM_MIN_SECONDS 0.5
#define BENCH_PHASE_REPS 5 /* of each step phase and its bound (bench_phases.h) */

typedef struct {
    double gemm_gflops;  /* ceiling: best fp32 GEMM rate */
    int gemm_n;          /* its square size */
    int iters;
    double fwd_s, bwd_s; /* per iteration (best of the timed runs) */
    double tokens_per_s, model_gflops, mfu, loss;
} bench_result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best rate of C[n,n] = A[n,n] B[n,n]^T in the backend's fp32 path, over many short runs (n = 512 on
 * a CPU: tens of milliseconds, so that some runs escape a busy machine's preemptions). */
static wp_result gemm_ceiling(wp_kern *k, int n, double *gflops) {
    size_t bytes = (size_t)n * n * sizeof(float);
    void *A = kern_alloc(k, bytes), *B = A ? kern_alloc(k, bytes) : NULL, *C = B ? kern_alloc(k, bytes) : NULL;
    *gflops = 0;
    if (C) {
        double total = 0;
        for (int rep = 0; total < GEMM_MIN_SECONDS || rep < 3; rep++) {
            double t0 = now_s();
            kern_gemm(k, false, true, n, n, n, 1.0f, A, n, B, n, 0.0f, C, WP_F32, n);
            kern_sync(k);
            double dt = now_s() - t0;
            total += dt;
            if (rep > 0) *gflops = fmax(*gflops, 2.0 * n * (double)n * n / dt / 1e9); /* rep 0 warms up */
        }
    }
    if (C) kern_free(k, C);
    if (B) kern_free(k, B);
    if (A) kern_free(k, A);
    return kern_error(k) ? WP_FAILED : WP_OK; /* the reason stays in kern_error(k) */
}

/* The fastest step of the timed iterations is reported (with its forward and backward), the
 * usual statistic on a shared machine: slower runs measure the neighbours, not the code. */
static wp_result run_model(wp_whole *W, bench_result *r) {
    double fwd, bwd, total = 0;
    r->fwd_s = r->bwd_s = INFINITY;
    for (int i = 0; i < BENCH_WARMUP; i++)
        if (whole_time_step(W, &fwd, &bwd, &r->loss) != 0) return WP_FAILED;
    for (r->iters = 0; r->iters < BENCH_MAX_ITERS && (r->iters < BENCH_MIN_ITERS || total < BENCH_MIN_SECONDS); r->iters++) {
        if (whole_time_step(W, &fwd, &bwd, &r->loss) != 0) return WP_FAILED;
        if (fwd + bwd < r->fwd_s + r->bwd_s) r->fwd_s = fwd, r->bwd_s = bwd;
        total += fwd + bwd;
    }
    return 0;
}

static void summarise(const wp_layout *L, bench_result *r) {
    double flops = 0, step = r->fwd_s + r->bwd_s;
    for (int c = 0; c < L->cfg.n_chunks; c++) {
        wp_flops f = layout_chunk_flops(L, c);
        flops += f.fwd + f.bwd_input + f.bwd_weight;
    }
    r->tokens_per_s = (double)L->cfg.micro_batch * L->cfg.seq / step;
    r->model_gflops = flops / step / 1e9;
    r->mfu = r->gemm_gflops > 0 ? r->model_gflops / r->gemm_gflops : 0;
}

static void print_result(const wp_opts *o, const wp_layout *L, wp_kern *k, const bench_result *r, const bench_phase *ph) {
    const wp_model_cfg *c = &L->cfg;
    const char *backend = kern_kind(k) == WP_BACKEND_CUDA ? "cuda" : "cpu";
    const char *dt = wp_dtype_name(kern_compute_dtype(k));
    if (o->format == WP_FMT_JSON) {
        printf("{\"backend\": \"%s\", \"compute\": \"%s\", \"layers\": %d, \"hidden\": %d, \"ffn\": %d, \"heads\": %d, "
               "\"kv_heads\": %d, \"seq\": %d, \"batch\": %d, \"vocab\": %d, \"chunks\": %d, \"recompute\": %s, "
               "\"iters\": %d, \"fwd_ms\": %.3f, \"bwd_ms\": %.3f, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, "
               "\"model_gflops\": %.2f, \"gemm_n\": %d, \"gemm_gflops\": %.2f, \"mfu\": %.4f, \"loss\": %.6f, \"phases\": ",
               backend, dt, c->n_layers, c->h, c->ffn, c->n_heads, c->n_kv_heads, c->seq, c->micro_batch, c->vocab, c->n_chunks,
               c->recompute ? "true" : "false", r->iters, 1e3 * r->fwd_s, 1e3 * r->bwd_s, 1e3 * (r->fwd_s + r->bwd_s),
               r->tokens_per_s, r->model_gflops, r->gemm_n, r->gemm_gflops, r->mfu, r->loss);
        bench_phases_print(stdout, ph, true);
        printf("}\n");
    } else if (o->format == WP_FMT_CSV) {
        printf("backend,compute,layers,hidden,ffn,heads,kv_heads,seq,batch,vocab,chunks,recompute,iters,fwd_ms,bwd_ms,"
               "step_ms,tokens_per_s,model_gflops,gemm_n,gemm_gflops,mfu,loss\n");
        printf("%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.1f,%.2f,%d,%.2f,%.4f,%.6f\n", backend, dt,
               c->n_layers, c->h, c->ffn, c->n_heads, c->n_kv_heads, c->seq, c->micro_batch, c->vocab, c->n_chunks, c->recompute,
               r->iters, 1e3 * r->fwd_s, 1e3 * r->bwd_s, 1e3 * (r->fwd_s + r->bwd_s), r->tokens_per_s, r->model_gflops,
               r->gemm_n, r->gemm_gflops, r->mfu, r->loss);
    } else {
        printf("model: %d layers, h=%d ffn=%d heads=%d/%d, b=%d s=%d V=%d, %d chunk%s%s; %s backend, %s compute\n",
               c->n_layers, c->h, c->ffn, c->n_heads, c->n_kv_heads, c->micro_batch, c->seq, c->vocab, c->n_chunks, c->n_chunks == 1 ? "" : "s",
               c->recompute ? ", recompute" : "", backend, dt);
        printf("fp32 GEMM ceiling (%d^3): %.1f GFLOP/s\n", r->gemm_n, r->gemm_gflops);
        printf("step (best of %d): forward %.2f ms + backward %.2f ms = %.2f ms\n", r->iters, 1e3 * r->fwd_s,
               1e3 * r->bwd_s, 1e3 * (r->fwd_s + r->bwd_s));
        printf("%.0f tokens/s, %.2f model GFLOP/s, MFU %.1f%% of the GEMM ceiling\n", r->tokens_per_s, r->model_gflops,
               100 * r->mfu);
        bench_phases_print(stdout, ph, false);
    }
}

int cmd_bench(const wp_opts *o) {
    char err[512] = "";
    wp_model_cfg cfg;
    wp_layout L;
    int rc = model_cfg_from_opts(o, 1, &cfg, err, sizeof err);
    if (rc == 0) rc = layout_build(&cfg, &L, err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    wp_kern_opts ko;
    if (kern_opts_from_opts(o, precision_act_dtype(cfg.precision), (int)o->threads, 0 /* one process: local rank 0 */, &ko,
                            err, sizeof err)) {
        wp_error("%s", err);
        layout_free(&L);
        return 2;
    }
    wp_kern *k = kern_create(&ko, err, sizeof err);
    wp_whole *W = k ? whole_create(&L, k, WP_F32, err, sizeof err) : NULL;
    bench_result r = {.gemm_n = ko.kind == WP_BACKEND_CUDA ? 8192 : 512};
    rc = W && whole_load_random(W, (uint64_t)o->seed, err, sizeof err) == 0 ? 0 : 1;
    if (rc == 0 && (gemm_ceiling(k, r.gemm_n, &r.gemm_gflops) != 0 || run_model(W, &r) != 0)) {
        snprintf(err, sizeof err, "%s", kern_error(k) ? kern_error(k) : "kernel failure");
        rc = 1;
    }
    bench_phase ph[BENCH_PHASES];
    if (rc == 0 && bench_phases_run(o, &L, k, BENCH_PHASE_REPS, ph, err, sizeof err)) rc = 1;
    if (rc == 0) {
        summarise(&L, &r);
        print_result(o, &L, k, &r, ph);
    } else {
        wp_error("%s", err);
    }
    whole_destroy(W);
    if (k) kern_destroy(k);
    layout_free(&L);
    return rc;
}
