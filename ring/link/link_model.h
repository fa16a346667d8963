/* Emulated slow links (--link-bandwidth, --link-latency): one wp_link per direction of a
 * (src, dst) pair, shared by every channel and TCP stream of that pair, and used alike by the
 * local and the tcp transport so that both pace the same way.
 *
 * Model: a frame occupies the link for bytes / bandwidth seconds (serialisation, i.e. a token
 * bucket one frame deep) and is delivered latency seconds after its last byte left. Frames of
 * different channels take turns on the link (the transports pick them round robin), so
 * channels share the bandwidth instead of queueing behind each other. A transfer of X bytes on
 * an idle link therefore completes after X / bandwidth + latency. Small control messages (the
 * receiver's clear-to-send) are not paced.
 *
 * A node's NIC (--ranks-per-node G, more than G ranks): the link between nodes is one NIC per
 * direction per node, shared by every flow that leaves (enters) it, as the simulator has it
 * (src/schedule/engine_links.c). A pair's link then has no bandwidth of its own (latency only)
 * and books every frame on up to two shared buckets as well, nic[0] the source node's egress and
 * nic[1] the destination node's ingress: a frame leaves when the pair and both NICs are free and
 * keeps each busy for its bytes / that one's bandwidth. Whoever owns the buckets makes the
 * links that share them take turns frame by frame (local.c: every rank's, one process; tcp: a
 * process's own egress only, see docs/transports.md). */
#ifndef WP_RING_LINK_MODEL_H
#define WP_RING_LINK_MODEL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct wp_link {
    double bytes_per_s; /* 0 = unlimited */
    double latency_s;   /* one way */
    double free_at;     /* when the last reserved frame has left the sender */
    struct wp_link *nic[2]; /* shared buckets this link's frames also occupy (NULL: none) */
} wp_link;

/* A link of its own (nic[] NULL); a NIC bucket is a link with no latency. */
void wp_link_init(wp_link *l, double bytes_per_s, double latency_s);
/* Whether frames on l are held back at all (its own bandwidth or latency, or a NIC's). */
bool wp_link_paced(const wp_link *l);

/* Time a frame of `bytes` keeps the link busy (its own bandwidth; not the NICs'). */
double wp_link_frame_time(const wp_link *l, size_t bytes);

/* When the link (and its NICs) can take the next frame of up to frame_bytes: each is booked one
 * frame ahead, so that back-to-back frames leave without a gap whatever the caller's wake-up jitter. */
double wp_link_ready_at(const wp_link *l, size_t frame_bytes);

/* Book the link (and its NICs) for one frame offered at `now`; returns when the frame has been
 * delivered (left no earlier than all of them were free, plus the longest serialisation, plus
 * latency). */
double wp_link_reserve(wp_link *l, double now, size_t bytes);

#endif
