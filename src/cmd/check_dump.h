/* The dump `weipipe check --out DIR` writes for the PyTorch reference (scripts/torch_ref.py):
 * config.ini, inputs.bin, targets.bin (int32 LE [b,s]), tensors.tsv (name, rows, cols,
 * offset in elements), params.bin, grads.bin (fp32 LE, chunks concatenated) and loss.txt.
 * Written into DIR.tmp and renamed, so DIR is either complete or absent. */
#ifndef WP_CHECK_DUMP_H
#define WP_CHECK_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "layout.h"

typedef struct {
    const char *dir;
    const wp_opts *opts;
    const wp_layout *L;
    const int32_t *inputs, *targets;
    size_t tokens;
    const float *params, *grads;  /* L->total_numel each */
    double loss;
} check_dump;

/* Before any work: DIR must not exist (or be an empty directory), and a DIR.tmp left by an
 * interrupted dump is cleared. 0, or 2 with a reason naming DIR (bad --out: a file, a directory
 * that is not empty, a path too long, or a DIR.tmp that cannot be removed). */
wp_result check_dump_prepare(const char *dir, char *err, size_t errlen);
/* 0, or 1 with a reason naming the file that could not be written (DIR.tmp is removed again). */
wp_result check_dump_write(const check_dump *d, char *err, size_t errlen);

#endif
