/* Target mask files (mask.h). */
#include "mask.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

wp_result mask_path_of(const char *shard_path, char *out, size_t outlen, char *err, size_t errlen) {
    size_t n = strlen(shard_path);
    size_t stem = n >= 4 && strcmp(shard_path + n - 4, ".bin") == 0 ? n - 4 : n;
    if (snprintf(out, outlen, "%.*s%s", (int)stem, shard_path, WP_MASK_SUFFIX) >= (int)outlen)
        return wp_fail(WP_FAILED, err, errlen, "%s: path too long for its mask file", shard_path);
    return 0;
}

static int32_t get_int(const unsigned char *h, int i) {
    return (int32_t)((uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 | (uint32_t)h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24);
}

static void put_int(unsigned char *h, int i, uint32_t u) {
    for (int b = 0; b < 4; b++) h[4 * i + b] = (unsigned char)(u >> (8 * b));
}

static wp_result validate(wp_mask *m, int64_t n_tokens, char *err, size_t errlen) {
    const fs_map *f = &m->map;
    if (f->size < WP_MASK_HEADER_BYTES)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: truncated: %zu bytes, shorter than the %d-byte header", m->path, f->size,
                       WP_MASK_HEADER_BYTES);
    const unsigned char *h = f->data;
    if (get_int(h, 0) != WP_MASK_MAGIC)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header magic is %d, expected %d (a weipipe target mask)", m->path, get_int(h, 0),
                       WP_MASK_MAGIC);
    if (get_int(h, 1) != WP_MASK_VERSION)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header version is %d, expected %d", m->path, get_int(h, 1), WP_MASK_VERSION);
    int64_t count = get_int(h, 2), targets = get_int(h, 3);
    if (count != n_tokens)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header token count %lld, but its shard holds %lld tokens", m->path,
                       (long long)count, (long long)n_tokens);
    if ((uint64_t)f->size != (uint64_t)WP_MASK_HEADER_BYTES + (uint64_t)count)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header token count %lld needs %lld bytes, but the file has %zu", m->path,
                       (long long)count, (long long)count + WP_MASK_HEADER_BYTES, f->size);
    const uint8_t *b = f->data + WP_MASK_HEADER_BYTES;
    int64_t ones = 0;
    for (int64_t i = 0; i < count; i++) {
        if (b[i] > 1) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: byte %lld of the mask is %u, not 0 or 1", m->path, (long long)i, b[i]);
        ones += b[i];
    }
    if (ones != targets)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header target count %lld, but the mask holds %lld", m->path, (long long)targets,
                       (long long)ones);
    uint32_t crc = fs_crc32(0, b, (size_t)count);
    if (crc != (uint32_t)get_int(h, 4))
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: checksum mismatch (header CRC-32 %08x, the bytes' %08x)", m->path,
                       (unsigned)get_int(h, 4), (unsigned)crc);
    m->n_tokens = count;
    m->n_targets = targets;
    m->bits = b;
    return 0;
}

wp_result mask_open(wp_mask *m, const char *path, int64_t n_tokens, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (snprintf(m->path, sizeof m->path, "%s", path) >= (int)sizeof m->path) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", path);
    WP_TRY(fs_map_file(path, &m->map, err, errlen));
    wp_result rc = validate(m, n_tokens, err, errlen);
    if (rc) mask_close(m);
    return rc;
}

void mask_close(wp_mask *m) {
    fs_unmap(&m->map);
    m->bits = NULL;
}

wp_result mask_writer_open(wp_mask_writer *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path)
        return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
    /* a new name beside it, as the shard writer's: a user's PATH.tmp is never truncated */
    WP_TRY(fs_create_beside(path, ".tmp", false, w->tmp, sizeof w->tmp, &w->fd, err, errlen));
    unsigned char zero[WP_MASK_HEADER_BYTES] = {0}; /* placeholder: the counts are known at the end */
    wp_result rc = fs_write_all(w->fd, zero, sizeof zero, w->tmp, err, errlen);
    if (rc) mask_writer_abort(w);
    return rc;
}

wp_result mask_writer_append(wp_mask_writer *w, const uint8_t *bits, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) w->n_targets += bits[i] != 0;
    w->crc = fs_crc32(w->crc, bits, n);
    WP_TRY(fs_write_all(w->fd, bits, n, w->tmp, err, errlen));
    w->n_tokens += (int64_t)n;
    return 0;
}

wp_result mask_writer_close(wp_mask_writer *w, char *err, size_t errlen) {
    unsigned char header[WP_MASK_HEADER_BYTES] = {0};
    put_int(header, 0, WP_MASK_MAGIC);
    put_int(header, 1, WP_MASK_VERSION);
    put_int(header, 2, (uint32_t)w->n_tokens);
    put_int(header, 3, (uint32_t)w->n_targets);
    put_int(header, 4, w->crc);
    return fs_finish_file(&w->fd, w->tmp, header, sizeof header, err, errlen);
}

wp_result mask_writer_commit(wp_mask_writer *w, char *err, size_t errlen) {
    wp_result rc = fs_rename_durable(w->tmp, w->path, err, errlen);
    if (rc == 0) w->tmp[0] = '\0';
    return rc;
}

void mask_writer_abort(wp_mask_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp[0]) unlink(w->tmp);
    w->tmp[0] = '\0';
}
