/* What the fuzz targets share: each target file defines LLVMFuzzerTestOneInput (libFuzzer's
 * entry point). With -Dfuzz=true (clang) they link libFuzzer; replay.c links the same
 * targets with gcc into drivers that feed the kept corpus (fuzz/corpus/<target>/) to them, so
 * the normal test suite replays every input ever found without needing clang. */
#ifndef WP_FUZZ_H
#define WP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A scratch file of this process (under /dev/shm when it exists, else /tmp) rewritten to hold
 * exactly data[0..size); returns its path, or NULL when it cannot be written (the input is then
 * skipped). name distinguishes several files of one target. */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

#endif
