/* The safetensors writer's CRC-32 (a checkpoint shard's receipt): a put of 1 MiB or more is
 * checksummed in parts on two threads while it is written, the parts combined; the result must
 * be zlib's crc32 of the whole file in one pass, and the file the bytes given, whatever the
 * piece sizes (below the threshold, at it, above it and not a multiple of the part count). */
#include <zlib.h>

#include "safetensors.h"
#include "tu.h"

int main(void) {
    char dir[256], path[512], err[512] = "";
    tu_scratch(dir, sizeof dir, "stcrc");
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    enum { N = 4 };
    const int64_t numel[N] = {17, 262144, 300001, 1048583}; /* 68 B, 1 MiB, 1.2 MB, 4.2 MB */
    st_desc d[N];
    float *data[N];
    uint64_t seed = 41;
    for (int i = 0; i < N; i++) {
        d[i] = (st_desc){.dtype = WP_F32, .ndim = 1, .shape = {numel[i], 1}};
        snprintf(d[i].name, sizeof d[i].name, "t%d", i);
        CHECK((data[i] = malloc((size_t)numel[i] * sizeof(float))), "out of memory");
        for (int64_t j = 0; j < numel[i]; j++) data[i][j] = (float)tu_normal(&seed);
    }
    st_writer *w;
    CHECK(st_writer_open(&w, path, d, N, NULL, NULL, 0, err, sizeof err) == 0, "open: %s", err);
    for (int i = 0; i < N; i++)
        CHECK(st_writer_put(w, data[i], (size_t)numel[i] * sizeof(float), err, sizeof err) == 0, "put: %s", err);
    uint64_t size = 0;
    uint32_t crc = 0xdeadbeefu; /* poisoned: finish must set it */
    CHECK(st_writer_finish(w, &size, &crc, err, sizeof err) == 0, "finish: %s", err);

    FILE *f = fopen(path, "rb");
    CHECK(f, "%s: %s", path, strerror(errno));
    CHECK(fseek(f, 0, SEEK_END) == 0, "seek");
    long len = ftell(f);
    CHECK(len > 0 && fseek(f, 0, SEEK_SET) == 0, "tell");
    unsigned char *file = malloc((size_t)len);
    CHECK(file && fread(file, 1, (size_t)len, f) == (size_t)len && fclose(f) == 0, "%s: read back", path);
    uint32_t want = (uint32_t)crc32(0L, file, (uInt)len);
    check_say(crc == want && size == (uint64_t)len, "CRC %08x over %llu bytes = zlib's one pass %08x over the %ld of the file",
              crc, (unsigned long long)size, want, len);
    size_t at = (size_t)len;
    for (int i = 0; i < N; i++) at -= (size_t)numel[i] * sizeof(float);
    bool same = true;
    for (int i = 0; i < N; i++) {
        same = same && memcmp(file + at, data[i], (size_t)numel[i] * sizeof(float)) == 0;
        at += (size_t)numel[i] * sizeof(float);
        free(data[i]);
    }
    check_say(same, "the file holds the bytes given, in order");
    free(file);
    tu_cleanup(dir);
    return check_result("train/st_crc");
}
