/* What the control backends (local, tcp) share. Not for users of the control channel. */
#ifndef WP_RING_CONTROL_IMPL_H
#define WP_RING_CONTROL_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "control.h"
#include "oom.h"
#include "result.h"

/* A collective call as every rank describes it; rank 0 checks that all descriptions agree. */
enum { COLL_BARRIER = 1, COLL_ALLREDUCE = 2, COLL_BCAST = 3 };
typedef struct ctl_coll {
    uint32_t kind, op, count, root; /* count: doubles (allreduce) or bytes (broadcast) */
} ctl_coll;

/* A rank's contribution: the description, then its data. */
#define CTL_CONTRIB_HDR 16

typedef struct ctl_ops {
    /* Send contrib (CTL_CONTRIB_HDR + data bytes), receive the combined result (malloc'd). */
    int (*exchange)(wp_control *c, const void *contrib, size_t bytes, void **result, size_t *result_bytes,
                    char *err, size_t errlen);
    int (*status_grid)(wp_control *c, char **grid, char *err, size_t errlen);
    /* Record the failure locally and tell the other ranks. */
    void (*abort)(wp_control *c, const char *why);
    void (*close)(wp_control *c);
} ctl_ops;

struct wp_control {
    const ctl_ops *ops;
    int rank, world;
    double timeout;
    uint64_t seq; /* collectives called so far (the executor's thread only) */
    pthread_mutex_t mu; /* guards the fields below */
    bool failed;
    char why[1024];
    wp_transport *attached;
    char status[CTL_STATUS_MAX + 1];
    double status_at;
    char unanswered[512]; /* the ranks rank 0's last status query did not hear from ("" = none); rank 0 sends them to all */
    double *mem;          /* ctl_note_memory: resident then allocated, world each; NULL before */
    long long mem_step;
    wp_oom_counts oom0;   /* the OOM killer's counts when the channel opened (oom.h) */
};

int ctl_base_init(wp_control *c, const ctl_ops *ops, int rank, int world, double timeout);
void ctl_base_destroy(wp_control *c);
/* What is known of how rank r vanished without a goodbye: ": killed by the OOM killer (...)"
 * when this cgroup's count rose, else its last memory figure, else "". */
/* same_host: r ran on this host, so this host's OOM counts speak of it */
void ctl_death_note(wp_control *c, int r, bool same_host, char *out, size_t len);

/* Record the first failure cause and abort the attached transport. Returns true when this
 * call recorded it (false: already failed). Takes c->mu itself. */
bool ctl_fail_local(wp_control *c, const char *why);

/* This rank's note as "<note> [for 3.2 s]". */
void ctl_status_line(wp_control *c, char *out, size_t outlen);

/* Rank 0's combine step: n contributions in rank order -> result (malloc'd). Returns WP_OK, or
 * WP_FAILED with a message naming the rank whose call differs. */
wp_result ctl_combine(int n, void *const *contribs, const size_t *sizes, void **result, size_t *result_bytes,
                      uint64_t seq, char *err, size_t errlen);

const char *ctl_coll_name(const ctl_coll *d, char *buf, size_t buflen);

#endif
