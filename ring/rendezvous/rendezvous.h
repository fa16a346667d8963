/* The rendezvous protocol (bootstrap.h says what a launcher gives; docs/transports.md
 * "Rendezvous" what a stranger can do): rank 0 listens at MASTER_ADDR:MASTER_PORT, admits each
 * rank after a handshake (job id, secret, the hash of the flags every rank must share,
 * WEIPIPE_PEERS), gathers every rank's data address and sends the table back. The connections
 * stay open: they become the control channel (control_tcp.h). How a transport uses it:
 * tcp_job.c. */
#ifndef WP_RING_RENDEZVOUS_H
#define WP_RING_RENDEZVOUS_H

#include <stddef.h>

#include "bootstrap.h"
#include "transport.h"

/* Exchange the data addresses of the tcp transport t (tcp.h) of every rank. lfd (rank 0): the
 * inherited listener, or -1 to bind MASTER_ADDR:MASTER_PORT; closed here in every case. fds
 * (world entries, all -1) receives the rendezvous connections: rank 0 fds[1..world), another
 * rank fds[0]; the caller owns them. addrs (world entries, all NULL) receives each rank's
 * address, malloc'd (an entry left NULL: out of memory; the caller checks). Returns 0, or 1
 * with a message. */
int rdv_exchange(const wp_boot_info *bi, const wp_net_opts *net, wp_transport *t, int lfd, int *fds, char **addrs,
                 char *err, size_t errlen);

#endif
