/* model_acts_bytes predicts exactly what a wp_acts allocates: after model_acts_create (its
 * forward arena) and after B of a split backward (plus the kept arena), for every chunk of
 * several configs, with and without recompute. Independently of the model's own bookkeeping,
 * the heap growth seen by mallinfo2 must match within malloc's per-block overhead (after a
 * warm-up step, so that the kernels' own scratch has reached its size). Running
 * out of memory is an error, not a crash. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "model_impl.h"

/* malloc rounds and pads each block: a page for mmap'ed blocks, plus headers */
#define HEAP_SLACK 8192

/* AddressSanitizer replaces malloc, and glibc's mallinfo2 then sees none of its blocks: the
 * heap-growth half of the check is only meaningful without it. */
#if defined(__SANITIZE_ADDRESS__)
#define HEAP_MEASURED 0
#else
#define HEAP_MEASURED 1
#endif

static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static int check_chunk(harness *H, wp_model *m, int c) {
    int failures = 0;
    size_t before = heap_in_use();
    wp_acts *a = model_acts_create(m, c);
    if (!a) {
        printf("FAIL model_acts_create(%d): %s\n", c, kern_error(H->k));
        return 1;
    }
    size_t grown = heap_in_use() - before, fwd = model_acts_bytes(&H->L, c, WP_F32, false);
    if (model_acts_held_bytes(a) != fwd || (HEAP_MEASURED && (grown < fwd || grown > fwd + HEAP_SLACK))) {
        printf("FAIL chunk %d after create: predicted %zu, held %zu, heap grew %zu\n", c, fwd, model_acts_held_bytes(a), grown);
        failures++;
    }
    /* B of a split backward, on zero weights and tokens: only the memory matters here */
    const wp_model_cfg *cfg = &H->L.cfg;
    size_t act = H->T * (size_t)cfg->h * sizeof(float);
    void *w = kern_alloc(H->k, H->L.chunk_numel[c] * sizeof(float)), *x = kern_alloc(H->k, act), *g = kern_alloc(H->k, act);
    void *g_in = kern_alloc(H->k, act), *x_out = kern_alloc(H->k, act);
    int32_t *tok = kern_alloc(H->k, H->T * sizeof(int32_t));
    double loss = 0;
    if (model_forward(m, c, w, a, x, tok, tok, x_out, &loss) != 0) printf("FAIL forward: %s\n", kern_error(H->k)), failures++;
    size_t before_b = heap_in_use();
    if (model_backward_input(m, c, w, a, g, 1.0f, g_in) != 0) printf("FAIL B: %s\n", kern_error(H->k)), failures++;
    size_t grown_b = heap_in_use() - before_b, peak = model_acts_bytes(&H->L, c, WP_F32, true);
    if (model_acts_held_bytes(a) != peak ||
        (HEAP_MEASURED && (grown_b < peak - fwd || grown_b > peak - fwd + HEAP_SLACK))) {
        printf("FAIL chunk %d after B: predicted %zu, held %zu, heap grew %zu of %zu\n", c, peak, model_acts_held_bytes(a),
               grown_b, peak - fwd);
        failures++;
    }
    void *gw = kern_alloc(H->k, H->L.chunk_numel[c] * sizeof(float));
    if (model_backward_weight(m, c, a, gw, WP_F32) != 0) printf("FAIL W: %s\n", kern_error(H->k)), failures++;
    if (model_acts_held_bytes(a) != fwd) printf("FAIL chunk %d: W-pass left %zu bytes held\n", c, model_acts_held_bytes(a)), failures++;
    if (!failures)
        printf("ok   chunks %s%s chunk %d: F keeps %zu bytes, split B adds %zu (heap grew %zu and %zu)\n", chunks_str(cfg),
               cfg->recompute ? " recompute" : "", c, fwd, peak - fwd, grown, grown_b);
    kern_free(H->k, gw);
    kern_free(H->k, tok);
    kern_free(H->k, g);
    kern_free(H->k, g_in);
    kern_free(H->k, x_out);
    kern_free(H->k, x);
    kern_free(H->k, w);
    model_acts_destroy(m, a);
    return failures;
}

static int check_cfg(wp_model_cfg cfg) {
    harness H;
    harness_open(&H, &cfg, 3, WP_F32);
    /* the kernels grow their own scratch on first use; let them, before the heap is watched */
    harness_step(&H, true, NULL);
    harness_step(&H, false, NULL);
    char err[256];
    wp_model *m = model_create(&H.L, H.k, err, sizeof err);
    if (!m) {
        printf("FAIL model_create: %s\n", err);
        return 1;
    }
    int failures = 0;
    for (int c = 0; c < cfg.n_chunks; c++) failures += check_chunk(&H, m, c);
    model_destroy(m);
    harness_close(&H);
    return failures;
}

/* Recompute keeps one [T,h] per layer instead of the whole block: it must predict less. */
static int check_recompute_saves(void) {
    wp_model_cfg cfg = shape_cfg(4, 64, 4, 2, 160, 32, 2, 256);
    wp_layout full, rec;
    char err[256];
    layout_build(&cfg, &full, err, sizeof err);
    cfg.recompute = true;
    layout_build(&cfg, &rec, err, sizeof err);
    size_t a = model_acts_bytes(&full, 0, WP_F32, false), b = model_acts_bytes(&rec, 0, WP_F32, false);
    size_t h16 = model_acts_bytes(&full, 0, WP_F16, false);
    layout_free(&full);
    layout_free(&rec);
    /* 4 layers x [T=64, h=64] fp32 inputs, each padded to the arena alignment, plus the head */
    int ok = b < a && b >= 4 * 64 * 64 * 4 && h16 < a && h16 > a / 2 - 4096;
    printf("%s recompute keeps %zu bytes instead of %zu; fp16 compute %zu\n", ok ? "ok  " : "FAIL", b, a, h16);
    return !ok;
}

/* A model far larger than the machine: creation fails with a message, no crash. */
static int check_out_of_memory(void) {
    wp_model_cfg cfg = shape_cfg(2, 8192, 64, 64, 28672, 1 << 20, 64, 256);
    wp_layout L;
    char err[256];
    layout_build(&cfg, &L, err, sizeof err);
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, sizeof err);
    wp_model *m = model_create(&L, k, err, sizeof err);
    int ok = m == NULL && err[0];
    printf("%s out of memory: model_create %s (%s)\n", ok ? "ok  " : "FAIL", m ? "succeeded" : "failed", m ? "" : err);
    model_destroy(m);
    kern_destroy(k);
    layout_free(&L);
    return !ok;
}

int main(void) {
    int failures = 0;
    if (!HEAP_MEASURED) printf("AddressSanitizer build: checking the byte counts, not the heap growth\n");
    const int uneven[] = {3, 1}, three[] = {1, 1, 1};
    wp_model_cfg a = shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), b = shape_cfg(3, 24, 3, 1, 50, 13, 3, 37);
    set_chunks(&a, uneven, 2);
    set_chunks(&b, three, 3);
    failures += check_cfg(a) + check_cfg(b);
    a.recompute = b.recompute = true;
    failures += check_cfg(a) + check_cfg(b);
    failures += check_recompute_saves() + check_out_of_memory();
    return failures ? 1 : 0;
}
