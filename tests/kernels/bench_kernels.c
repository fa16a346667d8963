/* Kernel benchmark (not a test): GEMM throughput for the linear layers of widths 256..1024
 * through OpenBLAS and the C fallback, and causal attention forward/backward at s = 1024 and
 * 4096. Usage: bench_kernels [threads [gemm|attention]] (threads 0 or absent: all cores, as
 * OMP_NUM_THREADS allows; the second argument runs one part only).
 * GFLOP/s count useful work: 2mnk for a GEMM; for causal attention 4*hd per visible
 * (query, key) pair forward and 2.5 times that backward (the five products of FlashAttention-2,
 * whatever the kernel recomputes). */
#include <time.h>

#include "cpu.h"
#include "kt.h"
#include "wp_config.h"

#if WP_HAVE_BLAS
#include <cblas.h>
#endif

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

typedef void (*bench_fn)(wp_kern *k, void *arg);

typedef struct {
    double wall, cpu; /* seconds of the fastest run: elapsed, and CPU time of all threads */
} timing;

/* Fastest of repeated runs (at least 3, at least 0.3 s in all). On a shared machine the CPU
 * time shows what the kernel itself costs when the wall clock includes waiting for a core. */
static timing best_of(wp_kern *k, bench_fn f, void *arg) {
    timing best = {INFINITY, INFINITY};
    double start = now();
    for (int rep = 0; rep < 3 || now() - start < 0.3; rep++) {
        double t0 = now(), c0 = cpu_now();
        f(k, arg);
        double t = now() - t0, c = cpu_now() - c0;
        if (t < best.wall) best.wall = t;
        if (c < best.cpu) best.cpu = c;
    }
    return best;
}

static void row(const char *kernel, const char *shape, timing t, double flops) {
    printf("| %-20s | %-32s | %9.2f | %8.1f | %10.2f | %11.1f |\n", kernel, shape, t.wall * 1e3, flops / t.wall * 1e-9,
           t.cpu * 1e3, flops / t.cpu * 1e-9);
}

typedef struct {
    bool ta, tb;
    int m, n, kk;
    float *A, *B, *C;
} gemm_arg;

static void run_gemm(wp_kern *k, void *arg) {
    gemm_arg *g = arg;
    int lda = g->ta ? g->m : g->kk, ldb = g->tb ? g->kk : g->n;
    kern_gemm(k, g->ta, g->tb, g->m, g->n, g->kk, 1.0f, g->A, lda, g->B, ldb, 0.0f, g->C, WP_F32, g->n);
}

static void bench_gemm(wp_kern *k, kt_rng *r, int T) {
    const int widths[] = {256, 512, 1024};
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        int h = widths[wi];
        /* forward y = x W^T, input gradient dx = dy W, weight gradient dW = dy^T x, MLP up */
        gemm_arg cases[] = {{false, true, T, h, h, 0, 0, 0},
                            {false, false, T, h, h, 0, 0, 0},
                            {true, false, h, h, T, 0, 0, 0},
                            {false, true, T, 4 * h, h, 0, 0, 0}};
        const char *names[] = {"x W^T", "dy W", "dy^T x", "x W_up^T"};
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            gemm_arg *g = &cases[ci];
            size_t na = (size_t)g->m * g->kk, nb = (size_t)g->kk * g->n, nc = (size_t)g->m * g->n;
            g->A = kt_floats(na), g->B = kt_floats(nb), g->C = kt_floats(nc);
            kt_fill(r, g->A, na, -1, 1), kt_fill(r, g->B, nb, -1, 1);
            char shape[64];
            snprintf(shape, sizeof shape, "%s m=%d n=%d k=%d", names[ci], g->m, g->n, g->kk);
            double flops = 2.0 * g->m * g->n * g->kk;
            for (int blas = WP_HAVE_BLAS; blas >= 0; blas--) {
                bool was = cpu_gemm_use_blas(k, blas);
                row(blas ? "gemm OpenBLAS" : "gemm C fallback", shape, best_of(k, run_gemm, g), flops);
                cpu_gemm_use_blas(k, was);
            }
            free(g->A), free(g->B), free(g->C);
        }
    }
}

typedef struct {
    int b, s, nh, nkv, hd;
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} attn_arg;

static void run_fwd(wp_kern *k, void *arg) {
    attn_arg *a = arg;
    kern_attention_fwd(k, a->o, a->lse, a->q, a->k, a->v, a->b, a->s, a->s, a->nh, a->nkv, a->hd, NULL);
}

static void run_bwd(wp_kern *k, void *arg) {
    attn_arg *a = arg;
    kern_attention_bwd(k, a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, a->lse, a->b, a->s, a->s, a->nh,
                       a->nkv, a->hd, NULL);
}

static void bench_attention(wp_kern *k, kt_rng *r, int s, int nh, int nkv, int hd) {
    attn_arg a = {1, s, nh, nkv, hd, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t nq = (size_t)s * nh * hd, nk = (size_t)s * nkv * hd;
    a.q = kt_floats(nq), a.o = kt_floats(nq), a.dout = kt_floats(nq), a.dq = kt_floats(nq);
    a.k = kt_floats(nk), a.v = kt_floats(nk), a.dk = kt_floats(nk), a.dv = kt_floats(nk);
    a.lse = kt_floats((size_t)nh * s);
    kt_fill(r, a.q, nq, -1, 1), kt_fill(r, a.k, nk, -1, 1), kt_fill(r, a.v, nk, -1, 1), kt_fill(r, a.dout, nq, -1, 1);
    double fwd_flops = 4.0 * hd * ((double)s * (s + 1) / 2) * nh;
    char shape[64];
    snprintf(shape, sizeof shape, "s=%d nh=%d nkv=%d hd=%d", s, nh, nkv, hd);
    run_fwd(k, &a);
    row("attention fwd", shape, best_of(k, run_fwd, &a), fwd_flops);
    row("attention bwd", shape, best_of(k, run_bwd, &a), 2.5 * fwd_flops);
    free(a.q), free(a.o), free(a.dout), free(a.dq), free(a.k), free(a.v), free(a.dk), free(a.dv), free(a.lse);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    wp_kern *k = kt_cpu(threads);
    kt_rng r = {1};
    printf("weipipe CPU kernels: %d OpenMP thread(s)", cpu_threads(k));
#if WP_HAVE_BLAS && defined(OPENBLAS_VERSION)
    printf(", OpenBLAS with %d thread(s)", openblas_get_num_threads());
#endif
    printf("\n\n");
    printf("| %-20s | %-32s | %9s | %8s | %10s | %11s |\n", "kernel", "shape", "wall ms", "GFLOP/s", "CPU ms",
           "GFLOP/CPU-s");
    printf("|%s|%s|%s|%s|%s|%s|\n", "----------------------", "----------------------------------", "-----------",
           "----------", "------------", "-------------");
    const char *only = argc > 2 ? argv[2] : "";
    if (strcmp(only, "attention") != 0) bench_gemm(k, &r, 1024);
    if (strcmp(only, "gemm") != 0) {
        bench_attention(k, &r, 1024, 4, 4, 64);
        bench_attention(k, &r, 4096, 4, 4, 64);
        bench_attention(k, &r, 4096, 8, 2, 64);
    }
    kt_no_error(k, "bench");
    kern_destroy(k);
    return check_failures() ? 1 : 0;
}
