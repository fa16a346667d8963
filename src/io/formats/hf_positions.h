/* How many positions a Hugging Face Llama directory says its model takes: config.json's
 * max_position_embeddings (what `weipipe sample` sizes its KV cache and checks prompts by). Kept
 * apart from hf.h so that the config reader there stays the training's. */
#ifndef WP_IO_HF_POSITIONS_H
#define WP_IO_HF_POSITIONS_H

#include <stddef.h>
#include <stdint.h>
#include "result.h"

/* *positions = HF_DIR/config.json's max_position_embeddings. 2 naming the file and the key when
 * it is missing, not an integer or below 1; 1 when reading fails. */
wp_result hf_max_positions(const char *hf_dir, int64_t *positions, char *err, size_t errlen);

#endif
