/* The CPU backend's entry in the dispatch table (kernels/backend.h). */
#include "cpu.h"

const wp_kern_ops wp_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .sync = cpu_sync,
#define CPU_OP_ENTRY(ret, name, ...) .name = cpu_##name,
    WP_KERN_OPS(CPU_OP_ENTRY, CPU_OP_ENTRY)
#undef CPU_OP_ENTRY
};
