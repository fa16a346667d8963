/* Tokenizers: text <-> token ids, for prepare (encode), sample (encode a prompt, decode the
 * output) and the files kept with checkpoints and exports.
 *
 * Three kinds, picked by tok_open from the file's content (not its name):
 *   "bytes"              built in: token = byte value, vocabulary 256, no BOS/EOS (the byte
 *                        shards mark documents with token 0, see prepare.h);
 *   "sentencepiece"      a SentencePiece model (tokenizer.model, Llama-2 family) through
 *                        Debian's libsentencepiece: encode and decode;
 *   "hf-tokenizer.json"  a Hugging Face tokenizer.json of a BPE model (GPT-2 and Llama-3 byte
 *                        level, SmolLM2, SentencePiece-style byte-fallback BPE as Llama-2 and
 *                        Mistral publish them): encode and decode as the `tokenizers` library
 *                        does (tokjson.h, which lists what is supported; anything else is
 *                        refused at open with exit 2 naming the field).
 *
 * CONVENTION shared by checkpoints, exports and prepare: a directory holds `tokenizer.model`
 * or `tokenizer.json` when the run had one (TOK_FILE_SPM / TOK_FILE_HF); neither means bytes
 * (when the vocabulary is >= 256) or no tokenizer. tok_find_in_dir looks for them.
 *
 * Return codes as everywhere in src/io: 0 ok, 2 bad input (named), 1 I/O or memory failure.
 * A wp_tokenizer is immutable after tok_open: its functions may be called from several
 * threads at once. */
#ifndef WP_IO_TOKENIZER_H
#define WP_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "result.h"

#define TOK_FILE_SPM "tokenizer.model"
#define TOK_FILE_HF "tokenizer.json"

typedef struct wp_tokenizer wp_tokenizer;

/* path: a SentencePiece model (tokenizer.model), a Hugging Face tokenizer.json, or NULL/"bytes"
 * for the built-in byte tokenizer (token = byte value); a llama.cpp GGUF file's tokenizer is
 * opened by gguf_tok_open (src/io/formats/gguf.h), which hands its metadata as tokenizer.json
 * text to tok_open_mem. 0 ok, 2 not a tokenizer (err names the file and why), 1 I/O error. */
wp_result tok_open(const char *path, wp_tokenizer **out, char *err, size_t errlen);
/* A tokenizer.json given as text (json[0, len), e.g. made from a GGUF file's metadata); name,
 * the file it stands for, names it in errors and is tok_path (NULL: "tokenizer.json" in errors,
 * tok_path NULL). tok_file_name is TOK_FILE_HF, and no tokenizer_config.json is looked for
 * (BOS from the file's TemplateProcessing, else by name). */
wp_result tok_open_mem(const char *json, size_t len, const char *name, wp_tokenizer **out, char *err, size_t errlen);
void tok_close(wp_tokenizer *t);
int64_t tok_vocab_size(const wp_tokenizer *t);
int32_t tok_bos(const wp_tokenizer *t); /* -1 when none */
int32_t tok_eos(const wp_tokenizer *t); /* -1 when none */
const char *tok_kind(const wp_tokenizer *t); /* "bytes", "sentencepiece", "hf-tokenizer.json" */
/* ids: malloc'd array the caller frees (NULL when *n is 0); 0/1/2. No BOS/EOS is added: the
 * caller decides where documents start (a tokenizer.json is encoded as the library's
 * encode(text, add_special_tokens=False); invalid UTF-8 is first replaced as Python's
 * decode(errors='replace') does). */
wp_result tok_encode(const wp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);
/* text: malloc'd NUL-terminated string the caller frees; ids >= vocab (or < 0) -> 2. The bytes
 * the tokens stand for (a partial UTF-8 sequence stays as it is), less any NUL byte (a C string
 * cannot hold one; the byte tokenizer's token 0 is the document boundary). Control tokens
 * (BOS/EOS) decode to nothing under SentencePiece and to their text under tokenizer.json.
 * To print tokens as they come, decode the whole sequence so far and print what is new:
 * SentencePiece drops the leading space of the first piece it decodes, so decoding one token
 * at a time loses the spaces between words. */
wp_result tok_decode(const wp_tokenizer *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen);
/* The file(s) that describe this tokenizer, to copy next to a checkpoint or an export
 * (NULL for bytes): the source path. */
const char *tok_path(const wp_tokenizer *t);
/* The bytes it was opened from (tokenizer.json text, also for a GGUF or tok_open_mem; the
 * SentencePiece model): what a checkpoint, an export or prepared data keeps as tok_file_name.
 * NULL for bytes. */
const char *tok_bytes(const wp_tokenizer *t, size_t *size);
/* The name the file takes in a checkpoint, export or data directory: TOK_FILE_SPM or
 * TOK_FILE_HF (NULL for bytes). */
const char *tok_file_name(const wp_tokenizer *t);

/* The tokenizer file of a directory (checkpoint, export, prepared data): dir/tokenizer.model or
 * dir/tokenizer.json into path, or "" when it has neither. 0 ok; 2 both are there (which one is
 * meant is unclear: err names them); 1 the path does not fit. */
wp_result tok_find_in_dir(const char *dir, char *path, size_t pathlen, char *err, size_t errlen);

#endif
