/* Filling an optimizer's owned fp32 masters from a model file, one parameter at a time: the
 * part every importer shares (Hugging Face safetensors, GGUF). The reader writes parameter p's
 * values into dst (p->numel floats, the layout's order); moments, gradients and the step start
 * at zero; a slice owner (fsdp) is handed its element range of each chunk. 0, 2 or 1 as the
 * reader returns (err names the file and the tensor). */
#ifndef WP_IO_MASTERS_FILL_H
#define WP_IO_MASTERS_FILL_H

#include <stddef.h>

#include "layout.h"
#include "optim.h"
#include "result.h"

typedef wp_result (*masters_reader)(void *ctx, const wp_param *p, float *dst, char *err, size_t errlen);
wp_result masters_fill(wp_optim *o, masters_reader read, void *ctx, char *err, size_t errlen);

#endif
