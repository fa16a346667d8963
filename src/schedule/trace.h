/* Chrome-trace JSON writer (opens in Perfetto or chrome://tracing), shared by the simulator's
 * drawings and the real runtime so that simulated and measured traces have one format:
 * one process per rank ("rank R"), track 0 "compute" and one track per channel for transfers
 * (trace_track_name gives the names), complete events ("ph":"X") with times in microseconds.
 * Safe to call from several threads (one per rank). */
#ifndef WP_SCHEDULE_TRACE_H
#define WP_SCHEDULE_TRACE_H

#include <stddef.h>
#include "result.h"

typedef struct wp_trace wp_trace;

/* NULL with a one-line reason when the file cannot be created. */
wp_trace *trace_open(const char *path, char *err, size_t errlen);
/* Names of a process (a rank) and of one of its tracks. */
void trace_process(wp_trace *t, int pid, const char *name);
void trace_thread(wp_trace *t, int pid, int tid, const char *name);
/* Any other metadata event of process pid: {"ph":"M","name":name,...,"args":{args_json}}
 * (Perfetto ignores names it does not know; train records its clock estimate so). */
void trace_metadata(wp_trace *t, int pid, const char *name, const char *args_json);
/* A span [t0, t0 + dur) in seconds on track tid of process pid; args_json is NULL or the inside
 * of a JSON object, e.g. "\"chunk\":2,\"mb\":5". */
void trace_span(wp_trace *t, int pid, int tid, const char *name, const char *cat, double t0_s, double dur_s,
                const char *args_json);
/* Finish the file; 0, or 1 with a reason when writing failed. Frees t in any case. */
wp_result trace_close(wp_trace *t, char *err, size_t errlen);

/* Conventional tracks: 0 compute, 1 + channel for the transfers a rank sends on that channel. */
enum { WP_TRACK_COMPUTE = 0 };
static inline int trace_track_of_channel(int channel) { return 1 + channel; }

#endif
