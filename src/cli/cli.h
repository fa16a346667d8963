/* Command line and INI config: one table (flags.def) drives parsing, config keys and --help.
 * src/cli is where flags end: adapters.h turns them into the plain structs of every layer below
 * (it uses all of them but src/faults), and nothing below it sees a wp_opts
 * (docs/architecture.md). */
#ifndef WP_CLI_H
#define WP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "choices.h" /* the enumerated flags' C types */
#include "result.h"

enum {
    C_TRAIN = 1u << 0,
    C_EVAL = 1u << 1,
    C_SCHEDULE = 1u << 2,
    C_SIMULATE = 1u << 3,
    C_PREPARE = 1u << 4,
    C_EXPORT = 1u << 5,
    C_CHECK = 1u << 6,
    C_BENCH = 1u << 7,
    C_TRACE_MERGE = 1u << 8,
    C_SAMPLE = 1u << 9,
};
#define C_ALL (C_TRAIN | C_EVAL | C_SCHEDULE | C_SIMULATE | C_PREPARE | C_EXPORT | C_CHECK | C_BENCH | C_TRACE_MERGE | C_SAMPLE)
/* the subcommands that build a model from flags; eval, export and sample take the shape from
 * the checkpoint (or config.json) and read only the few C_RUN flags and their own */
#define C_MODEL (C_TRAIN | C_CHECK | C_BENCH | C_SIMULATE | C_SCHEDULE)
/* the subcommands that run the model on a backend (simulate and schedule only model it) */
#define C_RUN (C_TRAIN | C_CHECK | C_BENCH | C_EVAL | C_SAMPLE)
#define C_PIPE (C_TRAIN | C_SCHEDULE | C_SIMULATE | C_BENCH)
#define C_DATA (C_TRAIN | C_EVAL | C_BENCH)
#define C_PACE (C_TRAIN | C_SIMULATE | C_SCHEDULE)

typedef enum { FT_INT, FT_NUM, FT_STR, FT_TEXT, FT_BOOL, FT_RATE, FT_TIME, FT_SIZE, FT_ENUM } wp_flag_type;

/* Flag identifiers, FLAG_num_layers etc., in table order. */
enum {
#define X(field, name, type, def, cmds, help) FLAG_##field,
#include "flags.def"
#undef X
    FLAG_COUNT
};

#define WP_MAX_ARGS 64

/* Every option of every subcommand, with its value after defaults, config file and flags.
 * Field types: INT/SIZE -> int64_t, NUM/RATE/TIME -> double (RATE in bytes/s, TIME in s),
 * STR -> char[256], TEXT -> const char * (never NULL after cli_parse; the command line's own
 * string, or a copy kept for the process), BOOL -> bool, ENUM -> its C enum (choices.h: wp_strategy, wp_precision, ...;
 * --strategy also WP_STRAT_ALL or WP_STRAT_AUTO). */
typedef struct wp_opts {
#define WP_FIELD_INT(f) int64_t f;
#define WP_FIELD_NUM(f) double f;
#define WP_FIELD_RATE(f) double f;
#define WP_FIELD_TIME(f) double f;
#define WP_FIELD_SIZE(f) int64_t f;
#define WP_FIELD_BOOL(f) bool f;
#define WP_FIELD_STR(f) char f[256];
#define WP_FIELD_TEXT(f) const char *f;
#define WP_FIELD_ENUM(f) WP_ENUM_TYPE_##f f;
#define X(field, name, type, def, cmds, help) WP_FIELD_##type(field)
#include "flags.def"
#undef X
    bool set[FLAG_COUNT];        /* given by a flag or the config file (not a default) */
    unsigned cmd;                /* the subcommand, one C_* bit */
    const char *cmd_name;
    int nargs;                   /* positional arguments, in order */
    const char *args[WP_MAX_ARGS];
    double attn_share_data;      /* --doc-mask: the share of attention's pairs train measured in
                                    its data (layout.h: attn_share); 0: not measured */
} wp_opts;

/* Subcommand name -> C_* bit, or 0 when unknown. */
unsigned cli_command(const char *name);

/* Fill o from defaults, then the --config file, then argv (argv[0] is the subcommand).
 * Returns 0, or 2 with a one-line reason in err naming the flag, file or key. TEXT flags given
 * in argv point into it: argv must outlive o. */
wp_result cli_parse(int argc, char **argv, wp_opts *o, char *err, size_t errlen);

/* Apply one key = value (as from a config file); 'where' names it in errors. Returns 0 or 2. */
wp_result cli_set(wp_opts *o, const char *key, const char *value, const char *where, char *err, size_t errlen);

/* The flags of `train` that every rank of one job must share, as "name=value\n" lines in table
 * order (values after the config file; the rendezvous compares their hash across ranks, see
 * ring/bootstrap.h). Left out: what may differ per rank or per host (--config's path, --bind,
 * --trace, --metrics, --quiet, --threads, timeouts, RDMA device, --nranks, which the launcher's
 * world size replaces). Returns WP_OK, or WP_FAILED (no line: there is no err) when out is too
 * small or memory ran out. */
wp_result cli_job_flags(const wp_opts *o, char *out, size_t outlen);

/* The flags of one subcommand (or all when cmd = 0), generated from the table. */
void cli_print_flags(FILE *f, unsigned cmd);

/* Write every option with its value as INI (round-trips through --config). */
void cli_write_ini(FILE *f, const wp_opts *o, unsigned cmd_mask);
/* The same options as one JSON object {"flag-name": value, ...}: numbers as numbers (null when
 * not finite), booleans, strings escaped; sizes and rates in bytes, times in seconds. */
void cli_write_json(FILE *f, const wp_opts *o, unsigned cmd_mask);

/* The name of an enumerated flag's value as the user spells it ("bf16" for --precision
 * WP_PREC_BF16): for messages and for writing flags back out; "?" for no such value. */
const char *cli_enum_name(int flag, int value);

/* Parsers shared with other inputs (bandwidths, durations, sizes): whether s parses (then the
 * value is set). Questions without err: the caller names the flag or field the text came from
 * and what it should look like. */
bool cli_parse_rate(const char *s, double *bytes_per_s);
bool cli_parse_time(const char *s, double *seconds);
bool cli_parse_size(const char *s, int64_t *bytes);

const char *cli_flag_name(int flag);

#endif
