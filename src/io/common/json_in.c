#include "json_in.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer token (an optional '-', then digits) whose magnitude passes INT64's: more than 19
 * digits, or 19 that compare above 9223372036854775807 (…808 with the sign). Leading zeros are
 * not valid JSON and are left for jansson to refuse. */
static bool int_overflows(const char *s, size_t n) {
    bool neg = n > 0 && s[0] == '-';
    const char *d = s + neg;
    size_t nd = n - neg;
    if (nd < 19) return false;
    if (nd > 19) return true;
    return strncmp(d, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

/* The end of the number token starting at s[i] (JSON's number characters). */
static size_t number_end(const char *s, size_t len, size_t i) {
    while (i < len && (strchr("+-.eE", s[i]) || (s[i] >= '0' && s[i] <= '9')) && s[i] != '\0') i++;
    return i;
}

/* Counts the integer tokens outside strings that pass 64 bits and, when out is given, writes the
 * text with ".0" after each of them (*out_len: the rewritten length). The
 * scan follows JSON's lexical rules only as far as telling strings (with their escapes) from the
 * rest: anything malformed is passed through unchanged for jansson to report. */
static size_t scan_big(const char *s, size_t len, char *out, size_t *out_len) {
    size_t count = 0, o = 0, i = 0;
    bool in_str = false;
    while (i < len) {
        char c = s[i];
        if (in_str) {
            if (c == '\\' && i + 1 < len) {
                if (out) out[o] = c;
                o++;
                c = s[++i];
            } else if (c == '"') {
                in_str = false;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = number_end(s, len, i), n = end - i;
            bool integer = true;
            for (size_t k = i; k < end; k++)
                if (s[k] == '.' || s[k] == 'e' || s[k] == 'E' || s[k] == '+' || (s[k] == '-' && k > i)) integer = false;
            if (out) memcpy(out + o, s + i, n);
            o += n;
            if (integer && int_overflows(s + i, n)) {
                /* ".0" makes it a real for jansson's strtod; the line is unchanged */
                if (out) memcpy(out + o, ".0", 2);
                o += 2;
                count++;
            }
            i = end;
            continue;
        }
        if (out) out[o] = c;
        o++;
        i++;
    }
    if (out_len) *out_len = o;
    return count;
}

json_t *json_in_loadb(const char *text, size_t len, size_t flags, json_error_t *error) {
    size_t need;
    if (scan_big(text, len, NULL, &need) == 0) return json_loadb(text, len, flags, error);
    char *copy = malloc(need ? need : 1);
    if (!copy) {
        if (error) {
            memset(error, 0, sizeof *error);
            snprintf(error->text, sizeof error->text, "out of memory rewriting %zu bytes of big integers", len);
        }
        return NULL;
    }
    scan_big(text, len, copy, NULL);
    json_t *j = json_loadb(copy, need, flags, error);
    free(copy);
    return j;
}
