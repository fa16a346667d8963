/* Helpers shared by the kernel tests: a seeded generator, CPU contexts and error measures.
 * Checks are tests/check.h's: each test states every measured value next to its tolerance
 * with check_say and ends with check_result. */
#ifndef WP_TESTS_KT_H
#define WP_TESTS_KT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels.h"

/* fp32 unit roundoff: tolerances below are stated as multiples of it. */
#define KT_U32 (0x1p-24)

/* splitmix64: small, seedable, identical everywhere. */
typedef struct {
    unsigned long long s;
} kt_rng;

static inline unsigned long long kt_next(kt_rng *r) {
    unsigned long long z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double kt_unit(kt_rng *r) { return (double)(kt_next(r) >> 11) * 0x1p-53; } /* [0, 1) */
static inline float kt_uniform(kt_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)kt_unit(r); }
static inline double kt_normal(kt_rng *r) {
    double u1 = kt_unit(r), u2 = kt_unit(r);
    return sqrt(-2.0 * log(u1 + 0x1p-60)) * cos(6.283185307179586 * u2);
}
static inline void kt_fill(kt_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = kt_uniform(r, lo, hi);
}

static inline void *kt_alloc(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    CHECK(p, "out of memory (%zu bytes)", bytes);
    return p;
}
static inline float *kt_floats(size_t n) { return kt_alloc(n * sizeof(float)); }
static inline double *kt_doubles(size_t n) { return kt_alloc(n * sizeof(double)); }

static inline wp_kern *kt_cpu(int threads) {
    wp_kern_opts o = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = threads, .device = 0};
    char err[256];
    wp_kern *k = kern_create(&o, err, sizeof err);
    CHECK(k, "kern_create failed: %s", err);
    return k;
}

/* Fails the test (and says which call) when the context holds an error. */
static inline void kt_no_error(wp_kern *k, const char *where) {
    const char *e = kern_error(k);
    EXPECT(!e, "%s: unexpected kernel error: %s", where, e);
}

/* ||a - b|| / ||b||, fp32 result against an fp64 reference. */
static inline double kt_rel(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ||a - b|| / ||b|| for two fp64 vectors. */
static inline double kt_rel_dd(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double kt_dot_fd(const float *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void kt_to_double(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

/* Element-wise central differences of a scalar fp64 function of a parameter vector p (n
 * elements), in place: g[i] = (f(p + h e_i) - f(p - h e_i)) / 2h. */
typedef double (*kt_loss_fn)(void *ctx);
static inline void kt_fd_grad(double *g, double *p, size_t n, double h, kt_loss_fn f, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = f(ctx);
        p[i] = keep - h;
        double down = f(ctx);
        p[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
}

/* Directional central difference along d (same length as p). */
static inline double kt_fd_dir(double *p, const double *d, size_t n, double h, kt_loss_fn f, void *ctx) {
    double *keep = kt_doubles(n);
    memcpy(keep, p, n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = keep[i] + h * d[i];
    double up = f(ctx);
    for (size_t i = 0; i < n; i++) p[i] = keep[i] - h * d[i];
    double down = f(ctx);
    memcpy(p, keep, n * sizeof *p);
    free(keep);
    return (up - down) / (2 * h);
}

static inline int kt_same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

#endif
