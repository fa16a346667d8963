/* CUDA backend: rotary position embedding (Hugging Face "rotate half": element i < hd/2 pairs
 * with i + hd/2). The cos/sin table for the call's positions is built first in double
 * precision: at positions in the tens of thousands an fp32 angle pos * freq would already be
 * off by ~1e-3 rad. */
#include "dtype.cuh"
#include "rope_freq.h"

/* sc by value (has_sc false: plain), so the device reads no host pointer. */
__global__ void rope_table_kernel(float2 *table, int s, int half, int pos0, double theta, int hd, wp_rope_scaling sc,
                                  bool has_sc) {
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)s * half) return;
    int p = (int)(idx / half), i = (int)(idx % half);
    double freq = wp_rope_inv_freq(i, hd, theta, has_sc ? &sc : NULL);
    double sn, cs;
    sincos((double)(pos0 + p) * freq, &sn, &cs);
    table[idx] = make_float2((float)cs, (float)sn);
}

/* One thread per (row, head, pair). sign = +1 rotates by +angle (forward), -1 by -angle:
 * the inverse, which is also the transpose that the backward applies to the gradient. */
/* plo (positions restarting per document): row r sits at pos0 + r % s - plo[r] of a table
 * that starts at position 0 and holds pos0 + s positions; doc_mask.c keeps that in range, the
 * clamp only keeps a broken plo from reading outside the table. */
template <typename T>
__global__ void rope_apply_kernel(T *x, const float2 *table, size_t rows, int s, int nheads, int hd, int pos0,
                                  const int32_t *plo, float sign) {
    int half = hd / 2;
    size_t pairs = rows * nheads * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < pairs;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t head_row = idx / half; /* row * nheads + head */
        size_t row = head_row / nheads;
        int p = (int)(row % s);
        if (plo) p = min(max(pos0 + p - plo[row], 0), pos0 + s - 1);
        float2 cs = table[(size_t)p * half + i];
        float sn = sign * cs.y;
        T *v = x + head_row * hd;
        float a = wp_load(v[i]), b = wp_load(v[i + half]);
        v[i] = wp_store<T>(a * cs.x - b * sn);
        v[i + half] = wp_store<T>(b * cs.x + a * sn);
    }
}

static void rope(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc, const int32_t *plo, float sign, const char *name) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    if (b < 0 || s < 0 || nheads <= 0 || hd <= 0 || hd % 2 || pos0 < 0 || !(theta > 0.0f)) {
        cu_fail(k, name, "bad arguments b=%d s=%d nheads=%d hd=%d pos0=%d theta=%g", b, s, nheads, hd, pos0, theta);
        return;
    }
    if (b == 0 || s == 0) return;
    int half = hd / 2;
    /* restarting positions (plo) reach anywhere in [0, pos0 + s): one table from position 0 */
    int tab_rows = plo ? pos0 + s : s, tab_pos0 = plo ? 0 : pos0;
    float2 *table = (float2 *)cu_scratch(k, WP_SCRATCH_OP, (size_t)tab_rows * half * sizeof(float2));
    if (!table) return;
    unsigned table_blocks = (unsigned)(((size_t)tab_rows * half + 255) / 256);
    wp_rope_scaling none = {0, 0, 0, 0};
    rope_table_kernel<<<table_blocks, 256, 0, c->stream>>>(table, tab_rows, half, tab_pos0, (double)theta, hd,
                                                           sc ? *sc : none, sc != NULL);
    if (CU_LAUNCH_CHECK(k, "rope_table_kernel")) return;
    size_t rows = (size_t)b * s;
    unsigned grid = cu_grid_for(c, rows * nheads * half, 256);
    WP_WITH_DTYPE(k->compute, E,
        rope_apply_kernel<E><<<grid, 256, 0, c->stream>>>((E *)x, table, rows, s, nheads, hd, pos0, plo, sign));
    CU_LAUNCH_CHECK(k, "rope_apply_kernel");
}

extern "C" {

void cu_rope_fwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc, const int32_t *plo) {
    rope(k, x, b, s, nheads, hd, pos0, theta, sc, plo, 1.0f, "rope_fwd");
}

void cu_rope_bwd(wp_kern *k, void *x, int b, int s, int nheads, int hd, int pos0, float theta,
                 const wp_rope_scaling *sc, const int32_t *plo) {
    rope(k, x, b, s, nheads, hd, pos0, theta, sc, plo, -1.0f, "rope_bwd");
}

} /* extern "C" */
