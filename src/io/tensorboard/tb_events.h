/* TensorBoard event files (train --tensorboard DIR; docs/runtime.md): one new file per run in
 * DIR, named events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, holding TFRecord records
 * (little-endian uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the
 * data) of tensorboard.Event messages (tb_event.proto, packed by protobuf-c; CRC32C from
 * ISA-L). The file starts with the file_version event "brain.Event:2" and a SessionLog START
 * at the run's first step, so that TensorBoard drops what an earlier file in DIR wrote at that
 * step or later (the steps a crashed run did after its last checkpoint); then one event per
 * tb_scalars call, flushed at once: `tensorboard --logdir` shows the run as it goes.
 *
 * Writes behave like a FILE's: a failed write is kept (the first one) and later writes do
 * nothing; tb_status says whether any failed. Every function takes NULL (no --tensorboard) and
 * then does nothing. Built only with protobuf-c and ISA-L (meson's tensorboard feature). */
#ifndef WP_IO_TB_EVENTS_H
#define WP_IO_TB_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"

typedef struct wp_tb wp_tb;

/* One scalar of an event: TensorBoard's tag ("train/loss") and the value, written as the
 * float32 simple_value (non-finite values as they are). */
typedef struct {
    const char *tag;
    double value;
} tb_scalar;

/* Whether this build can write event files (false: built without protobuf-c or ISA-L). */
bool tb_supported(void);

/* Creates dir (mkdir -p) and a new event file in it whose name sorts after every event file
 * already there (TensorBoard reads a directory's files in name order: a resumed run's after the
 * one it resumes), then writes the file_version and START events. first_step: the step number
 * of the first tb_scalars call to come. 1 or 2 naming dir. */
wp_result tb_open(wp_tb **out, const char *dir, int64_t first_step, char *err, size_t errlen);

/* One event at step with n scalars and wall_time (Unix seconds), flushed. */
void tb_scalars(wp_tb *tb, int64_t step, double wall_time, const tb_scalar *v, int n);

/* 0, or 1 with the first failed write's line (naming the file). */
wp_result tb_status(const wp_tb *tb, char *err, size_t errlen);

/* The file's path ("" for NULL). */
const char *tb_path(const wp_tb *tb);

void tb_close(wp_tb *tb);

#endif
