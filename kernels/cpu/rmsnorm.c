/* RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), one row per token. */
#include "cpu.h"

enum { COLS = 256, ROWS_PARALLEL = 16 };

void cpu_rmsnorm_fwd(wp_kern *k, void *y, float *rstd, const void *x, const void *w, int T, int h, float eps) {
    const float *xf = x, *wf = w;
    float *yf = y;
#pragma omp parallel for num_threads(cpu_threads(k)) if (T >= ROWS_PARALLEL) schedule(static)
    for (int t = 0; t < T; t++) {
        const float *xr = xf + (size_t)t * h;
        float *yr = yf + (size_t)t * h;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < h; j++) ss += xr[j] * xr[j];
        float r = 1.0f / sqrtf(ss / (float)h + eps);
        rstd[t] = r;
        for (int j = 0; j < h; j++) yr[j] = xr[j] * r * wf[j];
    }
}

/* With u = x * rstd: dx = rstd * (w*dy - u * mean(w*dy*u)). */
void cpu_rmsnorm_bwd_input(wp_kern *k, void *dx, bool accumulate, const void *dy, const void *x, const void *w,
                           const float *rstd, int T, int h) {
    const float *dyf = dy, *xf = x, *wf = w;
    float *dxf = dx;
#pragma omp parallel for num_threads(cpu_threads(k)) if (T >= ROWS_PARALLEL) schedule(static)
    for (int t = 0; t < T; t++) {
        const float *xr = xf + (size_t)t * h, *dyr = dyf + (size_t)t * h;
        float *dxr = dxf + (size_t)t * h;
        float r = rstd[t], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < h; j++) dot += dyr[j] * wf[j] * xr[j];
        float c = dot * r * r / (float)h;
        for (int j = 0; j < h; j++) {
            float g = r * (wf[j] * dyr[j] - xr[j] * c);
            dxr[j] = accumulate ? dxr[j] + g : g;
        }
    }
}

/* Each thread owns a block of columns and sums over tokens in order: deterministic, and the
 * gradient is rounded once into dw. */
void cpu_rmsnorm_bwd_weight(wp_kern *k, void *dw, wp_dtype dwtype, const void *dy, const void *x,
                            const float *rstd, int T, int h) {
    const float *dyf = dy, *xf = x;
    int nblocks = (h + COLS - 1) / COLS;
#pragma omp parallel for num_threads(cpu_threads(k)) if (nblocks > 1 && T >= ROWS_PARALLEL) schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int j0 = blk * COLS, len = h - j0 < COLS ? h - j0 : COLS;
        float acc[COLS] = {0};
        for (int t = 0; t < T; t++) {
            const float *dyr = dyf + (size_t)t * h + j0, *xr = xf + (size_t)t * h + j0;
            float r = rstd[t];
            for (int j = 0; j < len; j++) acc[j] += dyr[j] * xr[j] * r;
        }
        cpu_add_into(dw, dwtype, (size_t)j0, acc, (size_t)len);
    }
}
