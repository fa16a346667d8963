/* Fields of JSON records (records.h). */
#include "records.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

wp_result record_text(json_t *rec, const char *field, const char **text, size_t *len, char *why, size_t whylen) {
    if (!json_is_object(rec)) return wp_fail(WP_BAD_INPUT, why, whylen, "the record is %s, not an object with a field \"%s\"", kind(rec), field);
    json_t *v = json_object_get(rec, field);
    if (!v) return wp_fail(WP_BAD_INPUT, why, whylen, "no field \"%s\"", field);
    if (!json_is_string(v)) return wp_fail(WP_BAD_INPUT, why, whylen, "field \"%s\" is %s, not a string", field, kind(v));
    *text = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

wp_result record_messages(json_t *rec, chat_msg **msgs, int *n, int *cap, char *why, size_t whylen) {
    *n = 0;
    if (!json_is_object(rec)) return wp_fail(WP_BAD_INPUT, why, whylen, "the record is %s, not an object with a field \"messages\"", kind(rec));
    json_t *a = json_object_get(rec, "messages");
    if (!a) return wp_fail(WP_BAD_INPUT, why, whylen, "no field \"messages\"");
    if (!json_is_array(a)) return wp_fail(WP_BAD_INPUT, why, whylen, "field \"messages\" is %s, not an array", kind(a));
    size_t count = json_array_size(a);
    if (count == 0) return wp_fail(WP_BAD_INPUT, why, whylen, "field \"messages\" is empty");
    if (count > (size_t)INT32_MAX / 2) return wp_fail(WP_BAD_INPUT, why, whylen, "field \"messages\" holds too many messages");
    if ((int)count > *cap) {
        chat_msg *grown = realloc(*msgs, count * sizeof *grown);
        if (!grown) return wp_fail(WP_FAILED, why, whylen, "out of memory for %zu messages", count);
        *msgs = grown;
        *cap = (int)count;
    }
    for (size_t i = 0; i < count; i++) {
        json_t *m = json_array_get(a, i);
        if (!json_is_object(m)) return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu] is %s, not an object", i, kind(m));
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!role) return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu] has no \"role\"", i);
        if (!json_is_string(role)) return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu].role is %s, not a string", i, kind(role));
        const char *r = json_string_value(role);
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)
            return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu].role \"%.40s\" is not system, user or assistant", i, r);
        if (!content) return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu] has no \"content\"", i);
        if (!json_is_string(content))
            return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu].content is %s, not a string", i, kind(content));
        if (memchr(json_string_value(content), 0, json_string_length(content)))
            return wp_fail(WP_BAD_INPUT, why, whylen, "messages[%zu].content holds a NUL character", i);
        (*msgs)[i] = (chat_msg){.role = r, .content = json_string_value(content), .len = json_string_length(content)};
    }
    *n = (int)count;
    return 0;
}
