/* Which transport a rank's executor talks through, given where its buffers live (the
 * "transfer memory" decision, made once per rank next to the backend context):
 *   --backend cpu                 the wire transport itself (local or tcp): host memory;
 *   --backend cuda, local or tcp  the staged transport over it (staged.h): pinned host slots,
 *                                 async copies on a transfer stream;
 *   a transport whose row has open_device (nccl, transport_table.h): that layer over the
 *                                 wire, e.g. NCCL moving device buffers directly, tcp only
 *                                 for matching and ordering.
 * Both wrappers leave the wire transport and the control channel to their owner. */
#ifndef WP_RING_DEVICE_TP_H
#define WP_RING_DEVICE_TP_H

#include <stddef.h>

#include "control.h"
#include "kernels.h"
#include "transport.h"
#include "transport_table.h"

/* *out: the transport for buffers in k's memory over `wire` (*out == wire when nothing is
 * needed). net: --connect-timeout bounds NCCL's set-up. Collective when the row has open_device
 * (every rank calls it at the same point).
 * Posts through *out must come from the thread that drives k. Returns 0, or 1 (2: bad
 * usage) with a message. */
int tp_device_open(wp_transport *wire, wp_control *ctl, wp_kern *k, const tp_row *kind, const wp_net_opts *net,
                   wp_transport **out, char *err, size_t errlen);
/* Closes what tp_device_open made (nothing when it returned the wire transport). */
void tp_device_close(wp_transport *t);

#endif
