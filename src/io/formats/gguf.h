/* llama.cpp GGUF model files (GGUF v2/v3, general.architecture "llama"), read as the Hugging
 * Face directories of hf.h are: the callers pick by the file's magic (gguf_is_file). Tensors F32,
 * F16, BF16, Q8_0, Q4_0 and Q4_1 are dequantized to fp32; Q and K rows are un-permuted from
 * llama.cpp's RoPE layout back to transformers' (docs/formats.md, GGUF). Returns 0, 2 (bad
 * input: err names the file and the field) or 1 (I/O, memory). */
#ifndef WP_IO_GGUF_H
#define WP_IO_GGUF_H

#include <stdbool.h>

#include "hf.h"
#include "result.h"
#include "tokenizer.h"

bool gguf_is_file(const char *path);

/* A model file is parsed once on the way in: gguf_open_if maps it and checks its header, its
 * key/value table and its tensor index, and every reader below takes the parsed file (a command
 * opens it once, passes it down and closes it at the end). */
typedef struct gguf_file gguf_file;
/* path a GGUF file (told by its magic): *out the parsed file; *out NULL (and 0) when path is no
 * regular file or one of another kind, which costs one open. 2 naming the file and the field
 * for a GGUF file that is damaged, 1. */
wp_result gguf_open_if(const char *path, gguf_file **out, char *err, size_t errlen);
void gguf_close(gguf_file *f);
const char *gguf_path(const gguf_file *f);
/* The same hf_config as hf_read_config (path: the .gguf; tied: no output.weight tensor). */
wp_result gguf_read_config(const gguf_file *f, hf_config *c, char *err, size_t errlen);
/* Like hf_load_masters: the owned chunks' fp32 masters, moments and step at zero. The file may
 * be read by several ranks' threads at once. */
wp_result gguf_load_masters(const gguf_file *f, wp_optim *o, char *err, size_t errlen);
/* llama.context_length, as hf_max_positions reads config.json's max_position_embeddings. */
wp_result gguf_max_positions(const gguf_file *f, int64_t *positions, char *err, size_t errlen);
/* The file's tokenizer.ggml.* (a "gpt2" byte-level BPE) as Hugging Face tokenizer.json text
 * (*json malloc'd, NUL-terminated); *json NULL when the file has no tokenizer.ggml.model, 2 when
 * it has another kind or a tokenizer.ggml.pre weipipe does not map. */
wp_result gguf_tokenizer_json(const gguf_file *f, char **json, size_t *len, char *err, size_t errlen);
/* That tokenizer.json opened by tok_open_mem (tok_path: the file); none: 2. */
wp_result gguf_tokenizer(const gguf_file *f, wp_tokenizer **out, char *err, size_t errlen);
/* tok_open, and a llama.cpp file's tokenizer too (told by its magic: gguf_tokenizer), so
 * --tokenizer MODEL.gguf works wherever a tokenizer file does. gguf: NULL, or where the parsed
 * file goes for the caller's further reads (gguf_chat_info) and gguf_close (NULL when path is
 * no GGUF). */
wp_result gguf_tok_open(const char *path, wp_tokenizer **out, gguf_file **gguf, char *err, size_t errlen);
/* What a chat needs of the file: tokenizer.chat_template (*tmpl malloc'd, NULL when absent) and
 * tokenizer.ggml.bos_token_id / eos_token_id (-1 when absent). */
wp_result gguf_chat_info(const gguf_file *f, char **tmpl, int64_t *bos, int64_t *eos, char *err, size_t errlen);
/* A checkpoint as a llama-architecture GGUF (F32, F16 or BF16 tensors), via a new OUT.tmp-XXXXXXXX renamed. */
wp_result gguf_export(const wp_ckpt *c, const char *out, wp_dtype dtype, char *err, size_t errlen);

#endif
