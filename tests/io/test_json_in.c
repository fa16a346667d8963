/* json_in_loadb (src/io/common/json_in.h) against the JSON reading Python gives (transformers writes
 * the files; Python's json reads them): integers past 64 bits read as the nearest double, every
 * other integer exactly, strings untouched whatever digits or escapes they hold, error lines
 * those of the text as written. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_in.h"

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static json_t *load(const char *text, json_error_t *je) { return json_in_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, je); }

/* The value of key k as a real (it must be one) or an integer (it must be one). */
static void want_real(const char *text, const char *k, double want) {
    json_error_t je;
    json_t *j = load(text, &je);
    CHECK(j, "%s: not parsed: %s", text, je.text);
    json_t *v = json_object_get(j, k);
    CHECK(json_is_real(v) && json_real_value(v) == want, "%s: %s is not the real %.17g", text, k, want);
    json_decref(j);
}

static void want_int(const char *text, const char *k, json_int_t want) {
    json_error_t je;
    json_t *j = load(text, &je);
    CHECK(j, "%s: not parsed: %s", text, je.text);
    json_t *v = json_object_get(j, k);
    CHECK(json_is_integer(v) && json_integer_value(v) == want, "%s: %s is not the integer %lld", text, k, (long long)want);
    json_decref(j);
}

static void want_string(const char *text, const char *k, const char *want) {
    json_error_t je;
    json_t *j = load(text, &je);
    CHECK(j, "%s: not parsed: %s", text, je.text);
    const char *got = json_string_value(json_object_get(j, k));
    CHECK(got && strcmp(got, want) == 0, "%s: %s is '%s', want '%s'", text, k, got ? got : "(none)", want);
    json_decref(j);
}

static void want_error_line(const char *text, int line) {
    json_error_t je;
    json_t *j = load(text, &je);
    CHECK(!j, "%s: parsed, want an error", text);
    CHECK(je.line == line, "%s: error on line %d, want %d (%s)", text, je.line, line, je.text);
    json_decref(j);
}

int main(void) {
    /* transformers' VERY_LARGE_INTEGER, int(1e30), as save_pretrained writes it */
    want_real("{\"model_max_length\": 1000000000000000019884624838656}", "model_max_length", 1e30);
    want_real("{\"a\": -1000000000000000019884624838656}", "a", -1e30);
    /* the 64-bit edges: INT64_MAX and INT64_MIN stay integers, one past them become reals */
    want_int("{\"a\": 9223372036854775807}", "a", INT64_MAX);
    want_int("{\"a\": -9223372036854775808}", "a", INT64_MIN);
    want_real("{\"a\": 9223372036854775808}", "a", 9223372036854775808.0);
    want_real("{\"a\": -9223372036854775809}", "a", -9223372036854775809.0);
    want_real("{\"a\": 99999999999999999999}", "a", 1e20);
    /* ordinary numbers keep jansson's reading */
    want_int("{\"a\": 0}", "a", 0);
    want_int("{\"a\": -7}", "a", -7);
    want_int("{\"a\": 128256}", "a", 128256);
    want_real("{\"a\": 1e5}", "a", 1e5);
    want_real("{\"a\": -2.5E-3}", "a", -2.5e-3);
    want_real("{\"a\": 12345678901234567890123e-3}", "a", 12345678901234567890123e-3);
    /* digits in strings are text: keys, values, escapes, a quote escaped before digits */
    want_string("{\"x\": \"99999999999999999999\", \"y\": 1000000000000000019884624838656}", "x", "99999999999999999999");
    want_string("{\"x\": \"a\\\"99999999999999999999\"}", "x", "a\"99999999999999999999");
    want_string("{\"x\": \"\\\\\", \"99999999999999999999\": \"k\"}", "99999999999999999999", "k");
    want_string("{\"x\": \"\\u00e9 1e999999\"}", "x", "\xc3\xa9 1e999999");
    /* nested, in arrays, several at once */
    {
        const char *t = "{\"l\": [1, 18446744073709551616, {\"m\": -18446744073709551616}], \"n\": 3}";
        json_error_t je;
        json_t *j = load(t, &je);
        CHECK(j, "%s: %s", t, je.text);
        json_t *l = json_object_get(j, "l");
        CHECK(json_integer_value(json_array_get(l, 0)) == 1, "l[0]");
        CHECK(json_real_value(json_array_get(l, 1)) == 18446744073709551616.0, "l[1]");
        CHECK(json_real_value(json_object_get(json_array_get(l, 2), "m")) == -18446744073709551616.0, "l[2].m");
        CHECK(json_integer_value(json_object_get(j, "n")) == 3, "n");
        json_decref(j);
    }
    /* still refused: what is not JSON, on the line where it is, rewritten or not */
    want_error_line("{\n\"a\": 1,\n\"b\": 01}", 3);
    want_error_line("{\n\"a\": 1000000000000000019884624838656,\n\"b\": }", 3);
    want_error_line("{\"a\": 1,\n \"a\": 2}", 2); /* duplicates, as the flags say */
    want_error_line("{\"a\": \"unterminated 99999999999999999999999}", 1);
    if (failures) {
        printf("%d failed\n", failures);
        return 1;
    }
    printf("PASS: json_in_loadb\n");
    return 0;
}
