/* CUDA backend: token embedding. The backward must add dy rows into dwte in token order
 * without float atomics (whose order would vary between runs): a stable radix sort of
 * (token, position) groups equal tokens with their positions ascending; the first entry of
 * each group then owns that vocabulary row and sums the group's rows in position order,
 * in fp32, rounding once into dwte. */
#include <cub/device/device_radix_sort.cuh>

#include "dtype.cuh"

#define WP_EMB_THREADS 256

template <typename T>
__global__ void embedding_fwd_kernel(T *y, const int32_t *tokens, const T *wte, int h) {
    size_t row = blockIdx.x;
    const T *src = wte + (size_t)tokens[row] * h;
    T *dst = y + row * h;
    for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < h; j += gridDim.y * blockDim.x) dst[j] = src[j];
}

__global__ void iota_kernel(int32_t *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
}

/* Block (i, column slice): active only if sorted entry i starts a group of equal tokens. */
template <typename D, typename S>
__global__ void embedding_bwd_kernel(D *dwte, const int32_t *sorted_tokens, const int32_t *sorted_pos, const S *dy,
                                     int T, int h) {
    int i = blockIdx.x;
    int token = sorted_tokens[i];
    if (i > 0 && sorted_tokens[i - 1] == token) return;
    int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= h) return;
    float acc = 0.0f;
    for (int e = i; e < T && sorted_tokens[e] == token; e++) acc += wp_load(dy[(size_t)sorted_pos[e] * h + j]);
    D *row = dwte + (size_t)token * h;
    row[j] = wp_store<D>(wp_load(row[j]) + acc);
}

extern "C" {

void cu_embedding_fwd(wp_kern *k, void *y, const int32_t *tokens, const void *wte, int T, int h) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    if (T < 0 || h <= 0) {
        cu_fail(k, "embedding_fwd", "bad shape T=%d, h=%d", T, h);
        return;
    }
    if (T == 0) return;
    dim3 grid(T, (h + WP_EMB_THREADS - 1) / WP_EMB_THREADS);
    WP_WITH_DTYPE(k->compute, E,
        embedding_fwd_kernel<E><<<grid, WP_EMB_THREADS, 0, c->stream>>>((E *)y, tokens, (const E *)wte, h));
    CU_LAUNCH_CHECK(k, "embedding_fwd_kernel");
}

void cu_embedding_bwd(wp_kern *k, void *dwte, wp_dtype dwtype, const int32_t *tokens, const void *dy, int T, int h) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    if (T < 0 || h <= 0) {
        cu_fail(k, "embedding_bwd", "bad shape T=%d, h=%d", T, h);
        return;
    }
    if (T == 0) return;
    size_t sort_bytes = 0;
    if (CU_CHECK(k, cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                                    (const int32_t *)NULL, (int32_t *)NULL, T, 0, 32, c->stream)))
        return;
    /* scratch: positions, sorted tokens, sorted positions (T each, 256-byte aligned), sort temp */
    size_t slot = ((size_t)T * sizeof(int32_t) + 255) / 256 * 256;
    char *base = (char *)cu_scratch(k, WP_SCRATCH_OP, 3 * slot + sort_bytes);
    if (!base) return;
    int32_t *pos = (int32_t *)base, *sorted_tokens = (int32_t *)(base + slot), *sorted_pos = (int32_t *)(base + 2 * slot);
    iota_kernel<<<(T + 255) / 256, 256, 0, c->stream>>>(pos, T);
    if (CU_LAUNCH_CHECK(k, "iota_kernel")) return;
    /* LSD radix sort is stable: equal tokens keep their positions in ascending order. */
    if (CU_CHECK(k, cub::DeviceRadixSort::SortPairs(base + 3 * slot, sort_bytes, tokens, sorted_tokens, pos, sorted_pos,
                                                    T, 0, 32, c->stream)))
        return;
    dim3 grid(T, (h + WP_EMB_THREADS - 1) / WP_EMB_THREADS);
    WP_WITH_DTYPE(dwtype, D, WP_WITH_DTYPE(k->compute, S,
        embedding_bwd_kernel<D, S><<<grid, WP_EMB_THREADS, 0, c->stream>>>((D *)dwte, sorted_tokens, sorted_pos,
                                                                          (const S *)dy, T, h)));
    CU_LAUNCH_CHECK(k, "embedding_bwd_kernel");
}

} /* extern "C" */
