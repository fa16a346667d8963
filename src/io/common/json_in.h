/* The one way JSON from elsewhere is parsed: jansson, taking what the ecosystem writes. */
#ifndef WP_IO_JSON_IN_H
#define WP_IO_JSON_IN_H

#include <stddef.h>

#include <jansson.h>

/* json_loadb, except that an integer too large for 64 bits becomes a real instead of an error.
 * transformers writes `"model_max_length": 1000000000000000019884624838656` (its
 * VERY_LARGE_INTEGER, int(1e30)) into the tokenizer_config.json of every tokenizer without a
 * length limit; jansson refuses such integers ("too big integer"), Python reads them. Every
 * other number keeps jansson's reading: integers that fit stay integers, so readers of ids,
 * counts and offsets see no change; error lines are the text's own. */
json_t *json_in_loadb(const char *text, size_t len, size_t flags, json_error_t *error);

#endif
