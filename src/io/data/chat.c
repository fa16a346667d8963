/* Chat templates rendered in C (chat.h). Each render_* function follows its template's Jinja
 * statement by statement, in the same order, so that it raises where the template raises and
 * renders nothing where the template renders nothing. */
#include "chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[CHAT_FAMILIES] = {"chatml", "llama3", "llama2", "mistral", "gemma", "zephyr"};

const char *chat_family_name(chat_family f) { return f < CHAT_FAMILIES ? names[f] : "?"; }

const char *chat_end_of_turn(const chat_template *t) {
    switch (t->family) {
    case CHAT_CHATML: return "<|im_end|>";
    case CHAT_LLAMA3: return "<|eot_id|>";
    case CHAT_GEMMA: return "<end_of_turn>";
    default: return t->eos;
    }
}

/* ---- the published template texts ---- */

/* SmolLM2-Instruct and Qwen (1.5, 2) add a default system turn: PREFIX DEFAULT SUFFIX */
static const char CHATML_SYS_PREFIX[] = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                                        "{{ '<|im_start|>system\n";
static const char CHATML_SYS_SUFFIX[] = "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
                                        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
                                        "{{ '<|im_start|>assistant\n' }}{% endif %}";

static const struct {
    chat_family family;
    const char *text;
} published[] = {
    {CHAT_CHATML, /* transformers' default ChatML */
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
     "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"},
    {CHAT_LLAMA3, /* Meta-Llama-3-8B-Instruct */
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
     "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
     "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"},
    {CHAT_LLAMA2, /* Llama-2-7b-chat-hf */
     "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
     "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
     "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + "
     "'\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
     "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
     "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"},
    {CHAT_MISTRAL, /* Mistral-7B-Instruct-v0.1 / v0.2 */
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
     "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
     "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"},
    {CHAT_GEMMA, /* gemma-2b-it, gemma-7b-it */
     "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
     "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
     "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"},
    {CHAT_ZEPHYR, /* zephyr-7b-beta */
     "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
     "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
     "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
     "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"},
};

/* The text with each backslash-n turned into a newline (a Jinja string literal's escape, how
 * some tokenizer_config.json files spell it) and the ends' blanks cut. */
static char *normalized(const char *text) {
    size_t n = strlen(text);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\\' && text[i + 1] == 'n') {
            s[j++] = '\n';
            i++;
        } else {
            s[j++] = text[i];
        }
    }
    while (j > 0 && strchr(" \t\r\n", s[j - 1])) j--;
    s[j] = 0;
    size_t lead = strspn(s, " \t\r\n");
    memmove(s, s + lead, j - lead + 1);
    return s;
}

/* ChatML with a default system turn: the default, or NULL when text is not of that form. */
static char *chatml_default_system(const char *s) {
    size_t n = strlen(s), p = sizeof CHATML_SYS_PREFIX - 1, q = sizeof CHATML_SYS_SUFFIX - 1;
    if (n < p + q || memcmp(s, CHATML_SYS_PREFIX, p) != 0 || memcmp(s + n - q, CHATML_SYS_SUFFIX, q) != 0) return NULL;
    const char *d = s + p;
    size_t dn = n - p - q;
    /* the default is a plain string literal: no quote or escape that Jinja would read otherwise */
    if (memchr(d, '\'', dn) || memchr(d, '\\', dn) || memchr(d, '{', dn) || memchr(d, '}', dn)) return NULL;
    char *out = malloc(dn + 1);
    if (out) {
        memcpy(out, d, dn);
        out[dn] = 0;
    }
    return out;
}

wp_result chat_template_init(chat_template *t, const char *name, const char *text, const char *where, const char *bos,
                             const char *eos, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->bos = strdup(bos ? bos : "");
    t->eos = strdup(eos ? eos : "");
    if (!t->bos || !t->eos) {
        chat_template_free(t);
        return wp_fail(WP_FAILED, err, errlen, "chat template: out of memory");
    }
    if (name && name[0]) {
        for (int f = 0; f < CHAT_FAMILIES; f++)
            if (strcmp(name, names[f]) == 0) {
                t->family = (chat_family)f;
                return 0;
            }
        chat_template_free(t);
        return wp_fail(WP_BAD_INPUT, err, errlen, "--chat-template: '%s' is not a template weipipe renders (%s)", name, CHAT_NAMES);
    }
    if (!text) {
        chat_template_free(t);
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: no chat template: name one with --chat-template (%s)", where, CHAT_NAMES);
    }
    char *s = normalized(text);
    if (!s) {
        chat_template_free(t);
        return wp_fail(WP_FAILED, err, errlen, "chat template: out of memory");
    }
    bool known = false;
    for (size_t i = 0; !known && i < sizeof published / sizeof *published; i++)
        if (strcmp(s, published[i].text) == 0) {
            t->family = published[i].family;
            known = true;
        }
    if (!known && (t->default_system = chatml_default_system(s)) != NULL) {
        t->family = CHAT_CHATML;
        known = true;
    }
    free(s);
    if (known) {
        if ((t->text = strdup(text)) != NULL) return 0;
        chat_template_free(t);
        return wp_fail(WP_FAILED, err, errlen, "chat template: out of memory");
    }
    chat_template_free(t);
    return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a chat template weipipe recognises: name its family with --chat-template (%s)",
                   where, CHAT_NAMES);
}

void chat_template_free(chat_template *t) {
    free(t->default_system);
    free(t->bos);
    free(t->eos);
    free(t->text);
    memset(t, 0, sizeof *t);
}

/* ---- rendering ---- */

static wp_result put(chat_text *c, const char *s, size_t n) {
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n + 1) cap *= 2;
        char *grown = realloc(c->text, cap);
        if (!grown) return WP_FAILED;
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = 0;
    return 0;
}

static wp_result puts_(chat_text *c, const char *s) { return put(c, s, strlen(s)); }

/* A target range opens (begin) or closes at the current end of the text. */
static wp_result mark(chat_text *c) {
    if (c->n_span == c->cap_span) {
        int cap = c->cap_span ? 2 * c->cap_span : 16;
        size_t *grown = realloc(c->span, (size_t)cap * sizeof *grown);
        if (!grown) return WP_FAILED;
        c->span = grown;
        c->cap_span = cap;
    }
    c->span[c->n_span++] = c->len;
    return 0;
}

/* Python's str.isspace() code points, which str.strip() and Jinja's trim remove. */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The code point at s[i] (valid UTF-8: the reader checked it) and its length. */
static uint32_t cp_at(const unsigned char *s, size_t i, size_t *len) {
    unsigned char c = s[i];
    int k = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = k ? c & (0x3F >> k) : c;
    for (int j = 1; j <= k; j++) cp = (cp << 6) | (s[i + (size_t)j] & 0x3F);
    *len = (size_t)k + 1;
    return cp;
}

/* s[0, n) with Python's strip(): *start and *end narrowed. */
static void strip(const char *s, size_t n, size_t *start, size_t *end) {
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, b = n, l;
    while (a < b && py_space(cp_at(u, a, &l))) a += l;
    while (b > a) {
        size_t p = b - 1;
        while (p > a && (u[p] & 0xC0) == 0x80) p--;
        if (!py_space(cp_at(u, p, &l))) break;
        b = p;
    }
    *start = a;
    *end = b;
}

static wp_result put_stripped(chat_text *c, const char *s, size_t n) {
    size_t a, b;
    strip(s, n, &a, &b);
    return put(c, s + a, b - a);
}

static bool is(const chat_msg *m, const char *role) { return strcmp(m->role, role) == 0; }

#define R(x)                                                                                                         \
    do {                                                                                                             \
        if ((x) != 0) return WP_FAILED;                                                                              \
    } while (0)

static wp_result refuse(char *why, size_t whylen, const char *msg) {
    snprintf(why, whylen, "the chat template refuses the conversation: %s", msg);
    return WP_BAD_INPUT;
}

static const char ALTERNATE[] = "Conversation roles must alternate user/assistant/user/assistant/...";

static wp_result render_chatml(const chat_template *t, const chat_msg *m, int n, bool gen, chat_text *c) {
    for (int i = 0; i < n; i++) {
        if (i == 0 && t->default_system && !is(&m[0], "system")) {
            R(puts_(c, "<|im_start|>system\n"));
            R(puts_(c, t->default_system));
            R(puts_(c, "<|im_end|>\n"));
        }
        R(puts_(c, "<|im_start|>"));
        R(puts_(c, m[i].role));
        R(puts_(c, "\n"));
        bool a = is(&m[i], "assistant");
        if (a) R(mark(c));
        R(put(c, m[i].content, m[i].len));
        R(puts_(c, "<|im_end|>"));
        if (a) R(mark(c));
        R(puts_(c, "\n"));
    }
    if (gen) R(puts_(c, "<|im_start|>assistant\n"));
    return 0;
}

static wp_result render_llama3(const chat_template *t, const chat_msg *m, int n, bool gen, chat_text *c) {
    for (int i = 0; i < n; i++) {
        if (i == 0) R(puts_(c, t->bos));
        R(puts_(c, "<|start_header_id|>"));
        R(puts_(c, m[i].role));
        R(puts_(c, "<|end_header_id|>\n\n"));
        bool a = is(&m[i], "assistant");
        if (a) R(mark(c));
        R(put_stripped(c, m[i].content, m[i].len));
        R(puts_(c, "<|eot_id|>"));
        if (a) R(mark(c));
    }
    if (gen) R(puts_(c, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    return 0;
}

static wp_result render_llama2(const chat_template *t, const chat_msg *m, int n, chat_text *c, char *why, size_t whylen) {
    const bool sys = is(&m[0], "system");
    const chat_msg *loop = sys ? m + 1 : m;
    int ln = sys ? n - 1 : n;
    chat_text content = {0};
    wp_result rc = 0;
    for (int i = 0; rc == 0 && i < ln; i++) {
        if (is(&loop[i], "user") != (i % 2 == 0)) {
            rc = refuse(why, whylen, ALTERNATE);
            break;
        }
        content.len = 0;
        if (i == 0 && sys) {
            if (puts_(&content, "<<SYS>>\n") || put(&content, m[0].content, m[0].len) || puts_(&content, "\n<</SYS>>\n\n")) rc = WP_FAILED;
        }
        if (rc == 0 && put(&content, loop[i].content, loop[i].len)) rc = WP_FAILED;
        if (rc) break;
        if (is(&loop[i], "user")) {
            if (puts_(c, t->bos) || puts_(c, "[INST] ") || put_stripped(c, content.text, content.len) || puts_(c, " [/INST]")) rc = WP_FAILED;
        } else if (is(&loop[i], "assistant")) {
            if (puts_(c, " ") || mark(c) || put_stripped(c, content.text, content.len) || puts_(c, " ") || puts_(c, t->eos) || mark(c))
                rc = WP_FAILED;
        }
    }
    chat_text_free(&content);
    return rc;
}

static wp_result render_mistral(const chat_template *t, const chat_msg *m, int n, chat_text *c, char *why, size_t whylen) {
    R(puts_(c, t->bos));
    for (int i = 0; i < n; i++) {
        if (is(&m[i], "user") != (i % 2 == 0)) return refuse(why, whylen, ALTERNATE);
        if (is(&m[i], "user")) {
            R(puts_(c, "[INST] "));
            R(put(c, m[i].content, m[i].len));
            R(puts_(c, " [/INST]"));
        } else if (is(&m[i], "assistant")) {
            R(mark(c));
            R(put(c, m[i].content, m[i].len));
            R(puts_(c, t->eos));
            R(mark(c));
        } else {
            return refuse(why, whylen, "Only user and assistant roles are supported!");
        }
    }
    return 0;
}

static wp_result render_gemma(const chat_template *t, const chat_msg *m, int n, bool gen, chat_text *c, char *why, size_t whylen) {
    R(puts_(c, t->bos));
    if (is(&m[0], "system")) return refuse(why, whylen, "System role not supported");
    for (int i = 0; i < n; i++) {
        if (is(&m[i], "user") != (i % 2 == 0)) return refuse(why, whylen, ALTERNATE);
        bool a = is(&m[i], "assistant");
        R(puts_(c, "<start_of_turn>"));
        R(puts_(c, a ? "model" : m[i].role));
        R(puts_(c, "\n"));
        if (a) R(mark(c));
        R(put_stripped(c, m[i].content, m[i].len));
        R(puts_(c, "<end_of_turn>"));
        if (a) R(mark(c));
        R(puts_(c, "\n"));
    }
    if (gen) R(puts_(c, "<start_of_turn>model\n"));
    return 0;
}

static wp_result render_zephyr(const chat_template *t, const chat_msg *m, int n, bool gen, chat_text *c) {
    for (int i = 0; i < n; i++) {
        bool a = is(&m[i], "assistant");
        if (is(&m[i], "user") || is(&m[i], "system") || a) {
            R(puts_(c, is(&m[i], "user") ? "<|user|>\n" : a ? "<|assistant|>\n" : "<|system|>\n"));
            if (a) R(mark(c));
            R(put(c, m[i].content, m[i].len));
            R(puts_(c, t->eos));
            if (a) R(mark(c));
            R(puts_(c, "\n"));
        }
        if (i == n - 1 && gen) R(puts_(c, "<|assistant|>\n"));
    }
    return 0;
}

wp_result chat_render(const chat_template *t, const chat_msg *m, int n, bool generation_prompt, chat_text *out, char *why,
                      size_t whylen) {
    out->len = 0;
    out->n_span = 0;
    if (put(out, "", 0)) return wp_fail(WP_FAILED, why, whylen, "out of memory");
    if (n < 1) return wp_fail(WP_BAD_INPUT, why, whylen, "the conversation has no messages");
    wp_result rc = 0;
    switch (t->family) {
    case CHAT_CHATML: rc = render_chatml(t, m, n, generation_prompt, out); break;
    case CHAT_LLAMA3: rc = render_llama3(t, m, n, generation_prompt, out); break;
    case CHAT_LLAMA2: rc = render_llama2(t, m, n, out, why, whylen); break;
    case CHAT_MISTRAL: rc = render_mistral(t, m, n, out, why, whylen); break;
    case CHAT_GEMMA: rc = render_gemma(t, m, n, generation_prompt, out, why, whylen); break;
    case CHAT_ZEPHYR: rc = render_zephyr(t, m, n, generation_prompt, out); break;
    default: return wp_fail(WP_FAILED, why, whylen, "chat template: family %d unknown", (int)t->family);
    }
    if (rc == WP_FAILED) snprintf(why, whylen, "out of memory rendering a conversation");
    return rc;
}

void chat_text_free(chat_text *c) {
    free(c->text);
    free(c->span);
    memset(c, 0, sizeof *c);
}
