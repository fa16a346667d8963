/* CUDA backend: elementwise kernels (dtype conversion, accumulate, scale, add, SwiGLU) and the
 * fp32 epilogue of the GEMM. Grid-stride loops; fp32 arithmetic, one rounding per store. */
#include "dtype.cuh"

#define WP_EW_THREADS 256

template <typename D, typename S>
__global__ void convert_kernel(D *dst, const S *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = wp_store<D>(wp_load(src[i]));
}

template <typename D, typename S>
__global__ void accumulate_kernel(D *dst, const S *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = wp_store<D>(wp_load(dst[i]) + wp_load(src[i]));
}

template <typename T>
__global__ void scale_kernel(T *x, float a, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = wp_store<T>(wp_load(x[i]) * a);
}

template <typename T>
__global__ void add_kernel(T *y, const T *a, const T *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = wp_store<T>(wp_load(a[i]) + wp_load(b[i]));
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__global__ void swiglu_fwd_kernel(T *y, const T *gate, const T *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = wp_load(gate[i]);
        y[i] = wp_store<T>(g * sigmoid(g) * wp_load(up[i]));
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g) */
template <typename T>
__global__ void swiglu_bwd_kernel(T *dgate, T *dup, const T *dy, const T *gate, const T *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = wp_load(gate[i]), u = wp_load(up[i]), d = wp_load(dy[i]);
        float s = sigmoid(g);
        dgate[i] = wp_store<T>(d * u * s * (1.0f + g * (1.0f - s)));
        dup[i] = wp_store<T>(d * g * s);
    }
}

/* beta == 0 never reads C (it may hold garbage), as in BLAS. */
template <typename T>
__global__ void gemm_epilogue_kernel(T *C, int ldc, const float *acc, float beta, int m, int n) {
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / n, col = i % n;
        T *c = C + r * ldc + col;
        float v = acc[i];
        if (beta != 0.0f) v += beta * wp_load(*c);
        *c = wp_store<T>(v);
    }
}

extern "C" {

void cu_convert(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    if (dt == st) {
        cu_copy(k, dst, src, n * wp_dtype_size(dt));
        return;
    }
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(dt, D, WP_WITH_DTYPE(st, S,
        convert_kernel<D, S><<<grid, WP_EW_THREADS, 0, c->stream>>>((D *)dst, (const S *)src, n)));
    CU_LAUNCH_CHECK(k, "convert_kernel");
}

void cu_accumulate(wp_kern *k, void *dst, wp_dtype dt, const void *src, wp_dtype st, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(dt, D, WP_WITH_DTYPE(st, S,
        accumulate_kernel<D, S><<<grid, WP_EW_THREADS, 0, c->stream>>>((D *)dst, (const S *)src, n)));
    CU_LAUNCH_CHECK(k, "accumulate_kernel");
}

void cu_scale(wp_kern *k, void *x, wp_dtype t, float a, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(t, T, scale_kernel<T><<<grid, WP_EW_THREADS, 0, c->stream>>>((T *)x, a, n));
    CU_LAUNCH_CHECK(k, "scale_kernel");
}

void cu_add(wp_kern *k, void *y, const void *a, const void *b, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(k->compute, T,
        add_kernel<T><<<grid, WP_EW_THREADS, 0, c->stream>>>((T *)y, (const T *)a, (const T *)b, n));
    CU_LAUNCH_CHECK(k, "add_kernel");
}

void cu_swiglu_fwd(wp_kern *k, void *y, const void *gate, const void *up, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(k->compute, T,
        swiglu_fwd_kernel<T><<<grid, WP_EW_THREADS, 0, c->stream>>>((T *)y, (const T *)gate, (const T *)up, n));
    CU_LAUNCH_CHECK(k, "swiglu_fwd_kernel");
}

void cu_swiglu_bwd(wp_kern *k, void *dgate, void *dup, const void *dy, const void *gate, const void *up, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    unsigned grid = cu_grid_for(c, n, WP_EW_THREADS);
    WP_WITH_DTYPE(k->compute, T,
        swiglu_bwd_kernel<T><<<grid, WP_EW_THREADS, 0, c->stream>>>((T *)dgate, (T *)dup, (const T *)dy,
                                                                   (const T *)gate, (const T *)up, n));
    CU_LAUNCH_CHECK(k, "swiglu_bwd_kernel");
}

int cu_gemm_epilogue(wp_kern *k, void *C, wp_dtype ctype, int ldc, const float *acc, float beta, int m, int n) {
    wp_cuda *c = (wp_cuda *)k->impl;
    unsigned grid = cu_grid_for(c, (size_t)m * n, WP_EW_THREADS);
    WP_WITH_DTYPE(ctype, T,
        gemm_epilogue_kernel<T><<<grid, WP_EW_THREADS, 0, c->stream>>>((T *)C, ldc, acc, beta, m, n));
    return CU_LAUNCH_CHECK(k, "gemm_epilogue_kernel");
}

} /* extern "C" */
