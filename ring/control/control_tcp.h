/* The control channel over tcp: the rendezvous connections, kept open (every rank to rank 0).
 * Created by the rendezvous (tcp_job_open, tcp_job.c); used through control.h. */
#ifndef WP_RING_CONTROL_TCP_H
#define WP_RING_CONTROL_TCP_H

#include <stdint.h>

#include "control.h"
#include "result.h"

/* fds: rank 0 passes fds[1..world) (one connection per rank), every other rank fds[0] (its
 * connection to rank 0). addrs names each rank in messages. Takes ownership of the fds (also
 * on failure). Returns 0, or 1 with a message. */
int ctl_tcp_start(int rank, int world, const int *fds, char *const *addrs, double timeout, wp_control **out,
                  char *err, size_t errlen);

/* Frame helpers shared with the rendezvous: write one frame / read one whole frame (payload
 * malloc'd, at most max_len bytes) before a deadline. Return WP_OK, or WP_FAILED with a reason. */
wp_result ctl_write_frame(int fd, int type, uint64_t seq, const void *payload, size_t len, double deadline, char *why,
                          size_t whylen);
wp_result ctl_read_frame(int fd, int *type, uint64_t *seq, char **payload, size_t *len, size_t max_len, double deadline,
                         char *why, size_t whylen);

#endif
