/* File-system helpers shared by shards, checkpoints and exports. Every helper checks its system
 * calls and reports failures as one line naming the path.
 *
 * Every status is a wp_result (result.h): WP_BAD_INPUT for a missing, unreadable or malformed
 * file given by the user (the line names the file and the field), WP_FAILED for a runtime
 * failure (out of memory, a failed write or rename). Commands pass them on as exit codes. */
#ifndef WP_IO_FSUTIL_H
#define WP_IO_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "result.h"

#define WP_PATH_MAX 4096

/* dir + "/" + name into out; 1 (with a message) when it does not fit. */
wp_result fs_join(char *out, size_t outlen, const char *dir, const char *name, char *err, size_t errlen);

bool fs_is_dir(const char *path);
bool fs_exists(const char *path);

/* Can files be created in dir (or, when dir does not exist yet, in its nearest existing
 * ancestor)? A probe file is created and removed: read-only mounts, permissions and a full
 * inode table all show, before hours of work are lost at the first save. 2 naming dir. */
wp_result fs_probe_writable(const char *dir, char *err, size_t errlen);

/* mkdir -p */
wp_result fs_mkdirs(const char *path, char *err, size_t errlen);
/* fsync a directory, so that renames and new entries in it survive a crash. */
wp_result fs_fsync_dir(const char *dir, char *err, size_t errlen);
/* rm -r; a missing path is not an error. */
wp_result fs_remove_tree(const char *path, char *err, size_t errlen);
/* rename, then fsync the directory holding the new name. */
wp_result fs_rename_durable(const char *from, const char *to, char *err, size_t errlen);
/* Directory `from` takes the place of `to`, which may exist: `to` names a complete directory at
 * every instant (the old one until the new one). renameat2's RENAME_EXCHANGE swaps the two in
 * one step, then the old copy (now at `from`) is removed; where the file system has no exchange,
 * `to` moves aside to a new `to.old-XXXXXXXX` (fs_create_beside: never a name someone else
 * holds; a crash between that and the next rename leaves it there, whole). The directory holding
 * them is fsync'd before the old copy goes. */
wp_result fs_replace_dir(const char *from, const char *to, char *err, size_t errlen);

/* A new file (dir false: *fd open O_WRONLY | O_CLOEXEC, mode 0666 less the umask) or directory
 * (dir true: *fd -1, mode 0777 less the umask) beside path, named path + tag + "-" + 8 random
 * letters into tmp: O_EXCL / mkdir refuse a name that exists, and another is drawn, so what a
 * run writes and later removes or renames is only ever what it created itself (a user's
 * OUT.tmp is never truncated, replaced or removed). */
wp_result fs_create_beside(const char *path, const char *tag, bool dir, char *tmp, size_t tmplen, int *fd, char *err,
                           size_t errlen);

/* A file written with a placeholder header, finished: the header written at offset 0, the data
 * fsync'd, *fd closed (and set to -1 whatever happens), naming tmp in errors. The shard and mask
 * writers' common end. */
wp_result fs_finish_file(int *fd, const char *tmp, const void *header, size_t n, char *err, size_t errlen);

/* write(2) until all n bytes are out. */
wp_result fs_write_all(int fd, const void *buf, size_t n, const char *path, char *err, size_t errlen);
/* A new path.tmp-XXXXXXXX (fs_create_beside) written, fsync'd and renamed over path: readers see
 * the old file or the whole new one. */
wp_result fs_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* Opens a file to read, which must be a regular file of at most max_bytes (0: any size): a FIFO,
 * a device (/dev/zero), a socket or a directory is refused with 2 naming the path, without
 * blocking (O_NONBLOCK while opening, so a FIFO with no writer cannot hang the open; cleared
 * after). Every reader of a user-given file goes through here. *fd is O_CLOEXEC; *size its
 * size. Missing or unreadable: 2. */
wp_result fs_open_regular(const char *path, uint64_t max_bytes, int *fd, uint64_t *size, char *err, size_t errlen);
/* A small file read whole, NUL-terminated (caller frees *data). Missing file: 2. */
wp_result fs_read_small(const char *path, size_t max_bytes, char **data, size_t *size, char *err, size_t errlen);

/* A JSON file (fs_read_small's checks, then jansson's json_loadb with flags). Not JSON: 2 with
 * the line and jansson's reason. */
struct json_t;
wp_result fs_load_json(const char *path, size_t max_bytes, size_t flags, struct json_t **out, char *err, size_t errlen);

/* A read-only mapping of a whole file (data is NULL for an empty file). */
typedef struct {
    const unsigned char *data;
    size_t size;
} fs_map;
wp_result fs_map_file(const char *path, fs_map *m, char *err, size_t errlen);
void fs_unmap(fs_map *m);

/* zlib CRC-32 of a buffer of any size. */
uint32_t fs_crc32(uint32_t crc, const void *data, size_t n);
/* The CRC-32 of a then b (len_b bytes), from each one's: zlib's crc32_combine. */
uint32_t fs_crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

#endif
