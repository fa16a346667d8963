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
 * Usually created by bootstrap.h (wp_job_open_tcp), which also runs the rendezvous that
 * tells every rank the others' addresses. */
#ifndef WP_RING_TCP_H
#define WP_RING_TCP_H

#include "transport.h"

/* Listen on net->bind (port 0: the kernel picks) and start the progress thread. job_id and
 * secret (each at most 63 bytes) must be the same on every rank. */
int tcp_create(const wp_net_opts *net, int rank, int world, const char *job_id, const char *secret,
               wp_transport **out, char *err, size_t errlen);

/* "ip:port" the data listener is bound to (the host part is 0.0.0.0 / :: for a wildcard). */
const char *tcp_listen_addr(wp_transport *t);

/* Every rank's data address ("host:port", index = rank), from the rendezvous. Must be set
 * before any connect or post to another rank. Returns 0, or 1 with a message. */
int tcp_set_peers(wp_transport *t, char *const *addrs, char *err, size_t errlen);

/* The data address of a rank as the rendezvous told it ("" before tcp_set_peers). */
const char *tcp_peer_addr(wp_transport *t, int peer);

#endif
