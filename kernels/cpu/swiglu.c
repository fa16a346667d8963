/* SwiGLU: y = silu(gate) * up = gate * sigmoid(gate) * up, elementwise. */
#include "cpu.h"

enum { PARALLEL_MIN = 1 << 15 };

static inline float sigmoid(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

void cpu_swiglu_fwd(wp_kern *k, void *y, const void *gate, const void *up, size_t n) {
    float *yf = y;
    const float *g = gate, *u = up;
#pragma omp parallel for simd num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) yf[i] = g[i] * sigmoid(g[i]) * u[i];
}

/* d/dg [g s(g)] = s (1 + g (1 - s)). Inputs are read before outputs are written, so dgate and
 * dup may alias gate and up. */
void cpu_swiglu_bwd(wp_kern *k, void *dgate, void *dup, const void *dy, const void *gate, const void *up, size_t n) {
    float *dg = dgate, *du = dup;
    const float *dyf = dy, *g = gate, *u = up;
#pragma omp parallel for num_threads(cpu_threads(k)) if (n >= PARALLEL_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], d = dyf[i], s = sigmoid(gi);
        dg[i] = d * ui * s * (1.0f + gi * (1.0f - s));
        du[i] = d * gi * s;
    }
}
