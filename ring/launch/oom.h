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

#endif
