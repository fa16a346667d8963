/* The launcher's notice to a rank that a peer ended (weipipe's own launcher, ring/launch/launch.c).
 *
 * A rank that dies before it joins the rendezvous leaves nothing for the others to read: rank 0
 * waits for it up to --connect-timeout, the rest wait for rank 0, and the launcher's grace period
 * (--timeout) ends first, so the survivors were killed without naming the lost rank. The launcher
 * sees the death at once: it hands each rank one end of a socket pair (WEIPIPE_NOTICE_FD) and
 * writes "RANK HOW\n" on every other rank's when one ends in failure. While the ring is being set
 * up (notice_watch), every wait of sock.c and the rendezvous also waits on it and fails with the
 * lost rank's name. Afterwards the transports and the control channel see a dead peer
 * themselves (a closed connection), and a pending notice must not cut short what survivors still
 * say to each other (an abort, the checkpoint they agree on). */
#ifndef WP_RING_NOTICE_H
#define WP_RING_NOTICE_H

#include <stdbool.h>
#include <stddef.h>

/* Take fd (from WEIPIPE_NOTICE_FD) as the notice's: close-on-exec, non-blocking, watched. */
void notice_adopt(int fd);
/* Watch it (true) or not; without an adopted fd nothing is watched. */
void notice_watch(bool on);
/* The fd to poll for POLLIN while watching, else -1. */
int notice_fd(void);
/* Whether a peer's end was announced (reading what arrived, without blocking); its sentence,
 * e.g. "rank 2 ended (killed by signal 9, Killed), the launcher says", into out (may be NULL).
 * Always false while not watching. */
bool notice_lost(char *out, size_t len);

#endif
