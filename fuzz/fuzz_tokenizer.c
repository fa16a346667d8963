/* Fuzz target: the tokenizer loaders (src/io/tokenizer/tokenizer.c, tokjson.c, bpe.c, tok_*.c and
 * gguf_tokenizer.c). An input that starts with "GGUF" is a llama.cpp file whose tokenizer.ggml.*
 * keys tok_open converts to tokenizer.json; anything else is a tokenizer.json. Opening gives 0, or
 * 1/2 with one message naming the file; an opened tokenizer encodes a few texts (every id inside
 * its vocabulary, or a refusal 1/2 with a message) and decodes what it encoded. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tokenizer.h"

static void judge(int rc, const char *err, const char *path) {
    if ((rc != 0 && rc != 1 && rc != 2) || (rc && path && !strstr(err, path)) || (rc && !err[0])) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool gguf = size >= 4 && memcmp(data, "GGUF", 4) == 0;
    const char *path = fuzz_file(gguf ? "model.gguf" : "tokenizer.json", data, size);
    if (!path) return 0;
    wp_tokenizer *t = NULL;
    char err[1024] = "";
    int rc = tok_open(path, &t, err, sizeof err);
    judge(rc, err, path);
    if (rc) return 0;
    static const char *const texts[] = {"", "a b ab", "Hello, world! 12345 ", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81x\n\n\t  y",
                                        "\xff\xfe bad utf-8 \xc3", "<s>a</s><|endoftext|>"};
    int64_t vocab = tok_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        err[0] = '\0';
        rc = tok_encode(t, texts[i], strlen(texts[i]), &ids, &n, err, sizeof err);
        judge(rc, err, NULL);
        for (size_t k = 0; rc == 0 && k < n; k++)
            if (ids[k] < 0 || ids[k] >= vocab) __builtin_trap();
        char *text = NULL;
        err[0] = '\0';
        if (rc == 0) judge(tok_decode(t, ids, n, &text, err, sizeof err), err, NULL);
        free(text);
        free(ids);
    }
    tok_close(t);
    return 0;
}
