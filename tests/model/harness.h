/* Shared by the model tests: a whole model on the CPU backend with seeded random weights
 * and tokens, and small helpers to compare results. */
#ifndef WP_TEST_MODEL_HARNESS_H
#define WP_TEST_MODEL_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "whole.h"

typedef struct {
    wp_layout L;
    wp_kern *k;
    wp_whole *W;
    size_t T, N;
    float *params;          /* host fp32, layout order */
    int32_t *inputs, *targets;
} harness;

/* A model config of the given shape: fp32, theta 10000, eps 1e-5, init std 0.02, one chunk. */
wp_model_cfg shape_cfg(int layers, int h, int heads, int kv_heads, int ffn, int seq, int batch, int vocab);
/* Split into chunks with the given layer counts (n values). */
void set_chunks(wp_model_cfg *cfg, const int *layers, int n);
const char *chunks_str(const wp_model_cfg *cfg);  /* "3,1" (static buffer) */

/* Builds layout, CPU backend (1 thread, fp32), whole model with gradients in gt; weights from
 * layout_init_chunk(seed) scaled where init_scale says (1 = as initialised), random tokens.
 * A failure ends the test (tests/check.h's CHECK). */
void harness_open(harness *H, const wp_model_cfg *cfg, uint64_t seed, wp_dtype gt);
void harness_close(harness *H);
/* F + backward (split or fused); loss and host gradients (N floats). Exits on failure. */
double harness_step(harness *H, bool split, float *grads);
/* Loss at host parameters p (forward only). Exits on failure. */
double harness_loss_at(harness *H, const float *p);
/* Chunk c's input gradient after a step, to host (T*h floats); c >= 1. */
void harness_input_grad(harness *H, int c, float *dst);

/* The context's error, or "(no reason)" (for the message of a failed call). */
const char *harness_why(const harness *H);

/* First index where a and b differ bitwise, or -1. */
long first_difference(const float *a, const float *b, size_t n);
float *xmalloc_floats(size_t n);

#endif
