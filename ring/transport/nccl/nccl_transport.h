/* The NCCL transport: the executor's device buffers move GPU to GPU with ncclSend/ncclRecv,
 * never through host memory; the tcp transport it is opened over (the same rendezvous:
 * MASTER_ADDR:MASTER_PORT, or the launcher's variables) carries only small messages that
 * keep transport.h's semantics, which NCCL alone does not give:
 *
 *  - Matching is FIFO per (src, dst, channel) and channels are independent, while NCCL pairs
 *    the operations between two ranks in the order they are issued. So a send first sends a
 *    descriptor (size, label, the communicator's unique id) over tcp on its own channel; tcp
 *    pairs it with the receiver's descriptor receive; the receiver then issues ncclRecv and
 *    answers "go" on the reserved channel WP_NCCL_GO_CHANNEL; the sender issues its ncclSend
 *    when that go arrives. Both sides thus issue a direction's operations in the receiver's
 *    go order, and only operations whose two sides are both posted (no head-of-line wait on
 *    a peer that has not posted yet).
 *  - Every direction between two ranks (a -> b) is its own 2-rank communicator with its own
 *    stream on each side, created on first use (non-blocking init; the sender makes the id and
 *    every descriptor carries it), so traffic a -> b never queues behind b -> a or another
 *    peer: the ring's opposite directions cannot deadlock.
 *  - Each progress turn issues its ready operations in one ncclGroupStart/End.
 *  - Sends wait (on the device) for the compute work queued before their post (an event of
 *    the compute stream); a receive completes once its data is in the buffer.
 *
 * Failures: a communicator error (ncclCommGetAsyncError, polled every turn), a set-up that
 * does not finish within --connect-timeout, a tcp failure, an abort or a silent wait fails the
 * transport; every communicator is then aborted (ncclCommAbort) so that no kernel stays
 * blocked on a dead peer, and the error names the peer. NCCL cannot put two ranks on one GPU:
 * tp_nccl_open checks that first and says so.
 *
 * Not yet run on a GPU: see docs/transports.md. */
#ifndef WP_RING_NCCL_TRANSPORT_H
#define WP_RING_NCCL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "control.h"
#include "kernels.h"
#include "transport.h"

/* The inner channel of the go messages; the NCCL transport refuses posts on it. */
#define WP_NCCL_GO_CHANNEL (WP_MAX_CHANNELS - 1)

/* Collective over the job's ranks (ctl). wire: the rank's tcp transport (stays the caller's:
 * close this one first); compute: the rank's CUDA context (posts come from its thread).
 * Returns 0; 2 when two ranks share a GPU (naming both); 1 on other failures. */
int tp_nccl_open(wp_transport *wire, wp_control *ctl, wp_kern *compute, double connect_timeout, wp_transport **out,
                 char *err, size_t errlen);
bool tp_is_nccl(const wp_transport *t);

#endif
