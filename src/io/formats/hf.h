/* Hugging Face Llama directories: model.safetensors (or model.safetensors.index.json with its
 * shards) + config.json (LlamaForCausalLM). Tensor names are those of wp_layout; our RoPE is
 * the "rotate half" layout that transformers uses, so weights need no permutation. */
#ifndef WP_IO_HF_H
#define WP_IO_HF_H

#include "checkpoint.h"
#include "kernels.h"
#include "layout.h"
#include "optim.h"
#include "result.h"

#define HF_DEFAULT_MAX_SHARD ((int64_t)5000000000) /* save_pretrained's "5GB" */
typedef struct {
    wp_dtype dtype;          /* of the exported tensors (the masters converted) */
    int64_t max_shard_bytes; /* above it: model-0000K-of-0000N.safetensors + index */
    int max_pos;             /* max_position_embeddings; 0: hf_default_max_positions */
} hf_export_opts;
/* Writes OUT_DIR: model.safetensors (or shards and model.safetensors.index.json), config.json,
 * generation_config.json and the checkpoint's tokenizer files, all into a new OUT_DIR.tmp-XXXXXXXX first and
 * then renamed onto OUT_DIR (an existing OUT_DIR holding only export files is replaced whole;
 * anything else in it: 2). Returns 0, 2 (bad checkpoint or options) or 1. */
wp_result hf_export_with(const wp_ckpt *c, const char *out_dir, const hf_export_opts *x, char *err, size_t errlen);
/* The same with 5GB shards and the default max_position_embeddings. */
wp_result hf_export(const wp_ckpt *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen);
/* max_position_embeddings an export declares: cfg->max_pos when set (--max-position-embeddings,
 * or carried from --init-from's config.json), else factor x original_max_position_embeddings
 * under llama3 scaling, else the larger of 4096 and the sequence length. */
int hf_default_max_positions(const wp_model_cfg *cfg);

/* config.json for a model (shared by the export and tests). */
wp_result hf_write_config(const wp_model_cfg *cfg, const char *out_dir, wp_dtype dtype, char *err, size_t errlen);

/* The model keys of HF_DIR/config.json that the model flags mirror (the command line applies
 * them: hf_config_apply in src/cli/adapters.h). */
typedef enum {
    HF_NUM_HIDDEN_LAYERS, HF_HIDDEN_SIZE, HF_INTERMEDIATE_SIZE, HF_NUM_ATTENTION_HEADS,
    HF_NUM_KEY_VALUE_HEADS, HF_VOCAB_SIZE, HF_RMS_NORM_EPS, HF_ROPE_THETA,
    /* optional: rope_scaling (type llama3) and max_position_embeddings */
    HF_ROPE_FACTOR, HF_ROPE_LOW_FREQ, HF_ROPE_HIGH_FREQ, HF_ROPE_ORIGINAL_MAX, HF_MAX_POSITIONS,
    HF_BOS_TOKEN_ID, HF_EOS_TOKEN_ID, /* optional; null or absent: none, a list: its first */
    HF_NKEYS
} hf_key;
typedef struct {
    char path[WP_PATH_MAX];    /* the config.json read */
    double value[HF_NKEYS];
    bool present[HF_NKEYS];    /* rope_theta and the optional ones may be absent; num_key_value_heads defaults to the heads */
    bool have_head_dim;
    int64_t head_dim;
    bool tied;                 /* tie_word_embeddings (absent: false, as LlamaConfig) */
} hf_config;
const char *hf_key_name(hf_key k);
bool hf_key_integer(hf_key k);
/* Reads it, refusing what our model does not implement (biases, a rope_scaling type other than
 * llama3, another activation or model type) and a required key missing or not a number: 2
 * naming the file and the key. */
wp_result hf_read_config(const char *hf_dir, hf_config *c, char *err, size_t errlen);
/* The values a reader found, checked as a model file's settings (both readers call it before
 * they return): counts in the model flags' ranges and consistent (heads divide the width, KV
 * heads divide the heads, an even head size), rms_norm_eps, rope_theta and the llama3 factors
 * finite and positive, bos/eos ids below the vocabulary. 2 naming c->path and the key as the
 * file spells it (names[k]: config.json's or GGUF's), never the flag that mirrors it. */
wp_result hf_config_check(const hf_config *c, const char *const names[HF_NKEYS], char *err, size_t errlen);

/* Loads the owned chunks' fp32 masters from HF_DIR (F32, F16 or BF16 tensors, one file or an
 * index of shards; a missing lm_head.weight with tie_word_embeddings takes the embedding).
 * Before any is read, the files are checked against the optimizer's layout (hf_read_params
 * likewise): every tensor is a parameter or the known model.layers.N.self_attn.rotary_emb.inv_freq
 * (others: 2 naming the file and the tensor, "unexpected"); no name is in two shards (2 naming
 * both); the index's weight_map lists each tensor with the shard that holds it (2 naming both). 
 * Moments, gradients and the step count start at zero. Returns 0, 2 or 1. */
wp_result hf_load_masters(const char *hf_dir, wp_optim *o, char *err, size_t errlen);

/* Every parameter of layout L (any chunking) from HF_DIR in layout order, each in pieces: sink
 * gets elements [first, first + n) of parameter p as fp32 values (a buffer it may change, valid
 * for the call). Inference loads its weights this way without an optimizer and with one piece of
 * the files in memory at a time (their pages are dropped once read). sink returns 0, or 1/2
 * with err set, which stops the load. Returns 0, 2 or 1. */
typedef wp_result (*hf_param_sink)(void *ctx, const wp_param *p, size_t first, size_t n, float *vals, char *err, size_t errlen);
wp_result hf_read_params(const char *hf_dir, const wp_layout *L, hf_param_sink sink, void *ctx, char *err, size_t errlen);

/* The ids that end generation: generation_config.json's eos_token_id (an id or a list, as
 * Llama 3 Instruct's [128001, 128008, 128009]), else config.json's, into ids[0..*n) (at most
 * max; *n = 0 when neither names one). Returns 0 or 2 naming the file. */
wp_result hf_read_eos(const char *hf_dir, int32_t *ids, int max, int *n, char *err, size_t errlen);

#endif
