/* weipipe export CKPT_DIR OUT_DIR [--precision P] [--max-shard-size S] [--max-position-embeddings N]:
 * a checkpoint as a Hugging Face Llama dir; --format gguf: OUT as one llama.cpp GGUF file. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "checkpoint.h"
#include "gguf.h"
#include "hf.h"
#include "safetensors.h"
#include "log.h"

/* fp32 unless --precision is given: then the dtype its weights travel in (fp16, bf16, fp32). */
static wp_dtype export_dtype(const wp_opts *o) {
    return o->set[FLAG_precision] ? precision_weight_dtype(o->precision) : WP_F32;
}

int cmd_export(const wp_opts *o) {
    if (o->nargs != 2) {
        wp_error("export: expected CKPT_DIR OUT_DIR, got %d argument%s", o->nargs, o->nargs == 1 ? "" : "s");
        return 2;
    }
    char err[2 * WP_PATH_MAX], dir[WP_PATH_MAX];
    wp_ckpt *c = NULL;
    int rc = ckpt_resolve(o->args[0], NULL, dir, sizeof dir, err, sizeof err);
    if (rc == 0) rc = ckpt_open(&c, dir, err, sizeof err);
    hf_export_opts x = {.dtype = export_dtype(o), .max_shard_bytes = o->max_shard_size,
                        .max_pos = o->set[FLAG_max_position_embeddings] ? (int)o->max_position_embeddings : 0};
    if (o->set[FLAG_max_position_embeddings] && !(o->max_position_embeddings >= 1 && o->max_position_embeddings <= INT32_MAX)) {
        wp_error("--max-position-embeddings: %lld must be between 1 and %d", (long long)o->max_position_embeddings, INT32_MAX);
        return 2;
    }
    if (o->max_shard_size < 1) {
        wp_error("--max-shard-size: %lld must be positive", (long long)o->max_shard_size);
        return 2;
    }
    bool gguf = o->set[FLAG_format] && o->format == (wp_format)WP_FMT_GGUF;
    if (o->set[FLAG_format] && !gguf && o->format != (wp_format)WP_FMT_SAFETENSORS) {
        wp_error("--format: '%s' is not one of safetensors, gguf (export)", cli_enum_name(FLAG_format, o->format));
        ckpt_close(c);
        return 2;
    }
    if (rc == 0) rc = gguf ? gguf_export(c, o->args[1], x.dtype, err, sizeof err) : hf_export_with(c, o->args[1], &x, err, sizeof err);
    if (rc) {
        wp_error("%s", err);
        ckpt_close(c);
        return rc;
    }
    if (!o->quiet)
        printf("export: %s (step %" PRId64 ") -> %s (%s %s)\n", dir, ckpt_info(c)->step, o->args[1],
               st_dtype_name(export_dtype(o)), gguf ? "GGUF" : "safetensors, config.json, generation_config.json");
    ckpt_close(c);
    return 0;
}
