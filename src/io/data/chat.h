/* Chat templates without a Jinja interpreter: the families people fine-tune with, each
 * recognised from its published template text and rendered in C exactly as transformers'
 * apply_chat_template renders that text (its Jinja settings: trim_blocks, lstrip_blocks), so
 * that the rendered text, encoded without added special tokens, gives the same ids.
 *
 *   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n (SmolLM2, Qwen: with the default system
 *            turn their template adds when the conversation has none; the HF default ChatML)
 *   llama3   BOS<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT.strip()<|eot_id|>
 *   llama2   BOS[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER.strip() [/INST] ANSWER.strip() EOS
 *   mistral  BOS[INST] USER [/INST]ANSWEREOS (user and assistant roles only)
 *   gemma    BOS<start_of_turn>user\nCONTENT.strip()<end_of_turn>\n ... (assistant is "model";
 *            no system role)
 *   zephyr   <|system|>\nCONTENT EOS\n<|user|>\n...  (EOS right after the content)
 *
 * A template text is recognised when it is one of the published texts (chat.c lists them;
 * "\n" written as a backslash and n inside the Jinja is taken as the newline it stands for);
 * anything else is refused, so that an unknown template is never rendered as a look-alike.
 * Where the template raises (roles that do not alternate, a system turn Gemma refuses),
 * chat_render fails (2) with the template's own message.
 *
 * The targets: the bytes of each assistant turn's content (as rendered: stripped where the
 * template strips it) and of the end-of-turn marker that follows it (<|im_end|>, <|eot_id|>,
 * <end_of_turn>, or EOS). */
#ifndef WP_IO_CHAT_H
#define WP_IO_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "result.h"

typedef enum { CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA2, CHAT_MISTRAL, CHAT_GEMMA, CHAT_ZEPHYR, CHAT_FAMILIES } chat_family;

#define CHAT_NAMES "chatml, llama3, llama2, mistral, gemma, zephyr"

typedef struct {
    chat_family family;
    char *default_system; /* chatml: the system turn added when the first turn is not one (NULL: none) */
    char *bos, *eos;      /* the tokenizer's BOS and EOS text ("" when it has none) */
    char *text;           /* the template text it was recognised from, as given (NULL when named) */
    bool from_gguf;       /* text is a GGUF file's tokenizer.chat_template (chat_template_for) */
} chat_template;

/* name: a --chat-template value (one of CHAT_NAMES) or NULL/"" to recognise text; text: the
 * template found with the tokenizer (NULL when none); where names it in messages (e.g.
 * "DIR/tokenizer_config.json chat_template"). 2 when the name is unknown, when there is no
 * text to recognise, or when the text is not one of the published ones (each message lists
 * the names); 1 out of memory. */
wp_result chat_template_init(chat_template *t, const char *name, const char *text, const char *where, const char *bos,
                             const char *eos, char *err, size_t errlen);
void chat_template_free(chat_template *t);
const char *chat_family_name(chat_family f);
/* The text that ends an assistant turn, where generation of an answer stops: <|im_end|>,
 * <|eot_id|>, <end_of_turn>, or the tokenizer's EOS (llama2, mistral, zephyr; "" when none). */
const char *chat_end_of_turn(const chat_template *t);

typedef struct {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
    size_t len;
} chat_msg;

/* The rendered conversation: text[0, len) and the target byte ranges [span[2i], span[2i+1]). */
typedef struct {
    char *text;
    size_t len, cap;
    size_t *span;
    int n_span, cap_span;
} chat_text;

/* Renders n >= 1 messages into out (reset first; reusable); generation_prompt adds the opening
 * of an assistant turn where the template has one. 2: the template refuses the conversation
 * (why says so); 1 out of memory. */
wp_result chat_render(const chat_template *t, const chat_msg *m, int n, bool generation_prompt, chat_text *out, char *why,
                      size_t whylen);
void chat_text_free(chat_text *c);

#endif
