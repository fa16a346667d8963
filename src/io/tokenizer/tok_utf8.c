/* UTF-8 helpers and Unicode classes for the tokenizer.json encoder (tok_utf8.h). */
#include "tok_utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
    uint32_t c = s[(*i)++];
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    c &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0x7F;
    for (; more > 0 && *i < n; more--) c = (c << 6) | (s[(*i)++] & 0x3F);
    return c;
}

size_t utf8_len(unsigned char c) { return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1; }

size_t utf8_put(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The well-formed sequence starting at s[i]: its length, or 0 when it is ill-formed, with
 * *bad the length of its maximal subpart (at least 1) per Unicode's table 3-7. */
static size_t utf8_wellformed(const unsigned char *s, size_t n, size_t i, size_t *bad) {
    unsigned char c = s[i];
    *bad = 1;
    if (c < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    size_t j = i + 1;
    for (size_t k = 0; k < need; k++, j++) {
        unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
        if (j >= n || s[j] < l || s[j] > h) {
            *bad = j - i;
            return 0;
        }
    }
    return need + 1;
}

size_t utf8_repair(const char *str, size_t n, char **out) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, bad;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_wellformed(s, n, i, &bad);
        if (!k) break;
        i += k;
    }
    if (i == n) return n;
    /* each maximal subpart (>= 1 byte) becomes 3 bytes: at most 3n */
    char *o = malloc(3 * n + 1);
    if (!o) return (size_t)-1;
    memcpy(o, s, i);
    size_t m = i;
    while (i < n) {
        size_t k = utf8_wellformed(s, n, i, &bad);
        if (k) {
            memcpy(o + m, s + i, k);
            m += k;
            i += k;
        } else {
            m += utf8_put(0xFFFD, o + m);
            i += bad;
        }
    }
    *out = o;
    return m;
}

bool uni_is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool uni_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool uni_is_word(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}
