/* Inference on one rank with a KV cache: text generation (`weipipe sample`, `--sample-every`).
 *
 * Training (model.h) runs whole sequences and keeps everything the backward needs. Decoding
 * runs one sequence (b = 1) a few positions at a time: the prompt in blocks of up to
 * WP_DECODE_ROWS positions (prefill), then one position per new token. Each block's keys and
 * values (after RoPE) stay in a per-layer cache [max_pos, nkv*hd], so a new token costs one
 * position of every matrix product plus attention over the cached keys, never the whole prefix
 * again. It calls the same kernels (kernels.h) as the training forward, on any backend: RoPE at
 * the token's absolute position (pos0), attention with sq new queries over skv cached keys.
 *
 * The functions that return int return 0, 1 (a kernel or allocation failed: reason in err) or 2
 * (bad input: a token outside the vocabulary, more positions than the cache holds). */
#ifndef WP_DECODE_H
#define WP_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "layout.h"
#include "result.h"

#define WP_DECODE_ROWS 64 /* prefill block: bounds the scratch, whatever the prompt's length */

typedef struct wp_decoder wp_decoder;

/* The model of layout L (any chunking) on backend k, with a cache of max_pos positions.
 * NULL with a reason when memory runs out or max_pos < 1. */
wp_decoder *decoder_create(const wp_layout *L, wp_kern *k, int max_pos, char *err, size_t errlen);
void decoder_destroy(wp_decoder *D);

/* Upload total_numel fp32 parameters (layout order, chunks concatenated), rounded to the
 * backend's compute dtype. */
wp_result decoder_set_params(wp_decoder *D, const float *params);

/* Upload elements [first, first + n) of one parameter p of L (n fp32 values), rounded as
 * decoder_set_params does: a loader hands the weights over piece by piece, never holding a
 * second copy of the whole model. */
wp_result decoder_set_param(wp_decoder *D, const wp_param *p, size_t first, size_t n, const float *src);

/* Forget the cached positions: the next decoder_run starts a new sequence at position 0. */
void decoder_reset(wp_decoder *D);
/* Positions cached so far (the position of the next token). */
int decoder_pos(const wp_decoder *D);
int decoder_max_pos(const wp_decoder *D);

/* Run tokens[0..n) at positions decoder_pos() .. +n-1, appending their keys and values to the
 * cache. logits (host fp32): the next-token logits of the last of them [V], or with all_rows
 * those of every one of them [n, V]. On an error nothing is appended. */
wp_result decoder_run(wp_decoder *D, const int32_t *tokens, int n, float *logits, bool all_rows, char *err, size_t errlen);

/* What decoder_create(L, k, max_pos) and loading its weights take on a backend of compute
 * dtype compute, in bytes (the start-up memory check, before anything is allocated); the KV
 * cache's part in *kv_bytes. */
size_t decoder_bytes(const wp_layout *L, wp_dtype compute, int max_pos, size_t *kv_bytes);

/* Choosing the next token from logits. temperature 0: the argmax (ties to the lowest id).
 * Otherwise softmax(logits / temperature) restricted to the top_k most likely ids (0: all;
 * ties in order of id) and then to the smallest set of most likely ids whose probability
 * reaches top_p (1: all), renormalised, and one draw u = rng_uniform (rng.h: splitmix64
 * seeded with rng_seeded(--seed), 53 bits) walks the remaining ids from the most likely one.
 * One draw per sampled token, none for greedy ones: the ids depend only on seed and logits. */
typedef struct {
    double temperature; /* >= 0 */
    int64_t top_k;      /* >= 0 */
    double top_p;       /* in (0, 1] */
} wp_sampling;

typedef struct wp_sampler wp_sampler;
/* NULL when memory runs out. */
wp_sampler *sampler_create(int64_t vocab, const wp_sampling *s, uint64_t seed);
void sampler_destroy(wp_sampler *S);
int32_t sampler_pick(wp_sampler *S, const float *logits);

/* From a reset decoder: run the prompt (P >= 1 tokens), then choose up to max_new tokens with S,
 * feeding each back, into out; stops after any of eos[0..n_eos) (a generation config's list:
 * Llama 3 Instruct ends a turn with either of two ids) or when the cache is full.
 * *n_out: tokens chosen. on_token, when given, sees each as it is chosen (streaming).
 * 0, 1 or 2 as decoder_run. */
int decoder_generate(wp_decoder *D, wp_sampler *S, const int32_t *prompt, int P, int max_new, const int32_t *eos, int n_eos,
                     int32_t *out, int *n_out, void (*on_token)(int32_t id, void *ctx), void *ctx, char *err,
                     size_t errlen);

#endif
