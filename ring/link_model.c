/* Link emulation shared by the transports (see link_model.h). */
#include "link_model.h"

void wp_link_init(wp_link *l, double bytes_per_s, double latency_s) {
    l->bytes_per_s = bytes_per_s > 0 ? bytes_per_s : 0;
    l->latency_s = latency_s > 0 ? latency_s : 0;
    l->free_at = 0;
}

bool wp_link_paced(const wp_link *l) { return l->bytes_per_s > 0 || l->latency_s > 0; }

double wp_link_frame_time(const wp_link *l, size_t bytes) {
    return l->bytes_per_s > 0 ? (double)bytes / l->bytes_per_s : 0.0;
}

double wp_link_ready_at(const wp_link *l, size_t frame_bytes) {
    return l->free_at - wp_link_frame_time(l, frame_bytes);
}

double wp_link_reserve(wp_link *l, double now, size_t bytes) {
    double leave = l->free_at > now ? l->free_at : now;
    l->free_at = leave + wp_link_frame_time(l, bytes);
    return l->free_at + l->latency_s;
}
