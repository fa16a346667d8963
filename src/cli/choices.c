/* The enumerated flags' names and values, by flag (choices.h): what cli.c parses an ENUM flag
 * with and prints it back by. Made from the same lists as the --help choices. */
#include "cli_impl.h"

#include <assert.h>
#include <string.h>

#define LIST_(f)                                                                                              \
    static const char *const f##_names[] = {WP_CHOICES_##f(WP_CHOICE_NAME_, WP_CHOICE_COMMA_)};                \
    static const int f##_values[] = {WP_CHOICES_##f(WP_CHOICE_VALUE_, WP_CHOICE_COMMA_)};
LIST_(precision)
LIST_(backend)
LIST_(attention)
LIST_(lr_decay_style)
LIST_(wzb2_owner)
LIST_(i1f1b_order)
LIST_(train_on)
LIST_(optimizer_memory)
LIST_(doc_positions)
LIST_(format)
#undef LIST_

/* the tables' own rows, in their order (the enums are made from the same rows) */
#define STRAT_NAME_(id, name, gen, check, chunks, traits, knobs) name,
static const char *const strategy_names[] = {WP_STRATEGIES(STRAT_NAME_) "all", "auto"};
static const int strategy_values[] = {WP_STRATEGIES(WP_STRAT_ENUM_) WP_STRAT_ALL, WP_STRAT_AUTO};
static const char *const transport_names[] = {WP_TRANSPORTS(WP_TP_STR_, WP_CHOICE_COMMA_)};
static const int transport_values[] = {WP_TRANSPORTS(WP_TRANSPORT_ENUM_, WP_CHOICE_COMMA_)};
static_assert(sizeof strategy_names / sizeof strategy_names[0] == WP_STRAT_AUTO + 1, "a name per wp_strategy, all, auto");
static_assert(sizeof transport_names / sizeof transport_names[0] == WP_TRANSPORT_COUNT, "a name per transport row");

typedef struct {
    const char *const *names;
    const int *values;
    int n;
} enum_info;

/* one entry per ENUM row of flags.def: a row without its list above does not compile */
#define INFO_INT(f)
#define INFO_NUM(f)
#define INFO_STR(f)
#define INFO_TEXT(f)
#define INFO_BOOL(f)
#define INFO_RATE(f)
#define INFO_TIME(f)
#define INFO_SIZE(f)
#define INFO_ENUM(f) [FLAG_##f] = {f##_names, f##_values, (int)(sizeof f##_names / sizeof f##_names[0])},
static const enum_info enums[FLAG_COUNT] = {
#define X(field, name, type, def, cmds, help) INFO_##type(field)
#include "flags.def"
#undef X
};

/* cli_enum_get/set move an int: every flag's enum must be one */
#define SIZE_INT(f)
#define SIZE_NUM(f)
#define SIZE_STR(f)
#define SIZE_TEXT(f)
#define SIZE_BOOL(f)
#define SIZE_RATE(f)
#define SIZE_TIME(f)
#define SIZE_SIZE(f)
#define SIZE_ENUM(f) static_assert(sizeof(WP_ENUM_TYPE_##f) == sizeof(int), "--" #f "'s enum is an int");
#define X(field, name, type, def, cmds, help) SIZE_##type(field)
#include "flags.def"
#undef X

bool cli_enum_parse(int flag, const char *name, int *value) {
    const enum_info *e = &enums[flag];
    for (int k = 0; k < e->n; k++)
        if (strcmp(e->names[k], name) == 0) return *value = e->values[k], true;
    return false;
}

const char *cli_enum_name(int flag, int value) {
    if (flag < 0 || flag >= FLAG_COUNT) return "?";
    const enum_info *e = &enums[flag];
    for (int k = 0; k < e->n; k++)
        if (e->values[k] == value) return e->names[k];
    return "?";
}

int cli_enum_get(const wp_opts *o, int flag) {
    int v;
    memcpy(&v, (const char *)o + flags[flag].offset, sizeof v);
    return v;
}

void cli_enum_set(wp_opts *o, int flag, int value) { memcpy((char *)o + flags[flag].offset, &value, sizeof value); }

size_t cli_flag_size(int flag) {
    switch (flags[flag].type) {
    case FT_STR: return sizeof ((wp_opts *)0)->config;
    case FT_TEXT: return sizeof(const char *);
    case FT_BOOL: return sizeof(bool);
    case FT_ENUM: return sizeof(int);
    case FT_INT:
    case FT_SIZE: return sizeof(int64_t);
    default: return sizeof(double);
    }
}
