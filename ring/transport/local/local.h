/* The local transport: every rank is a thread of one process (tests, and N ranks sharing one
 * GPU). A world holds the ranks' transports and control channels; it is created before the
 * threads start and destroyed after they all returned (launch_threads in launch.h does both).
 *
 * Mailboxes per (src, dst, channel) hold posted sends and receives; when both sides of a
 * transfer are posted it is one memcpy by whichever thread posted last (nothing is buffered).
 * With --link-bandwidth / --link-latency a pacer thread moves the bytes instead, frame by
 * frame, no faster than the emulated link (link_model.h), exactly as the tcp transport paces. */
#ifndef WP_RING_LOCAL_H
#define WP_RING_LOCAL_H

#include "control.h"
#include "transport.h"

typedef struct wp_local_world wp_local_world;

int local_world_create(int nranks, const wp_net_opts *net, wp_local_world **out, char *err, size_t errlen);
wp_transport *local_transport(wp_local_world *w, int rank);
wp_control *local_control(wp_local_world *w, int rank);
/* After every thread using the world has returned. */
void local_world_destroy(wp_local_world *w);

#endif
