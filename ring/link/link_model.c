/* Link emulation shared by the transports (see link_model.h). */
#include "link_model.h"

void wp_link_init(wp_link *l, double bytes_per_s, double latency_s) {
    l->bytes_per_s = bytes_per_s > 0 ? bytes_per_s : 0;
    l->latency_s = latency_s > 0 ? latency_s : 0;
    l->free_at = 0;
    l->nic[0] = l->nic[1] = NULL;
}

bool wp_link_paced(const wp_link *l) {
    bool nic = (l->nic[0] && l->nic[0]->bytes_per_s > 0) || (l->nic[1] && l->nic[1]->bytes_per_s > 0);
    return l->bytes_per_s > 0 || l->latency_s > 0 || nic;
}

double wp_link_frame_time(const wp_link *l, size_t bytes) {
    return l->bytes_per_s > 0 ? (double)bytes / l->bytes_per_s : 0.0;
}

double wp_link_ready_at(const wp_link *l, size_t frame_bytes) {
    double t = l->free_at - wp_link_frame_time(l, frame_bytes);
    for (int i = 0; i < 2; i++)
        if (l->nic[i]) {
            double n = l->nic[i]->free_at - wp_link_frame_time(l->nic[i], frame_bytes);
            if (n > t) t = n;
        }
    return t;
}

double wp_link_reserve(wp_link *l, double now, size_t bytes) {
    double leave = l->free_at > now ? l->free_at : now;
    for (int i = 0; i < 2; i++)
        if (l->nic[i] && l->nic[i]->free_at > leave) leave = l->nic[i]->free_at;
    l->free_at = leave + wp_link_frame_time(l, bytes);
    double left = l->free_at;
    for (int i = 0; i < 2; i++)
        if (l->nic[i]) {
            l->nic[i]->free_at = leave + wp_link_frame_time(l->nic[i], bytes);
            if (l->nic[i]->free_at > left) left = l->nic[i]->free_at;
        }
    return left + l->latency_s;
}
