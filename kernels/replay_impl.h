/* Private to kernels/: how dispatch.c and streams.c hand calls to replays (replay.h) while a
 * context records a span. Each row of ops_table.h gets rp_op_<name>, with the op's own
 * parameters, which keeps the call in the record. */
#ifndef WP_KERNELS_REPLAY_IMPL_H
#define WP_KERNELS_REPLAY_IMPL_H

#include <stddef.h>

#include "backend.h"

enum { RP_RUN = 0, RP_RECORD }; /* wp_kern.rp_mode */

#define WP_RP_OP_DECL(ret, name, params, ...) void rp_op_##name params;
WP_KERN_OPS(WP_RP_OP_DECL, WP_RP_OP_DECL)
#undef WP_RP_OP_DECL

/* kern_copy (src NULL: kern_zero) while recording (pointers non-NULL, bytes > 0: checked) */
void rp_mem(wp_kern *k, void *dst, const void *src, size_t bytes);
/* A call that needs the host (its name, a string literal) while recording: what was recorded is
 * made now, and the span runs as its calls come from here on (the caller then makes its call). */
void rp_break(wp_kern *k, const char *why);

#endif
