/* The tcp transport: ranks as processes on one or many machines.
 *
 * Per peer pair, --tcp-streams sockets (the lower rank connects, the higher accepts); large
 * buffers are cut into frames (wp_net_opts.frame_bytes, 1 MiB) striped over them. Every
 * connection opens with a handshake (magic, protocol version, job id and secret, sender rank,
 * stream index; wire.h) and every frame carries length, channel, message number and a crc32
 * of header and payload. A receive sends a small clear-to-send to the sender when it is
 * posted; the sender's frames follow only then, straight into the receive buffer
 * (rendezvous: nothing is buffered, no unbounded queue). One progress thread per transport
 * moves all data, so transfers proceed while the executor computes.
 *
 * In a job, opened by tcp_job_open (tcp_job.c), which also runs the rendezvous that tells every
 * rank the others' addresses (rendezvous.h). */
#ifndef WP_RING_TCP_H
#define WP_RING_TCP_H

#include "control.h"
#include "result.h"
#include "transport.h"

struct wp_boot_info;
struct wp_job_cfg;
struct tp_job_conn;

/* Listen on net->bind (port 0: the kernel picks) and start the progress thread. job_id and
 * secret (each at most 63 bytes) must be the same on every rank. Returns WP_OK, or WP_FAILED
 * with a message. */
wp_result tcp_create(const wp_net_opts *net, int rank, int world, const char *job_id, const char *secret,
                     wp_transport **out, char *err, size_t errlen);

/* "ip:port" the data listener is bound to (the host part is 0.0.0.0 / :: for a wildcard). */
const char *tcp_listen_addr(wp_transport *t);

/* Every rank's data address ("host:port", index = rank), from the rendezvous. Must be set
 * before any connect or post to another rank. Returns WP_OK, or WP_FAILED with a message. */
wp_result tcp_set_peers(wp_transport *t, char *const *addrs, char *err, size_t errlen);

/* The data address of a rank as the rendezvous told it ("" before tcp_set_peers). */
const char *tcp_peer_addr(wp_transport *t, int peer);

/* A rank of a job: rendezvous (rendezvous.h), then this rank's tcp transport and the control
 * channel, attached to it (an abort anywhere aborts it). Connections to peers open on demand
 * (or call tp_connect_ring). Rank 0 closes bi's inherited listener, if any, whatever the
 * outcome (so call this once per boot). Returns 0, or 1 (2: a malformed variable) with a message. */
int tcp_job_open(const struct wp_boot_info *bi, const wp_net_opts *net, wp_transport **t, wp_control **ctl, char *err,
                 size_t errlen);
/* Close both in the safe order: the control channel first (its goodbye doubles as a final
 * barrier on rank 0, and it must not abort a transport that is gone), then the transport. */
void tcp_job_close(wp_transport *t, wp_control *ctl);
/* The same as tp_row's open and close (transport_table.h), for the transports whose ranks meet
 * by the tcp rendezvous and keep its transport (nccl). */
int tcp_row_open(const struct wp_boot_info *bi, const struct wp_job_cfg *cfg, struct tp_job_conn *c, char *err,
                 size_t errlen);
void tcp_row_close(struct tp_job_conn *c);

#endif
