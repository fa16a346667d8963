/* The ranges of numeric flags (private to src/cli): checked by the parser for every value it
 * sets, from the command line or a config file, so no call site needs its own check. */
#ifndef WP_CLI_FLAG_BOUNDS_H
#define WP_CLI_FLAG_BOUNDS_H

#include <stddef.h>

#include "cli.h"

/* 0, or 2 with "<where>--<name>: <value> ..." naming the range when flag's parsed value (the
 * field of that flag's type) lies outside it. */
wp_result cli_check_bound(int flag, wp_flag_type type, const void *field, const char *name, const char *where, char *err,
                    size_t errlen);

/* Whether flag has a range in the table (every numeric flag must: tests/cli). */
bool cli_flag_bounded(int flag);

#endif
