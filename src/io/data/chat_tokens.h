/* A rendered conversation (chat.h) as token ids and their target mask. */
#ifndef WP_IO_CHAT_TOKENS_H
#define WP_IO_CHAT_TOKENS_H

#include <stdint.h>

#include "chat.h"
#include "gguf.h"
#include "tokenizer.h"
#include "result.h"

/* ids: the whole text encoded at once (tok_encode, no special tokens added: the ids of
 * transformers' apply_chat_template(tokenize=True)); mask[i] 1 when any byte of token i lies in
 * one of the text's target ranges. A token's bytes are where it starts in the text, found by
 * decoding each token alone; a tokenizer whose tokens do not spell the text back byte for byte
 * (SentencePiece's dummy prefix, a normalizer) cannot be placed: 2 naming it. The caller frees
 * *ids and *mask. */
wp_result chat_tokens(const wp_tokenizer *t, const chat_text *c, int32_t **ids, uint8_t **mask, size_t *n, char *err,
                      size_t errlen);

/* The chat template of the tokenizer t: the family named by name (--chat-template; NULL or ""
 * to recognise) or recognised from the template that its source carries: gguf, the parsed GGUF
 * file t was made from (gguf_tokenizer, gguf_tok_open), its tokenizer.chat_template (BOS and
 * EOS: its tokenizer.ggml.bos/eos_token_id); NULL: the "chat_template" of the
 * tokenizer_config.json beside tok_path(t), a tokenizer.json (a string, or the
 * list transformers writes, whose "default" entry is taken; BOS and EOS: the tokenizer's).
 * 2 (named) as chat_template_init, or a tokenizer of another kind; 1. */
wp_result chat_template_for(const wp_tokenizer *t, const gguf_file *gguf, const char *name, chat_template *out, char *err,
                            size_t errlen);

#endif
