/* Hugging Face Llama directories: model.safetensors (or model.safetensors.index.json with its
 * shards) + config.json (LlamaForCausalLM). Tensor names are those of wp_layout; our RoPE is
 * the "rotate half" layout that transformers uses, so weights need no permutation. */
#ifndef WP_IO_HF_H
#define WP_IO_HF_H

#include "checkpoint.h"
#include "kernels.h"
#include "model/layout.h"
#include "optim.h"

struct wp_opts;

/* Writes OUT_DIR/model.safetensors (masters converted to dtype) and OUT_DIR/config.json, each
 * atomically. Returns 0, 2 (bad checkpoint) or 1. */
int hf_export(const wp_ckpt *c, const char *out_dir, wp_dtype dtype, char *err, size_t errlen);

/* config.json for a model (shared by the export and tests). */
int hf_write_config(const wp_model_cfg *cfg, const char *out_dir, wp_dtype dtype, char *err, size_t errlen);

/* Reads HF_DIR/config.json: every model flag the user did not set is filled from it, a set one
 * must agree (2 naming the flag and the key). Refuses what our model does not implement
 * (biases, rope_scaling, another activation or model type). */
int hf_config_apply(const char *hf_dir, struct wp_opts *o, char *err, size_t errlen);

/* Loads the owned chunks' fp32 masters from HF_DIR (F32, F16 or BF16 tensors, one file or an
 * index of shards; a missing lm_head.weight with tie_word_embeddings takes the embedding).
 * Moments, gradients and the step count start at zero. Returns 0, 2 or 1. */
int hf_load_masters(const char *hf_dir, wp_optim *o, char *err, size_t errlen);

#endif
