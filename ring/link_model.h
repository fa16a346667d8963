/* Emulated slow links (--link-bandwidth, --link-latency): one wp_link per direction of a
 * (src, dst) pair, shared by every channel and TCP stream of that pair, and used alike by the
 * local and the tcp transport so that both pace the same way.
 *
 * Model: a frame occupies the link for bytes / bandwidth seconds (serialisation, i.e. a token
 * bucket one frame deep) and is delivered latency seconds after its last byte left. Frames of
 * different channels take turns on the link (the transports pick them round robin), so
 * channels share the bandwidth instead of queueing behind each other. A transfer of X bytes on
 * an idle link therefore completes after X / bandwidth + latency. Small control messages (the
 * receiver's clear-to-send) are not paced. */
#ifndef WP_RING_LINK_MODEL_H
#define WP_RING_LINK_MODEL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct wp_link {
    double bytes_per_s; /* 0 = unlimited */
    double latency_s;   /* one way */
    double free_at;     /* when the last reserved frame has left the sender */
} wp_link;

void wp_link_init(wp_link *l, double bytes_per_s, double latency_s);
bool wp_link_paced(const wp_link *l);

/* Time a frame of `bytes` keeps the link busy. */
double wp_link_frame_time(const wp_link *l, size_t bytes);

/* When the link can take the next frame of up to frame_bytes: it is booked one frame ahead,
 * so that back-to-back frames leave without a gap whatever the caller's wake-up jitter. */
double wp_link_ready_at(const wp_link *l, size_t frame_bytes);

/* Book the link for one frame offered at `now`; returns when the frame has been delivered
 * (left no earlier than the link was free, plus serialisation, plus latency). */
double wp_link_reserve(wp_link *l, double now, size_t bytes);

#endif
