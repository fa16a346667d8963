/* The memory a rank may use and the memory it used (memlimit.h). */
#include "memlimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number from a one-line file; "max" and failures are -1. */
static double read_num(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = "";
    char *got = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!got || strncmp(buf, "max", 3) == 0) return -1;
    char *end;
    double v = strtod(buf, &end);
    return end != buf && v >= 0 ? v : -1;
}

/* The "0::/path" line of /proc/self/cgroup (cgroup v2), "" when there is none. */
static void own_cgroup(char *path, size_t len) {
    path[0] = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = 0;
            snprintf(path, len, "%s", line + 3);
            break;
        }
    fclose(f);
}

/* The tightest memory.max - memory.current from the process's cgroup up to the root. */
static double cgroup_room(char *what, size_t len) {
    char cg[1024], dir[1200];
    own_cgroup(cg, sizeof cg);
    if (!cg[0]) return -1;
    double best = -1;
    for (;;) {
        char p[1300];
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(cg, "/") == 0 ? "" : cg);
        snprintf(p, sizeof p, "%s/memory.max", dir);
        double max = read_num(p);
        snprintf(p, sizeof p, "%s/memory.current", dir);
        double cur = read_num(p);
        if (max >= 0 && cur >= 0 && (best < 0 || max - cur < best)) {
            best = max > cur ? max - cur : 0;
            snprintf(what, len, "cgroup %s memory.max - memory.current", dir);
        }
        char *slash = strrchr(cg, '/');
        if (!slash || slash == cg) break;
        *slash = 0;
    }
    return best;
}

static double meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtod(line + n + 1, NULL) * 1024; /* kB */
            break;
        }
    fclose(f);
    return v;
}

double memlimit_available(char *what, size_t len) {
    const char *fake = getenv("WEIPIPE_TEST_MEMORY_LIMIT");
    if (fake && *fake) {
        snprintf(what, len, "WEIPIPE_TEST_MEMORY_LIMIT");
        return strtod(fake, NULL);
    }
    double avail = meminfo("MemAvailable"), cg = cgroup_room(what, len);
    if (cg >= 0 && (avail < 0 || cg < avail)) return cg;
    snprintf(what, len, "MemAvailable");
    return avail > 0 ? avail : 0;
}

double memlimit_vmhwm(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            v = strtod(line + 6, NULL) * 1024;
            break;
        }
    fclose(f);
    return v;
}
