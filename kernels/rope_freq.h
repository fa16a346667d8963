/* Private to kernels/ (the backends, and dispatch.c's wp_rope_freq_factor for the GGUF files):
 * the RoPE inverse frequency of pair i, plain or Llama-3 scaled, in double. One definition for
 * the CPU (C) and CUDA (device) tables so both scale identically. */
#ifndef WP_KERNELS_ROPE_FREQ_H
#define WP_KERNELS_ROPE_FREQ_H

#include <math.h>

#include "kernels.h"

#ifdef __CUDACC__
#define WP_ROPE_HD __host__ __device__
#else
#define WP_ROPE_HD
#endif

/* theta^(-2i/hd), then transformers' _compute_llama3_parameters when sc is given (kernels.h). */
static inline WP_ROPE_HD double wp_rope_inv_freq(int i, int hd, double theta, const wp_rope_scaling *sc) {
    double f = pow(theta, -2.0 * i / (double)hd);
    if (!sc || sc->factor == 0.0) return f;
    const double two_pi = 6.283185307179586476925286766559;
    double wavelen = two_pi / f;
    double low_wavelen = sc->original_max_pos / sc->low_freq_factor;   /* longer: divided by factor */
    double high_wavelen = sc->original_max_pos / sc->high_freq_factor; /* shorter: unchanged */
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / sc->factor;
    double a = (sc->original_max_pos / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1.0 - a) * f / sc->factor + a * f;
}

#endif
