/* ckpt_diff A B TOL: the largest per-tensor relative difference ||a - b|| / ||b|| between the
 * fp32 masters of two checkpoints (any chunking each), printed; exit 0 when it is at most TOL,
 * 1 when larger, 2 when a checkpoint cannot be read or the shapes differ. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

static int open_both(const char *a, const char *b, wp_ckpt **ca, wp_ckpt **cb, wp_layout *L) {
    char err[1024];
    if (ckpt_open(ca, a, err, sizeof err) || ckpt_open(cb, b, err, sizeof err) ||
        ckpt_check_model(*cb, &ckpt_info(*ca)->cfg, err, sizeof err) ||
        layout_build(&ckpt_info(*ca)->cfg, L, err, sizeof err)) {
        fprintf(stderr, "ckpt_diff: %s\n", err);
        return 2;
    }
    return 0;
}

static double rel_diff(const float *x, const float *y, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)x[i] - (double)y[i];
        d += e * e;
        r += (double)y[i] * (double)y[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ckpt_diff STEP_DIR_A STEP_DIR_B TOL\n");
        return 2;
    }
    wp_ckpt *ca = NULL, *cb = NULL;
    wp_layout L;
    if (open_both(argv[1], argv[2], &ca, &cb, &L)) return 2;
    double worst = 0, tol = atof(argv[3]);
    const char *worst_name = "";
    char err[1024];
    for (int i = 0; i < L.n_params; i++) {
        const wp_param *p = &L.params[i];
        size_t n = (size_t)p->rows * p->cols;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        if (!x || !y || ckpt_read_master(ca, p, x, err, sizeof err) || ckpt_read_master(cb, p, y, err, sizeof err)) {
            fprintf(stderr, "ckpt_diff: %s: %s\n", p->name, x && y ? err : "out of memory");
            return 2;
        }
        double d = rel_diff(x, y, n);
        if (!(d <= worst)) {
            worst = d;
            worst_name = p->name;
        }
        free(x);
        free(y);
    }
    printf("max relative difference %.3e (%s), tolerance %.1e\n", worst, worst_name, tol);
    ckpt_close(ca);
    ckpt_close(cb);
    layout_free(&L);
    return worst <= tol ? 0 : 1;
}
