/* Printing schedules and validation reports: text (compact, one line per rank and turn), CSV
 * (one row per action) and JSON (everything, for scripts and the runtime's tests). */
#ifndef WP_SCHEDULE_PRINT_H
#define WP_SCHEDULE_PRINT_H

#include <stdio.h>

#include "engine.h"

typedef enum { WP_FMT_TEXT = 0, WP_FMT_CSV, WP_FMT_JSON } wp_format;

/* Whether name is a format (then *f is set). A question, not a fallible call: it has no err
 * because each caller words the refusal itself (naming --format and the formats it prints). */
bool format_parse(const char *name, wp_format *f);

void print_schedule_text(FILE *f, const wp_schedule *s);
void print_schedule_csv(FILE *f, const wp_schedule *s);
/* Per-rank summary of a validation run: peak buffers, activation states, bytes per step. */
void print_report_text(FILE *f, const wp_schedule *s, const wp_run *rep, bool bytes);
/* {"strategy":..., "owner":[...], "ranks":[{"rank":r,"carry":[...],"actions":[...]}], "report":[...]} */
void print_schedule_json(FILE *f, const wp_schedule *s, const wp_run *rep);

/* "1.50 GB", "12.0 MB", "512 B" (decimal units). */
char *fmt_bytes(char *out, size_t len, double bytes);
/* "1.23 s", "45.6 ms", "789 us". */
char *fmt_seconds(char *out, size_t len, double s);

#endif
