/* weipipe trace-merge OUT.json IN.json...: the --trace files of a job's processes (rank 0's
 * file and tr.rank-R.json, perhaps copied from several hosts) as one Chrome/Perfetto trace, a
 * process per rank. Train already stamps every rank's events on the job's common clock
 * (ring/clock_sync.h), so merging is a union of the events; it checks that no rank appears in
 * two files and states the largest clock residual. --local-clocks undoes the correction (each
 * rank back on its own clock), to see what the correction did.
 *
 * Why a separate command rather than rank 0 writing the merged trace: each rank writes its
 * events where it runs, at the end, without shipping megabytes over the control channel; the
 * files of a failed or killed rank are kept; and the merge runs anywhere the files are. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "fsutil.h"
#include "log.h"

#define MERGE_MAX_RANKS 65536

typedef struct {
    int file;        /* input that holds the rank, -1 none */
    bool have_clock; /* a weipipe_clock metadata event */
    double offset_s, residual_s;
} rank_info;

/* The events of one input; 2 naming the file when it is not a trace. */
static int load(const char *path, json_t **root, json_t **events) {
    char err[512];
    /* a FIFO or a device as input would block or never end: regular files only */
    int rc = fs_load_json(path, (size_t)1 << 34, 0, root, err, sizeof err);
    if (rc) {
        wp_error("trace-merge: %s", err);
        return rc;
    }
    *events = json_object_get(*root, "traceEvents");
    if (!json_is_array(*events)) {
        wp_error("trace-merge: %s: no traceEvents array (not a --trace file)", path);
        return 2;
    }
    return 0;
}

/* Which ranks each file holds, and their clock estimates; 2 when a rank is in two files. */
static int scan(const char *const *paths, json_t **events, int n, rank_info *ranks) {
    for (int f = 0; f < n; f++) {
        size_t i;
        json_t *ev;
        json_array_foreach(events[f], i, ev) {
            json_t *pid = json_object_get(ev, "pid");
            if (!json_is_integer(pid) || json_integer_value(pid) < 0 || json_integer_value(pid) >= MERGE_MAX_RANKS) {
                wp_error("trace-merge: %s: event %zu has no pid 0..%d", paths[f], i, MERGE_MAX_RANKS - 1);
                return 2;
            }
            rank_info *r = &ranks[json_integer_value(pid)];
            if (r->file >= 0 && r->file != f) {
                wp_error("trace-merge: rank %d is in both %s and %s (two runs' files?)", (int)json_integer_value(pid),
                         paths[r->file], paths[f]);
                return 2;
            }
            r->file = f;
            const char *name = json_string_value(json_object_get(ev, "name"));
            const char *ph = json_string_value(json_object_get(ev, "ph"));
            if (ph && name && strcmp(ph, "M") == 0 && strcmp(name, "weipipe_clock") == 0) {
                json_t *args = json_object_get(ev, "args");
                json_t *off = json_object_get(args, "offset_s"), *res = json_object_get(args, "residual_s");
                if (!json_is_number(off) || !json_is_number(res)) {
                    wp_error("trace-merge: %s: rank %d's weipipe_clock lacks offset_s or residual_s", paths[f],
                             (int)json_integer_value(pid));
                    return 2;
                }
                r->have_clock = true;
                r->offset_s = json_number_value(off);
                r->residual_s = json_number_value(res);
            }
        }
    }
    return 0;
}

/* Every event, one per line; --local-clocks moves each rank's spans back by its offset. */
static int write_merged(FILE *out, json_t **events, int n, const rank_info *ranks, bool local, double max_res) {
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"%s\",\"max_residual_s\":%.9f},\"traceEvents\":[\n",
            local ? "each rank's own" : "common (rank 0's)", max_res);
    bool first = true;
    for (int f = 0; f < n; f++) {
        size_t i;
        json_t *ev;
        json_array_foreach(events[f], i, ev) {
            const rank_info *r = &ranks[json_integer_value(json_object_get(ev, "pid"))];
            json_t *ts = json_object_get(ev, "ts");
            if (local && r->have_clock && json_is_number(ts) &&
                json_object_set_new(ev, "ts", json_real(json_number_value(ts) - r->offset_s * 1e6)) != 0)
                return 1;
            if (!first) fputs(",\n", out);
            first = false;
            if (json_dumpf(ev, out, JSON_COMPACT | JSON_REAL_PRECISION(15)) != 0) return 1;
        }
    }
    fputs("\n]}\n", out);
    return 0;
}

int cmd_trace_merge(const wp_opts *o) {
    if (o->nargs < 2) {
        wp_error("trace-merge: give OUT.json and at least one IN.json (a --trace file of train)");
        return 2;
    }
    const char *out_path = o->args[0];
    const int n = o->nargs - 1;
    const char *const *paths = o->args + 1;
    for (int f = 0; f < n; f++)
        if (strcmp(paths[f], out_path) == 0) {
            wp_error("trace-merge: %s is both the output and an input", out_path);
            return 2;
        }
    json_t *roots[WP_MAX_ARGS] = {0}, *events[WP_MAX_ARGS] = {0};
    rank_info *ranks = malloc(sizeof *ranks * MERGE_MAX_RANKS);
    int rc = ranks ? 0 : 1;
    if (!ranks) wp_error("trace-merge: out of memory");
    for (int r = 0; ranks && r < MERGE_MAX_RANKS; r++) ranks[r] = (rank_info){.file = -1};
    for (int f = 0; !rc && f < n; f++) rc = load(paths[f], &roots[f], &events[f]);
    if (!rc) rc = scan(paths, events, n, ranks);
    int nranks = 0, unclocked = 0, worst = -1;
    double max_res = 0;
    for (int r = 0; !rc && r < MERGE_MAX_RANKS; r++) {
        if (ranks[r].file < 0) continue;
        nranks++;
        if (!ranks[r].have_clock) unclocked++;
        if (ranks[r].have_clock && ranks[r].residual_s >= max_res) max_res = ranks[r].residual_s, worst = r;
    }
    if (!rc) {
        /* written beside OUT and renamed: a failed merge leaves no half file */
        char tmp[4200], why[512] = "";
        int fd = -1;
        /* a new name no one else holds (fs_create_beside): never a user's file truncated */
        FILE *out = fs_create_beside(out_path, ".tmp", false, tmp, sizeof tmp, &fd, why, sizeof why) == 0 ? fdopen(fd, "w") : NULL;
        if (!out) {
            if (fd >= 0) {
                wp_error("trace-merge: cannot open %s: %s", tmp, strerror(errno));
                close(fd);
                unlink(tmp);
            } else {
                wp_error("trace-merge: %s", why);
            }
            rc = 2;
        } else {
            int wrc = write_merged(out, events, n, ranks, o->local_clocks, max_res);
            int bad = ferror(out), closed = fclose(out);
            if (wrc || bad || closed != 0 || rename(tmp, out_path) != 0) {
                wp_error("trace-merge: writing %s failed: %s", out_path, strerror(errno));
                unlink(tmp);
                rc = 1;
            }
        }
    }
    if (!rc && !o->quiet) {
        fprintf(stderr, "trace-merge: %d rank%s from %d file%s into %s, %s clock", nranks, nranks == 1 ? "" : "s", n,
                n == 1 ? "" : "s", out_path, o->local_clocks ? "each rank's own" : "the job's common");
        if (worst >= 0) fprintf(stderr, "; residual at most %.1f us (rank %d)", max_res * 1e6, worst);
        if (unclocked) fprintf(stderr, "; %d rank%s without a clock estimate (an older or simulated trace)", unclocked,
                               unclocked == 1 ? "" : "s");
        fputc('\n', stderr);
    }
    for (int f = 0; f < n; f++) json_decref(roots[f]);
    free(ranks);
    return rc;
}
