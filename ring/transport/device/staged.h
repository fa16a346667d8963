/* Device buffers over a host-memory transport: the staged transport.
 *
 * The executor's buffers live in the backend's memory (GPU memory for --backend cuda), while
 * the local and tcp transports move host bytes (memcpy, socket writes). This transport takes
 * posts of device buffers and moves them through page-locked host staging buffers with async
 * copies on a transfer stream of its own (a sibling context, streams.h), so that a rank's
 * compute stream keeps running while its weights travel (the double-buffered prefetch of the
 * design: the next chunk lands while this one computes):
 *   send: [transfer stream waits for the compute stream's event at post] -> D2H into a pinned
 *         slot -> inner send of the slot -> complete;
 *   recv: inner receive into a pinned slot -> H2D on the transfer stream -> complete (the data
 *         is on the device before the executor sees the receive done).
 * A progress thread drives these steps; pinned slots are reused by size, so after the first
 * step nothing is allocated. FIFO order per (peer, channel) is kept: a send reaches the inner
 * transport only after every earlier send of its (peer, channel) did.
 *
 * Ranks that are threads of one process (--transport local, N ranks sharing a GPU) skip the
 * host: the receiver copies device to device from the sender's buffer (WP_STAGE_DIRECT).
 *
 * With the CPU backend the same steps run synchronously (streams.h), which is how the tests
 * exercise this file on machines without a GPU. */
#ifndef WP_RING_STAGED_H
#define WP_RING_STAGED_H

#include <stddef.h>

#include "kernels.h"
#include "transport.h"

/* How the bytes get from one rank's device buffer to another's:
 *   HOST    through pinned host slots over the inner transport (any inner transport);
 *   DIRECT  one device-to-device copy on the receiver's transfer stream, from the sender's
 *           buffer (the inner transport, which must be local: ranks as threads of one
 *           process, carries only the handover); the send completes once that copy did;
 *   AUTO    DIRECT over local, HOST otherwise. */
typedef enum { WP_STAGE_AUTO = 0, WP_STAGE_HOST, WP_STAGE_DIRECT } wp_stage_mode;

/* A transport over `inner` (which stays the caller's: close this one first, then inner) for
 * buffers in `compute`'s memory. Sends are ordered after the work queued on `compute` when
 * they are posted, so posts must come from the thread that drives `compute`. Returns 0, or 1
 * with a message. */
int tp_staged_open(wp_transport *inner, wp_kern *compute, wp_stage_mode mode, wp_transport **out, char *err,
                   size_t errlen);

/* Whether t is a staged transport (tp_kind reads "staged"). */
bool tp_is_staged(const wp_transport *t);

#endif
