/* Small socket helpers: addresses as "host:port" strings ("[v6]:port" for IPv6), listeners on
 * one interface, connects and whole-buffer reads/writes bounded by a monotonic deadline. All
 * sockets are non-blocking; every error comes back as a one-line message. */
#ifndef WP_RING_SOCK_H
#define WP_RING_SOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "result.h"

#define SOCK_ADDR_MAX 64
#define SOCK_BUF_BYTES (4 << 20) /* requested SO_SNDBUF / SO_RCVBUF */

/* "host:port" -> host, port. Returns WP_OK, or WP_FAILED with a reason. */
wp_result sock_split_addr(const char *addr, char *host, size_t hostlen, int *port, char *err, size_t errlen);
bool sock_is_wildcard(const char *host);

/* A non-blocking listener bound to host:port (port 0: the kernel picks one). Returns the fd. */
int sock_listen(const char *host, int port, char *err, size_t errlen);

/* The local IP address ("10.0.0.2", "::1") of the interface this host would use to reach
 * host:port: a UDP socket connect()ed there and getsockname() (connecting a UDP socket only
 * consults the routing table; no packet is sent). Returns WP_OK, or WP_FAILED with a reason (the
 * name does not resolve; no route: "Network is unreachable"). */
wp_result sock_route_addr(const char *host, int port, char *out, size_t outlen, char *err, size_t errlen);

/* Connect to host:port before the monotonic `deadline`, retrying while the peer refuses (it
 * may not listen yet). Returns a tuned non-blocking fd, or -1 with a reason. */
int sock_connect(const char *host, int port, double deadline, char *err, size_t errlen);

/* Non-blocking, close-on-exec, TCP_NODELAY, large buffers. Returns WP_OK, or WP_FAILED with a
 * reason. */
wp_result sock_tune(int fd, char *err, size_t errlen);

/* "ip:port" of the local or the remote end of a socket ("?" when unknown). */
void sock_local_addr(int fd, char *out, size_t outlen);
void sock_peer_addr(int fd, char *out, size_t outlen);

/* Move exactly n bytes before the deadline. Returns WP_OK, or WP_FAILED with a reason ("timed
 * out", "connection closed", errno text). */
wp_result sock_write_all(int fd, const void *buf, size_t n, double deadline, char *err, size_t errlen);
wp_result sock_read_all(int fd, void *buf, size_t n, double deadline, char *err, size_t errlen);

#endif
