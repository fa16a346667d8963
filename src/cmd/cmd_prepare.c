/* weipipe prepare TEXT_FILE... --out DIR [--val-fraction F] [--vocab-size V] */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "prepare.h"
#include "shard.h"
#include "log.h"

int cmd_prepare(const wp_opts *o) {
    char err[WP_PATH_MAX + 256];
    wp_prepare_stats st;
    int rc = prepare_shards(o->args, o->nargs, o->out, o->val_fraction, o->vocab_size, WP_PREPARE_SHARD_TOKENS, &st, err,
                            sizeof err);
    if (rc) {
        wp_error("%s", err);
        return rc;
    }
    if (!o->quiet)
        printf("prepare: %d input file%s -> %s: %" PRId64 " training tokens in %d shard%s, %" PRId64
               " validation tokens in %d shard%s (byte tokens, vocabulary %" PRId64 ": llm.c version %d, %s)\n",
               o->nargs, o->nargs == 1 ? "" : "s", o->out, st.train_tokens, st.train_shards, st.train_shards == 1 ? "" : "s",
               st.val_tokens, st.val_shards, st.val_shards == 1 ? "" : "s", o->vocab_size, st.version,
               shard_token_type(st.version));
    return 0;
}
