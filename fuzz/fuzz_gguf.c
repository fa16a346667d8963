/* Fuzz target: the GGUF reader (src/io/formats/gguf_*.c): any file gives 0, or 2 naming the file (1
 * only for system errors) from the parse, the config reader, the positions and the tokenizer conversion;
 * an accepted config has a positive layer count and hidden size. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gguf.h"

static void judge(int rc, const char *err, const char *path) {
    if ((rc != 0 && rc != 1 && rc != 2) || (rc && !strstr(err, path))) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("model.gguf", data, size);
    if (!path) return 0;
    char err[1024] = "";
    gguf_file *f;
    int rc = gguf_open_if(path, &f, err, sizeof err);
    judge(rc, err, path);
    if (!f) return 0; /* not a GGUF (no magic) or refused at the header */
    hf_config c;
    rc = gguf_read_config(f, &c, err, sizeof err);
    judge(rc, err, path);
    if (rc == 0 && c.present[HF_NUM_HIDDEN_LAYERS] && c.value[HF_NUM_HIDDEN_LAYERS] < 0) __builtin_trap();
    int64_t pos;
    err[0] = '\0';
    judge(gguf_max_positions(f, &pos, err, sizeof err), err, path);
    char *json = NULL;
    size_t len = 0;
    err[0] = '\0';
    rc = gguf_tokenizer_json(f, &json, &len, err, sizeof err);
    judge(rc, err, path);
    if (json && strlen(json) != len) __builtin_trap();
    free(json);
    gguf_close(f);
    return 0;
}
