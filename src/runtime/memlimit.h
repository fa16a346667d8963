/* What a rank may really use on this host, and what it used (docs/memory.md). */
#ifndef WP_RUNTIME_MEMLIMIT_H
#define WP_RUNTIME_MEMLIMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "result.h"

/* Bytes this process may still take: the tightest cgroup limit - use on the way from its cgroup
 * (/proc/self/cgroup) to the root (v2: memory.max - memory.current; v1, where the memory
 * controller is mounted apart: memory.limit_in_bytes - memory.usage_in_bytes), else
 * MemAvailable (/proc/meminfo);
 * WEIPIPE_TEST_MEMORY_LIMIT (bytes) stands in for both in tests. what names the source.
 * Returns 0 when nothing could be read (no check then). */
double memlimit_available(char *what, size_t len);
/* The cgroup part of that, from a /proc/self/cgroup file and the cgroup fs mounted at root
 * ("/sys/fs/cgroup"; v1's memory controller under root/memory): tests give a fake tree. Bytes,
 * or -1 when no cgroup on the way sets a limit. */
double memlimit_cgroup_room(const char *self_cgroup, const char *root, char *what, size_t len);
/* The process's resident-set high-water (VmHWM of /proc/self/status), bytes; 0 unknown. */
double memlimit_vmhwm(void);
/* The start-up check's margin over the prediction: MEMLIMIT_MARGIN of it plus
 * MEMLIMIT_FIXED_MIB per process (the program, its libraries, OpenBLAS's and the C library's
 * arenas: measured, docs/memory.md). */
#define MEMLIMIT_MARGIN 0.10
#define MEMLIMIT_FIXED_MIB 64.0

/* The start-up check of a one-process command (eval, sample) before it allocates: need bytes
 * predicted (its largest parts in words, parts), with the margin above, against
 * limit when > 0 (the value of the flag limit_flag names: --device-memory, --host-memory), else
 * on the CPU (cpu) what this host may still give (memlimit_available); a GPU's free memory is
 * known only once the backend is open.
 * 0, or 2 with "<culprit>: <cmd> needs about X MiB (parts), Y MiB with the ... margin, more
 * than <source> (Z MiB)" in err: culprit names the flag and value (or the model's setting)
 * that asked for it. */
wp_result memlimit_check(const char *cmd, const char *culprit, double need, const char *parts, double limit,
                         const char *limit_flag, bool cpu, char *err, size_t errlen);

#endif
