/* Shared helpers of the train tests: a check of refusals (the others come from tests/check.h),
 * a seeded generator, a scratch directory, and a small model layout. Header-only: each test
 * is one executable. */
#ifndef WP_TESTS_TRAIN_TU_H
#define WP_TESTS_TRAIN_TU_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fsutil.h"
#include "kernels.h"
#include "layout.h"

/* rc must be 2 and the message must name every fragment given (NULL-terminated list). */
#define EXPECT_REFUSED(rc, err, ...)                                                                     \
    do {                                                                                                 \
        const char *frags_[] = {__VA_ARGS__, NULL};                                                      \
        EXPECT((rc) == 2, "expected refusal (2), got %d: %s", (rc), (err));                              \
        for (int f_ = 0; frags_[f_]; f_++)                                                               \
            EXPECT(strstr((err), frags_[f_]) != NULL, "message '%s' does not name '%s'", (err), frags_[f_]); \
        EXPECT(strchr((err), '\n') == NULL, "message '%s' spans several lines", (err));                   \
    } while (0)

static inline uint64_t tu_next(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static inline double tu_uniform(uint64_t *s) { return (double)(tu_next(s) >> 11) * 0x1.0p-53; }
static inline double tu_normal(uint64_t *s) {
    double u1 = tu_uniform(s) + 0x1.0p-54, u2 = tu_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* The fp32, one-thread CPU context the train tests run on; exits 1 naming why when it cannot
 * be made. */
static inline wp_kern *tu_cpu_kern(void) {
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    char why[256];
    wp_kern *k = kern_create(&ko, why, sizeof why);
    CHECK(k, "cpu backend: %s", why);
    return k;
}

/* A fresh directory under $TMPDIR (or /tmp); removed by tu_cleanup. */
static inline const char *tu_scratch(char *buf, size_t len, const char *tag) {
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/wp-%s-XXXXXX", base && base[0] ? base : "/tmp", tag);
    CHECK(mkdtemp(buf), "mkdtemp %s: %s", buf, strerror(errno));
    return buf;
}
static inline void tu_cleanup(const char *dir) {
    char err[512];
    if (fs_remove_tree(dir, err, sizeof err)) fprintf(stderr, "cleanup: %s\n", err);
}

/* A small Llama shape with grouped-query heads and odd sizes; chunks given as layer counts. */
static inline void tu_model(wp_model_cfg *c, int n_layers, int h, int n_heads, int n_kv, int ffn, int vocab) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->h = h;
    c->n_heads = n_heads;
    c->n_kv_heads = n_kv;
    c->head_dim = h / n_heads;
    c->ffn = ffn;
    c->vocab = vocab;
    c->seq = 16;
    c->micro_batch = 2;
    c->rope_theta = 10000;
    c->norm_eps = 1e-5;
    c->init_std = 0.02;
    c->precision = WP_PREC_MIXED;
    model_cfg_even_chunks(c, 1);
}

#endif
