/* UTF-8 and the Unicode character classes the tokenizer.json encoder needs (tokjson.h): the
 * reading of one character, the repair of invalid input, and the predicates Rust's `char` and
 * `regex` give the `tokenizers` library (whitespace, numeric, word character), taken from
 * utf8proc's tables. */
#ifndef WP_IO_TOK_UTF8_H
#define WP_IO_TOK_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One code point from valid UTF-8 s[*i..n); *i moves past it. */
uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i);
/* Bytes of the UTF-8 character that starts with byte c (1 for a stray byte). */
size_t utf8_len(unsigned char c);
/* Writes c as UTF-8 into out (4 bytes of room), returns the byte count. */
size_t utf8_put(uint32_t c, char *out);

/* Invalid UTF-8 made valid as Python's bytes.decode('utf-8', errors='replace') and Rust's
 * String::from_utf8_lossy do it (the tokenizers library takes only valid text): each maximal
 * subpart of an ill-formed sequence becomes one U+FFFD. Returns the length of s when it is
 * valid already (*out untouched), else writes a malloc'd copy to *out and returns its length;
 * (size_t)-1 when out of memory. */
size_t utf8_repair(const char *s, size_t n, char **out);

bool uni_is_whitespace(uint32_t c); /* Rust char::is_whitespace, regex \s (White_Space) */
bool uni_is_numeric(uint32_t c);    /* Rust char::is_numeric: categories Nd, Nl, No */
bool uni_is_word(uint32_t c);       /* Rust regex \w: letters, marks, Nd, Nl, Pc */

#endif
