/* Writes the check dump (see check_dump.h). */
#include "check_dump.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference reads "<f4" and "<i4": the bytes must be little-endian as they lie in memory. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the check dump is written from a little-endian host");

static const char *const dump_files[] = {"config.ini", "inputs.bin", "targets.bin", "tensors.tsv",
                                         "params.bin", "grads.bin",  "loss.txt"};
#define N_DUMP_FILES (sizeof dump_files / sizeof dump_files[0])

/* The helpers below return WP_FAILED (message in err); check_dump_prepare turns that into
 * WP_BAD_INPUT: it fails on the user's --out before any work. */
static bool tmp_name(const char *dir, char *tmp, size_t n) { return snprintf(tmp, n, "%s.tmp", dir) < (int)n; }

/* Removes DIR.tmp and the files a dump puts there; anything else in it makes rmdir fail. */
static wp_result clear_tmp(const char *tmp, char *err, size_t errlen) {
    char path[4096];
    for (size_t i = 0; i < N_DUMP_FILES; i++) {
        if (snprintf(path, sizeof path, "%s/%s", tmp, dump_files[i]) >= (int)sizeof path)
            return wp_fail(WP_FAILED, err, errlen, "--out: path '%s' is too long", tmp);
        if (unlink(path) != 0 && errno != ENOENT) return wp_fail(WP_FAILED, err, errlen, "--out: cannot remove %s: %s", path, strerror(errno));
    }
    if (rmdir(tmp) != 0 && errno != ENOENT) return wp_fail(WP_FAILED, err, errlen, "--out: cannot remove %s: %s", tmp, strerror(errno));
    return 0;
}

static bool dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)) != NULL) empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

static wp_result prepare(const char *dir, char *err, size_t errlen) {
    char tmp[4096];
    if (!tmp_name(dir, tmp, sizeof tmp)) return wp_fail(WP_FAILED, err, errlen, "--out: path '%s' is too long", dir);
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return wp_fail(WP_FAILED, err, errlen, "--out: '%s' exists and is not a directory", dir);
        if (!dir_is_empty(dir)) /* rename() replaces an empty directory, never a full one */
            return wp_fail(WP_FAILED, err, errlen, "--out: '%s' already exists and is not empty", dir);
    } else if (errno != ENOENT) {
        return wp_fail(WP_FAILED, err, errlen, "--out: '%s': %s", dir, strerror(errno));
    }
    return clear_tmp(tmp, err, errlen);
}

static FILE *open_in(const char *tmp, const char *name, char *path, size_t n, char *err, size_t errlen) {
    if (snprintf(path, n, "%s/%s", tmp, name) >= (int)n) {
        wp_fail(WP_FAILED, err, errlen, "--out: path '%s/%s' is too long", tmp, name);
        return NULL;
    }
    FILE *f = fopen(path, "wb");
    if (!f) wp_fail(WP_FAILED, err, errlen, "--out: cannot create %s: %s", path, strerror(errno));
    return f;
}

static wp_result close_checked(FILE *f, const char *path, wp_result rc, char *err, size_t errlen) {
    if (ferror(f) && rc == 0) rc = wp_fail(WP_FAILED, err, errlen, "--out: writing %s failed", path);
    if (fclose(f) != 0 && rc == 0) rc = wp_fail(WP_FAILED, err, errlen, "--out: closing %s: %s", path, strerror(errno));
    return rc;
}

static wp_result write_binary(const char *tmp, const char *name, const void *data, size_t bytes, char *err, size_t errlen) {
    char path[4096];
    FILE *f = open_in(tmp, name, path, sizeof path, err, errlen);
    if (!f) return WP_FAILED;
    wp_result rc = fwrite(data, 1, bytes, f) == bytes ? WP_OK : wp_fail(WP_FAILED, err, errlen, "--out: writing %s: %s", path, strerror(errno));
    return close_checked(f, path, rc, err, errlen);
}

static wp_result write_config(const char *tmp, const check_dump *d, char *err, size_t errlen) {
    char path[4096];
    FILE *f = open_in(tmp, "config.ini", path, sizeof path, err, errlen);
    if (!f) return WP_FAILED;
    cli_write_ini(f, d->opts, C_MODEL);
    /* 0 means "derive it" on the command line; the reference gets the values in force */
    fprintf(f, "ffn-hidden-size = %d\nnum-query-groups = %d\n", d->L->cfg.ffn, d->L->cfg.n_kv_heads);
    if (d->L->cfg.doc_mask) fprintf(f, "doc-boundary-id = %d\n", (int)d->L->cfg.doc_boundary);
    return close_checked(f, path, 0, err, errlen);
}

static wp_result write_tensors(const char *tmp, const check_dump *d, char *err, size_t errlen) {
    char path[4096];
    FILE *f = open_in(tmp, "tensors.tsv", path, sizeof path, err, errlen);
    if (!f) return WP_FAILED;
    for (int i = 0; i < d->L->n_params; i++) {
        const wp_param *p = &d->L->params[i];
        fprintf(f, "%s\t%d\t%d\t%zu\n", p->name, p->rows, p->cols, d->L->chunk_offset[p->chunk] + p->offset);
    }
    return close_checked(f, path, 0, err, errlen);
}

static wp_result write_loss(const char *tmp, const check_dump *d, char *err, size_t errlen) {
    char path[4096];
    FILE *f = open_in(tmp, "loss.txt", path, sizeof path, err, errlen);
    if (!f) return WP_FAILED;
    fprintf(f, "%.9g\n", d->loss);
    return close_checked(f, path, 0, err, errlen);
}

static wp_result write_all(const char *tmp, const check_dump *d, char *err, size_t errlen) {
    size_t n = d->L->total_numel;
    WP_TRY(write_config(tmp, d, err, errlen));
    WP_TRY(write_binary(tmp, "inputs.bin", d->inputs, d->tokens * sizeof(int32_t), err, errlen));
    WP_TRY(write_binary(tmp, "targets.bin", d->targets, d->tokens * sizeof(int32_t), err, errlen));
    WP_TRY(write_tensors(tmp, d, err, errlen));
    WP_TRY(write_binary(tmp, "params.bin", d->params, n * sizeof(float), err, errlen));
    WP_TRY(write_binary(tmp, "grads.bin", d->grads, n * sizeof(float), err, errlen));
    return write_loss(tmp, d, err, errlen);
}

static wp_result write_dump(const check_dump *d, char *err, size_t errlen) {
    char tmp[4096], ignored[256];
    if (!tmp_name(d->dir, tmp, sizeof tmp)) return wp_fail(WP_FAILED, err, errlen, "--out: path '%s' is too long", d->dir);
    if (mkdir(tmp, 0777) != 0) return wp_fail(WP_FAILED, err, errlen, "--out: cannot create %s: %s", tmp, strerror(errno));
    wp_result rc = write_all(tmp, d, err, errlen);
    if (rc == 0 && rename(tmp, d->dir) != 0) rc = wp_fail(WP_FAILED, err, errlen, "--out: cannot rename %s to %s: %s", tmp, d->dir, strerror(errno));
    if (rc != 0) clear_tmp(tmp, ignored, sizeof ignored); /* no partial dump; the first error is reported */
    return rc;
}

/* Preparing fails before any work, on the user's --out: 2. Writing fails at run time: 1. */
wp_result check_dump_prepare(const char *dir, char *err, size_t errlen) {
    return prepare(dir, err, errlen) ? WP_BAD_INPUT : WP_OK;
}
wp_result check_dump_write(const check_dump *d, char *err, size_t errlen) { return write_dump(d, err, errlen); }
