/* The per-pair RoPE frequency factor of llama3 scaling, for the GGUF files (src/io/gguf_rope.c):
 * llama.cpp carries the scaling as these factors (rope_freqs.weight). */
#ifndef WP_KERNELS_ROPE_FACTOR_H
#define WP_KERNELS_ROPE_FACTOR_H

#include "kernels.h"

/* The factor that sc divides pair i's plain frequency theta^(-2i/hd) by (1 when sc is NULL or
 * its factor 0): the backends' own formula (rope_freq.h), so a file's factors and the tables
 * weipipe computes from the recovered parameters cannot part. */
double wp_rope_freq_factor(int i, int hd, double theta, const wp_rope_scaling *sc);

#endif
