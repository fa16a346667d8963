/* weipipe prepare INPUT... --out DIR [--val-fraction F] [--vocab-size V] [--tokenizer FILE]
 * [--text-field NAME] [--chat [--chat-template NAME] [--train-on answers|all]] [--skip-bad-records]:
 * token shards from text files and .jsonl/.json records, all-or-nothing. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "chat_tokens.h"
#include "choices.h"
#include "cli.h"
#include "commands.h"
#include "gguf.h"
#include "log.h"
#include "prepare.h"
#include "shard.h"
#include "tokenizer.h"

/* Progress lines on stderr: only for an input worth waiting for (a terminal watching, or at
 * least PROGRESS_BIG bytes, say a log file of a long job), at most one a second, the first
 * after a second, so a small prepare prints nothing. */
#define PROGRESS_BIG ((uint64_t)64 << 20)

typedef struct {
    bool on;
    double start, last;
} progress_state;

static double now_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0; /* cannot fail for CLOCK_MONOTONIC */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(void *ctx, uint64_t done, uint64_t total, int64_t tokens) {
    progress_state *ps = ctx;
    if (!ps->on || (!isatty(STDERR_FILENO) && total < PROGRESS_BIG)) return;
    double t = now_s(), el = t - ps->start;
    if (t - ps->last < 1.0 || done == total) return;
    ps->last = t;
    double eta = done > 0 ? el * (double)(total - done) / (double)done : 0;
    fprintf(stderr, "prepare: %.1f of %.1f MB (%.0f%%), %" PRId64 " tokens, %.0f tokens/s, ETA %.0f s\n", (double)done / 1e6,
            (double)total / 1e6, 100.0 * (double)done / (double)total, tokens, el > 0 ? (double)tokens / el : 0.0, eta);
}

int cmd_prepare(const wp_opts *o) {
    char err[WP_PATH_MAX + 512];
    wp_tokenizer *tok = NULL;
    gguf_file *gguf = NULL; /* --tokenizer FILE.gguf, parsed once: its tokenizer and chat template */
    if (o->tokenizer[0]) {
        int rc = gguf_tok_open(o->tokenizer, &tok, &gguf, err, sizeof err);
        if (rc) {
            wp_error("--tokenizer %s", err);
            return rc;
        }
    }
    /* the vocabulary: the tokenizer's, unless --vocab-size asks for a larger (padded) one */
    int64_t vocab = tok && !o->set[FLAG_vocab_size] ? tok_vocab_size(tok) : o->vocab_size;
    progress_state ps = {.on = !o->quiet, .start = now_s()};
    ps.last = ps.start;
    chat_template tmpl = {0};
    wp_prepare_records rec = {.text_field = o->text_field, .chat = o->chat, .train_on_all = o->train_on == WP_TRAIN_ON_ALL,
                              .skip_bad = o->skip_bad_records};
    if (!o->chat && (o->set[FLAG_chat_template] || o->set[FLAG_train_on])) {
        wp_error("--%s: only with --chat", o->set[FLAG_chat_template] ? "chat-template" : "train-on");
        tok_close(tok);
        gguf_close(gguf);
        return 2;
    }
    if (o->chat && !tok) {
        wp_error("--chat: conversations need --tokenizer (a tokenizer.json or GGUF with its chat template)");
        return 2;
    }
    if (o->chat) {
        int rc = chat_template_for(tok, gguf, o->chat_template, &tmpl, err, sizeof err);
        if (rc) {
            wp_error("%s", err);
            tok_close(tok);
            gguf_close(gguf);
            return rc;
        }
        rec.tmpl = &tmpl;
    }
    wp_prepare_stats st;
    int rc = prepare_shards_rec(o->args, o->nargs, o->out, o->val_fraction, vocab, tok, &rec, WP_PREPARE_SHARD_TOKENS, 0, progress,
                                &ps, &st, err, sizeof err);
    chat_family tmpl_family = tmpl.family;
    chat_template_free(&tmpl);
    if (rc) {
        wp_error("%s", err);
        tok_close(tok);
        gguf_close(gguf);
        return rc;
    }
    if (st.skipped > 0)
        fprintf(stderr, "prepare: skipped %" PRId64 " bad record%s (--skip-bad-records); the first: %s\n", st.skipped,
                st.skipped == 1 ? "" : "s", st.first_skipped);
    char what[WP_PATH_MAX + 64];
    if (tok && tok_path(tok))
        snprintf(what, sizeof what, "%s tokens of %s, copied as %s", tok_kind(tok), tok_path(tok), tok_file_name(tok));
    else
        snprintf(what, sizeof what, "byte tokens");
    if (!o->quiet)
        printf("prepare: %d input file%s -> %s: %" PRId64 " training tokens in %d shard%s, %" PRId64
               " validation tokens in %d shard%s (%s, vocabulary %" PRId64 ": llm.c version %d, %s)\n",
               o->nargs, o->nargs == 1 ? "" : "s", o->out, st.train_tokens, st.train_shards, st.train_shards == 1 ? "" : "s",
               st.val_tokens, st.val_shards, st.val_shards == 1 ? "" : "s", what, vocab, st.version,
               shard_token_type(st.version));
    if (!o->quiet && st.records > 0)
        printf("prepare: %" PRId64 " record%s%s%s\n", st.records, st.records == 1 ? "" : "s",
               o->chat ? ", rendered with the chat template " : "", o->chat ? chat_family_name(tmpl_family) : "");
    if (!o->quiet && st.masks)
        printf("prepare: targets (the answers): %" PRId64 " of %" PRId64 " training tokens, %" PRId64 " of %" PRId64
               " validation tokens, in a .mask file beside each shard\n",
               st.train_targets, st.train_tokens, st.val_targets, st.val_tokens);
    tok_close(tok);
    gguf_close(gguf);
    return 0;
}
