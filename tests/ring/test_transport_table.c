/* The registry of transports (transport_table.h), as the recipe "A new transport"
 * (docs/transports.md) wants it: every row complete, reachable by --transport through the
 * command line's own parsing, and every row a transport defines (tp_row_<name> at the end of
 * ring/transport/<folder>/<folder>_job.c) listed in WP_TRANSPORTS, and nothing else listed.
 * Argument: the source root (to find the rows' definitions). */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "adapters.h"
#include "cli.h"
#include "job.h"
#include "transport_table.h"

static wp_opts opts;

/* `weipipe train --transport name` through cli_parse and the job adapter: the row it picks,
 * or NULL with rc and err. */
static const tp_row *pick_by_flag(const char *name, int *rc, char *err, size_t errlen) {
    char a0[] = "train", a1[] = "--transport", a2[64];
    snprintf(a2, sizeof a2, "%s", name);
    char *argv[] = {a0, a1, a2};
    err[0] = '\0';
    *rc = cli_parse(3, argv, &opts, err, errlen);
    if (*rc != 0) return NULL;
    wp_job_cfg cfg;
    memset(&cfg, 0xA5, sizeof cfg); /* poisoned: the adapter must set what it returns */
    *rc = job_cfg_from_opts(&opts, &cfg, err, errlen);
    return *rc == 0 ? cfg.transport : NULL;
}

/* Is `name` one |-separated entry of the --transport choices? */
static bool in_choices(const char *name) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", WP_TRANSPORT_CHOICES);
    char *save = NULL;
    for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
        if (strcmp(t, name) == 0) return true;
    return false;
}

static void check_row(int i, const tp_row *row) {
    char err[512];
    EXPECT(row->name && row->name[0], "row %d has no name", i);
    if (!row->name) return;
    EXPECT(tp_table_find(row->name) == row, "%s: tp_table_find gives another row", row->name);
    EXPECT(in_choices(row->name), "%s: not among --transport's choices {%s}", row->name, WP_TRANSPORT_CHOICES);
    for (int j = 0; j < i; j++) EXPECT(strcmp(tp_table_row(j)->name, row->name) != 0, "%s: listed twice", row->name);
    int rc;
    const tp_row *got = pick_by_flag(row->name, &rc, err, sizeof err);
    if (row->built) {
        EXPECT(rc == 0 && got == row, "--transport %s: rc %d, %s (%s)", row->name, rc, got == row ? "its row" : "not its row",
               err);
        if (row->meet == TP_MEET_RENDEZVOUS)
            EXPECT(row->open && row->close, "%s: ranks meet by rendezvous but the row has no open/close", row->name);
        else
            EXPECT(!row->open && !row->close, "%s: ranks are threads, started by the job runner: no open/close", row->name);
        EXPECT(!row->device_memory || row->open_device, "%s: moves device memory but has no open_device", row->name);
        EXPECT(row->device_memory || !row->open_device, "%s: open_device without device_memory", row->name);
    } else {
        EXPECT(row->how_to_build && row->how_to_build[0], "%s: not built and does not say how to build it", row->name);
        EXPECT(rc == 2 && !got && strstr(err, "not built") && row->how_to_build && strstr(err, row->how_to_build),
               "--transport %s (not built): rc %d, '%s'", row->name, rc, err);
        EXPECT(!row->open && !row->close && !row->check && !row->open_device, "%s: not built, yet has functions", row->name);
    }
    printf("%-8s %s, %s%s\n", row->name, row->meet == TP_MEET_THREADS ? "threads" : "rendezvous",
           row->built ? "built" : "not built", row->device_memory ? ", device memory" : "");
}

/* Every `const tp_row tp_row_X` defined in ring/transport/<folder>/<folder>_job.c names a row of
 * the registry, and each row is defined exactly once. */
static void check_definitions(const char *root, int rows) {
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/ring/transport/*/*_job.c", root);
    glob_t g;
    CHECK(glob(pattern, 0, NULL, &g) == 0, "no %s", pattern);
    int defined[64] = {0};
    for (size_t f = 0; f < g.gl_pathc; f++) {
        FILE *fp = fopen(g.gl_pathv[f], "r");
        CHECK(fp, "cannot read %s", g.gl_pathv[f]);
        char line[1024];
        int in_file = 0;
        while (fgets(line, sizeof line, fp)) {
            char name[64];
            if (sscanf(line, "const tp_row tp_row_%63[a-z0-9_] =", name) != 1) continue;
            in_file++;
            const tp_row *row = tp_table_find(name);
            EXPECT(row != NULL, "%s defines tp_row_%s, which WP_TRANSPORTS does not list", g.gl_pathv[f], name);
            for (int i = 0; row && i < rows && i < 64; i++)
                if (tp_table_row(i) == row) defined[i]++;
        }
        fclose(fp);
        EXPECT(in_file == 1, "%s defines %d rows, want 1", g.gl_pathv[f], in_file);
    }
    globfree(&g);
    for (int i = 0; i < rows && i < 64; i++)
        EXPECT(defined[i] == 1, "row %s is defined %d times under ring/transport/*/*_job.c", tp_table_row(i)->name,
               defined[i]);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s SOURCE_ROOT", argv[0]);
    int rows = 0;
    while (tp_table_row(rows)) check_row(rows, tp_table_row(rows)), rows++;
    EXPECT(rows >= 4, "%d rows, want local, tcp, ibverbs and nccl at least", rows);
    int bars = 0;
    for (const char *c = WP_TRANSPORT_CHOICES; *c; c++) bars += *c == '|';
    EXPECT(bars + 1 == rows, "--transport offers %d choices for %d rows", bars + 1, rows);
    char err[512];
    int rc;
    EXPECT(!pick_by_flag("carrier-pigeon", &rc, err, sizeof err) && rc == 2 && strstr(err, "carrier-pigeon"),
           "an unknown --transport: rc %d, '%s'", rc, err);
    check_definitions(argv[1], rows);
    return check_result("transport_table");
}
