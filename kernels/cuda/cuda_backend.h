/* What the rest of weipipe may know about the CUDA backend beyond kernels.h: its compute
 * stream (the ring runtime orders its transfer stream against it with events) and device.
 * Only meaningful for a context whose kern_kind() is WP_BACKEND_CUDA. */
#ifndef WP_CUDA_BACKEND_H
#define WP_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels.h"

/* The stream on which every kernel, copy and cuBLAS call of this context is queued. */
cudaStream_t kern_cuda_stream(wp_kern *k);
/* The CUDA device ordinal of this context. */
int kern_cuda_device(const wp_kern *k);
/* The CUDA event behind a streams.h event of a CUDA context (for streams outside weipipe's
 * contexts, e.g. NCCL's, to wait on). */
struct wp_kern_event;
cudaEvent_t kern_cuda_event(struct wp_kern_event *e);
/* true when a usable CUDA device exists; else false with "no CUDA device (cudaGetDeviceCount:
 * ...)" in why. Backs kern_available(WP_BACKEND_CUDA). */
bool kern_cuda_probe(char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
