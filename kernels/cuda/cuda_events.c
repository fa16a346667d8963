/* CUDA backend: events, pinned host memory and async copies (kernels/streams.h). A transfer
 * context is a sibling with its own stream; events let it and the compute stream wait for
 * each other on the device while the host keeps going. */
#include <string.h>

#include "cuda_backend.h"
#include "cuda_impl.h"
#include "streams.h"

void *cu_event_create(wp_kern *k) {
    if (!cu_ctx(k)) return NULL;
    cudaEvent_t e = NULL;
    /* Timing off: such events are cheaper to record and to query. */
    if (CU_CHECK(k, cudaEventCreateWithFlags(&e, cudaEventDisableTiming))) return NULL;
    return e;
}

/* A timer (streams.h): an event with timing on, which costs a little more to record. */
void *cu_timer_create(wp_kern *k) {
    if (!cu_ctx(k)) return NULL;
    cudaEvent_t e = NULL;
    if (CU_CHECK(k, cudaEventCreateWithFlags(&e, cudaEventDefault))) return NULL;
    return e;
}

/* Both complete (the caller's promise): cudaEventElapsedTime does not wait. Its resolution is
 * about 0.5 us. */
int cu_timer_elapsed(wp_kern *k, void *a, void *b, double *seconds) {
    float ms = 0;
    if (!cu_ctx(k) || CU_CHECK(k, cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b))) return -1;
    *seconds = (double)ms * 1e-3;
    return 0;
}

void cu_event_destroy(wp_kern *k, void *ev) {
    if (!cu_ctx(k)) return;
    CU_CHECK(k, cudaEventDestroy((cudaEvent_t)ev));
}

void cu_event_record(wp_kern *k, void *ev) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaEventRecord((cudaEvent_t)ev, c->stream));
}

bool cu_event_done(wp_kern *k, void *ev) {
    if (!cu_ctx(k)) return false;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* "not ready" is an answer, not an error to keep */
        return false;
    }
    return CU_CHECK(k, e) == 0;
}

void cu_event_wait(wp_kern *k, void *ev) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaStreamWaitEvent(c->stream, (cudaEvent_t)ev, 0));
}

void *cu_host_alloc(wp_kern *k, size_t bytes) {
    if (!cu_ctx(k)) return NULL;
    void *p = NULL;
    /* Portable: any context of the process (a rank's compute and transfer siblings, other
     * ranks' threads on the local transport) may copy from it asynchronously. */
    if (CU_CHECK(k, cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable))) return NULL;
    memset(p, 0, bytes);
    return p;
}

void cu_host_free(wp_kern *k, void *p) {
    if (!cu_ctx(k)) return;
    CU_CHECK(k, cudaFreeHost(p));
}

void cu_to_device_async(wp_kern *k, void *dst, const void *src, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
}

void cu_to_host_async(wp_kern *k, void *dst, const void *src, size_t bytes) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
}

int cu_device(const wp_kern *k) { return ((const wp_cuda *)k->impl)->device; }

/* The device's free memory now (the context is current on this thread: cu_init). */
int cu_mem_info(wp_kern *k, size_t *free_bytes, size_t *total_bytes) {
    return CU_CHECK(k, cudaMemGetInfo(free_bytes, total_bytes)) ? -1 : 0;
}

cudaEvent_t kern_cuda_event(struct wp_kern_event *e) { return (cudaEvent_t)(void *)e; }
