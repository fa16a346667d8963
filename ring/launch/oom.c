/* The OOM killer's count for this process's cgroup (oom.h). */
#include "oom.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* "oom_kill N" from a cgroup file, -1 when the file or the line is not there. */
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
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024], path[1200];
    long n = -1;
    while (n < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        const char *cg = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
        bool v2 = strcmp(line, "0") == 0 && c1[1] == 0, mem = false;
        for (char *tok = strtok(c1 + 1, ","); tok && !v2; tok = strtok(NULL, ",")) mem |= strcmp(tok, "memory") == 0;
        if (v2) snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.events", cg);
        else if (mem) snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.oom_control", cg);
        else continue;
        n = count_in(path);
    }
    fclose(f);
    return n;
}
