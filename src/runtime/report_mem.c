/* The end-of-run memory table and its --metrics line (report.h): what each rank's allocator held
 * at its peak, term by term, beside what the start-up check predicted (schedule/memory.h), also
 * as TensorBoard scalars (--tensorboard). */
#include "report.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "memlimit.h"
#include "memory.h"

#define MIB (1.0 / 1048576.0)

static void print_row(const char *what, const double *t, double total) {
    fprintf(stderr, "      %-9s", what);
    for (int k = 0; k < WP_MEM_TERMS; k++) fprintf(stderr, " %*.1f", k == WP_MEM_ACTS || k == WP_MEM_EVAL ? 11 : 9, t[k] * MIB);
    fprintf(stderr, " %9.1f\n", total * MIB);
}

static void print_table(const train_job *j, const double *v, int stride) {
    fprintf(stderr, "\nmemory per rank, MiB: the allocator's high-water (its terms at that moment) beside the prediction; "
                    "resident: the process's VmHWM%s\nrank          ", j->nranks > 1 && !boot_launched() ? " (ranks are threads of one process: shared)" : "");
    for (int k = 0; k < WP_MEM_TERMS; k++) fprintf(stderr, " %*s", k == WP_MEM_ACTS || k == WP_MEM_EVAL ? 11 : 9, wp_mem_term_name[k]);
    fprintf(stderr, "     total\n");
    for (int r = 0; r < j->nranks; r++) {
        const double *x = v + (size_t)stride * r;
        double pred[WP_MEM_TERMS];
        train_mem_predict(j, r, pred);
        fprintf(stderr, "%4d\n", r);
        print_row("measured", x + 2, x[0]);
        print_row("predicted", pred, mem_total(pred));
        double p = mem_total(pred);
        fprintf(stderr, "      resident %.1f, allocator %.1f = %+.1f%% of the prediction\n", x[1] * MIB, x[0] * MIB,
                p > 0 ? 100.0 * (x[0] - p) / p : 0);
    }
}

/* The memory scalars of rank r as TensorBoard tags memory/rank<r>/<key> (terms/<name>,
 * predicted_terms/<name>), the same numbers as the metrics line's: peak, resident, predicted,
 * then the measured and the predicted terms. */
enum { MEM_VALUES = 3 + 2 * WP_MEM_TERMS };
static void memory_scalars(const train_job *j, const double *x, int r, char (*tag)[80], tb_scalar *s) {
    double pred[WP_MEM_TERMS];
    train_mem_predict(j, r, pred);
    static const char *const keys[3] = {"peak_bytes", "resident_bytes", "predicted_bytes"};
    const double top[3] = {x[0], x[1], mem_total(pred)};
    for (int i = 0; i < 3; i++) {
        snprintf(tag[i], sizeof tag[i], "memory/rank%d/%s", r, keys[i]);
        s[i] = (tb_scalar){tag[i], top[i]};
    }
    for (int k = 0; k < WP_MEM_TERMS; k++) {
        snprintf(tag[3 + k], sizeof tag[0], "memory/rank%d/terms/%s", r, wp_mem_term_name[k]);
        s[3 + k] = (tb_scalar){tag[3 + k], x[2 + k]};
        snprintf(tag[3 + WP_MEM_TERMS + k], sizeof tag[0], "memory/rank%d/predicted_terms/%s", r, wp_mem_term_name[k]);
        s[3 + WP_MEM_TERMS + k] = (tb_scalar){tag[3 + WP_MEM_TERMS + k], pred[k]};
    }
}

/* The metrics line and the TensorBoard event, each from memory_scalars' values. */
static void metrics_line(const train_job *j, const double *v, int stride, FILE *f, wp_tb *tb, int64_t step) {
    struct timespec ts; /* every metrics line carries its Unix time */
    double now = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec : 0;
    char tag[MEM_VALUES][80];
    tb_scalar s[MEM_VALUES];
    if (f) fprintf(f, "{\"time\": %.6f, \"memory\": [", now);
    for (int r = 0; r < j->nranks; r++) {
        memory_scalars(j, v + (size_t)stride * r, r, tag, s);
        tb_scalars(tb, step, now, s, MEM_VALUES); /* an event per rank: the tags' text lives in tag[] */
        if (!f) continue;
        fprintf(f, "%s{\"rank\": %d, \"peak_bytes\": %.0f, \"resident_bytes\": %.0f, \"predicted_bytes\": %.0f, \"terms\": {",
                r ? ", " : "", r, s[0].value, s[1].value, s[2].value);
        for (int k = 0; k < WP_MEM_TERMS; k++) fprintf(f, "%s\"%s\": %.0f", k ? ", " : "", wp_mem_term_name[k], s[3 + k].value);
        fprintf(f, "}, \"predicted_terms\": {");
        for (int k = 0; k < WP_MEM_TERMS; k++)
            fprintf(f, "%s\"%s\": %.0f", k ? ", " : "", wp_mem_term_name[k], s[3 + WP_MEM_TERMS + k].value);
        fprintf(f, "}}");
    }
    if (!f) return;
    fprintf(f, "]}\n");
    fflush(f);
}

/* The GPU's own figure beside the prediction, one line per device: ranks that are threads of
 * one process share a device's context and its figure, so their predictions add up with one
 * context; a launched rank (its own process) is its own line, and its figure counts whatever
 * else holds that GPU. Measured: the most in use at any step's end (peaks inside a step that
 * are freed by its end are not seen). */
static void print_device(const train_job *j, const double *dev, int stride) {
    wp_mem_cfg mc;
    train_mem_cfg(j, &mc);
    wp_mem_device d;
    mem_predict_device(&j->L, &mc, j->nranks, &d);
    const bool threads = !boot_launched();
    for (int r = 0; r < j->nranks; r++) {
        const double *x = dev + (size_t)stride * r;
        bool seen = false; /* an earlier thread on the same device has printed it */
        for (int q = 0; q < r && threads; q++) seen |= dev[(size_t)stride * q + 2] == x[2];
        if (seen || x[2] <= 0) continue;
        double alloc = 0, extra = 0, open = x[0], peak = x[1];
        int n = 0;
        char who[128] = "";
        for (int q = r; q < j->nranks; q++) {
            const double *y = dev + (size_t)stride * q;
            if (y[2] != x[2] || (q != r && !threads)) continue;
            double pred[WP_MEM_TERMS];
            train_mem_predict(j, q, pred);
            alloc += mem_total(pred);
            extra += d.cudnn + d.sibling;
            if (y[0] < open) open = y[0]; /* the first rank to open saw the least in use */
            if (y[1] > peak) peak = y[1];
            size_t at = strlen(who);
            if (at + 8 < sizeof who) snprintf(who + at, sizeof who - at, "%s%d", n++ ? "," : "", q);
        }
        double want = alloc + extra + d.context;
        fprintf(stderr,
                "device %d (rank%s %s), cudaMemGetInfo total - free: at start-up %.1f MiB, most at a step's end %.1f MiB; "
                "predicted %.1f MiB = allocations %.1f + CUDA context %.1f + cuDNN and transfer workspaces %.1f "
                "(the last two estimates, docs/memory.md): %+.1f%%\n",
                (int)x[2] - 1, n == 1 ? "" : "s", who, open * MIB, peak * MIB, want * MIB, alloc * MIB, d.context * MIB,
                extra * MIB, want > 0 ? 100.0 * (peak - want) / want : 0);
    }
}

void report_memory(const train_job *j, const double *v, const double *dev, int stride, FILE *metrics, wp_tb *tb,
                   int64_t step) {
    if (!j->o.quiet) print_table(j, v, stride);
    if (!j->o.quiet) print_device(j, dev, stride);
    if (metrics || tb) metrics_line(j, v, stride, metrics, tb, step);
}
