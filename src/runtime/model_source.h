/* A model to run, whatever holds it (`weipipe sample`, `weipipe eval`): a checkpoint (SAVE, its
 * latest step, or SAVE/step-K: the fp32 masters) or a Hugging Face directory (config.json +
 * safetensors) opened into one description: the model's shape, the positions it takes, the
 * ids that end generation and the directory its tokenizer lives in; then its weights, tensor by
 * tensor, with no optimizer state (no moments, no gradient: inference holds the weights once,
 * plus one tensor in flight).
 *
 * or a llama.cpp GGUF file (src/io/formats/gguf.h: told by its magic, parsed once and kept open as
 * gguf: its tokenizer and chat template come from the file's metadata, gguf_tokenizer). */
#ifndef WP_RUNTIME_MODEL_SOURCE_H
#define WP_RUNTIME_MODEL_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "cli.h"
#include "gguf.h"
#include "hf.h"
#include "layout.h"
#include "result.h"

#define WP_SRC_MAX_EOS 16

typedef enum { WP_SRC_CHECKPOINT, WP_SRC_HF, WP_SRC_GGUF } wp_src_kind;

typedef struct {
    wp_src_kind kind;
    wp_layout L;               /* one chunk, micro-batch and sequence length as asked */
    bool have_layout;
    int64_t positions;         /* --seq-length, else the checkpoint's sequence length or config.json's max_position_embeddings */
    int64_t step;              /* a checkpoint's step, -1 otherwise */
    char dir[WP_PATH_MAX];     /* the step or Hugging Face directory: where its tokenizer is looked for (GGUF: the file) */
    gguf_file *gguf;           /* GGUF: the parsed file (closed by model_src_close) */
    int32_t eos[WP_SRC_MAX_EOS]; /* generation_config.json's eos_token_id list (a checkpoint: its one eos); */
    int n_eos;                 /* 0: none named, the tokenizer's EOS decides */
    wp_ckpt *ckpt;             /* open while the weights are read */
} wp_model_src;

/* What the caller runs: the model as one chunk of micro-batch mb; the sequence length is
 * --seq-length, else the source's own (require_seq: a Hugging Face directory has no training
 * length, so `eval` must be given one). precision: --precision, else the checkpoint's, fp32
 * for a Hugging Face directory (its weights as they are). 0, 2 naming the culprit, or 1. */
wp_result model_src_open(const char *path, const wp_opts *o, int mb, bool require_seq, wp_model_src *s, char *err, size_t errlen);
void model_src_close(wp_model_src *s);

/* Every parameter in layout order, handed to sink (hf_param_sink: a range of its fp32 values,
 * which the sink may change; a checkpoint gives each parameter whole). 0, 2 or 1. */
wp_result model_src_read(wp_model_src *s, hf_param_sink sink, void *ctx, char *err, size_t errlen);

/* "step 12 of DIR" or "Hugging Face DIR", for messages. */
const char *model_src_name(const wp_model_src *s, char *buf, size_t len);

#endif
