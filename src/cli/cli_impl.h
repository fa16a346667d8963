/* Private to src/cli: the flag table and the subcommand table that cli.c parses with and
 * cli_help.c prints and suggests from. */
#ifndef WP_CLI_IMPL_H
#define WP_CLI_IMPL_H

#include "cli.h"

typedef struct {
    const char *name;
    wp_flag_type type;
    const char *def;
    unsigned cmds;
    const char *help;
    size_t offset;
} flag_info;

extern const flag_info flags[FLAG_COUNT];

#define CLI_N_COMMANDS 10
typedef struct {
    const char *name;
    unsigned bit;
    int max_args;        /* positional arguments it takes */
    const char *summary;
    const char *formats; /* "{text|csv}": its --format choices; NULL: takes no --format */
} cli_command_info;

extern const cli_command_info commands[CLI_N_COMMANDS];

/* The subcommand of a C_* bit, NULL when none. */
const cli_command_info *cli_command_of(unsigned bit);
/* Index of a flag by its long name, -1 when none. */
int cli_find_flag(const char *name);

/* The one-line refusal of an unknown flag or config key `name` (no dashes) seen by subcommand
 * cmd (0: a config file, which may set any key): the closest flag by edit distance, a known
 * spelling of another trainer (--max-steps, Hugging Face's num_hidden_layers) or the same
 * words with hyphens (--num_layers). what: "flag '--x'" or "key 'x'" as the caller names it. */
wp_result cli_unknown_flag(const char *name, const char *what, unsigned cmd, char *err, size_t errlen);

/* ENUM flags (choices.c): whether name is one of the flag's choices (then *value is its enum);
 * the field of o as an int, read and written. */
bool cli_enum_parse(int flag, const char *name, int *value);
int cli_enum_get(const wp_opts *o, int flag);
void cli_enum_set(wp_opts *o, int flag, int value);
/* Bytes of a flag's field in wp_opts. */
size_t cli_flag_size(int flag);

#endif
