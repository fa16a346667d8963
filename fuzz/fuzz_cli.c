/* Fuzz target: the command line (src/cli/cli.c): the input split at NUL bytes is argv (the
 * first word the subcommand); cli_parse returns 0 or 2 with a non-empty one-line reason. Arguments that
 * would name a config file are dropped (that reader has its own target). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fuzz.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        char *word = copy + i;
        size_t len = strlen(word);
        if (!strstr(word, "config")) argv[argc++] = word;
        i += len + 1;
    }
    argv[argc] = NULL;
    static wp_opts o;
    char err[512];
    int rc = argc > 0 ? cli_parse(argc, argv, &o, err, sizeof err) : 0;
    if (rc != 0 && rc != 2) __builtin_trap();
    /* One line: a newline in the reason may only come from an argument that holds one (the
     * reason quotes what it rejects as given). */
    if (rc == 2 && (err[0] == '\0' || (strchr(err, '\n') && !memchr(data, '\n', size)))) __builtin_trap();
    free(copy);
    return 0;
}
