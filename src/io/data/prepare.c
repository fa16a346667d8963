/* weipipe prepare: byte-level shards from text files, all-or-nothing. */
#include "prepare.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat_tokens.h"
#include "checkpoint.h"
#include "jsonl.h"
#include "mask.h"
#include "records.h"
#include "shard.h"

/* A numbered run of shards (train_000.bin, train_001.bin, ...) filled in order. */
typedef struct {
    const char *dir, *prefix;
    int version; /* WP_SHARD_VERSION (uint16 tokens) or WP_SHARD_VERSION_U32 */
    int64_t shard_tokens;
    int n, cap;
    wp_shard_writer *w; /* w[n-1] is open, earlier ones are closed */
    bool masked;        /* a target mask file beside each shard (mask.h) */
    wp_mask_writer *mw; /* [cap] when masked */
    int64_t tokens, targets;
} shard_run;

static wp_result shard_name(const shard_run *r, int i, const char *ext, char *path, size_t len, char *err, size_t errlen) {
    char name[64];
    snprintf(name, sizeof name, "%s_%03d%s", r->prefix, i, ext);
    return fs_join(path, len, r->dir, name, err, errlen);
}

static wp_result run_next(shard_run *r, char *err, size_t errlen) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 4;
        wp_shard_writer *grown = realloc(r->w, (size_t)cap * sizeof *grown);
        if (!grown) return wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
        r->w = grown;
        wp_mask_writer *mgrown = r->masked ? realloc(r->mw, (size_t)cap * sizeof *mgrown) : NULL;
        if (r->masked && !mgrown) return wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
        r->mw = mgrown;
        r->cap = cap;
    }
    if (r->n > 0) {
        WP_TRY(shard_writer_close(&r->w[r->n - 1], err, errlen));
        if (r->masked) WP_TRY(mask_writer_close(&r->mw[r->n - 1], err, errlen));
    }
    char path[WP_PATH_MAX], mpath[WP_PATH_MAX];
    wp_result rc = shard_name(r, r->n, ".bin", path, sizeof path, err, errlen);
    if (rc == 0 && r->masked) rc = shard_name(r, r->n, WP_MASK_SUFFIX, mpath, sizeof mpath, err, errlen);
    if (rc == 0) rc = shard_writer_open(&r->w[r->n], path, r->version, err, errlen);
    if (rc == 0 && r->masked) {
        rc = mask_writer_open(&r->mw[r->n], mpath, err, errlen);
        if (rc) shard_writer_abort(&r->w[r->n]);
    }
    if (rc == 0) r->n++;
    return rc;
}

/* mask: one byte per token (NULL: all targets), written only when the run is masked */
static wp_result run_append_masked(shard_run *r, const uint32_t *tok, const uint8_t *mask, size_t n, char *err, size_t errlen) {
    enum { ONES = 4096 };
    uint8_t ones[ONES];
    if (r->masked && !mask) memset(ones, 1, sizeof ones);
    while (n > 0) {
        if (r->n == 0 || r->w[r->n - 1].n_tokens == r->shard_tokens) {
            WP_TRY(run_next(r, err, errlen));
        }
        wp_shard_writer *w = &r->w[r->n - 1];
        size_t room = (size_t)(r->shard_tokens - w->n_tokens), part = n < room ? n : room;
        if (r->masked && !mask && part > ONES) part = ONES;
        WP_TRY(shard_writer_append(w, tok, part, err, errlen));
        if (r->masked) WP_TRY(mask_writer_append(&r->mw[r->n - 1], mask ? mask : ones, part, err, errlen));
        for (size_t i = 0; i < part; i++) r->targets += mask ? mask[i] : 1;
        r->tokens += (int64_t)part;
        tok += part;
        if (mask) mask += part;
        n -= part;
    }
    return 0;
}

static wp_result run_append(shard_run *r, const uint32_t *tok, size_t n, char *err, size_t errlen) {
    return run_append_masked(r, tok, NULL, n, err, errlen);
}

static void run_abort(shard_run *r) {
    for (int i = 0; i < r->n; i++) {
        shard_writer_abort(&r->w[i]);
        if (r->masked) mask_writer_abort(&r->mw[i]);
    }
    free(r->w);
    free(r->mw);
    r->w = NULL;
    r->mw = NULL;
    r->n = 0;
}

static wp_result run_close(shard_run *r, char *err, size_t errlen) {
    if (r->n == 0) return 0;
    WP_TRY(shard_writer_close(&r->w[r->n - 1], err, errlen));
    return r->masked ? mask_writer_close(&r->mw[r->n - 1], err, errlen) : 0;
}

static wp_result run_commit(shard_run *r, char *err, size_t errlen) {
    for (int i = 0; i < r->n; i++) {
        /* the mask first: a shard under its final name never lacks its mask */
        if (r->masked) WP_TRY(mask_writer_commit(&r->mw[i], err, errlen));
        WP_TRY(shard_writer_commit(&r->w[i], err, errlen));
    }
    return 0;
}

/* Files named from `from` on are left over from an earlier run with more data. */
static wp_result remove_numbered(const shard_run *r, int from, const char *ext, char *err, size_t errlen) {
    for (int i = from;; i++) {
        char path[WP_PATH_MAX];
        WP_TRY(shard_name(r, i, ext, path, sizeof path, err, errlen));
        if (!fs_exists(path)) return 0;
        if (unlink(path) != 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove a stale file", path);
    }
}

/* Shards from r->n on, and masks from there (all of them for a run without masks). */
static wp_result run_remove_stale(const shard_run *r, char *err, size_t errlen) {
    WP_TRY(remove_numbered(r, r->n, ".bin", err, errlen));
    return remove_numbered(r, r->masked ? r->n : 0, WP_MASK_SUFFIX, err, errlen);
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
    const wp_prepare_records *rec; /* NULL: every input is plain text */
    int64_t records;               /* records taken so far (the split counts them) */
    wp_prepare_stats *stats;
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

/* Record k goes to validation when it carries the running share val_fraction * (k+1) past a
 * whole number: an even spread, a share val_fraction of the records. */
static shard_run *record_run(prep *p) {
    int64_t k = p->records++;
    bool val = floor(p->val_fraction * (double)(k + 1)) > floor(p->val_fraction * (double)k);
    return val ? &p->val : &p->train;
}

/* A text record: one document (the boundary token, then its text). */
static wp_result add_text_record(prep *p, const char *path, const char *text, size_t len, char *err, size_t errlen) {
    shard_run *r = record_run(p);
    if (p->tok) return encode_part(p, r, path, text, len, err, errlen);
    static const uint32_t boundary = 0;
    wp_result rc = run_append(r, &boundary, 1, err, errlen);
    enum { BLOCK = 4096 };
    uint32_t tok[BLOCK];
    for (size_t at = 0; rc == 0 && at < len; at += BLOCK) {
        size_t m = len - at < BLOCK ? len - at : BLOCK;
        for (size_t i = 0; i < m; i++) tok[i] = (unsigned char)text[at + i];
        rc = run_append(r, tok, m, err, errlen);
    }
    return rc;
}

typedef struct {
    chat_msg *msgs;
    int cap;
    chat_text text;
} chat_scratch;

/* A conversation: its ids exactly as the template renders them (no boundary token of ours),
 * with their targets. A refusal (the record, the template) is 2 in why. */
static wp_result add_chat_record(prep *p, chat_scratch *cs, json_t *rec, char *why, size_t whylen) {
    int n;
    WP_TRY(record_messages(rec, &cs->msgs, &n, &cs->cap, why, whylen));
    WP_TRY(chat_render(p->rec->tmpl, cs->msgs, n, false, &cs->text, why, whylen));
    int32_t *ids;
    uint8_t *mask;
    size_t count;
    WP_TRY(chat_tokens(p->tok, &cs->text, &ids, &mask, &count, why, whylen));
    shard_run *r = record_run(p);
    /* ids are below the tokenizer's vocabulary, so non-negative: the same values as uint32 */
    wp_result rc = run_append_masked(r, (const uint32_t *)ids, p->rec->train_on_all ? NULL : mask, count, why, whylen);
    free(ids);
    free(mask);
    return rc;
}

/* A JSON Lines or JSON array file: each record a document (its text field) or, with chat, a
 * conversation. A bad record is 2 naming the file and line, or skipped and counted. */
static wp_result add_records(prep *p, const char *path, char *err, size_t errlen) {
    jsonl_reader *jr;
    WP_TRY(jsonl_open(&jr, path, err, errlen));
    chat_scratch cs = {0};
    uint64_t seen = 0;
    wp_result rc = 0;
    for (;;) {
        json_t *rec = NULL;
        int64_t line = 0;
        char why[WP_PATH_MAX + 512];
        rc = jsonl_next(jr, &rec, &line, why, sizeof why);
        if (rc == 0 && !rec) break;
        if (rc == 0) {
            if (p->rec->chat) {
                rc = add_chat_record(p, &cs, rec, why, sizeof why);
            } else {
                const char *text;
                size_t len;
                rc = record_text(rec, p->rec->text_field, &text, &len, why, sizeof why);
                if (rc == 0) rc = add_text_record(p, path, text, len, why, sizeof why);
            }
        }
        json_decref(rec);
        uint64_t at = jsonl_offset(jr);
        report(p, at - seen);
        seen = at;
        /* the record's own failures do not name where it is: the file and line go first */
        bool where = rc == WP_BAD_INPUT && strncmp(why, path, strlen(path)) != 0;
        if (rc == WP_BAD_INPUT && p->rec->skip_bad && jsonl_can_resume(jr)) {
            if (p->stats->skipped++ == 0) {
                if (where) wp_fail(rc, p->stats->first_skipped, sizeof p->stats->first_skipped, "%s:%lld: %s", path, (long long)line, why);
                else wp_fail(rc, p->stats->first_skipped, sizeof p->stats->first_skipped, "%s", why);
            }
            rc = 0;
            continue;
        }
        if (rc) {
            if (where) wp_fail(rc, err, errlen, "%s:%lld: %s", path, (long long)line, why);
            else wp_fail(rc, err, errlen, "%s", why);
            break;
        }
    }
    jsonl_close(jr);
    free(cs.msgs);
    chat_text_free(&cs.text);
    return rc;
}

/* One input: its head to train, its tail to val, each part opened by the boundary token 0. */
static wp_result add_document(prep *p, const char *path, int fd, uint64_t size, char *err, size_t errlen) {
    if (p->rec && jsonl_is_records(path)) return add_records(p, path, err, errlen);
    if (p->rec && p->rec->chat)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: --chat reads conversations from .jsonl or .json files only", path);
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

/* The tokenizer_config.json of conversations rendered with a GGUF file's own chat template: the
 * file has no such JSON beside it, and without one the checkpoints and exports of a fine-tune on
 * these shards would not know the template their answers were trained in (sample --chat reads
 * it there; transformers' apply_chat_template reads it in the export). The fast tokenizer class
 * and BOS/EOS by text, as export makes for a tokenizer.json that came alone, plus the template
 * text as the file has it. */
static wp_result write_chat_config(const chat_template *t, const char *to, char *err, size_t errlen) {
    json_t *j = json_pack("{s:s, s:b, s:s}", "tokenizer_class", "PreTrainedTokenizerFast", "clean_up_tokenization_spaces", 0,
                          "chat_template", t->text);
    if (j && t->bos[0]) json_object_set_new(j, "bos_token", json_string(t->bos));
    if (j && t->eos[0]) json_object_set_new(j, "eos_token", json_string(t->eos));
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    wp_result rc = text ? fs_write_file_atomic(to, text, strlen(text), err, errlen)
                        : wp_fail(WP_FAILED, err, errlen, "%s: out of memory", to);
    free(text);
    return rc;
}

/* tokenizer_config.json and generation_config.json from beside a tokenizer.json (a Hugging Face
 * directory's) copied byte for byte beside the shards' tokenizer, an earlier run's removed: they
 * hold the BOS/EOS this run encoded with and the chat template, which `train` carries from the
 * tokenizer's directory into checkpoints and exports. Conversations rendered with a GGUF's own
 * template get a tokenizer_config.json made for it (write_chat_config). */
static wp_result place_side_files(const prep *p, char *err, size_t errlen) {
    const char *src = p->tok ? tok_path(p->tok) : NULL, *slash = src ? strrchr(src, '/') : NULL;
    bool hf_dir = src && strcmp(slash ? slash + 1 : src, TOK_FILE_HF) == 0;
    const chat_template *tmpl = p->rec && p->rec->chat ? p->rec->tmpl : NULL;
    bool gguf_chat = !hf_dir && src && tmpl && tmpl->text && tmpl->from_gguf;
    for (int i = 0; i < CKPT_SIDE_FILES; i++) {
        char from[WP_PATH_MAX], to[WP_PATH_MAX];
        WP_TRY(fs_join(to, sizeof to, p->train.dir, ckpt_side_files[i], err, errlen));
        if (snprintf(from, sizeof from, "%.*s%s", slash ? (int)(slash - src + 1) : 0, src ? src : "", ckpt_side_files[i]) >=
            (int)sizeof from)
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", src);
        if (gguf_chat && strcmp(ckpt_side_files[i], "tokenizer_config.json") == 0) {
            WP_TRY(write_chat_config(tmpl, to, err, errlen));
        } else if (hf_dir && fs_exists(from)) {
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
    return prepare_shards_rec(inputs, n_inputs, out_dir, val_fraction, vocab, tok, NULL, shard_tokens, piece_bytes, progress,
                              progress_ctx, stats, err, errlen);
}

wp_result prepare_shards_rec(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                             const wp_tokenizer *tok, const wp_prepare_records *rec, int64_t shard_tokens, size_t piece_bytes,
                             wp_prepare_progress progress, void *progress_ctx, wp_prepare_stats *stats, char *err,
                             size_t errlen) {
    memset(stats, 0, sizeof *stats);
    if (tok && strcmp(tok_kind(tok), "bytes") == 0) tok = NULL;
    WP_TRY(check_args(n_inputs, out_dir, val_fraction, vocab, tok, shard_tokens, err, errlen));
    if (rec && rec->chat && (!tok || !rec->tmpl))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chat: conversations need a --tokenizer with a chat template (a tokenizer.json or GGUF)");
    if (rec && !rec->chat && (!rec->text_field || !rec->text_field[0]))
        return wp_fail(WP_BAD_INPUT, err, errlen, "--text-field: the field name must not be empty");
    const bool masked = rec && rec->chat && !rec->train_on_all;
    const int version = shard_version_for_vocab(vocab);
    stats->version = version;
    int *fds = malloc((size_t)n_inputs * sizeof *fds);
    uint64_t *sizes = malloc((size_t)n_inputs * sizeof *sizes);
    wp_result rc = WP_OK;
    if (!fds || !sizes) rc = wp_fail(WP_FAILED, err, errlen, "prepare: out of memory");
    for (int i = 0; fds && i < n_inputs; i++) fds[i] = -1;
    if (rc == 0) rc = open_inputs(inputs, n_inputs, fds, sizes, err, errlen);
    prep p = {.train = {.dir = out_dir, .prefix = "train", .version = version, .shard_tokens = shard_tokens, .masked = masked},
              .val = {.dir = out_dir, .prefix = "val", .version = version, .shard_tokens = shard_tokens, .masked = masked},
              .rec = rec,
              .stats = stats,
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
    stats->train_targets = masked ? p.train.targets : p.train.tokens;
    stats->val_targets = masked ? p.val.targets : p.val.tokens;
    stats->records = p.records;
    stats->masks = masked;
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
