/* Llama 3.x RoPE scaling in a llama.cpp file (gguf_rope.h). convert_hf_to_gguf.py writes no
 * rope_scaling keys for rope_type llama3: it writes the tensor rope_freqs.weight, F32 [hd / 2],
 * the factor that divides each pair's frequency (ggml's rope_ext takes theta / freq_factors[i]).
 *
 * weipipe recovers llama3's four parameters from the factors rather than carrying the factors
 * themselves: the parameters are what the model flags, the checkpoint manifest, config.json's
 * rope_scaling and both backends' tables already speak (one representation of the concept
 * through every layer), and a Hugging Face export could not state arbitrary factors anyway. The
 * parameters are kept only when they reproduce every factor of the file (within TOL), so the
 * model computed is the file's; factors that no llama3 parameters give are refused by name (for
 * the llama architecture the converter writes rope_freqs for llama3 alone). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gguf_rope.h"

/* The converter computes the factors in float32 from float32 frequencies: against the exact
 * formula (double) they differ by at most 2.7e-7 relative on Llama 3.1's and 3.2's parameters
 * and on small test models' (measured); 2e-6 is about 16 float32 ulps. */
#define TOL 2e-6

void gguf_rope_factors(int hd, double theta, const wp_rope_scaling *sc, float *out) {
    for (int i = 0; i < hd / 2; i++) out[i] = (float)wp_rope_freq_factor(i, hd, theta, sc);
}

static bool near(double got, double want) { return fabs(got - want) <= TOL * fabs(want); }

/* The first pair whose factor sc does not reproduce, or n when all are. */
static int mismatch(const float *r, int n, int hd, double theta, const wp_rope_scaling *sc) {
    if (!(sc->high_freq_factor > sc->low_freq_factor) || !(sc->low_freq_factor > 0)) return 0;
    for (int i = 0; i < n; i++)
        if (!near(wp_rope_freq_factor(i, hd, theta, sc), r[i])) return i;
    return n;
}

/* *v rounded to the fewest significant digits that still reproduce the file (so Llama 3.1's
 * parameters come back as 8, 1, 4, which --rope-* flags then compare equal); else unchanged. */
static void shorten(double *v, const float *r, int n, int hd, double theta, wp_rope_scaling *sc) {
    double keep = *v;
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, keep);
        *v = strtod(text, NULL);
        if (*v > 0 && mismatch(r, n, hd, theta, sc) == n) return;
    }
    *v = keep;
}

/* llama3 is a clamped line: with u = f / 2pi (one over the plain wavelength) and
 * s = (original * u - low) / (high - low) clamped to [0, 1], a pair's factor is
 * 1 / ((1 - s) / factor + s) (s 1: unscaled, s 0: the full factor). So: factor is the last
 * pair's (the longest wavelength; a file with no pair at the full factor is reproduced as well
 * with its last pair there), each pair's s follows from its factor, and the line s = a u - b
 * through the pairs between the bands gives low / original = b / a, high / original = (1 + b) / a.
 * With fewer than two such pairs the line is one of those the bands allow. The three values are
 * known only up to one common scale: original is the integer nearest a / b (low then near 1). */
static wp_result recover(const gguf_file *f, const float *r, int n, int hd, double theta, wp_rope_scaling *sc, char *err,
                         size_t errlen) {
    int ones = 0; /* the unscaled pairs (short wavelengths) lead */
    while (ones < n && near(r[ones], 1.0)) ones++;
    if (ones == n) return 0; /* every pair unscaled: plain RoPE */
    double factor = r[n - 1];
    if (near(factor, 1.0) || !(factor >= 1e-3 && factor <= 1e6))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: its factors are not llama3's (pair %d is %.9g, the last pair "
                       "%.9g; weipipe implements rope scaling type llama3 only)", f->path, GGUF_ROPE_TENSOR, ones, r[ones], factor);
    int full = n - 1; /* the first pair of the trailing run at the full factor */
    while (full > ones && near(r[full - 1], factor)) full--;
    double *u = malloc(2 * (size_t)n * sizeof *u), *s = u + n;
    if (!u) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
    const double two_pi = 6.283185307179586476925286766559;
    for (int i = 0; i < n; i++) {
        u[i] = pow(theta, -2.0 * i / (double)hd) / two_pi;
        s[i] = (1.0 / r[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    }
    int between = full - ones, m = ones;
    double a, b;
    if (between >= 2) { /* the line through the outermost pairs between the bands */
        a = (s[m] - s[full - 1]) / (u[m] - u[full - 1]);
        b = a * u[m] - s[m];
    } else if (between == 1) { /* through that pair, at most 0 at the first full pair, at least 1 at the last unscaled */
        a = s[m] / (u[m] - u[full]);
        if (ones > 0) a = fmax(a, (1.0 - s[m]) / (u[m - 1] - u[m]));
        b = a * u[m] - s[m];
    } else if (ones > 0) { /* 1 at the last unscaled pair, 0 at the first full one */
        a = 1.0 / (u[ones - 1] - u[full]);
        b = a * u[full];
    } else { /* every pair at the full factor: the line's 0 past pair 0 */
        a = 1.0 / u[0];
        b = 2.0;
    }
    free(u);
    wp_rope_scaling t = {0};
    if (a > 0 && b > 0 && isfinite(a) && isfinite(b)) {
        double orig = fmin(fmax(round(a / b), 1.0), 2147483647.0);
        t = (wp_rope_scaling){factor, orig * b / a, orig * (1.0 + b) / a, orig};
    }
    int bad = t.factor > 0 ? mismatch(r, n, hd, theta, &t) : 0;
    if (bad < n)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: its factors are not llama3's (pair %d: %.9g, the nearest llama3 "
                       "parameters give %.9g; weipipe implements rope scaling type llama3 only)", f->path, GGUF_ROPE_TENSOR, bad,
                       r[bad], t.factor > 0 ? wp_rope_freq_factor(bad, hd, theta, &t) : 1.0);
    shorten(&t.low_freq_factor, r, n, hd, theta, &t);
    shorten(&t.high_freq_factor, r, n, hd, theta, &t);
    shorten(&t.factor, r, n, hd, theta, &t);
    if (!(t.low_freq_factor >= 1e-6 && t.high_freq_factor <= 1e6)) /* the --rope-*-freq-factor flags' range */
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: its llama3 parameters (low_freq_factor %g, high_freq_factor %g) "
                       "are outside [1e-6, 1e6]", f->path, GGUF_ROPE_TENSOR, t.low_freq_factor, t.high_freq_factor);
    *sc = t;
    return 0;
}

wp_result gguf_rope_read(const gguf_file *f, int hd, double theta, wp_rope_scaling *sc, char *err, size_t errlen) {
    *sc = (wp_rope_scaling){0};
    const gguf_tensor *t = gguf_find_tensor(f, GGUF_ROPE_TENSOR);
    if (!t) return 0;
    int n = hd / 2;
    if (t->type != GGML_F32) /* ggml's rope_ext takes F32 factors only */
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: type %s (%u), llama.cpp reads these factors as F32 only", f->path,
                       GGUF_ROPE_TENSOR, gguf_type_name(t->type), t->type);
    if (t->ndims != 1 || t->dims[0] != (uint64_t)n)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: dims [%llu] (n_dims %u), the heads need [%d] (head size / 2)",
                       f->path, GGUF_ROPE_TENSOR, (unsigned long long)t->dims[0], t->ndims, n);
    float *r = malloc((size_t)n * sizeof *r);
    if (!r) return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", f->path);
    wp_result rc = gguf_tensor_f32(f, t, r, err, errlen); /* not finite: 2 naming the tensor */
    for (int i = 0; rc == 0 && i < n; i++)
        if (!(r[i] > 0))
            rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: tensor %s: pair %d's factor %g is not positive", f->path, GGUF_ROPE_TENSOR,
                         i, r[i]);
    if (rc == 0) rc = recover(f, r, n, hd, theta, sc, err, errlen);
    free(r);
    return rc;
}
