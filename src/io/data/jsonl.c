/* JSON Lines and JSON array files as a stream of records (jsonl.h). */
#include "jsonl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"

struct jsonl_reader {
    FILE *f;
    char path[WP_PATH_MAX];
    bool array;   /* a JSON array file: elements are the records */
    bool started; /* array: its '[' has been read */
    bool done;    /* array: its ']' has been read (or it broke: no resuming) */
    bool broken;
    int64_t line; /* the line the next byte is on (from 1) */
    uint64_t offset;
    char *buf; /* the current record's text */
    size_t len, cap;
};

bool jsonl_is_records(const char *path) {
    size_t n = strlen(path);
    return (n >= 6 && strcmp(path + n - 6, ".jsonl") == 0) || (n >= 5 && strcmp(path + n - 5, ".json") == 0);
}

bool jsonl_valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
        if (k < 0 || c > 0xF4 || n - i <= (size_t)k) return false; /* a stray continuation byte, or cut short */
        uint32_t cp = c & (0x3F >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + (size_t)j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + (size_t)j] & 0x3F);
        }
        static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += (size_t)k + 1;
    }
    return true;
}

wp_result jsonl_open(jsonl_reader **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    int fd;
    uint64_t size;
    WP_TRY(fs_open_regular(path, 0, &fd, &size, err, errlen));
    jsonl_reader *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return wp_fail(WP_FAILED, err, errlen, "%s: out of memory", path);
    }
    snprintf(r->path, sizeof r->path, "%s", path);
    r->line = 1;
    if (!(r->f = fdopen(fd, "rb"))) {
        close(fd);
        free(r);
        return wp_fail_errno(WP_FAILED, err, errlen, "%s: fdopen failed", path);
    }
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) { /* an array, or JSON Lines under another name */
        int c;
        while ((c = getc(r->f)) != EOF && strchr(" \t\r\n", c)) ;
        r->array = c == '[';
        if (c != EOF && ungetc(c, r->f) == EOF) {
            jsonl_close(r);
            return wp_fail(WP_FAILED, err, errlen, "%s: ungetc failed", path);
        }
        if (ferror(r->f) || fseek(r->f, 0, SEEK_SET) != 0) {
            jsonl_close(r);
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: read failed", path);
        }
    }
    *out = r;
    return 0;
}

static wp_result put(jsonl_reader *r, char c, char *err, size_t errlen) {
    if (r->len + 1 >= r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 4096;
        char *grown = realloc(r->buf, cap);
        if (!grown) return wp_fail(WP_FAILED, err, errlen, "%s:%lld: out of memory for a record", r->path, (long long)r->line);
        r->buf = grown;
        r->cap = cap;
    }
    r->buf[r->len++] = c;
    return 0;
}

static int next_byte(jsonl_reader *r) {
    int c = getc(r->f);
    if (c != EOF) r->offset++;
    return c;
}

/* The record's text in r->buf[0, len) as JSON. */
static wp_result parse(jsonl_reader *r, int64_t line, json_t **rec, char *err, size_t errlen) {
    if (!jsonl_valid_utf8((const unsigned char *)r->buf, r->len))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s:%lld: invalid UTF-8", r->path, (long long)line);
    json_error_t je;
    *rec = json_loadb(r->buf, r->len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!*rec) return wp_fail(WP_BAD_INPUT, err, errlen, "%s:%lld: not JSON: %s", r->path, (long long)line, je.text);
    return 0;
}

static wp_result next_line(jsonl_reader *r, json_t **rec, int64_t *line, char *err, size_t errlen) {
    for (;;) {
        r->len = 0;
        int c;
        bool blank = true;
        while ((c = next_byte(r)) != EOF && c != '\n') {
            WP_TRY(put(r, (char)c, err, errlen));
            if (!strchr(" \t\r", c)) blank = false;
        }
        if (ferror(r->f)) return wp_fail_errno(WP_FAILED, err, errlen, "%s:%lld: read failed", r->path, (long long)r->line);
        *line = r->line;
        if (c == '\n') r->line++;
        if (!blank) return parse(r, *line, rec, err, errlen);
        if (c == EOF) return 0;
    }
}

static wp_result broken(jsonl_reader *r, char *err, size_t errlen, const char *why) {
    r->broken = true;
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s:%lld: %s", r->path, (long long)r->line, why);
}

static int skip_blank(jsonl_reader *r) {
    int c;
    while ((c = next_byte(r)) != EOF && strchr(" \t\r\n", c))
        if (c == '\n') r->line++;
    return c;
}

/* One element of a JSON array: its bytes up to the ',' or ']' that ends it at depth 0. */
static wp_result next_element(jsonl_reader *r, json_t **rec, int64_t *line, char *err, size_t errlen) {
    int c;
    if (!r->started) {
        c = skip_blank(r);
        if (c != '[') return broken(r, err, errlen, "expected '[' opening a JSON array");
        r->started = true;
        c = skip_blank(r);
        if (c == ']') {
            r->done = true;
            c = skip_blank(r);
            if (c != EOF) return broken(r, err, errlen, "data after the array's closing ']'");
            return 0;
        }
    } else {
        c = skip_blank(r);
    }
    if (c == EOF) return broken(r, err, errlen, "the array ends without its closing ']'");
    *line = r->line;
    r->len = 0;
    int depth = 0;
    bool in_str = false, esc = false;
    for (; c != EOF; c = next_byte(r)) {
        if (c == '\n') r->line++;
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) break;
            depth--;
        } else if (c == ',' && depth == 0) {
            break;
        }
        WP_TRY(put(r, (char)c, err, errlen));
    }
    if (ferror(r->f)) return wp_fail_errno(WP_FAILED, err, errlen, "%s:%lld: read failed", r->path, (long long)r->line);
    if (c == EOF) return broken(r, err, errlen, "the array ends without its closing ']'");
    if (c == '}') return broken(r, err, errlen, "unbalanced '}'");
    if (c == ']') {
        r->done = true;
        if (skip_blank(r) != EOF) return broken(r, err, errlen, "data after the array's closing ']'");
    }
    size_t n = r->len;
    while (n > 0 && strchr(" \t\r\n", r->buf[n - 1])) n--;
    if (n == 0) return broken(r, err, errlen, "an empty array element");
    r->len = n;
    wp_result rc = parse(r, *line, rec, err, errlen);
    if (rc) r->broken = r->broken || r->done;
    return rc;
}

wp_result jsonl_next(jsonl_reader *r, json_t **rec, int64_t *line, char *err, size_t errlen) {
    *rec = NULL;
    *line = r->line;
    if (r->broken) return wp_fail(WP_BAD_INPUT, err, errlen, "%s:%lld: cannot read on after a broken array", r->path, (long long)r->line);
    if (!r->array) return next_line(r, rec, line, err, errlen);
    if (r->done) return 0;
    return next_element(r, rec, line, err, errlen);
}

bool jsonl_can_resume(const jsonl_reader *r) { return !r->broken; }
uint64_t jsonl_offset(const jsonl_reader *r) { return r->offset; }

void jsonl_close(jsonl_reader *r) {
    if (!r) return;
    if (r->f) (void)fclose(r->f); /* read-only: nothing to lose */
    free(r->buf);
    free(r);
}
