/* Text files -> token shards: byte-level (token = byte value, so tokens are below 256), or
 * through a tokenizer (prepare_shards_tok).
 *
 * Each input file is one document. Its head goes to training and its tail (a share
 * val_fraction of its bytes, rounded) to validation, so validation samples every source. Each
 * part that is not empty starts with token 0 (a NUL byte never occurs in text), the
 * document boundary, as llm.c's GPT-2 shards start every document with <|endoftext|>.
 * Parts are appended in input order to OUT/train_000.bin, OUT/train_001.bin, ... (a new shard
 * every shard_tokens tokens) and likewise val_NNN.bin; no val shard when val_fraction is 0.
 * The shards are written for a vocabulary V (256 for the bytes alone, more when the model's
 * vocabulary is larger): llm.c's version 1 (uint16 tokens) when V <= 65536, else its version 7
 * (uint32 tokens, as its Llama-3 shards).
 *
 * All shards are written to temp files and renamed only when every one is complete, so an
 * error leaves no output file; shards of an earlier, larger run beyond the new count are
 * deleted, so a directory never mixes two runs. */
#ifndef WP_IO_PREPARE_H
#define WP_IO_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "chat.h"
#include "fsutil.h"
#include "tokenizer.h"
#include "result.h"

#define WP_PREPARE_SHARD_TOKENS 100000000 /* llm.c's shard size */
#define WP_PREPARE_BYTE_VOCAB 256           /* byte tokens need at least this vocabulary */

typedef struct {
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
    int version; /* the shard version written: 1 (uint16) or 7 (uint32) */
    int64_t records;                  /* JSON records taken (prepare_shards_rec) */
    int64_t skipped;                  /* bad records skipped (skip_bad) */
    char first_skipped[WP_PATH_MAX + 512]; /* the first one's reason, "FILE:LINE: why" */
    int64_t train_targets, val_targets;    /* tokens that are targets (all, without masks) */
    bool masks;                            /* target masks were written beside the shards */
} wp_prepare_stats;

/* vocab: the vocabulary the shards are for (256 .. 2^31-1); it picks the shard version.
 * Returns 0, 2 (an input missing or unreadable, a bad argument: named) or 1 (write failure). */
wp_result prepare_shards(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                   int64_t shard_tokens, wp_prepare_stats *stats, char *err, size_t errlen);

/* Called after each piece of input is tokenized (about every piece_bytes): input
 * bytes done of total, tokens written so far. The caller decides what and how often to print. */
typedef void (*wp_prepare_progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total, int64_t tokens);
#define WP_PREPARE_PIECE_BYTES ((size_t)8 << 20)

/* prepare_shards with a tokenizer (NULL or the bytes kind: exactly prepare_shards). With a
 * tokenizer (SentencePiece, or a tokenizer.json encoded by tokjson.h), each part (a document's head for training, its tail for validation,
 * cut at the first UTF-8 character boundary at or after the byte split) starts with the
 * tokenizer's BOS (its EOS when it has no BOS; a tokenizer with neither is refused), then the
 * part's text encoded in pieces of at most piece_bytes (0: WP_PREPARE_PIECE_BYTES) cut after a
 * newline (at a character boundary when a piece holds none), each piece encoded as a text of
 * its own (so with SentencePiece's dummy prefix a piece's first word gets the leading-space
 * token of a text's first word: one extra space every piece). Pieces are encoded on all OpenMP
 * threads, a batch at a time, and written in order: the shards do not depend on the threads.
 * vocab must be at least the tokenizer's vocabulary (a model may have a larger, padded one).
 * The tokenizer file is copied into out_dir as tok_file_name(tok) (atomically, before the
 * shards take their names); a tokenizer file of an earlier run that is not this one's
 * (tokenizer.model / tokenizer.json; both for bytes) is removed, so the directory says which
 * tokenizer its shards were made with. A tokenizer.json cannot be encoded here: 2 naming
 * scripts/tokenize_hf.py. progress may be NULL. */
wp_result prepare_shards_tok(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                       const wp_tokenizer *tok, int64_t shard_tokens, size_t piece_bytes, wp_prepare_progress progress,
                       void *progress_ctx, wp_prepare_stats *stats, char *err, size_t errlen);

/* JSON records in (prepare_shards_rec): an input named *.jsonl or *.json is read as records
 * (jsonl.h), one at a time, never whole. Each record is one document and goes whole to
 * training or validation (record k to validation when floor(val_fraction*(k+1)) passes
 * floor(val_fraction*k): a share val_fraction, evenly spread; records are counted across all
 * inputs). Plain-text inputs are read as prepare_shards_tok reads them.
 *   text records: rec[text_field], a string: the boundary token, then the text encoded;
 *   chat records: rec["messages"] rendered with tmpl (chat.h) and encoded whole (chat_tokens.h):
 *     exactly the ids of transformers' apply_chat_template, no boundary token of ours; unless
 *     train_on_all, a target mask (mask.h) is written beside every shard (train_000.mask),
 *     1 for the tokens of assistant answers and their end-of-turn marker (text records and
 *     plain-text inputs mixed in are all targets). Masks of an earlier run that this one does
 *     not write are removed with the stale shards.
 * A bad record (not JSON, invalid UTF-8, a missing or non-string field, a conversation the
 * template refuses) is 2 with "FILE:LINE: why", or, with skip_bad, skipped and counted in
 * stats (skipped, first_skipped; a JSON array cut short still stops the run). */
typedef struct {
    const char *text_field;    /* text records: the field (e.g. "text") */
    bool chat;                 /* records are conversations */
    const chat_template *tmpl; /* chat: the template */
    bool train_on_all;         /* chat: every token a target (no masks) */
    bool skip_bad;             /* skip bad records, counting them */
} wp_prepare_records;

wp_result prepare_shards_rec(const char *const *inputs, int n_inputs, const char *out_dir, double val_fraction, int64_t vocab,
                             const wp_tokenizer *tok, const wp_prepare_records *rec, int64_t shard_tokens, size_t piece_bytes,
                             wp_prepare_progress progress, void *progress_ctx, wp_prepare_stats *stats, char *err,
                             size_t errlen);

#endif
