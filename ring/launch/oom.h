/* Evidence that the kernel's OOM killer ended a process of this job: the oom_kill count of this
 * process's memory cgroup (v2 memory.events, v1 memory.oom_control). The ranks a launcher starts
 * share its cgroup, so the launcher and the surviving ranks read the count the dead one raised. */
#ifndef WP_RING_OOM_H
#define WP_RING_OOM_H

/* The count, or -1 where no cgroup memory controller reports one. */
long oom_kill_count(void);

#endif
