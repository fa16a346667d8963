/* Llama 3.x RoPE scaling in a llama.cpp file, private to src/io/gguf*.c (gguf_rope.c). */
#ifndef WP_IO_GGUF_ROPE_H
#define WP_IO_GGUF_ROPE_H

#include "gguf_file.h"
#include "rope_factor.h"

#define GGUF_ROPE_TENSOR "rope_freqs.weight"

/* The file's llama3 scaling for heads of hd dims and base theta (all zero: plain RoPE, when the
 * file has no rope_freqs.weight or every factor in it is 1). 2 naming the file and the tensor for
 * a type other than F32, dims other than [hd / 2], a factor not finite and positive, or factors
 * that no llama3 parameters reproduce. */
wp_result gguf_rope_read(const gguf_file *f, int hd, double theta, wp_rope_scaling *sc, char *err, size_t errlen);

/* rope_freqs.weight for sc (hd / 2 floats): the factor each pair's frequency is divided by. */
void gguf_rope_factors(int hd, double theta, const wp_rope_scaling *sc, float *out);

#endif
