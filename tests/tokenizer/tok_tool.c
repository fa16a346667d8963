/* The C side of the tokenizer.json checks (tok_check.py), through the public tokenizer.h:
 *   tok_tool encode TOKENIZER FILE...   each file's ids, one line per file
 *   tok_tool decode TOKENIZER           each stdin line of ids -> its decoded text in hex
 *   tok_tool bench TOKENIZER FILE...    encode MB per CPU-second (one thread; each file one text)
 *   tok_tool facts TOKENIZER            "vocab bos eos"
 *   tok_tool mem-encode|mem-facts ...   the same through tok_open_mem (the file read into memory)
 * Exit: 0 ok, the tokenizer's code (2 bad input, 1 failure) otherwise, with its one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "tokenizer.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *g = realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

/* CPU time, not wall time: the machines that run this are often shared */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int encode_files(const wp_tokenizer *t, int n, char **files, int bench) {
    char err[1024];
    double secs = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        char *text = slurp(files[i], &len);
        if (!text) {
            fprintf(stderr, "tok_tool: cannot read %s\n", files[i]);
            return 1;
        }
        int32_t *ids;
        size_t k;
        double t0 = now();
        int rc = tok_encode(t, text, len, &ids, &k, err, sizeof err);
        secs += now() - t0;
        bytes += (double)len;
        free(text);
        if (rc) {
            fprintf(stderr, "tok_tool: %s\n", err);
            return rc;
        }
        for (size_t j = 0; !bench && j < k; j++) printf(j ? " %d" : "%d", ids[j]);
        if (!bench) putchar('\n');
        free(ids);
    }
    if (bench) printf("%.2f MB/s (%.2f MB in %.2f CPU-s)\n", bytes / 1e6 / secs, bytes / 1e6, secs);
    return 0;
}

static int decode_lines(const wp_tokenizer *t) {
    char err[1024], *line = NULL;
    size_t cap = 0;
    int32_t *ids = NULL;
    size_t idcap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        size_t k = 0;
        for (char *p = line, *end; *p && *p != '\n'; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (k == idcap && !(ids = realloc(ids, (idcap = idcap ? 2 * idcap : 1024) * sizeof *ids))) return 1;
            ids[k++] = (int32_t)v;
        }
        char *text;
        int rc = tok_decode(t, ids, k, &text, err, sizeof err);
        if (rc) {
            fprintf(stderr, "tok_tool: %s\n", err);
            return rc;
        }
        for (char *s = text; *s; s++) printf("%02x", (unsigned char)*s);
        putchar('\n');
        free(text);
    }
    free(line);
    free(ids);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_tool encode|decode|bench|facts TOKENIZER [FILE...]\n");
        return 2;
    }
    char err[1024];
    wp_tokenizer *t;
    const char *cmd = argv[1];
    int rc;
    if (strncmp(cmd, "mem-", 4) == 0) {
        size_t len;
        char *json = slurp(argv[2], &len);
        rc = json ? tok_open_mem(json, len, argv[2], &t, err, sizeof err) : 1;
        free(json);
        cmd += 4;
    } else {
        rc = gguf_tok_open(argv[2], &t, NULL, err, sizeof err);
    }
    if (rc) {
        fprintf(stderr, "tok_tool: %s\n", err);
        return rc;
    }
    if (strcmp(cmd, "decode") == 0) rc = decode_lines(t);
    else if (strcmp(cmd, "facts") == 0) printf("%lld %d %d\n", (long long)tok_vocab_size(t), tok_bos(t), tok_eos(t));
    else rc = encode_files(t, argc - 3, argv + 3, strcmp(cmd, "bench") == 0);
    tok_close(t);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
