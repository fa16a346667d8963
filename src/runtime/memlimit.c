/* The memory a rank may use and the memory it used (memlimit.h). */
#include "memlimit.h"

#include "oom.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number from a one-line file; "max", v1's "unlimited" (a page-rounded 2^63) and failures are -1. */
static double read_num(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[64] = "";
    char *got = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!got || strncmp(buf, "max", 3) == 0) return -1;
    char *end;
    double v = strtod(buf, &end);
    return end != buf && v >= 0 && v < 0x1p60 ? v : -1;
}

double memlimit_cgroup_room(const char *self_cgroup, const char *root, char *what, size_t len) {
    char cg[1024], dir[1400];
    bool v2 = true;
    cgroup_memory_path(self_cgroup, cg, sizeof cg, &v2);
    if (!cg[0]) return -1;
    const char *max_f = v2 ? "memory.max" : "memory.limit_in_bytes", *cur_f = v2 ? "memory.current" : "memory.usage_in_bytes";
    double best = -1;
    for (;;) {
        char p[1500];
        snprintf(dir, sizeof dir, "%s%s%s", root, v2 ? "" : "/memory", strcmp(cg, "/") == 0 ? "" : cg);
        snprintf(p, sizeof p, "%s/%s", dir, max_f);
        double max = read_num(p);
        snprintf(p, sizeof p, "%s/%s", dir, cur_f);
        double cur = read_num(p);
        if (max >= 0 && cur >= 0 && (best < 0 || max - cur < best)) {
            best = max > cur ? max - cur : 0;
            snprintf(what, len, "cgroup %s %s - %s", dir, max_f, cur_f);
        }
        char *slash = strrchr(cg, '/');
        if (!slash) break;
        if (slash == cg) {
            if (!cg[1]) break;
            cg[1] = 0; /* the root cgroup last */
            continue;
        }
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
    double avail = meminfo("MemAvailable"), cg = memlimit_cgroup_room("/proc/self/cgroup", "/sys/fs/cgroup", what, len);
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

wp_result memlimit_check(const char *cmd, const char *culprit, double need, const char *parts, double limit,
                         const char *limit_flag, bool cpu, char *err, size_t errlen) {
    char what[1400];
    snprintf(what, sizeof what, "%s", limit_flag);
    if (limit <= 0 && cpu) {
        char src[1300];
        limit = memlimit_available(src, sizeof src);
        snprintf(what, sizeof what, "%s", src);
    }
    double with = need * (1 + MEMLIMIT_MARGIN) + MEMLIMIT_FIXED_MIB * 1048576.0;
    if (limit > 0 && with > limit)
        return wp_fail(WP_BAD_INPUT, err, errlen,
                       "%s: %s needs about %.1f MiB (%s), %.1f MiB with the %.0f%% + %.0f MiB margin, more than %s (%.1f MiB)",
                       culprit, cmd, need / 1048576.0, parts, with / 1048576.0, MEMLIMIT_MARGIN * 100, MEMLIMIT_FIXED_MIB,
                       what, limit / 1048576.0);
    return 0;
}
