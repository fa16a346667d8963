/* memlimit_cgroup_room on fake cgroup trees (v2, v1, both listed, none): the tightest limit minus
 * use on the way from the process's cgroup to the root, "max" and v1's "unlimited" as no limit.
 * The expected rooms are the files' numbers subtracted by hand. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memlimit.h"

static char base[64];
static int failures;

static void put(const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    for (char *s = strchr(p + strlen(base) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        if (mkdir(p, 0700) != 0 && access(p, F_OK) != 0) { perror(p); exit(1); }
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(p); exit(1); }
}

static void expect(const char *what, const char *self, const char *root, double want, const char *names) {
    char sp[512], rp[512], src[512] = "";
    snprintf(sp, sizeof sp, "%s/%s", base, self);
    snprintf(rp, sizeof rp, "%s/%s", base, root);
    double got = memlimit_cgroup_room(sp, rp, src, sizeof src);
    bool ok = got == want && (!names || strstr(src, names));
    printf("%s %s: room %.0f (want %.0f), from \"%s\"\n", ok ? "ok  " : "FAIL", what, got, want, src);
    failures += !ok;
}

int main(void) {
    snprintf(base, sizeof base, "/tmp/test_memlimit.XXXXXX");
    if (!mkdtemp(base)) { perror("mkdtemp"); return 1; }
    /* v2: /a/b under /a; /a is the tighter (500000 - 400000), b's own is 700000 */
    put("v2/self", "0::/a/b\n");
    put("v2/fs/a/b/memory.max", "1000000\n");
    put("v2/fs/a/b/memory.current", "300000\n");
    put("v2/fs/a/memory.max", "500000\n");
    put("v2/fs/a/memory.current", "400000\n");
    expect("v2 nested", "v2/self", "v2/fs", 100000, "/a memory.max - memory.current");
    put("v2/fs/a/memory.max", "max\n");
    expect("v2 parent unlimited", "v2/self", "v2/fs", 700000, "/a/b memory.max");
    /* v1: the memory controller shares a line with cpuacct; the job's own limit is "unlimited" */
    put("v1/self", "12:pids:/job/x\n5:cpuacct,memory:/job/x\n1:name=systemd:/job/x\n");
    put("v1/fs/memory/job/x/memory.limit_in_bytes", "9223372036854771712\n");
    put("v1/fs/memory/job/x/memory.usage_in_bytes", "123\n");
    put("v1/fs/memory/job/memory.limit_in_bytes", "2000000\n");
    put("v1/fs/memory/job/memory.usage_in_bytes", "500000\n");
    expect("v1", "v1/self", "v1/fs", 1500000, "/memory/job memory.limit_in_bytes - memory.usage_in_bytes");
    /* hybrid: a v2 line and a v1 memory line: the v1 controller is the one that limits */
    put("hy/self", "0::/other\n5:memory:/job\n");
    put("hy/fs/memory/job/memory.limit_in_bytes", "4096000\n");
    put("hy/fs/memory/job/memory.usage_in_bytes", "96000\n");
    put("hy/fs/other/memory.max", "1\n");
    put("hy/fs/other/memory.current", "0\n");
    expect("hybrid", "hy/self", "hy/fs", 4000000, "memory.limit_in_bytes");
    /* used beyond the limit: no room, not a negative one */
    put("v2/fs/a/b/memory.current", "1200000\n");
    expect("over the limit", "v2/self", "v2/fs", 0, "/a/b");
    /* no memory controller listed, and no file at all */
    put("none/self", "3:cpu:/job\n");
    expect("v1 without memory", "none/self", "none", -1, NULL);
    expect("no /proc/self/cgroup", "missing", "none", -1, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    return failures ? 1 : 0;
}
