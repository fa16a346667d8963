/* CUDA backend: device memory and host<->device copies, all ordered on the context's stream. */
#include "cuda_impl.h"

void *cu_alloc(wp_kern *k, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return NULL;
    void *p = NULL;
    if (CU_CHECK(k, cudaMalloc(&p, bytes ? bytes : 1))) return NULL;
    /* kernels.h promises zeroed memory; wait for the memset so that work on any other stream
     * (the ring's transfers) also sees zeros. */
    if (CU_CHECK(k, cudaMemsetAsync(p, 0, bytes, c->stream)) || CU_CHECK(k, cudaStreamSynchronize(c->stream))) {
        (void)cudaFree(p);
        return NULL;
    }
    return p;
}

void cu_free(wp_kern *k, void *p) {
    if (!p || !cu_ctx(k)) return;
    CU_CHECK(k, cudaFree(p));
}

/* Host buffers may be pageable and reused as soon as the call returns, so both directions
 * wait for their copy. */
void cu_to_device(wp_kern *k, void *dst, const void *src, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c || !bytes) return;
    if (CU_CHECK(k, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream))) return;
    CU_CHECK(k, cudaStreamSynchronize(c->stream));
}

void cu_to_host(wp_kern *k, void *dst, const void *src, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c || !bytes) return;
    if (CU_CHECK(k, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream))) return;
    CU_CHECK(k, cudaStreamSynchronize(c->stream));
}

void cu_copy(wp_kern *k, void *dst, const void *src, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c || !bytes || dst == src) return;
    CU_CHECK(k, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

void cu_zero(wp_kern *k, void *p, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c || !bytes) return;
    CU_CHECK(k, cudaMemsetAsync(p, 0, bytes, c->stream));
}

void cu_sync(wp_kern *k) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaStreamSynchronize(c->stream));
}
