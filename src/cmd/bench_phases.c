/* The optimizer step's memory-bound phases against what the memory (or the disk) does with the
 * same bytes, measured in the same run, alternating, so that a loaded machine slows both alike:
 *   load        master fp32 -> working copy (optim_working_copy): 4 + ws bytes a parameter
 *   update      AdamW (optim_step_chunk, after the norm's optim_chunk_sumsq as in a step): reads
 *               master, m, v, grad; writes master, m, v: 28 (no working copy: as in a step, the
 *               next LOAD makes it); a tied head's master is then copied from the embedding's:
 *               8 a tied parameter more
 *   zero        the fp32 gradient accumulator (optim_zero_grad): 4
 *   accumulate  a wire gradient into it (optim_accumulate): 4 + gs + 4
 *   save        this rank's checkpoint shard (ckpt_write_shard): 12 written to the file
 * The bound of the first four is the fastest of a one-thread and a --threads memcpy of the masters
 * (8 bytes a parameter read + written), scaled to the phase's bytes; the save's, a plain write of
 * the same 12 bytes a parameter to a file beside it, then fsync (the file, and the save's step
 * folder, are removed after the clocks stop). Beside each: the threads the phase ran on (those
 * of its largest kernel call, kern_bulk_threads, or shard put, st_writer_threads) and those of
 * the bound's fastest repeat. */
#include "bench_phases.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adapters.h"
#include "checkpoint.h"
#include "fsutil.h"
#include "optim.h"
#include "safetensors.h"

enum { PH_LOAD, PH_UPDATE, PH_ZERO, PH_ACC, PH_SAVE };

typedef struct {
    const wp_opts *o;
    const wp_layout *L;
    wp_kern *k;
    wp_optim *opt;
    void *w[WP_MAX_CHUNKS], *gw[WP_MAX_CHUNKS]; /* working copies and wire gradients, per chunk */
    float *copy_dst;                              /* the bound's memcpy target, total_numel floats */
    wp_dtype wt, gt;
    char dir[WP_PATH_MAX];
    int64_t step;
} bench_ctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per byte (read + written) of the faster memcpy of every master: one thread, or the
 * run's threads each copying its share; *used: the thread count of the faster. */
static double copy_s_per_byte(bench_ctx *c, int threads, int *used) {
    double best = INFINITY;
    for (int t = 1; t <= threads; t = t == threads ? threads + 1 : threads) {
        double t0 = now_s();
        size_t done = 0;
        for (int i = 0; i < optim_n_owned(c->opt); i++) {
            int ch = optim_owned_chunk(c->opt, i);
            const float *src = optim_buffer(c->opt, ch, WP_OPT_MASTER);
            size_t n = c->L->chunk_numel[ch];
            float *dst = c->copy_dst + done;
#pragma omp parallel for num_threads(t) schedule(static)
            for (int part = 0; part < t; part++) {
                size_t a = n * (size_t)part / (size_t)t, b = n * (size_t)(part + 1) / (size_t)t;
                memcpy(dst + a, src + a, (b - a) * sizeof *dst);
            }
            done += n;
        }
        double s = (now_s() - t0) / (8.0 * (double)done);
        if (s < best) best = s, *used = t;
    }
    return best;
}

/* Seconds of a plain write of `bytes` (the masters, again and again) to a file in the save
 * folder, then fsync: the disk's side of the save. 0 and err on failure. */
static double write_s(bench_ctx *c, double bytes, char *err, size_t errlen) {
    char path[WP_PATH_MAX];
    if (fs_join(path, sizeof path, c->dir, "bound.bin", err, errlen)) return 0;
    double t0 = now_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return 0;
    }
    int rc = 0;
    for (double left = bytes; rc == 0 && left > 0;)
        for (int i = 0; rc == 0 && i < optim_n_owned(c->opt) && left > 0; i++) {
            int ch = optim_owned_chunk(c->opt, i);
            size_t n = c->L->chunk_numel[ch] * sizeof(float);
            if ((double)n > left) n = (size_t)left;
            rc = fs_write_all(fd, optim_buffer(c->opt, ch, WP_OPT_MASTER), n, path, err, errlen);
            left -= (double)n;
        }
    if (rc == 0 && fsync(fd) != 0) rc = snprintf(err, errlen, "%s: fsync failed: %s", path, strerror(errno)) > 0;
    if (close(fd) != 0 && rc == 0) rc = snprintf(err, errlen, "%s: close failed: %s", path, strerror(errno)) > 0;
    double s = now_s() - t0;
    if (unlink(path) != 0 && rc == 0) rc = snprintf(err, errlen, "%s: cannot remove: %s", path, strerror(errno)) > 0;
    return rc ? 0 : s;
}

/* What a step does before phase p, untimed: the norm (REDUCE) folds a tie before UPDATE. */
static void before_phase(bench_ctx *c, int p) {
    for (int i = 0; p == PH_UPDATE && i < optim_n_owned(c->opt); i++) optim_chunk_sumsq(c->opt, optim_owned_chunk(c->opt, i));
    kern_sync(c->k);
}

/* Elements of tied tensors, copied after the step (optim_step_chunk). */
static double tied_numel(const bench_ctx *c) {
    const wp_optim_model *m = optim_model(c->opt);
    double n = 0;
    size_t dst, src, len;
    for (int ch = 0; m->tied && ch < c->L->cfg.n_chunks; ch++)
        if (m->tied(m->ctx, ch, &dst, &src, &len)) n += (double)len;
    return n;
}

/* One run of phase p; 0, or 1 with err set. */
static wp_result run_phase(bench_ctx *c, int p, char *err, size_t errlen) {
    wp_optim *o = c->opt;
    int rc = 0;
    if (p == PH_ZERO) rc = optim_zero_grad(o);
    if (p == PH_SAVE) rc = ckpt_write_shard(c->dir, ++c->step, 0, o, err, errlen);
    for (int i = 0; rc == 0 && p != PH_ZERO && p != PH_SAVE && i < optim_n_owned(o); i++) {
        int ch = optim_owned_chunk(o, i);
        if (p == PH_LOAD) rc = optim_working_copy(o, ch, c->w[ch], c->wt);
        if (p == PH_UPDATE) rc = optim_step_chunk(o, ch, 1e-4f, 1.0f);
        if (p == PH_ACC) rc = optim_accumulate(o, ch, c->gw[ch], c->gt);
    }
    kern_sync(c->k);
    if (rc && !err[0]) snprintf(err, errlen, "%s", optim_error(o) ? optim_error(o) : "phase failed");
    return rc ? WP_FAILED : WP_OK;
}

/* What follows phase p, untimed: the save's step folder goes, so that the next save starts
 * afresh (as the bound's file is removed after its clock stops). */
static wp_result after_phase(bench_ctx *c, int p, char *err, size_t errlen) {
    if (p != PH_SAVE) return WP_OK;
    char step_dir[WP_PATH_MAX + 32];
    int n = snprintf(step_dir, sizeof step_dir, "%s/step-%lld.tmp", c->dir, (long long)c->step);
    if (n < 0 || (size_t)n >= sizeof step_dir) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", c->dir);
    return fs_remove_tree(step_dir, err, errlen);
}

static double phase_bytes(const bench_ctx *c, int p) {
    double n = (double)c->L->total_numel, ws = (double)wp_dtype_size(c->wt), gs = (double)wp_dtype_size(c->gt);
    switch (p) {
    case PH_LOAD: return n * (4 + ws);
    case PH_UPDATE: return n * 28 + tied_numel(c) * 8;
    case PH_ZERO: return n * 4;
    case PH_ACC: return n * (8 + gs);
    default: return n * 12;
    }
}

static wp_result setup(bench_ctx *c, char *err, size_t errlen) {
    const wp_layout *L = c->L;
    int owned[WP_MAX_CHUNKS];
    for (int i = 0; i < L->cfg.n_chunks; i++) owned[i] = i;
    wp_adamw_hparams hp;
    if (adamw_hparams_from_opts(c->o, &hp, err, errlen)) return WP_BAD_INPUT;
    c->opt = optim_create(layout_optim_model(L), c->k, owned, L->cfg.n_chunks, &hp, err, errlen);
    if (!c->opt || optim_init_from_seed(c->opt, (uint64_t)c->o->seed)) return err[0] ? WP_FAILED : wp_fail(WP_FAILED, err, errlen, "%s", optim_error(c->opt));
    c->copy_dst = kern_alloc(c->k, L->total_numel * sizeof(float));
    for (int i = 0; i < L->cfg.n_chunks; i++) {
        c->w[i] = kern_alloc(c->k, L->chunk_numel[i] * wp_dtype_size(c->wt));
        c->gw[i] = kern_alloc(c->k, L->chunk_numel[i] * wp_dtype_size(c->gt));
        /* a gradient that is not all zeros: the masters in the wire dtype */
        if (c->gw[i]) optim_working_copy(c->opt, i, c->gw[i], c->gt);
    }
    if (kern_error(c->k)) return wp_fail(WP_FAILED, err, errlen, "%s", kern_error(c->k));
    const char *tmp = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/weipipe-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(c->dir)) return wp_fail(WP_FAILED, err, errlen, "%s: mkdtemp failed: %s", c->dir, strerror(errno));
    return 0;
}

static void teardown(bench_ctx *c) {
    char err[256];
    if (c->dir[0] && strstr(c->dir, "weipipe-bench-")) fs_remove_tree(c->dir, err, sizeof err);
    for (int i = 0; i < c->L->cfg.n_chunks; i++) {
        if (c->w[i]) kern_free(c->k, c->w[i]);
        if (c->gw[i]) kern_free(c->k, c->gw[i]);
    }
    if (c->copy_dst) kern_free(c->k, c->copy_dst);
    optim_destroy(c->opt);
}

static const char *const phase_names[BENCH_PHASES] = {"load", "update", "zero", "accumulate", "save"};

wp_result bench_phases_run(const wp_opts *o, const wp_layout *L, wp_kern *k, int reps, bench_phase out[BENCH_PHASES],
                     char *err, size_t errlen) {
    bench_ctx c = {.o = o, .L = L, .k = k, .wt = precision_weight_dtype(L->cfg.precision),
                   .gt = precision_grad_dtype(L->cfg.precision)};
    int threads = o->threads > 0 ? (int)o->threads : omp_get_max_threads();
    double t[BENCH_PHASES][2][16];
    int bound_threads[BENCH_PHASES][16];
    /* the phases' threads: those of the largest kernel call (one a chunk; AdamW's are the
     * chunk's runs of tensors with one weight decay, smaller) and of the largest put into the
     * shard (a chunk's masters or moments) */
    int phase_threads[BENCH_PHASES] = {0};
    for (int i = 0; i < L->cfg.n_chunks; i++)
        for (int p = 0; p < BENCH_PHASES; p++) {
            int t = p == PH_SAVE ? st_writer_threads(L->chunk_numel[i] * sizeof(float)) : kern_bulk_threads(k, L->chunk_numel[i]);
            if (t > phase_threads[p]) phase_threads[p] = t;
        }
    if (reps > 16) reps = 16;
    int rc = setup(&c, err, errlen);
    for (int r = 0; rc == 0 && r <= reps; r++) /* r = 0 warms up: first touches, page cache */
        for (int p = 0; rc == 0 && p < BENCH_PHASES; p++) {
            double b = phase_bytes(&c, p);
            int used = 1;
            double bound = p == PH_SAVE ? write_s(&c, b, err, errlen) : b * copy_s_per_byte(&c, threads, &used);
            if (bound <= 0) rc = 1;
            if (rc == 0) before_phase(&c, p);
            double t0 = now_s();
            if (rc == 0) rc = run_phase(&c, p, err, errlen);
            if (r > 0) t[p][0][r - 1] = now_s() - t0, t[p][1][r - 1] = bound, bound_threads[p][r - 1] = used;
            if (rc == 0) rc = after_phase(&c, p, err, errlen);
        }
    for (int p = 0; rc == 0 && p < BENCH_PHASES; p++) {
        int fastest = 0; /* the bound's threads: those of its fastest repeat */
        for (int r = 1; r < reps; r++)
            if (t[p][1][r] < t[p][1][fastest]) fastest = r;
        int bt = bound_threads[p][fastest];
        qsort(t[p][0], (size_t)reps, sizeof(double), cmp_double);
        qsort(t[p][1], (size_t)reps, sizeof(double), cmp_double);
        out[p] = (bench_phase){.name = phase_names[p], .bytes = phase_bytes(&c, p), .min_s = t[p][0][0],
                               .med_s = t[p][0][reps / 2], .bound_min_s = t[p][1][0], .bound_med_s = t[p][1][reps / 2],
                               .threads = phase_threads[p], .bound_threads = bt};
    }
    teardown(&c);
    return rc;
}

void bench_phases_print(FILE *f, const bench_phase *p, bool json) {
    if (json) {
        fprintf(f, "[");
        for (int i = 0; i < BENCH_PHASES; i++)
            fprintf(f, "%s{\"phase\": \"%s\", \"bytes\": %.0f, \"threads\": %d, \"bound_threads\": %d, \"s\": %.6f, "
                       "\"s_median\": %.6f, \"bound_s\": %.6f, \"bound_s_median\": %.6f, \"ratio\": %.3f, \"ratio_median\": %.3f}",
                    i ? ", " : "", p[i].name, p[i].bytes, p[i].threads, p[i].bound_threads, p[i].min_s, p[i].med_s,
                    p[i].bound_min_s, p[i].bound_med_s, p[i].min_s / p[i].bound_min_s, p[i].med_s / p[i].bound_med_s);
        fprintf(f, "]");
        return;
    }
    fprintf(f, "step phases (best | median of the repeats; bound: memcpy of the same bytes, save: write + fsync;\n"
               "threads: the phase's / its bound's):\n");
    fprintf(f, "%-11s %10s %7s %9s %8s %9s %7s %9s %7s\n", "phase", "MB moved", "threads", "s", "GB/s", "bound GB/s", "ratio",
            "median s", "ratio");
    for (int i = 0; i < BENCH_PHASES; i++) {
        char th[24];
        snprintf(th, sizeof th, "%d/%d", p[i].threads, p[i].bound_threads);
        fprintf(f, "%-11s %10.1f %7s %9.4f %8.2f %9.2f %7.2f %9.4f %7.2f\n", p[i].name, p[i].bytes / 1e6, th, p[i].min_s,
                p[i].bytes / p[i].min_s / 1e9, p[i].bytes / p[i].bound_min_s / 1e9, p[i].min_s / p[i].bound_min_s,
                p[i].med_s, p[i].med_s / p[i].bound_med_s);
    }
}
