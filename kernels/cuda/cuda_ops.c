/* The CUDA backend's dispatch table (kernels/backend.h): kernels/dispatch.c calls through it
 * for contexts created with WP_BACKEND_CUDA. */
#include "cuda_impl.h"

const wp_kern_ops wp_cuda_ops = {
    .name = "cuda",
    .init = cu_init,
    .fini = cu_fini,
    .alloc = cu_alloc,
    .free = cu_free,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .copy = cu_copy,
    .zero = cu_zero,
    .sync = cu_sync,
#define CU_OP_ENTRY(ret, name, ...) .name = cu_##name,
    WP_KERN_OPS(CU_OP_ENTRY, CU_OP_ENTRY)
#undef CU_OP_ENTRY
    .event_create = cu_event_create,
    .timer_create = cu_timer_create,
    .timer_elapsed = cu_timer_elapsed,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_done = cu_event_done,
    .event_wait = cu_event_wait,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .to_device_async = cu_to_device_async,
    .to_host_async = cu_to_host_async,
    .device = cu_device,
    .mem_info = cu_mem_info,
    .attention_docs = cu_attention_docs,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
};
