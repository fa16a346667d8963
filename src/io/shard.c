/* llm.c token shards: validating reader and crash-safe writer. */
#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* tokens are read and written as they lie in memory */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

static int32_t header_int(const unsigned char *h, int i) {
    uint32_t v = (uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 | (uint32_t)h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24;
    return (int32_t)v;
}

static int validate_header(const wp_shard *s, char *err, size_t errlen) {
    const fs_map *m = &s->map;
    if (m->size < WP_SHARD_HEADER_BYTES)
        return io_fail(err, errlen, 2, "%s: truncated: %zu bytes, shorter than the %d-byte header", s->path, m->size,
                       WP_SHARD_HEADER_BYTES);
    int32_t magic = header_int(m->data, 0), version = header_int(m->data, 1), count = header_int(m->data, 2);
    if (magic != WP_SHARD_MAGIC)
        return io_fail(err, errlen, 2, "%s: header magic is %d, expected %d (not an llm.c token shard)", s->path, magic,
                       WP_SHARD_MAGIC);
    if (version != WP_SHARD_VERSION)
        return io_fail(err, errlen, 2, "%s: header version is %d, expected %d (uint16 tokens)", s->path, version,
                       WP_SHARD_VERSION);
    if (count < 0) return io_fail(err, errlen, 2, "%s: header token count %d is negative", s->path, count);
    uint64_t want = (uint64_t)WP_SHARD_HEADER_BYTES + 2 * (uint64_t)count;
    if (want > m->size)
        return io_fail(err, errlen, 2, "%s: header token count %d needs %llu bytes, but the file has %zu (truncated?)",
                       s->path, count, (unsigned long long)want, m->size);
    if (want < m->size)
        return io_fail(err, errlen, 2, "%s: header token count %d needs %llu bytes, but the file has %zu (trailing data)",
                       s->path, count, (unsigned long long)want, m->size);
    return 0;
}

static int validate_tokens(const wp_shard *s, int vocab, char *err, size_t errlen) {
    for (int64_t i = 0; i < s->n_tokens; i++)
        if (s->tokens[i] >= vocab)
            return io_fail(err, errlen, 2, "%s: token %u at position %lld is not below the vocabulary size %d", s->path,
                           (unsigned)s->tokens[i], (long long)i, vocab);
    return 0;
}

int shard_open(wp_shard *s, const char *path, int vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path)
        return io_fail(err, errlen, 2, "%s: path too long", path);
    int rc = fs_map_file(path, &s->map, err, errlen);
    if (rc == 0) rc = validate_header(s, err, errlen);
    if (rc == 0) {
        s->n_tokens = header_int(s->map.data, 2);
        s->tokens = (const uint16_t *)(s->map.data + WP_SHARD_HEADER_BYTES);
        rc = validate_tokens(s, vocab, err, errlen);
    }
    if (rc) shard_close(s);
    return rc;
}

void shard_close(wp_shard *s) {
    fs_unmap(&s->map);
    s->tokens = NULL;
    s->n_tokens = 0;
}

int shard_writer_open(wp_shard_writer *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path ||
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path) >= (int)sizeof w->tmp)
        return io_fail(err, errlen, 1, "%s: path too long", path);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (w->fd < 0) return io_fail(err, errlen, 1, "%s: cannot create: %s", w->tmp, strerror(errno));
    /* placeholder header; the count is known only at the end */
    unsigned char zero[WP_SHARD_HEADER_BYTES] = {0};
    int rc = fs_write_all(w->fd, zero, sizeof zero, w->tmp, err, errlen);
    if (rc) shard_writer_abort(w);
    return rc;
}

int shard_writer_append(wp_shard_writer *w, const uint16_t *tokens, size_t n, char *err, size_t errlen) {
    if ((uint64_t)w->n_tokens + n > (uint64_t)WP_SHARD_MAX_TOKENS)
        return io_fail(err, errlen, 1, "%s: more than %d tokens do not fit one shard", w->path, WP_SHARD_MAX_TOKENS);
    int rc = fs_write_all(w->fd, tokens, n * sizeof *tokens, w->tmp, err, errlen);
    if (rc == 0) w->n_tokens += (int64_t)n;
    return rc;
}

static void put_int(unsigned char *h, int i, int32_t v) {
    uint32_t u = (uint32_t)v;
    h[4 * i] = (unsigned char)u;
    h[4 * i + 1] = (unsigned char)(u >> 8);
    h[4 * i + 2] = (unsigned char)(u >> 16);
    h[4 * i + 3] = (unsigned char)(u >> 24);
}

int shard_writer_close(wp_shard_writer *w, char *err, size_t errlen) {
    unsigned char header[WP_SHARD_HEADER_BYTES] = {0};
    put_int(header, 0, WP_SHARD_MAGIC);
    put_int(header, 1, WP_SHARD_VERSION);
    put_int(header, 2, (int32_t)w->n_tokens);
    ssize_t put = pwrite(w->fd, header, sizeof header, 0);
    if (put != (ssize_t)sizeof header)
        return io_fail(err, errlen, 1, "%s: writing the header failed: %s", w->tmp, put < 0 ? strerror(errno) : "short write");
    if (fsync(w->fd) != 0) return io_fail(err, errlen, 1, "%s: fsync failed: %s", w->tmp, strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) return io_fail(err, errlen, 1, "%s: close failed: %s", w->tmp, strerror(errno));
    return 0;
}

int shard_writer_commit(wp_shard_writer *w, char *err, size_t errlen) {
    int rc = fs_rename_durable(w->tmp, w->path, err, errlen);
    if (rc == 0) w->tmp[0] = '\0';
    return rc;
}

void shard_writer_abort(wp_shard_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp[0]) unlink(w->tmp);
    w->tmp[0] = '\0';
}

int shard_write(const char *path, const uint16_t *tokens, int64_t n, char *err, size_t errlen) {
    wp_shard_writer w;
    int rc = shard_writer_open(&w, path, err, errlen);
    if (rc) return rc;
    if (n < 0) rc = io_fail(err, errlen, 1, "%s: negative token count %lld", path, (long long)n);
    if (rc == 0) rc = shard_writer_append(&w, tokens, (size_t)n, err, errlen);
    if (rc == 0) rc = shard_writer_close(&w, err, errlen);
    if (rc == 0) rc = shard_writer_commit(&w, err, errlen);
    if (rc) shard_writer_abort(&w);
    return rc;
}
