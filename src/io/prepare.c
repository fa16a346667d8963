/* weipipe prepare: byte-level shards from text files, all-or-nothing. */
#include "prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "shard.h"

/* A numbered run of shards (train_000.bin, train_001.bin, ...) filled in order. */
typedef struct {
    const char *dir, *prefix;
    int version; /* WP_SHARD_VERSION (uint16 tokens) or WP_SHARD_VERSION_U32 */
    int64_t shard_tokens;
    int n, cap;
    wp_shard_writer *w; /* w[n-1] is open, earlier ones are closed */
    int64_t tokens;
} shard_run;

static wp_result run_next(shard_run *r, char *err, size_t errlen) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 4;
        wp_shard_writer *grown = realloc(r->w, (size_t)cap * sizeof *grown);
        if (!grown) return wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
        r->w = grown;
        r->cap = cap;
    }
    if (r->n > 0) {
        WP_TRY(shard_writer_close(&r->w[r->n - 1], err, errlen));
    }
    char name[64], path[WP_PATH_MAX];
    snprintf(name, sizeof name, "%s_%03d.bin", r->prefix, r->n);
    wp_result rc = fs_join(path, sizeof path, r->dir, name, err, errlen);
    if (rc == 0) rc = shard_writer_open(&r->w[r->n], path, r->version, err, errlen);
    if (rc == 0) r->n++;
    return rc;
}

static wp_result run_append(shard_run *r, const uint32_t *tok, size_t n, char *err, size_t errlen) {
    while (n > 0) {
        if (r->n == 0 || r->w[r->n - 1].n_tokens == r->shard_tokens) {
            WP_TRY(run_next(r, err, errlen));
        }
        wp_shard_writer *w = &r->w[r->n - 1];
        size_t room = (size_t)(r->shard_tokens - w->n_tokens), part = n < room ? n : room;
        WP_TRY(shard_writer_append(w, tok, part, err, errlen));
        r->tokens += (int64_t)part;
        tok += part;
        n -= part;
    }
    return 0;
}

static void run_abort(shard_run *r) {
    for (int i = 0; i < r->n; i++) shard_writer_abort(&r->w[i]);
    free(r->w);
    r->w = NULL;
    r->n = 0;
}

static wp_result run_close(shard_run *r, char *err, size_t errlen) {
    return r->n > 0 ? shard_writer_close(&r->w[r->n - 1], err, errlen) : 0;
}

static wp_result run_commit(shard_run *r, char *err, size_t errlen) {
    for (int i = 0; i < r->n; i++) {
        WP_TRY(shard_writer_commit(&r->w[i], err, errlen));
    }
    return 0;
}

/* Shards numbered from r->n on are left over from an earlier run with more data. */
static wp_result run_remove_stale(const shard_run *r, char *err, size_t errlen) {
    for (int i = r->n;; i++) {
        char name[64], path[WP_PATH_MAX];
        snprintf(name, sizeof name, "%s_%03d.bin", r->prefix, i);
        WP_TRY(fs_join(path, sizeof path, r->dir, name, err, errlen));
        if (!fs_exists(path)) return 0;
        if (unlink(path) != 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove a stale shard", path);
    }
}

typedef struct {
    shard_run train, val;
    double val_fraction;
    const wp_tokenizer *tok; /* NULL: bytes */
    uint32_t boundary;       /* the token that opens every part */
    wp_prepare_progress progress;
    void *progress_ctx;
    uint64_t bytes_done, bytes_total;
    size_t piece_bytes;
} prep;

static void report(prep *p, uint64_t bytes) {
    p->bytes_done += bytes;
    if (p->progress) p->progress(p->progress_ctx, p->bytes_done, p->bytes_total, p->train.tokens + p->val.tokens);
}

/* The next piece of text[at, len): at most piece bytes, cut after a newline (inside
 * one huge line: before a UTF-8 continuation byte, never inside a character). */
static size_t piece_len(const char *text, size_t at, size_t len, size_t piece) {
    size_t n = len - at;
    if (n <= piece) return n;
    n = piece;
    const char *nl = memrchr(text + at, '\n', n);
    if (nl) return (size_t)(nl - (text + at)) + 1;
    while (n > 1 && ((unsigned char)text[at + n] & 0xC0) == 0x80) n--;
    return n;
}

enum { ENCODE_BATCH_MAX = 32 }; /* pieces encoded at once: bounds the id arrays held (~12 MB each) */

/* One part of a document through the tokenizer: the boundary token, then the text in pieces,
 * so that no piece (and no id array) outgrows p->piece_bytes. Encoding is most of
 * prepare's time, so a batch of pieces is encoded on all OpenMP threads (a wp_tokenizer may be
 * used from several threads) and appended in order: the shards do not depend on the thread
 * count. */
static wp_result encode_part(prep *p, shard_run *r, const char *path, const char *text, size_t len, char *err, size_t errlen) {
    if (len == 0) return 0;
    wp_result rc = run_append(r, &p->boundary, 1, err, errlen);
    int batch = omp_get_max_threads();
    batch = batch < 1 ? 1 : batch > ENCODE_BATCH_MAX ? ENCODE_BATCH_MAX : batch;
    for (size_t at = 0; rc == 0 && at < len;) {
        size_t start[ENCODE_BATCH_MAX], n[ENCODE_BATCH_MAX], cnt[ENCODE_BATCH_MAX] = {0};
        int32_t *ids[ENCODE_BATCH_MAX] = {0};
        int rcs[ENCODE_BATCH_MAX] = {0}, k = 0;
        char why[ENCODE_BATCH_MAX][256];
        for (; k < batch && at < len; k++) {
            start[k] = at;
            n[k] = piece_len(text, at, len, p->piece_bytes);
            at += n[k];
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(k) if (k > 1)
        for (int i = 0; i < k; i++) rcs[i] = tok_encode(p->tok, text + start[i], n[i], &ids[i], &cnt[i], why[i], sizeof why[i]);
        for (int i = 0; i < k; i++) {
            if (rc == 0 && rcs[i]) rc = wp_fail(rcs[i], err, errlen, "%s: %s", path, why[i]);
            /* ids are below the tokenizer's vocabulary, so non-negative: the same values as uint32 */
            if (rc == 0) rc = run_append(r, (const uint32_t *)ids[i], cnt[i], err, errlen);
            free(ids[i]);
            if (rc == 0) report(p, n[i]);
        }
    }
    return rc;
}

/* A document through the tokenizer: mapped whole, its head to train and its tail to val, the
 * split moved forward to a character boundary so that no character is cut in two. */
static wp_result add_document_tok(prep *p, const char *path, int fd, uint64_t size, char *err, size_t errlen) {
    if (size == 0) return 0;
    if (size > SIZE_MAX) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: too large to map", path);
    const char *text = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (text == MAP_FAILED) return wp_fail_errno(WP_FAILED, err, errlen, "%s: mmap failed", path);
    (void)madvise((void *)text, (size_t)size, MADV_SEQUENTIAL); /* a hint: reading works without it */
    size_t n_train = (size_t)(size - (uint64_t)llround(p->val_fraction * (double)size));
    while (n_train < size && ((unsigned char)text[n_train] & 0xC0) == 0x80) n_train++;
    wp_result rc = encode_part(p, &p->train, path, text, n_train, err, errlen);
    if (rc == 0) rc = encode_part(p, &p->val, path, text + n_train, (size_t)size - n_train, err, errlen);
    if (munmap((void *)text, (size_t)size) != 0 && rc == 0)
        rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: munmap failed", path);
    return rc;
}

/* One input: its head to train, its tail to val, each part opened by the boundary token 0. */
static wp_result add_document(prep *p, const char *path, int fd, uint64_t size, char *err, size_t errlen) {
    if (p->tok) return add_document_tok(p, path, fd, size, err, errlen);
    uint64_t n_val = (uint64_t)llround(p->val_fraction * (double)size), n_train = size - n_val;
    static const uint32_t boundary = 0;
    wp_result rc = WP_OK;
    if (n_train > 0) rc = run_append(&p->train, &boundary, 1, err, errlen);
    if (rc == 0 && n_val > 0) rc = run_append(&p->val, &boundary, 1, err, errlen);
    enum { BUF = 1 << 20 };
    unsigned char *bytes = malloc(BUF);
    uint32_t *tok = malloc(BUF * sizeof *tok);
    if (!bytes || !tok) rc = wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
    for (uint64_t done = 0; rc == 0 && done < size;) {
        ssize_t got = read(fd, bytes, BUF);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            rc = wp_fail(WP_FAILED, err, errlen, "%s: read failed: %s", path, got < 0 ? strerror(errno) : "file shrank");
            break;
        }
        size_t m = (size_t)got < size - done ? (size_t)got : (size_t)(size - done);
        for (size_t i = 0; i < m; i++) tok[i] = bytes[i];
        /* bytes [done, done+m) split at n_train */
        size_t to_train = done >= n_train ? 0 : (size_t)(n_train - done < m ? n_train - done : m);
        rc = run_append(&p->train, tok, to_train, err, errlen);
        if (rc == 0) rc = run_append(&p->val, tok + to_train, m - to_train, err, errlen);
        done += m;
        report(p, m);
    }
    free(bytes);
    free(tok);
    return rc;
}

/* Every input is opened before anything is written: a missing one costs nothing. */
static wp_result open_inputs(const char *const *inputs, int n, int *fds, uint64_t *sizes, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        WP_TRY(fs_open_regular(inputs[i], 0, &fds[i], &sizes[i], err, errlen));
    }
    return 0;
}

static wp_result check_args(int n_inputs, const char *out_dir, double val_fraction, int64_t vocab, const wp_tokenizer *tok,
                      int64_t shard_tokens, char *err, size_t errlen) {
    if (n_inputs < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "prepare: give at least one input text file");
    if (!out_dir || !out_dir[0]) return wp_fail(WP_BAD_INPUT, err, errlen, "--out: the output directory is required");
    if (!(val_fraction >= 0 && val_fraction < 1)) return wp_fail(WP_BAD_INPUT, err, errlen, "--val-fraction: %g must be in [0, 1)", val_fraction);
    if (tok && vocab < tok_vocab_size(tok))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--vocab-size: %lld is below the vocabulary of the tokenizer %s (%lld)", (long long)vocab,
                       tok_path(tok), (long long)tok_vocab_size(tok));
    if (tok && tok_bos(tok) < 0 && tok_eos(tok) < 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: the tokenizer has neither a BOS nor an EOS token to start documents with",
                       tok_path(tok));
    if (!tok && (vocab < WP_PREPARE_BYTE_VOCAB || vocab > INT32_MAX))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--vocab-size: %lld must be between %d (byte tokens) and %d", (long long)vocab,
                       WP_PREPARE_BYTE_VOCAB, INT32_MAX);
    if (vocab > INT32_MAX) return wp_fail(WP_BAD_INPUT, err, errlen, "--vocab-size: %lld is above %d", (long long)vocab, INT32_MAX);
    if (shard_tokens < 2 || shard_tokens > WP_SHARD_MAX_TOKENS)
        return wp_fail(WP_BAD_INPUT, err, errlen, "prepare: shard size %lld tokens out of range", (long long)shard_tokens);
    return 0;
}

/* tokenizer_config.json and generation_config.json from beside a tokenizer.json (a Hugging Face
 * directory's) copied byte for byte beside the shards' tokenizer, an earlier run's removed: they
 * hold the BOS/EOS this run encoded with and the chat template, which `train` carries from the
 * tokenizer's directory into checkpoints and exports. */
static wp_result place_side_files(const prep *p, char *err, size_t errlen) {
    const char *src = p->tok ? tok_path(p->tok) : NULL, *slash = src ? strrchr(src, '/') : NULL;
    bool hf_dir = src && strcmp(slash ? slash + 1 : src, TOK_FILE_HF) == 0;
    for (int i = 0; i < CKPT_SIDE_FILES; i++) {
        char from[WP_PATH_MAX], to[WP_PATH_MAX];
        WP_TRY(fs_join(to, sizeof to, p->train.dir, ckpt_side_files[i], err, errlen));
        if (snprintf(from, sizeof from, "%.*s%s", slash ? (int)(slash - src + 1) : 0, src ? src : "", ckpt_side_files[i]) >=
            (int)sizeof from)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", src);
        if (hf_dir && fs_exists(from)) {
            char *data = NULL;
            size_t size = 0;
            wp_result rc = fs_read_small(from, (size_t)1 << 26, &data, &size, err, errlen);
            if (rc == 0) rc = fs_write_file_atomic(to, data, size, err, errlen);
            free(data);
            WP_TRY(rc);
        } else if (fs_exists(to) && unlink(to) != 0) {
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove an earlier run's file", to);
        }
    }
    return 0;
}

/* DIR/tokenizer.model or DIR/tokenizer.json: this run's tokenizer copied in, the other name
 * (both, for bytes) removed, so the directory names the tokenizer of its shards. */
static wp_result place_tokenizer(const prep *p, char *err, size_t errlen) {
    const char *mine = p->tok ? tok_file_name(p->tok) : NULL;
    static const char *const names[] = {TOK_FILE_SPM, TOK_FILE_HF};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[WP_PATH_MAX];
        WP_TRY(fs_join(path, sizeof path, p->train.dir, names[i], err, errlen));
        if (mine && strcmp(mine, names[i]) == 0) {
            size_t size = 0;
            const char *data = tok_bytes(p->tok, &size); /* the bytes it encoded with (a GGUF's: its tokenizer.json) */
            WP_TRY(fs_write_file_atomic(path, data, size, err, errlen));
        } else if (fs_exists(path) && unlink(path) != 0) {
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove an earlier run's tokenizer", path);
        }
    }
    return place_side_files(p, err, errlen);
}

static wp_result write_all(prep *p, const char *const *inputs, int n, const int *fds, const uint64_t *sizes, char *err,
                     size_t errlen) {
    wp_result rc = fs_mkdirs(p->train.dir, err, errlen);
    for (int i = 0; rc == 0 && i < n; i++) rc = add_document(p, inputs[i], fds[i], sizes[i], err, errlen);
    if (rc == 0) rc = run_close(&p->train, err, errlen);
    if (rc == 0) rc = run_close(&p->val, err, errlen);
    if (rc == 0) rc = place_tokenizer(p, err, errlen);
    /* every shard is complete on disk before the first one takes its final name */
    if (rc == 0) rc = run_commit(&p->train, err, errlen);
    if (rc == 0) rc = run_commit(&p->val, err, errlen);
    if (rc == 0) rc = run_remove_stale(&p->train, err, errlen);
    if (rc == 0) rc = run_remove_stale(&p->val, err, errlen);
    return rc;
}

wp_result prepare_shards(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                   int64_t shard_tokens, wp_prepare_stats *stats, char *err, size_t errlen) {
    return prepare_shards_tok(inputs, n_inputs, out_dir, val_fraction, vocab, NULL, shard_tokens, 0, NULL, NULL, stats, err,
                              errlen);
}

wp_result prepare_shards_tok(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                       const wp_tokenizer *tok, int64_t shard_tokens, size_t piece_bytes, wp_prepare_progress progress,
                       void *progress_ctx, wp_prepare_stats *stats, char *err, size_t errlen) {
    memset(stats, 0, sizeof *stats);
    if (tok && strcmp(tok_kind(tok), "bytes") == 0) tok = NULL;
    WP_TRY(check_args(n_inputs, out_dir, val_fraction, vocab, tok, shard_tokens, err, errlen));
    const int version = shard_version_for_vocab(vocab);
    stats->version = version;
    int *fds = malloc((size_t)n_inputs * sizeof *fds);
    uint64_t *sizes = malloc((size_t)n_inputs * sizeof *sizes);
    wp_result rc = WP_OK;
    if (!fds || !sizes) rc = wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
    for (int i = 0; fds && i < n_inputs; i++) fds[i] = -1;
    if (rc == 0) rc = open_inputs(inputs, n_inputs, fds, sizes, err, errlen);
    prep p = {.train = {out_dir, "train", version, shard_tokens, 0, 0, NULL, 0},
              .val = {out_dir, "val", version, shard_tokens, 0, 0, NULL, 0},
              .val_fraction = val_fraction,
              .tok = tok,
              .boundary = tok ? (uint32_t)(tok_bos(tok) >= 0 ? tok_bos(tok) : tok_eos(tok)) : 0,
              .progress = progress,
              .progress_ctx = progress_ctx,
              .piece_bytes = piece_bytes ? piece_bytes : WP_PREPARE_PIECE_BYTES};
    for (int i = 0; rc == 0 && i < n_inputs; i++) p.bytes_total += sizes[i];
    if (rc == 0) rc = write_all(&p, inputs, n_inputs, fds, sizes, err, errlen);
    stats->train_tokens = p.train.tokens;
    stats->val_tokens = p.val.tokens;
    stats->train_shards = p.train.n;
    stats->val_shards = p.val.n;
    run_abort(&p.train); /* after a commit only frees; otherwise removes the temp files */
    run_abort(&p.val);
    for (int i = 0; fds && i < n_inputs; i++)
        if (fds[i] >= 0) close(fds[i]);
    free(fds);
    free(sizes);
    return rc;
}
