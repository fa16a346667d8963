/* TensorBoard event files (tb_events.h). */
#include "tb_events.h"

#include "wp_config.h"

#if WP_HAVE_TENSORBOARD

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "fsutil.h"
#include "tb_event.pb-c.h"

#define TB_PREFIX "events.out.tfevents."

struct wp_tb {
    FILE *f;
    char path[WP_PATH_MAX];
    char why[WP_PATH_MAX + 128]; /* the first failed write ("" while none) */
};

bool tb_supported(void) { return true; }

/* TFRecord's checksum: CRC32C (ISA-L's iSCSI CRC, which takes and returns it uninverted),
 * rotated right by 15 and offset, so that a CRC of data holding CRCs stays well spread. */
static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t c = ~crc32_iscsi((unsigned char *)p, (int)n, 0xffffffffu);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fail_write(wp_tb *tb, const char *what) {
    if (tb->why[0]) return;
    snprintf(tb->why, sizeof tb->why, "--tensorboard %s: %s failed: %s", tb->path, what, errno ? strerror(errno) : "I/O error");
}

/* One record: the length and its CRC, the packed event and its CRC; then flushed. */
static void write_event(wp_tb *tb, const WpTb__Event *ev) {
    if (tb->why[0]) return;
    size_t n = wp_tb__event__get_packed_size(ev);
    uint8_t head[12], foot[4], *data = malloc(n ? n : 1);
    errno = 0;
    if (!data || n > INT_MAX) {
        free(data);
        snprintf(tb->why, sizeof tb->why, "--tensorboard %s: an event of %zu bytes: out of memory", tb->path, n);
        return;
    }
    wp_tb__event__pack(ev, data);
    put_le(head, n, 8);
    put_le(head + 8, masked_crc(head, 8), 4);
    put_le(foot, masked_crc(data, n), 4);
    if (fwrite(head, 1, sizeof head, tb->f) != sizeof head || fwrite(data, 1, n, tb->f) != n ||
        fwrite(foot, 1, sizeof foot, tb->f) != sizeof foot)
        fail_write(tb, "write");
    else if (fflush(tb->f) != 0)
        fail_write(tb, "write");
    free(data);
}

/* The seconds in a name TB_PREFIX<seconds>.<...>, or -1 for another name. */
static long long name_seconds(const char *name) {
    if (strncmp(name, TB_PREFIX, strlen(TB_PREFIX)) != 0) return -1;
    const char *p = name + strlen(TB_PREFIX);
    char *end;
    errno = 0;
    long long s = strtoll(p, &end, 10);
    return end == p || errno || s < 0 ? -1 : s;
}

/* This run's seconds in the file name: now, or one past the newest name in dir when that is
 * not earlier (a resume within the same second: names compare by their seconds first). */
static wp_result name_time(const char *dir, long long *out, char *err, size_t errlen) {
    long long t = (long long)time(NULL);
    DIR *d = opendir(dir);
    if (!d) return wp_fail_errno(WP_FAILED, err, errlen, "--tensorboard %s: cannot list", dir);
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        long long s = name_seconds(e->d_name);
        if (s >= t) t = s + 1;
    }
    int read_errno = errno;
    closedir(d);
    if (read_errno) return errno = read_errno, wp_fail_errno(WP_FAILED, err, errlen, "--tensorboard %s: cannot list", dir);
    *out = t;
    return 0;
}

/* The host name as a file name's part: anything but letters, digits, '-' and '.' as '_'. */
static void host_part(char *host, size_t len) {
    if (gethostname(host, len) != 0) snprintf(host, len, "localhost");
    host[len - 1] = '\0';
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            *p = '_';
}

static double unix_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

wp_result tb_open(wp_tb **out, const char *dir, int64_t first_step, char *err, size_t errlen) {
    *out = NULL;
    WP_TRY(fs_mkdirs(dir, err, errlen));
    long long t = 0;
    WP_TRY(name_time(dir, &t, err, errlen));
    wp_tb *tb = calloc(1, sizeof *tb);
    if (!tb) return wp_fail(WP_FAILED, err, errlen, "--tensorboard %s: out of memory", dir);
    char host[256], name[512];
    host_part(host, sizeof host);
    /* "x": a name that exists (another process, same second and pid) is never appended to */
    for (int k = 0; !tb->f; k++) {
        snprintf(name, sizeof name, TB_PREFIX "%lld.%s.%ld.%d", t, host, (long)getpid(), k);
        if (fs_join(tb->path, sizeof tb->path, dir, name, err, errlen)) return free(tb), WP_BAD_INPUT;
        tb->f = fopen(tb->path, "wbx");
        if (!tb->f && (errno != EEXIST || k == 99)) {
            wp_result rc = wp_fail_errno(WP_FAILED, err, errlen, "--tensorboard %s: cannot create", tb->path);
            free(tb);
            return rc;
        }
    }
    double now = unix_now();
    WpTb__Event ev = WP_TB__EVENT__INIT;
    ev.has_wall_time = 1, ev.wall_time = now;
    ev.has_step = 1, ev.step = 0;
    ev.what_case = WP_TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    write_event(tb, &ev);
    WpTb__SessionLog start = WP_TB__SESSION_LOG__INIT;
    start.has_status = 1, start.status = WP_TB__SESSION_LOG__STATUS__START;
    ev.step = first_step;
    ev.what_case = WP_TB__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &start;
    write_event(tb, &ev);
    if (tb->why[0]) {
        wp_result rc = wp_fail(WP_FAILED, err, errlen, "%s", tb->why);
        tb_close(tb);
        return rc;
    }
    *out = tb;
    return 0;
}

void tb_scalars(wp_tb *tb, int64_t step, double wall_time, const tb_scalar *v, int n) {
    if (!tb || tb->why[0] || n <= 0) return;
    WpTb__Value *vals = calloc((size_t)n, sizeof *vals);
    WpTb__Value **ptrs = calloc((size_t)n, sizeof *ptrs);
    if (!vals || !ptrs) {
        free(vals), free(ptrs);
        snprintf(tb->why, sizeof tb->why, "--tensorboard %s: out of memory", tb->path);
        return;
    }
    for (int i = 0; i < n; i++) {
        wp_tb__value__init(&vals[i]);
        vals[i].tag = (char *)v[i].tag; /* protobuf-c's messages hold non-const strings; packing only reads */
        vals[i].value_case = WP_TB__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = (float)v[i].value;
        ptrs[i] = &vals[i];
    }
    WpTb__Summary sum = WP_TB__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    WpTb__Event ev = WP_TB__EVENT__INIT;
    ev.has_wall_time = 1, ev.wall_time = wall_time;
    ev.has_step = 1, ev.step = step;
    ev.what_case = WP_TB__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    write_event(tb, &ev);
    free(vals);
    free(ptrs);
}

wp_result tb_status(const wp_tb *tb, char *err, size_t errlen) {
    if (!tb || !tb->why[0]) return 0;
    return wp_fail(WP_FAILED, err, errlen, "%s", tb->why);
}

const char *tb_path(const wp_tb *tb) { return tb ? tb->path : ""; }

/* Every record was flushed and checked when written: a failing close loses nothing. */
void tb_close(wp_tb *tb) {
    if (!tb) return;
    if (tb->f) fclose(tb->f);
    free(tb);
}

#else /* built without protobuf-c or ISA-L: train refuses --tensorboard (exit 2) before this */

bool tb_supported(void) { return false; }

wp_result tb_open(wp_tb **out, const char *dir, int64_t first_step, char *err, size_t errlen) {
    (void)first_step;
    *out = NULL;
    return wp_fail(WP_BAD_INPUT, err, errlen, "--tensorboard %s: this build has no TensorBoard writer (built without protobuf-c and ISA-L)", dir);
}

void tb_scalars(wp_tb *tb, int64_t step, double wall_time, const tb_scalar *v, int n) {
    (void)tb, (void)step, (void)wall_time, (void)v, (void)n;
}

wp_result tb_status(const wp_tb *tb, char *err, size_t errlen) {
    (void)tb, (void)err, (void)errlen;
    return 0;
}

const char *tb_path(const wp_tb *tb) {
    (void)tb;
    return "";
}

void tb_close(wp_tb *tb) { (void)tb; }

#endif
