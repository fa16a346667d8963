/* This process's memory cgroup, and evidence that the kernel's OOM killer ended a process of
 * this job: the oom_kill count of that cgroup (v2 memory.events, v1 memory.oom_control). The
 * ranks a launcher starts share its cgroup, so the launcher and the surviving ranks read the
 * count the dead one raised; the start-up memory check (src/runtime/memlimit.c) reads the
 * same cgroup's limit. */
#ifndef WP_RING_OOM_H
#define WP_RING_OOM_H

#include <stdbool.h>
#include <stddef.h>

/* The memory cgroup's path from a /proc/self/cgroup file (self_cgroup): the v1 line whose
 * controller list names "memory" ("4:cpuacct,memory:/path", *v2 false), which is what limits
 * where both are listed, else the v2 line "0::/path" (*v2 true); "" when neither is there. */
void cgroup_memory_path(const char *self_cgroup, char *path, size_t len, bool *v2);

/* The count, or -1 where no cgroup memory controller reports one. */
long oom_kill_count(void);

/* The OOM killer's counts at one moment: this cgroup's (oom_kill_count) and the host's
 * (/proc/vmstat oom_kill, Linux 4.13+, raised by every OOM kill on the host); -1 where unknown. */
typedef struct {
    long cgroup, host;
} wp_oom_counts;
wp_oom_counts oom_counts(void);

/* What the counts taken before and now say of a process of this job, on this host, that was
 * SIGKILLed (or vanished) in between. */
typedef enum {
    WP_OOM_UNKNOWN, /* no count to read */
    WP_OOM_YES,     /* this cgroup's count rose */
    WP_OOM_LIKELY,  /* the host's rose: an OOM kill happened here, maybe of another process */
    WP_OOM_NO,      /* the host's did not change: no OOM kill at all (a person, a supervisor) */
} wp_oom_verdict;
/* The verdict, and its evidence as words into out ("this cgroup's oom_kill count went from 0 to
 * 1", "/proc/vmstat oom_kill stayed at 3"; "" when unknown). */
wp_oom_verdict oom_verdict(wp_oom_counts before, wp_oom_counts now, char *out, size_t len);

#endif
