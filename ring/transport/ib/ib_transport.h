/* The ibverbs transport: transport.h over RDMA (reliable-connected queue pairs), built on the
 * protocol of ib_proto.h (double-buffered registered staging per slot, RDMA WRITE WITH
 * IMMEDIATE into the receiver's free buffer, credits, bounded work requests, bounded
 * completion waits) and a thin hardware layer (ib_ops.h: libibverbs, or the in-process soft
 * fabric of the tests).
 *
 * Connection set-up goes through an out-of-band transport that already links the ranks: the
 * tcp transport opened by the rendezvous (bootstrap.h) in a job, the local transport in the
 * tests. Each side of a pair sends the other its queue pair number, LID, GID, the address and
 * rkey of its receive buffers (IBP_INFO_BYTES) over it, then a one-byte "ready" once its
 * queue pair can receive; data flows by RDMA only after both. The ring neighbours exchange at
 * creation; any other peer at the first post to it (both sides post, so both start). A
 * tp_connect to a non-neighbour waits for that peer to post to us or connect to us too. A failure of the RDMA
 * transport is also passed to the out-of-band one (whose abort frames tell the peers), and a
 * failure there fails this transport.
 *
 * Memory path: transfers are staged through registered host buffers (the executor hands the
 * transport host memory). The start-up line (rdma_describe) names the device, port, GID index
 * and this path. */
#ifndef WP_RING_IB_TRANSPORT_H
#define WP_RING_IB_TRANSPORT_H

#include "control.h"
#include "ib_ops.h"
#include "ib_proto.h"
#include "transport.h"

struct wp_boot_info;

/* Open the device with `ops` and create the transport of rank tp_rank(oob) in a world of
 * tp_world(oob). oob must outlive it (close this transport first). Returns 0; 2 with
 * "no RDMA device: ..." when there is none; 1 with a message otherwise. */
int rdma_create(const ib_ops *ops, const ib_dev_cfg *dev, const ibp_cfg *proto, double connect_timeout,
               wp_transport *oob, wp_transport **out, char *err, size_t errlen);
/* One line: device, port, GID index and memory path (for the start-up log). */
const char *rdma_describe(wp_transport *t);

#if WP_HAVE_IBVERBS
/* The RDMA transport over libibverbs on device dev, over `wire` (the tcp
 * transport of the rendezvous, which stays the caller's: close *t first). Rank 0 prints the
 * start-up line. Returns 0; 2 when there is no RDMA device or a flag is wrong; 1 otherwise. */
int rdma_open_over(wp_transport *wire, const ib_dev_cfg *dev, const wp_net_opts *net, wp_transport **t, char *err,
                  size_t errlen);
/* A rank of a job with --transport ibverbs: the tcp rendezvous (tcp_job_open) gives the
 * control channel and the out-of-band transport; then the RDMA transport over libibverbs,
 * attached to the control channel. Prints the start-up line on rank 0. Returns 0; 2 when
 * there is no RDMA device or a flag is wrong; 1 otherwise. */
int rdma_job_open(const struct wp_boot_info *bi, const wp_net_opts *net, const ib_dev_cfg *dev, wp_transport **t,
                 wp_transport **oob, wp_control **ctl, char *err, size_t errlen);
/* Control channel first (as tcp_job_close), then the RDMA transport, then the tcp one. */
void rdma_job_close(wp_transport *t, wp_transport *oob, wp_control *ctl);
#endif

#endif
