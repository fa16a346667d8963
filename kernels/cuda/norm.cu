/* CUDA backend: RMSNorm forward and backward. One block per row for the row-wise passes; the
 * weight gradient sums over rows in two fixed-order stages (per-chunk partials, then a sum of
 * the partials), never with atomics, so it repeats bit for bit. */
#include "dtype.cuh"

#define WP_NORM_THREADS 256
/* weight gradient: rows per partial, and the block shape (32 columns x 8 row lanes) */
#define WP_NORM_CHUNK_ROWS 256
#define WP_NORM_COLS 32
#define WP_NORM_ROW_LANES 8

template <typename T>
__global__ void rmsnorm_fwd_kernel(T *y, float *rstd, const T *x, const T *w, int h, float eps) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    const T *xr = x + row * h;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float v = wp_load(xr[j]);
        ss += v * v;
    }
    ss = wp_block_sum(ss, red);
    float r = 1.0f / sqrtf(ss / (float)h + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    T *yr = y + row * h;
    for (int j = threadIdx.x; j < h; j += blockDim.x) yr[j] = wp_store<T>(wp_load(xr[j]) * r * wp_load(w[j]));
}

/* y_j = x_j r w_j with r = (mean(x^2) + eps)^-1/2, so
 * dx_j = r (dy_j w_j - x_j r^2 mean_i(dy_i w_i x_i)). */
template <typename T>
__global__ void rmsnorm_bwd_input_kernel(T *dx, bool accumulate, const T *dy, const T *x, const T *w,
                                         const float *rstd, int h) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    const T *xr = x + row * h, *dyr = dy + row * h;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) dot += wp_load(dyr[j]) * wp_load(w[j]) * wp_load(xr[j]);
    dot = wp_block_sum(dot, red);
    float r = rstd[row];
    float c = r * r * dot / (float)h;
    T *dxr = dx + row * h;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float g = r * (wp_load(dyr[j]) * wp_load(w[j]) - wp_load(xr[j]) * c);
        if (accumulate) g += wp_load(dxr[j]);
        dxr[j] = wp_store<T>(g);
    }
}

/* partials[chunk, j] = sum over the chunk's rows t of dy[t,j] x[t,j] rstd[t] */
template <typename T>
__global__ void rmsnorm_dw_partial_kernel(float *partials, const T *dy, const T *x, const float *rstd, int T_rows,
                                          int h) {
    __shared__ float sums[WP_NORM_ROW_LANES][WP_NORM_COLS];
    int j = blockIdx.x * WP_NORM_COLS + threadIdx.x;
    int r0 = blockIdx.y * WP_NORM_CHUNK_ROWS;
    int r1 = min(r0 + WP_NORM_CHUNK_ROWS, T_rows);
    float acc = 0.0f;
    if (j < h)
        for (int r = r0 + threadIdx.y; r < r1; r += WP_NORM_ROW_LANES)
            acc += wp_load(dy[(size_t)r * h + j]) * wp_load(x[(size_t)r * h + j]) * rstd[r];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < h) {
        for (int l = 1; l < WP_NORM_ROW_LANES; l++) acc += sums[l][threadIdx.x];
        partials[(size_t)blockIdx.y * h + j] = acc;
    }
}

template <typename D>
__global__ void rmsnorm_dw_final_kernel(D *dw, const float *partials, int chunks, int h) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= h) return;
    float acc = 0.0f;
    for (int c = 0; c < chunks; c++) acc += partials[(size_t)c * h + j];
    dw[j] = wp_store<D>(wp_load(dw[j]) + acc);
}

static int check_shape(wp_kern *k, const char *kernel, int T, int h) {
    if (T < 0 || h <= 0) return cu_fail(k, kernel, "bad shape T=%d, h=%d", T, h);
    return 0;
}

extern "C" {

void cu_rmsnorm_fwd(wp_kern *k, void *y, float *rstd, const void *x, const void *w, int T, int h, float eps) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "rmsnorm_fwd", T, h) || T == 0) return;
    WP_WITH_DTYPE(k->compute, E,
        rmsnorm_fwd_kernel<E><<<T, WP_NORM_THREADS, 0, c->stream>>>((E *)y, rstd, (const E *)x, (const E *)w, h, eps));
    CU_LAUNCH_CHECK(k, "rmsnorm_fwd_kernel");
}

void cu_rmsnorm_bwd_input(wp_kern *k, void *dx, bool accumulate, const void *dy, const void *x, const void *w,
                          const float *rstd, int T, int h) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "rmsnorm_bwd_input", T, h) || T == 0) return;
    WP_WITH_DTYPE(k->compute, E,
        rmsnorm_bwd_input_kernel<E><<<T, WP_NORM_THREADS, 0, c->stream>>>((E *)dx, accumulate, (const E *)dy,
                                                                         (const E *)x, (const E *)w, rstd, h));
    CU_LAUNCH_CHECK(k, "rmsnorm_bwd_input_kernel");
}

void cu_rmsnorm_bwd_weight(wp_kern *k, void *dw, wp_dtype dwtype, const void *dy, const void *x, const float *rstd,
                           int T, int h) {
    wp_cuda *c = cu_ctx(k);
    if (!c || check_shape(k, "rmsnorm_bwd_weight", T, h) || T == 0) return;
    int chunks = (T + WP_NORM_CHUNK_ROWS - 1) / WP_NORM_CHUNK_ROWS;
    float *partials = (float *)cu_scratch(k, WP_SCRATCH_OP, (size_t)chunks * h * sizeof(float));
    if (!partials) return;
    dim3 grid((h + WP_NORM_COLS - 1) / WP_NORM_COLS, chunks), block(WP_NORM_COLS, WP_NORM_ROW_LANES);
    WP_WITH_DTYPE(k->compute, E,
        rmsnorm_dw_partial_kernel<E><<<grid, block, 0, c->stream>>>(partials, (const E *)dy, (const E *)x, rstd, T, h));
    if (CU_LAUNCH_CHECK(k, "rmsnorm_dw_partial_kernel")) return;
    WP_WITH_DTYPE(dwtype, D,
        rmsnorm_dw_final_kernel<D><<<(h + 255) / 256, 256, 0, c->stream>>>((D *)dw, partials, chunks, h));
    CU_LAUNCH_CHECK(k, "rmsnorm_dw_final_kernel");
}

} /* extern "C" */
