/* A byte meter for the long reads and writes of large models (an --init-from import, an
 * export, loading weights to sample or evaluate): on a terminal, one line redrawn in place with
 * the bytes done, the total and the rate; at the end, one line with the time taken (kept in
 * logs too, where nothing else is drawn). Process-wide and thread-safe: st_writer_put and the
 * Hugging Face readers count what they move while a meter runs, and count nothing otherwise. */
#ifndef WP_IO_PROGRESS_H
#define WP_IO_PROGRESS_H

#include <stdint.h>

/* Below this the meter stays silent: small models finish before anyone looks. */
#define IO_PROGRESS_MIN_BYTES ((uint64_t)64 << 20)

/* what: "export to hf/", say (copied). While a meter runs, another begin (the next rank of the
 * process) adds its total to it and keeps the first name; each begin has its end. */
void io_progress_begin(const char *what, uint64_t total);
void io_progress_add(uint64_t bytes);
/* ok: this part finished. The last end prints the time line, unless a part failed (then the
 * drawn line is only cleared). */
void io_progress_end(int ok);

#endif
