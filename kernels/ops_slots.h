/* The slots of a backend's dispatch table (wp_kern_ops, kernels/backend.h) by name, in the
 * struct's order, so that a missing entry is found when a context is created rather than as a
 * NULL call at runtime. kernels/dispatch.c checks at compile time that this list and the struct
 * agree (same members, same order, nothing else but the name string).
 *
 * Groups, and what a backend must fill:
 *   WP_SLOT_CONTEXT  lifetime of a context                     always
 *   WP_SLOT_MEMORY   allocation, copies, sync                  always
 *   WP_SLOT_OP       the compute calls of kernels.h            always (the rows of ops_table.h)
 *   WP_SLOT_EVENTS   streams.h events and timers               all or none (none: calls are
 *                                                              synchronous, events complete,
 *                                                              timers read the host's clock)
 *   WP_SLOT_PINNED   streams.h pinned host memory              both or neither
 *   WP_SLOT_GRAPHS   replay.h on the device (CUDA graphs)      all or none (none: the
 *                                                              dispatcher records calls itself)
 *   WP_SLOT_OPTIONAL async copies, device ordinal              may be NULL (streams.c falls
 *                                                              back to the synchronous copy, 0)
 */
#ifndef WP_KERNELS_OPS_SLOTS_H
#define WP_KERNELS_OPS_SLOTS_H

#include <stddef.h>

#include "ops_table.h"
#include "result.h"

/* A user defines WP_SLOT(name, group), expands WP_KERN_OPS_SLOTS, then undefines WP_SLOT: the
 * compute ops' slots come from the op table (ops_table.h), so the list names WP_SLOT rather than
 * taking it as an argument (a row of the table cannot pass an argument on). */
#define WP_KERN_OP_SLOT(ret, name, ...) WP_SLOT(name, WP_SLOT_OP)
#define WP_KERN_OPS_SLOTS                          \
    WP_SLOT(init, WP_SLOT_CONTEXT)                 \
    WP_SLOT(fini, WP_SLOT_CONTEXT)                 \
    WP_SLOT(alloc, WP_SLOT_MEMORY)                 \
    WP_SLOT(free, WP_SLOT_MEMORY)                  \
    WP_SLOT(to_device, WP_SLOT_MEMORY)             \
    WP_SLOT(to_host, WP_SLOT_MEMORY)               \
    WP_SLOT(copy, WP_SLOT_MEMORY)                  \
    WP_SLOT(zero, WP_SLOT_MEMORY)                  \
    WP_SLOT(sync, WP_SLOT_MEMORY)                  \
    WP_KERN_OPS(WP_KERN_OP_SLOT, WP_KERN_OP_SLOT)  \
    WP_SLOT(event_create, WP_SLOT_EVENTS)          \
    WP_SLOT(event_destroy, WP_SLOT_EVENTS)         \
    WP_SLOT(event_record, WP_SLOT_EVENTS)          \
    WP_SLOT(event_done, WP_SLOT_EVENTS)            \
    WP_SLOT(event_wait, WP_SLOT_EVENTS)            \
    WP_SLOT(timer_create, WP_SLOT_EVENTS)          \
    WP_SLOT(timer_elapsed, WP_SLOT_EVENTS)         \
    WP_SLOT(host_alloc, WP_SLOT_PINNED)            \
    WP_SLOT(host_free, WP_SLOT_PINNED)             \
    WP_SLOT(to_device_async, WP_SLOT_OPTIONAL)     \
    WP_SLOT(to_host_async, WP_SLOT_OPTIONAL)       \
    WP_SLOT(device, WP_SLOT_OPTIONAL)               \
    WP_SLOT(mem_info, WP_SLOT_OPTIONAL)             \
    WP_SLOT(attention_docs, WP_SLOT_OPTIONAL)      \
    WP_SLOT(graph_begin, WP_SLOT_GRAPHS)           \
    WP_SLOT(graph_end, WP_SLOT_GRAPHS)             \
    WP_SLOT(graph_launch, WP_SLOT_GRAPHS)          \
    WP_SLOT(graph_free, WP_SLOT_GRAPHS)

typedef enum {
    WP_SLOT_CONTEXT,
    WP_SLOT_MEMORY,
    WP_SLOT_OP,
    WP_SLOT_EVENTS,
    WP_SLOT_PINNED,
    WP_SLOT_GRAPHS,
    WP_SLOT_OPTIONAL
} wp_slot_group;

struct wp_kern_ops;

/* The slot that makes the table incomplete: the first NULL slot that must be filled (or of a
 * group that is filled only in part), "name" when the name string is NULL; NULL when the
 * table is complete. */
const char *wp_kern_ops_missing(const struct wp_kern_ops *ops);
/* WP_OK when complete; WP_FAILED with "kern_create: the <name> backend's dispatch table has no <slot>
 * ..." in err. kern_create refuses a backend that fails this. */
wp_result wp_kern_ops_check(const struct wp_kern_ops *ops, char *err, size_t errlen);

/* The slots in the struct's order: count, name and group of slot i (NULL / -1 past the end). */
size_t wp_kern_ops_slot_count(void);
const char *wp_kern_ops_slot_name(size_t i);
int wp_kern_ops_slot_group(size_t i);

#endif
