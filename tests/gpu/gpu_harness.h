/* Shared by the GPU tests: a CPU (reference) and a CUDA context side by side, seeded random
 * data, uploads in either backend's dtype, and error measures that print next to their bound.
 *
 * Tolerances are stated in units of the compute dtype's unit roundoff u (half the distance
 * from 1 to the next value): fp16 2^-11, bf16 2^-8, fp32 2^-24. Inputs are rounded to the
 * compute dtype before both backends see them, so what differs is only the GPU's own
 * arithmetic: fp16/bf16 storage of results and intermediates, fp32 accumulation in another
 * order. */
#ifndef WP_TESTS_GPU_HARNESS_H
#define WP_TESTS_GPU_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "kernels.h"
#include "rng.h"

#define GH_SKIP 77

typedef struct {
    wp_kern *cpu, *gpu;
    wp_dtype ct; /* the GPU's compute dtype */
} gh_pair;

/* 0 when a CUDA device is usable; else prints "skip: <reason>" and returns GH_SKIP. */
int gh_require_gpu(const char *test);
/* Both contexts (the CPU one on 8 threads); exits with 1 and a message on failure. */
void gh_open(gh_pair *p, wp_dtype ct);
/* The same with the GPU's attention kernels chosen (gh_open: WP_ATTN_AUTO). */
void gh_open_attn(gh_pair *p, wp_dtype ct, wp_attn_impl attn);
void gh_close(gh_pair *p);

double gh_unit_roundoff(wp_dtype t);

/* uniform in [-scale, scale], then rounded through dtype t */
void gh_fill(wp_rng *g, float *x, size_t n, float scale, wp_dtype t);
float *gh_floats(size_t n); /* malloc or exit */

/* Backend buffer holding host[0..n) converted to dtype t (host conversion, round to nearest
 * even); exits on failure. The result is freed with kern_free. */
void *gh_upload(wp_kern *k, const float *host, size_t n, wp_dtype t);
/* host[0..n) = backend buffer of n elements of dtype t, widened to fp32 */
void gh_download(wp_kern *k, float *host, const void *dev, size_t n, wp_dtype t);
void *gh_upload_ints(wp_kern *k, const int32_t *host, size_t n);
/* A buffer for an op's output, every byte 0xFF first: NaN in fp32, fp16 and bf16 alike, so an
 * element the op fails to write fails gh_expect (kern_alloc zero-fills, and a zero passes for
 * an accumulate-instead-of-overwrite or a skipped tail); exits on failure. Freed with kern_free. */
void *gh_out(wp_kern *k, size_t bytes);

/* ||got - ref||_2 / ||ref||_2 (0 when both are all zero) */
double gh_rel_l2(const float *got, const float *ref, size_t n);
/* The check with its measured value and bound, as a check_say verdict line (a failure is
 * counted for check_result; also when got holds a non-finite value the reference does not). */
void gh_expect(const char *what, const float *got, const float *ref, size_t n, double bound);
/* Attention's backward on both sides: dq (nq elements), dk and dv (nkv each), the CPU's in fp32
 * and the GPU's in dtype ct, each downloaded through the scratch ref / got (nq floats or more)
 * and held to bound, each verdict named "attention_bwd <dx> <shape>". */
void gh_expect_attn_grads(gh_pair *p, void *const cpu[3], void *const gpu[3], size_t nq, size_t nkv, wp_dtype ct,
                          float *ref, float *got, double bound, const char *shape);
/* Bitwise equality of two byte ranges, a verdict line naming the first difference. */
void gh_expect_same_bits(const char *what, const void *a, const void *b, size_t bytes);

/* Ends the test (CHECK) with the message when the context holds an error. */
void gh_ok(wp_kern *k, const char *where);

#endif
