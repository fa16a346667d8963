/* Fuzz target: the checkpoint reader's two parsers (src/io): the manifest (manifest.json:
 * JSON, sizes, CRCs, model shape) when the first byte is even, a shard (safetensors: header
 * length, JSON, dtypes, shapes, offsets) when odd. Each returns 0, or 1/2 with a message; an
 * accepted shard's tensors all convert to fp32 without reading outside the file. */
#include <stdlib.h>

#include "fuzz.h"
#include "manifest.h"
#include "safetensors.h"

#define MAX_CONVERT (1u << 20) /* elements converted per tensor (bounds the time per input) */

static void read_manifest(const char *path) {
    wp_manifest m;
    char err[512];
    int rc = manifest_read(path, &m, err, sizeof err);
    if (rc == 0) {
        for (int i = 0; i < m.n_files; i++)
            if (m.files[i].name[sizeof m.files[i].name - 1] != '\0') __builtin_trap();
        manifest_free(&m);
    } else if ((rc != 1 && rc != 2) || err[0] == '\0') {
        __builtin_trap();
    }
}

static void read_shard(const char *path) {
    st_file *f;
    char err[512];
    int rc = st_open(&f, path, err, sizeof err);
    if (rc != 0) {
        if ((rc != 1 && rc != 2) || err[0] == '\0') __builtin_trap();
        return;
    }
    for (int i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        if (!t->known || t->numel > MAX_CONVERT) continue;
        float *dst = malloc((t->numel ? t->numel : 1) * sizeof *dst);
        if (dst && st_to_f32(f, t, dst, err, sizeof err) != 0 && err[0] == '\0') __builtin_trap();
        free(dst);
    }
    st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *path = fuzz_file(data[0] % 2 ? "rank-00000.safetensors" : "manifest.json", data + 1, size - 1);
    if (!path) return 0;
    if (data[0] % 2)
        read_shard(path);
    else
        read_manifest(path);
    return 0;
}
