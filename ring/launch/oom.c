/* This process's memory cgroup and the OOM killer's count for it (oom.h). */
#include "oom.h"

#include <stdio.h>
#include <string.h>

void cgroup_memory_path(const char *self_cgroup, char *path, size_t len, bool *v2) {
    path[0] = 0;
    FILE *f = fopen(self_cgroup, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        bool is_v2 = strcmp(line, "0") == 0 && c1[1] == 0, is_mem = false;
        char *save = NULL; /* strtok_r: rank threads and the control thread may read this at once */
        for (char *tok = strtok_r(c1 + 1, ",", &save); tok && !is_v2; tok = strtok_r(NULL, ",", &save))
            is_mem |= strcmp(tok, "memory") == 0;
        if (is_v2 || is_mem) {
            snprintf(path, len, "%s", c2 + 1);
            *v2 = is_v2;
            if (is_mem) break; /* a v1 memory controller is what limits, where both are listed */
        }
    }
    fclose(f);
}

/* "oom_kill N" from a cgroup file or /proc/vmstat, -1 when the file or the line is not there. */
static long count_in(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "oom_kill %ld", &n) == 1) break;
    fclose(f);
    return n;
}

long oom_kill_count(void) {
    char cg[1024], path[1200];
    bool v2 = true;
    cgroup_memory_path("/proc/self/cgroup", cg, sizeof cg, &v2);
    if (!cg[0]) return -1;
    const char *dir = strcmp(cg, "/") == 0 ? "" : cg;
    if (v2) snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.events", dir);
    else snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.oom_control", dir);
    return count_in(path);
}

wp_oom_counts oom_counts(void) { return (wp_oom_counts){.cgroup = oom_kill_count(), .host = count_in("/proc/vmstat")}; }

wp_oom_verdict oom_verdict(wp_oom_counts before, wp_oom_counts now, char *out, size_t len) {
    out[0] = 0;
    if (before.cgroup >= 0 && now.cgroup > before.cgroup) {
        snprintf(out, len, "this cgroup's oom_kill count went from %ld to %ld", before.cgroup, now.cgroup);
        return WP_OOM_YES;
    }
    if (before.host < 0 || now.host < 0) return WP_OOM_UNKNOWN;
    if (now.host == before.host) {
        snprintf(out, len, "no OOM kill on this host meanwhile: /proc/vmstat oom_kill stayed at %ld", now.host);
        return WP_OOM_NO;
    }
    snprintf(out, len, "the host's oom_kill count went from %ld to %ld: see dmesg", before.host, now.host);
    return WP_OOM_LIKELY;
}
