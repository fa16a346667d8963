/* llm.c token shards (versions 1 and 7): validating reader and crash-safe writer. */
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

const char *shard_token_type(int version) { return version == WP_SHARD_VERSION ? "uint16" : "uint32"; }

int shard_version_for_vocab(int64_t vocab) { return vocab <= WP_SHARD_U16_VOCAB ? WP_SHARD_VERSION : WP_SHARD_VERSION_U32; }

static wp_result validate_header(wp_shard *s, char *err, size_t errlen) {
    const fs_map *m = &s->map;
    if (m->size < WP_SHARD_HEADER_BYTES)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: truncated: %zu bytes, shorter than the %d-byte header", s->path, m->size,
                       WP_SHARD_HEADER_BYTES);
    int32_t magic = header_int(m->data, 0), version = header_int(m->data, 1), count = header_int(m->data, 2);
    int want_version;
    if (magic == WP_SHARD_MAGIC) want_version = WP_SHARD_VERSION;
    else if (magic == WP_SHARD_MAGIC_U32) want_version = WP_SHARD_VERSION_U32;
    else
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header magic is %d, expected %d (version %d, uint16 tokens) or %d (version %d, uint32 tokens): "
                       "not an llm.c token shard",
                       s->path, magic, WP_SHARD_MAGIC, WP_SHARD_VERSION, WP_SHARD_MAGIC_U32, WP_SHARD_VERSION_U32);
    if (version != want_version)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header version is %d, expected %d with magic %d (%s tokens)", s->path, version,
                       want_version, magic, shard_token_type(want_version));
    if (count < 0) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header token count %d is negative", s->path, count);
    s->version = version;
    s->token_bytes = version == WP_SHARD_VERSION ? 2 : 4;
    uint64_t want = (uint64_t)WP_SHARD_HEADER_BYTES + (uint64_t)s->token_bytes * (uint64_t)count;
    if (want > m->size)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header token count %d needs %llu bytes (%s tokens), but the file has %zu (truncated?)",
                       s->path, count, (unsigned long long)want, shard_token_type(version), m->size);
    if (want < m->size)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: header token count %d needs %llu bytes (%s tokens), but the file has %zu (trailing data)",
                       s->path, count, (unsigned long long)want, shard_token_type(version), m->size);
    return 0;
}

static wp_result token_refused(const wp_shard *s, int64_t i, uint32_t token, int vocab, char *err, size_t errlen) {
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: token %u at position %lld is not below the vocabulary size %d", s->path,
                   (unsigned)token, (long long)i, vocab);
}

static wp_result validate_tokens(const wp_shard *s, int vocab, char *err, size_t errlen) {
    const uint32_t v = (uint32_t)vocab;
    if (s->token_bytes == 2) {
        const uint16_t *t = s->tokens;
        for (int64_t i = 0; i < s->n_tokens; i++)
            if (t[i] >= v) return token_refused(s, i, t[i], vocab, err, errlen);
    } else {
        const uint32_t *t = s->tokens;
        for (int64_t i = 0; i < s->n_tokens; i++)
            if (t[i] >= v) return token_refused(s, i, t[i], vocab, err, errlen);
    }
    return 0;
}

wp_result shard_open(wp_shard *s, const char *path, int vocab, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", path);
    if (vocab < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: vocabulary size %d must be at least 1", path, vocab);
    wp_result rc = fs_map_file(path, &s->map, err, errlen);
    if (rc == 0) rc = validate_header(s, err, errlen);
    if (rc == 0) {
        s->n_tokens = header_int(s->map.data, 2);
        s->tokens = s->map.data + WP_SHARD_HEADER_BYTES;
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

wp_result shard_writer_open(wp_shard_writer *w, const char *path, int version, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (version != WP_SHARD_VERSION && version != WP_SHARD_VERSION_U32)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: shard version %d is neither %d (uint16 tokens) nor %d (uint32 tokens)", path, version,
                       WP_SHARD_VERSION, WP_SHARD_VERSION_U32);
    w->version = version;
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
    WP_TRY(fs_create_beside(path, ".tmp", false, w->tmp, sizeof w->tmp, &w->fd, err, errlen));
    /* placeholder header; the count is known only at the end */
    unsigned char zero[WP_SHARD_HEADER_BYTES] = {0};
    wp_result rc = fs_write_all(w->fd, zero, sizeof zero, w->tmp, err, errlen);
    if (rc) shard_writer_abort(w);
    return rc;
}

wp_result shard_writer_append(wp_shard_writer *w, const uint32_t *tokens, size_t n, char *err, size_t errlen) {
    if ((uint64_t)w->n_tokens + n > (uint64_t)WP_SHARD_MAX_TOKENS)
        return wp_fail(WP_FAILED, err, errlen, "%s: more than %d tokens do not fit one shard", w->path, WP_SHARD_MAX_TOKENS);
    if (w->version == WP_SHARD_VERSION_U32) {
        wp_result rc = fs_write_all(w->fd, tokens, n * sizeof *tokens, w->tmp, err, errlen);
        if (rc == 0) w->n_tokens += (int64_t)n;
        return rc;
    }
    enum { BLOCK = 4096 };
    uint16_t narrow[BLOCK];
    for (size_t done = 0; done < n;) {
        size_t m = n - done < BLOCK ? n - done : BLOCK;
        for (size_t i = 0; i < m; i++) {
            uint32_t t = tokens[done + i];
            if (t >= WP_SHARD_U16_VOCAB)
                return wp_fail(WP_BAD_INPUT, err, errlen, "%s: token %u at position %lld does not fit version %d's uint16 tokens", w->path,
                               (unsigned)t, (long long)(w->n_tokens + (int64_t)i), WP_SHARD_VERSION);
            narrow[i] = (uint16_t)t;
        }
        WP_TRY(fs_write_all(w->fd, narrow, m * sizeof *narrow, w->tmp, err, errlen));
        w->n_tokens += (int64_t)m;
        done += m;
    }
    return 0;
}

static void put_int(unsigned char *h, int i, int32_t v) {
    uint32_t u = (uint32_t)v;
    h[4 * i] = (unsigned char)u;
    h[4 * i + 1] = (unsigned char)(u >> 8);
    h[4 * i + 2] = (unsigned char)(u >> 16);
    h[4 * i + 3] = (unsigned char)(u >> 24);
}

wp_result shard_writer_close(wp_shard_writer *w, char *err, size_t errlen) {
    unsigned char header[WP_SHARD_HEADER_BYTES] = {0};
    put_int(header, 0, w->version == WP_SHARD_VERSION ? WP_SHARD_MAGIC : WP_SHARD_MAGIC_U32);
    put_int(header, 1, w->version);
    put_int(header, 2, (int32_t)w->n_tokens);
    return fs_finish_file(&w->fd, w->tmp, header, sizeof header, err, errlen);
}

wp_result shard_writer_commit(wp_shard_writer *w, char *err, size_t errlen) {
    wp_result rc = fs_rename_durable(w->tmp, w->path, err, errlen);
    if (rc == 0) w->tmp[0] = '\0';
    return rc;
}

void shard_writer_abort(wp_shard_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp[0]) unlink(w->tmp);
    w->tmp[0] = '\0';
}

wp_result shard_write(const char *path, int version, const uint32_t *tokens, int64_t n, char *err, size_t errlen) {
    wp_shard_writer w;
    WP_TRY(shard_writer_open(&w, path, version, err, errlen));
    wp_result rc = WP_OK;
    if (n < 0) rc = wp_fail(WP_FAILED, err, errlen, "%s: negative token count %lld", path, (long long)n);
    if (rc == 0) rc = shard_writer_append(&w, tokens, (size_t)n, err, errlen);
    if (rc == 0) rc = shard_writer_close(&w, err, errlen);
    if (rc == 0) rc = shard_writer_commit(&w, err, errlen);
    if (rc) shard_writer_abort(&w);
    return rc;
}
