/* Parsing of flags and INI config files from the single table in flags.def. */
#include "cli.h"
#include "cli_impl.h"
#include "flag_bounds.h"
#include "fsutil.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const flag_info flags[FLAG_COUNT] = {
#define X(field, name, type, def, cmds, help) {name, FT_##type, def, cmds, help, offsetof(wp_opts, field)},
#include "flags.def"
#undef X
};

/* formats: the --format choices of the subcommands that print tables (cmd_*.c read them). */
const cli_command_info commands[CLI_N_COMMANDS] = {
    {"train", C_TRAIN, 0, "train a model (one rank, or a ring of --nranks)", NULL},
    {"eval", C_EVAL, 1, "CKPT_DIR: mean next-token loss of a checkpoint on a shard", NULL},
    {"schedule", C_SCHEDULE, 0, "print, validate and draw a strategy's action lists", "{text|csv|json}"},
    {"simulate", C_SIMULATE, 0, "predict step time, bubble, traffic and memory per strategy", "{text|csv|json}"},
    {"prepare", C_PREPARE, WP_MAX_ARGS, "TEXT_FILE...: turn text files into token shards (llm.c layout)", NULL},
    {"export", C_EXPORT, 2, "CKPT_DIR OUT_DIR: write a checkpoint as Hugging Face Llama safetensors", NULL},
    {"check", C_CHECK, 0, "forward and backward of a config on random tokens, with finite differences", "{text|json}"},
    {"bench", C_BENCH, 0, "time the kernels and a model step", "{text|csv|json}"},
    {"trace-merge", C_TRACE_MERGE, WP_MAX_ARGS, "OUT.json IN.json...: one trace of every rank's --trace file", NULL},
    {"sample", C_SAMPLE, 1, "CKPT_DIR|HF_DIR: generate tokens from a prompt (KV cache, one rank)", "{text|ids}"},
};

const char *cli_flag_name(int flag) { return flag >= 0 && flag < FLAG_COUNT ? flags[flag].name : "?"; }

unsigned cli_command(const char *name) {
    for (size_t i = 0; i < CLI_N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return commands[i].bit;
    return 0;
}

const cli_command_info *cli_command_of(unsigned bit) {
    for (size_t i = 0; i < CLI_N_COMMANDS; i++)
        if (commands[i].bit == bit) return &commands[i];
    return NULL;
}

static const char *command_name(unsigned bit) { return cli_command_of(bit) ? cli_command_of(bit)->name : "?"; }

static int command_max_args(unsigned bit) { return cli_command_of(bit) ? cli_command_of(bit)->max_args : 0; }

int cli_find_flag(const char *name) {
    for (int i = 0; i < FLAG_COUNT; i++)
        if (strcmp(flags[i].name, name) == 0) return i;
    return -1;
}

/* A number followed by an optional unit; the unit is returned in *unit (may be ""). */
static bool split_number(const char *s, double *v, const char **unit) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(*v)) return false;
    while (*end == ' ') end++;
    *unit = end;
    return true;
}

bool cli_parse_rate(const char *s, double *bytes_per_s) {
    static const struct { const char *unit; double bytes; } units[] = {
        {"bit", 1.0 / 8}, {"Kbit", 1e3 / 8}, {"Mbit", 1e6 / 8}, {"Gbit", 1e9 / 8}, {"Tbit", 1e12 / 8},
        {"Byte", 1}, {"KByte", 1e3}, {"MByte", 1e6}, {"GByte", 1e9}, {"TByte", 1e12},
    };
    double v;
    const char *unit;
    if (!split_number(s, &v, &unit) || v < 0) return false;
    size_t n = strlen(unit);
    if (n >= 2 && strcmp(unit + n - 2, "/s") == 0) n -= 2;
    if (n == 0) return v == 0 ? (*bytes_per_s = 0, true) : false; /* a bare number is ambiguous */
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strlen(units[i].unit) == n && strncmp(unit, units[i].unit, n) == 0) {
            *bytes_per_s = v * units[i].bytes;
            return true;
        }
    return false;
}

bool cli_parse_time(const char *s, double *seconds) {
    static const struct { const char *unit; double s; } units[] = {
        {"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"m", 60}, {"min", 60}, {"h", 3600},
    };
    double v;
    const char *unit;
    if (!split_number(s, &v, &unit) || v < 0) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(unit, units[i].unit) == 0) {
            *seconds = v * units[i].s;
            return true;
        }
    return false;
}

bool cli_parse_size(const char *s, int64_t *bytes) {
    static const struct { const char *unit; double b; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MB", 1e6},
        {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GB", 1e9}, {"GiB", 1073741824.0},
        {"T", 1099511627776.0}, {"TB", 1e12}, {"TiB", 1099511627776.0},
    };
    double v;
    const char *unit;
    if (!split_number(s, &v, &unit) || v < 0) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(unit, units[i].unit) == 0) {
            double b = v * units[i].b;
            if (b > 9.2e18) return false;
            *bytes = (int64_t)b;
            return true;
        }
    return false;
}

static bool parse_int(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out) {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, true;
        if (strcasecmp(s, no[i]) == 0) return *out = false, true;
    }
    return false;
}

/* The choices of a flag for one subcommand: --format's are the subcommand's own. */
static const char *choices_of(int flag, unsigned cmd) {
    const cli_command_info *c = cli_command_of(cmd);
    if (flag == FLAG_format && c && c->formats) return c->formats;
    return flags[flag].help;
}

static wp_result check_choice_for(int flag, unsigned cmd, const char *value, char *err, size_t errlen) {
    const char *help = choices_of(flag, cmd);
    if (help[0] != '{') return 0;
    const char *close = strchr(help, '}');
    size_t vlen = strlen(value);
    for (const char *p = help + 1; p < close;) {
        const char *q = p;
        while (q < close && *q != '|') q++;
        if ((size_t)(q - p) == vlen && strncmp(p, value, vlen) == 0) return 0;
        p = q + 1;
    }
    return wp_fail(WP_BAD_INPUT, err, errlen, "--%s: '%s' is not one of %.*s%s%s", flags[flag].name, value, (int)(close - help + 1), help,
                    help != flags[flag].help ? " for " : "", help != flags[flag].help ? command_name(cmd) : "");
}

/* TEXT values from a config file (or cli_set): copies kept for the whole process (inih reuses its
 * line buffer, and a wp_opts is copied by value); reachable from here, so never reported as
 * leaks. A command line's values are used in place: argv lives as long as the process. */
typedef struct kept_text {
    struct kept_text *next;
    char s[];
} kept_text;
static kept_text *kept_texts;
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *keep_text(const char *value) {
    if (!value[0]) return "";
    size_t n = strlen(value);
    kept_text *k = malloc(sizeof *k + n + 1);
    if (!k) return NULL;
    memcpy(k->s, value, n + 1);
    pthread_mutex_lock(&kept_mu);
    k->next = kept_texts;
    kept_texts = k;
    pthread_mutex_unlock(&kept_mu);
    return k->s;
}

/* lasting: value outlives the options (argv, a default), so a TEXT flag may point at it. */
static wp_result set_value(wp_opts *o, int i, const char *value, bool lasting, const char *where, char *err,
                           size_t errlen) {
    void *field = (char *)o + flags[i].offset;
    const flag_info *f = &flags[i];
    int bad = 0;
    const char *expect = "";
    switch (f->type) {
    case FT_INT: bad = !parse_int(value, field); expect = "an integer"; break;
    case FT_SIZE: bad = !cli_parse_size(value, field); expect = "a size such as 512M or 16G"; break;
    case FT_BOOL: bad = !parse_bool(value, field); expect = "true or false"; break;
    case FT_RATE: bad = !cli_parse_rate(value, field); expect = "a rate such as 10Gbit or 400GByte (per second)"; break;
    case FT_TIME: bad = !cli_parse_time(value, field); expect = "a duration such as 20us, 5ms or 30s"; break;
    case FT_NUM: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        bad = end == value || *end != '\0' || isnan(v);
        if (!bad && (isinf(v) || (errno == ERANGE && fabs(v) >= 1)))
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: '%s' is out of range: beyond the largest number, %g", where,
                           f->name, value, DBL_MAX);
        /* an underflow (1e-308) keeps strtod's tiny value: the flag's range names what is wrong */
        if (!bad) *(double *)field = v;
        expect = "a number";
        break;
    }
    case FT_STR:
        if (strlen(value) >= 256) return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: value longer than 255 characters", where, f->name);
        strcpy(field, value);
        break;
    case FT_TEXT: {
        const char *kept = lasting ? value : keep_text(value);
        if (!kept) return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: out of memory for its %zu characters", where, f->name, strlen(value));
        *(const char **)field = kept;
        break;
    }
    case FT_ENUM: { /* parsed here, once: the rest of weipipe sees the enum */
        int v;
        if (strlen(value) >= 256) return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: value longer than 255 characters", where, f->name);
        WP_TRY(check_choice_for(i, o->cmd, value, err, errlen));
        if (!cli_enum_parse(i, value, &v)) /* a subcommand's --format that choices.h lacks (tests/cli checks) */
            return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: '%s' has no value in choices.h", where, f->name, value);
        cli_enum_set(o, i, v);
        break;
    }
    }
    if (bad) return wp_fail(WP_BAD_INPUT, err, errlen, "%s--%s: '%s' is not %s", where, f->name, value, expect);
    WP_TRY(cli_check_bound(i, f->type, field, f->name, where, err, errlen));
    o->set[i] = true;
    return 0;
}

wp_result cli_set(wp_opts *o, const char *key, const char *value, const char *where, char *err, size_t errlen) {
    int i = cli_find_flag(key);
    if (i < 0) {
        char what[160], why[400];
        snprintf(what, sizeof what, "key '%s'", key);
        cli_unknown_flag(key, what, 0, why, sizeof why);
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s%s", where, why);
    }
    return set_value(o, i, value, false, where, err, errlen);
}

/* Sections group keys for readers (keys are global); a section that is no group of --help nor
 * one of the names configs/ and train --calibrate ([machine]) write is refused, so a misspelt
 * [modle] cannot hide keys. */
static bool known_section(const char *name) {
    static const char *const known[] = {"model", "compute", "parallelism", "pipeline", "data", "optimizer", "train",
                                        "training", "schedule", "checkpoints", "cluster", "links", "sampling",
                                        "sample", "output", "export", "simulate", "machine"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i]) == 0) return true;
    return false;
}

typedef struct {
    wp_opts *o;
    const char *path;
    FILE *f;
    int line;     /* lines read so far: inih calls the handler right after reading its line */
    int bad_line; /* the first line a key was refused on (0: none); its reason is in err */
    int long_line;    /* a line longer than inih's buffer (0: none), which holds long_max characters */
    int long_max;
    int line_of[FLAG_COUNT]; /* where each key was set in this file (0: not yet) */
    char *err;
    size_t errlen;
} ini_ctx;

/* inih reads a line into a fixed buffer (INI_MAX_LINE, 200 bytes in Debian's build) and parses
 * what does not fit as a line of its own: a long value was "not 'key = value'". A line that
 * does not fit stops the reading here, to be refused naming the real limit. */
static char *read_counted(char *buf, int size, void *user) {
    ini_ctx *c = user;
    char *got = fgets(buf, size, c->f);
    if (!got) return NULL;
    c->line++;
    size_t n = strlen(got);
    if (n + 1 == (size_t)size && got[n - 1] != '\n') {
        int next = fgetc(c->f);
        if (next != EOF) {
            c->long_line = c->line;
            c->long_max = size - 2; /* the newline and the terminating NUL take the rest */
            return NULL;
        }
    }
    return got;
}

static int on_ini_line(void *user, const char *section, const char *key, const char *value) {
    ini_ctx *c = user;
    if (c->bad_line) return 0; /* the first refusal is the one reported */
    char where[512];
    snprintf(where, sizeof where, "%s line %d: ", c->path, c->line);
    wp_result rc = WP_OK;
    if (section[0] && !known_section(section))
        rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%sunknown section [%s] (sections only group keys: model, parallelism, data, "
                      "optimizer, checkpoints, cluster, output)", where, section);
    else if (strcmp(key, "config") == 0)
        rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%s'config' cannot be set inside a config file", where);
    else {
        /* A key given twice in one file is refused, not the last one taken silently: one of
         * the two lines is a mistake, and which one weipipe cannot know. (A flag, or a later
         * --config, still overrides a file's key.) */
        int i = cli_find_flag(key);
        if (i >= 0 && c->line_of[i])
            rc = wp_fail(WP_BAD_INPUT, c->err, c->errlen, "%skey '%s' is set again (first on line %d; a key may be set once "
                         "in a file)", where, key, c->line_of[i]);
        else
            rc = cli_set(c->o, key, value, where, c->err, c->errlen);
        if (rc == 0 && i >= 0) c->line_of[i] = c->line;
    }
    if (rc) c->bad_line = c->line;
    return rc == 0;
}

static wp_result load_config(wp_opts *o, const char *path, char *err, size_t errlen) {
    /* a regular file only: a FIFO would block, /dev/zero never end, a directory read as empty */
    int fd;
    uint64_t size;
    char why[WP_PATH_MAX + 128];
    if (fs_open_regular(path, (uint64_t)16 << 20, &fd, &size, why, sizeof why) != 0)
        return wp_fail(WP_BAD_INPUT, err, errlen, "--config: %s", why);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return wp_fail(WP_BAD_INPUT, err, errlen, "--config: %s: %s", path, strerror(errno));
    }
    ini_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        fclose(f);
        return wp_fail(WP_FAILED, err, errlen, "--config: out of memory reading '%s'", path);
    }
    *c = (ini_ctx){.o = o, .path = path, .f = f, .err = err, .errlen = errlen};
    int first = ini_parse_stream(read_counted, c, on_ini_line, c); /* the first bad line, ours or a syntax error */
    bool read_error = ferror(f);
    fclose(f);
    const int bad_line = c->bad_line, long_line = c->long_line, long_max = c->long_max;
    free(c);
    if (read_error) return wp_fail(WP_BAD_INPUT, err, errlen, "--config: cannot read '%s'", path);
    if (first != 0 && first != bad_line)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s line %d: not 'key = value' nor a [section]", path, first);
    if (bad_line) return WP_BAD_INPUT;
    if (long_line)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s line %d: longer than %d characters, the most a config line holds "
                       "(give a longer value as a flag)", path, long_line, long_max);
    return WP_OK;
}

static void set_defaults(wp_opts *o) {
    char err[256];
    for (int i = 0; i < FLAG_COUNT; i++) {
        wp_result rc = set_value(o, i, flags[i].def, true, "", err, sizeof err);
        (void)rc; /* defaults are known to parse: tests/cli checks every default */
        o->set[i] = false;
    }
}

wp_result cli_parse(int argc, char **argv, wp_opts *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    set_defaults(o);
    if (argc < 1) return wp_fail(WP_BAD_INPUT, err, errlen, "no subcommand given");
    o->cmd = cli_command(argv[0]);
    if (!o->cmd) return wp_fail(WP_BAD_INPUT, err, errlen, "unknown subcommand '%s' (try weipipe --help)", argv[0]);
    o->cmd_name = command_name(o->cmd);

    /* The config file comes first so that every flag overrides it, wherever it stands. */
    for (int a = 1; a < argc; a++) {
        const char *path = NULL;
        if (strcmp(argv[a], "--config") == 0 && a + 1 < argc) path = argv[a + 1];
        else if (strncmp(argv[a], "--config=", 9) == 0) path = argv[a] + 9;
        if (path) {
            WP_TRY(load_config(o, path, err, errlen));
        }
    }
    bool only_positional = false;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (only_positional || arg[0] != '-' || strcmp(arg, "-") == 0) {
            int max = command_max_args(o->cmd);
            if (o->nargs == max)
                return wp_fail(WP_BAD_INPUT, err, errlen, "unexpected argument '%s' ('%s' takes %s%d)", arg, o->cmd_name,
                            max ? "at most " : "", max);
            o->args[o->nargs++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) return wp_fail(WP_BAD_INPUT, err, errlen, "unknown option '%s' (flags are --long-names)", arg);
        char name[128];
        const char *eq = strchr(arg + 2, '=');
        size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (n >= sizeof name) return wp_fail(WP_BAD_INPUT, err, errlen, "unknown flag '%s'", arg);
        memcpy(name, arg + 2, n);
        name[n] = '\0';
        int i = cli_find_flag(name);
        if (i < 0) {
            char what[160];
            snprintf(what, sizeof what, "flag '--%s'", name);
            return cli_unknown_flag(name, what, o->cmd, err, errlen);
        }
        if (!(flags[i].cmds & o->cmd))
            return wp_fail(WP_BAD_INPUT, err, errlen, "--%s does not apply to '%s' (see weipipe %s --help)", name, o->cmd_name, o->cmd_name);
        const char *value = eq ? eq + 1 : NULL;
        if (!value && flags[i].type == FT_BOOL && (a + 1 >= argc || !parse_bool(argv[a + 1], &(bool){0})))
            value = "true";
        if (!value) {
            if (a + 1 >= argc) return wp_fail(WP_BAD_INPUT, err, errlen, "--%s needs a value", name);
            value = argv[++a];
        }
        WP_TRY(set_value(o, i, value, true, "", err, errlen));
    }
    return 0;
}

static void print_value(FILE *f, const wp_opts *o, int i) {
    const void *field = (const char *)o + flags[i].offset;
    switch (flags[i].type) {
    case FT_INT:
    case FT_SIZE: fprintf(f, "%lld", (long long)*(const int64_t *)field); break;
    case FT_BOOL: fputs(*(const bool *)field ? "true" : "false", f); break;
    case FT_STR: fputs((const char *)field, f); break;
    case FT_TEXT: fputs(*(const char *const *)field, f); break;
    case FT_ENUM: fputs(cli_enum_name(i, cli_enum_get(o, i)), f); break;
    case FT_RATE: fprintf(f, "%.17gByte", *(const double *)field); break;
    case FT_TIME: fprintf(f, "%.17gs", *(const double *)field); break;
    case FT_NUM: fprintf(f, "%.17g", *(const double *)field); break;
    }
}

void cli_write_ini(FILE *f, const wp_opts *o, unsigned cmd_mask) {
    for (int i = 0; i < FLAG_COUNT; i++) {
        if (i == FLAG_config || !(flags[i].cmds & cmd_mask)) continue;
        fprintf(f, "%s = ", flags[i].name);
        print_value(f, o, i);
        fputc('\n', f);
    }
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

void cli_write_json(FILE *f, const wp_opts *o, unsigned cmd_mask) {
    bool first = true;
    fputc('{', f);
    for (int i = 0; i < FLAG_COUNT; i++) {
        if (i == FLAG_config || !(flags[i].cmds & cmd_mask)) continue;
        fputs(first ? "" : ", ", f);
        first = false;
        json_string(f, flags[i].name);
        fputs(": ", f);
        const void *field = (const char *)o + flags[i].offset;
        switch (flags[i].type) {
        case FT_INT:
        case FT_SIZE: fprintf(f, "%lld", (long long)*(const int64_t *)field); break;
        case FT_BOOL: fputs(*(const bool *)field ? "true" : "false", f); break;
        case FT_STR: json_string(f, (const char *)field); break;
        case FT_TEXT: json_string(f, *(const char *const *)field); break;
        case FT_ENUM: json_string(f, cli_enum_name(i, cli_enum_get(o, i))); break;
        case FT_RATE:
        case FT_TIME:
        case FT_NUM: {
            double v = *(const double *)field;
            if (isfinite(v)) fprintf(f, "%.17g", v);
            else fputs("null", f);
            break;
        }
        }
    }
    fputc('}', f);
}

wp_result cli_job_flags(const wp_opts *o, char *out, size_t outlen) {
    static const int per_rank[] = {FLAG_config,  FLAG_bind,    FLAG_trace,   FLAG_metrics,  FLAG_tensorboard, FLAG_quiet,
                                   FLAG_threads, FLAG_nranks,  FLAG_timeout, FLAG_connect_timeout,
                                   FLAG_ib_device, FLAG_ib_port, FLAG_ib_gid_index, FLAG_device};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return WP_FAILED;
    for (int i = 0; i < FLAG_COUNT; i++) {
        bool skip = !(flags[i].cmds & C_TRAIN);
        for (size_t k = 0; k < sizeof per_rank / sizeof per_rank[0]; k++) skip = skip || per_rank[k] == i;
        if (skip) continue;
        fprintf(f, "%s=", flags[i].name);
        print_value(f, o, i);
        fputc('\n', f);
    }
    wp_result rc = fclose(f) == 0 && len < outlen ? WP_OK : WP_FAILED;
    if (rc == 0) memcpy(out, text, len + 1);
    free(text);
    return rc;
}
