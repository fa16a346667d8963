/* weipipe: one executable, subcommands dispatched from a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "log.h"
#include "ring_warn.h"
#include "wp_config.h"

static const struct {
    unsigned cmd;
    int (*run)(const wp_opts *);
} dispatch[] = {
    {C_CHECK, cmd_check},
    {C_BENCH, cmd_bench},
    {C_PREPARE, cmd_prepare},
    {C_EXPORT, cmd_export},
    {C_EVAL, cmd_eval},
    {C_SCHEDULE, cmd_schedule},
    {C_SIMULATE, cmd_simulate},
    {C_TRAIN, cmd_train},
    {C_TRACE_MERGE, cmd_trace_merge},
    {C_SAMPLE, cmd_sample},
    {0, NULL}, /* end */
};

static void usage(FILE *f) {
    fprintf(f, "weipipe %s: weight-passing pipeline training for Llama-style models\n\n", WP_VERSION);
    fprintf(f, "usage: weipipe SUBCOMMAND [--flag value ...] [ARGS]\n");
    fprintf(f, "       weipipe SUBCOMMAND --help\n\n");
    cli_print_flags(f, 0);
}

/* The ring layer's warnings go through the command's log (one line, control bytes escaped). */
static void ring_warning(const char *line) { wp_warn("%s", line); }

/* `sample` decodes one token at a time: every kernel is a short OpenMP region, and libgomp's
 * default waiting between regions spins, so with 2 threads on 2 busy cores each token waits
 * for spinning threads to be scheduled (SmolLM2-135M, load 22: 0.2 tokens/s with active
 * waiting, 4+ with passive; docs/performance-cpu.md). libgomp reads OMP_WAIT_POLICY once, as it
 * loads, so sample runs itself again with it set, unless the user chose a policy. */
static void passive_wait_for_sample(char **argv) {
    if (strcmp(argv[1], "sample") != 0 || getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* no exec (no /proc): go on as we are */
}

int main(int argc, char **argv) {
    ring_set_warn(ring_warning);
    if (argc >= 2) passive_wait_for_sample(argv);
    if (argc < 2) {
        wp_error("no subcommand given (try weipipe --help)");
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("weipipe %s\n", WP_VERSION);
        return 0;
    }
    unsigned cmd = cli_command(argv[1]);
    for (int a = 2; cmd && a < argc; a++)
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            printf("usage: weipipe %s [--flag value ...]\n\n", argv[1]);
            cli_print_flags(stdout, cmd);
            return 0;
        }
    static wp_opts opts; /* large; not on the stack */
    char err[512];
    if (cli_parse(argc - 1, argv + 1, &opts, err, sizeof err) != 0) {
        wp_error("%s", err);
        return 2;
    }
    for (size_t i = 0; dispatch[i].run; i++)
        if (dispatch[i].cmd == opts.cmd) return dispatch[i].run(&opts);
    wp_error("'%s' is not built into this weipipe", opts.cmd_name);
    return 2;
}
