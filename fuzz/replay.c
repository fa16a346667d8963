/* Replays fuzz inputs through one target (linked with it, built by any compiler): each
 * argument is a file or a directory of files; every input runs once. A crash or trap fails the
 * test like under libFuzzer; the count replayed is printed. Exit 77 when no input exists. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    /* An exact-size copy, so that AddressSanitizer catches a read just past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory %s\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort), total = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char sub[4096];
        if (names[i]->d_name[0] != '.' && total >= 0) {
            snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
            int r = run_path(sub);
            total = r < 0 ? -1 : total + r;
        }
        free(names[i]);
    }
    free(names);
    return total;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int a = 1; a < argc; a++) {
        int r = run_path(argv[a]);
        if (r < 0) return 1;
        total += r;
    }
    if (total == 0) {
        printf("no inputs to replay\n");
        return 77;
    }
    printf("replayed %d inputs: no crash\n", total);
    return 0;
}
