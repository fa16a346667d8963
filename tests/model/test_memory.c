/* model_acts_bytes predicts exactly what a wp_acts allocates: after model_acts_create (its
 * forward arena) and after B of a split backward (plus the kept arena), for every chunk of
 * several configs, with and without recompute. Independently of the model's own bookkeeping,
 * the heap growth seen by mallinfo2 must match within malloc's per-block overhead (after a
 * warm-up step, so that the kernels' own scratch has reached its size). Running
 * out of memory is an error, not a crash. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
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

static void check_chunk(harness *H, wp_model *m, int c) {
    int failed_before = check_failures();
    size_t before = heap_in_use();
    wp_acts *a = model_acts_create(m, c);
    EXPECT(a, "model_acts_create(%d): %s", c, harness_why(H));
    if (!a) return;
    size_t grown = heap_in_use() - before, fwd = model_acts_bytes(&H->L, c, WP_F32, false);
    EXPECT(model_acts_held_bytes(a) == fwd && (!HEAP_MEASURED || (grown >= fwd && grown <= fwd + HEAP_SLACK)),
           "chunk %d after create: predicted %zu, held %zu, heap grew %zu", c, fwd, model_acts_held_bytes(a), grown);
    /* B of a split backward, on zero weights and tokens: only the memory matters here */
    const wp_model_cfg *cfg = &H->L.cfg;
    size_t act = H->T * (size_t)cfg->h * sizeof(float);
    void *w = kern_alloc(H->k, H->L.chunk_numel[c] * sizeof(float)), *x = kern_alloc(H->k, act), *g = kern_alloc(H->k, act);
    void *g_in = kern_alloc(H->k, act), *x_out = kern_alloc(H->k, act);
    int32_t *tok = kern_alloc(H->k, H->T * sizeof(int32_t));
    double loss = 0;
    EXPECT(model_forward(m, c, w, a, x, tok, tok, x_out, &loss) == 0, "forward: %s", harness_why(H));
    size_t before_b = heap_in_use();
    EXPECT(model_backward_input(m, c, w, a, g, 1.0f, g_in) == 0, "B: %s", harness_why(H));
    size_t grown_b = heap_in_use() - before_b, peak = model_acts_bytes(&H->L, c, WP_F32, true);
    EXPECT(model_acts_held_bytes(a) == peak &&
               (!HEAP_MEASURED || (grown_b >= peak - fwd && grown_b <= peak - fwd + HEAP_SLACK)),
           "chunk %d after B: predicted %zu, held %zu, heap grew %zu of %zu", c, peak, model_acts_held_bytes(a), grown_b,
           peak - fwd);
    void *gw = kern_alloc(H->k, H->L.chunk_numel[c] * sizeof(float));
    EXPECT(model_backward_weight(m, c, a, gw, WP_F32) == 0, "W: %s", harness_why(H));
    EXPECT(model_acts_held_bytes(a) == fwd, "chunk %d: W-pass left %zu bytes held", c, model_acts_held_bytes(a));
    if (check_failures() == failed_before)
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
}

static void check_cfg(wp_model_cfg cfg) {
    harness H;
    harness_open(&H, &cfg, 3, WP_F32);
    /* the kernels grow their own scratch on first use; let them, before the heap is watched */
    harness_step(&H, true, NULL);
    harness_step(&H, false, NULL);
    char err[256];
    wp_model *m = model_create(&H.L, H.k, err, sizeof err);
    EXPECT(m, "model_create: %s", err);
    if (!m) return;
    for (int c = 0; c < cfg.n_chunks; c++) check_chunk(&H, m, c);
    model_destroy(m);
    harness_close(&H);
}

/* Recompute keeps one [T,h] per layer instead of the whole block: it must predict less. */
static void check_recompute_saves(void) {
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
    check_say(b < a && b >= 4 * 64 * 64 * 4 && h16 < a && h16 > a / 2 - 4096,
              "recompute keeps %zu bytes instead of %zu; fp16 compute %zu", b, a, h16);
}

/* A model far larger than the machine: creation fails with a message, no crash. */
static void check_out_of_memory(void) {
    wp_model_cfg cfg = shape_cfg(2, 8192, 64, 64, 28672, 1 << 20, 64, 256);
    wp_layout L;
    char err[256];
    layout_build(&cfg, &L, err, sizeof err);
    wp_kern_opts ko = {.kind = WP_BACKEND_CPU, .compute = WP_F32, .threads = 1};
    wp_kern *k = kern_create(&ko, err, sizeof err);
    wp_model *m = model_create(&L, k, err, sizeof err);
    check_say(m == NULL && err[0], "out of memory: model_create %s (%s)", m ? "succeeded" : "failed", m ? "" : err);
    model_destroy(m);
    kern_destroy(k);
    layout_free(&L);
}

int main(void) {
    if (!HEAP_MEASURED) printf("AddressSanitizer build: checking the byte counts, not the heap growth\n");
    const int uneven[] = {3, 1}, three[] = {1, 1, 1};
    wp_model_cfg a = shape_cfg(4, 64, 4, 2, 160, 32, 2, 256), b = shape_cfg(3, 24, 3, 1, 50, 13, 3, 37);
    set_chunks(&a, uneven, 2);
    set_chunks(&b, three, 3);
    check_cfg(a);
    check_cfg(b);
    a.recompute = b.recompute = true;
    check_cfg(a);
    check_cfg(b);
    check_recompute_saves();
    check_out_of_memory();
    return check_result("model/memory");
}
