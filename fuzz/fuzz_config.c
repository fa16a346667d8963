/* Fuzz target: the INI config reader (src/cli/cli.c through inih): any file given as --config
 * to any subcommand returns 0 or 2 with a one-line reason, never crashes or reads out of bounds. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "fuzz.h"

static const char *const commands[] = {"train", "simulate", "schedule", "eval", "prepare", "export", "check", "bench"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *path = fuzz_file("config.ini", data + 1, size - 1);
    if (!path) return 0;
    char cmd[32], conf[300], err[512];
    snprintf(cmd, sizeof cmd, "%s", commands[data[0] % (sizeof commands / sizeof *commands)]);
    snprintf(conf, sizeof conf, "%s", path);
    char flag[] = "--config";
    char *argv[] = {cmd, flag, conf, NULL};
    static wp_opts o;
    int rc = cli_parse(3, argv, &o, err, sizeof err);
    if (rc != 0 && rc != 2) __builtin_trap();
    if (rc == 2 && (err[0] == '\0' || strchr(err, '\n'))) __builtin_trap(); /* one line, never empty */
    return 0;
}
