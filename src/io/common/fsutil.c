/* File-system helpers: durable writes (temp file, fsync, rename, fsync of the directory),
 * mappings and recursive removal, each failure reported with the path it concerns. */
#include "fsutil.h"
#include "json_in.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

wp_result fs_join(char *out, size_t outlen, const char *dir, const char *name, char *err, size_t errlen) {
    int n = snprintf(out, outlen, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= outlen) return wp_fail(WP_FAILED, err, errlen, "%s/%s: path too long", dir, name);
    return 0;
}

bool fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

wp_result fs_mkdirs(const char *path, char *err, size_t errlen) {
    char buf[WP_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot create directory", buf);
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot create directory", buf);
    if (!fs_is_dir(buf)) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: exists and is not a directory", buf);
    return 0;
}

wp_result fs_probe_writable(const char *dir, char *err, size_t errlen) {
    char at[WP_PATH_MAX], probe[WP_PATH_MAX];
    if (snprintf(at, sizeof at, "%s", dir) >= (int)sizeof at) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", dir);
    while (!fs_exists(at)) { /* the directory will be created at the first save: probe where */
        char *slash = strrchr(at, '/');
        if (!slash) {
            snprintf(at, sizeof at, ".");
            break;
        }
        if (slash == at) slash[1] = '\0';
        else *slash = '\0';
    }
    if (snprintf(probe, sizeof probe, "%s/.weipipe-probe-%ld", at, (long)getpid()) >= (int)sizeof probe)
        return wp_fail(WP_BAD_INPUT, err, errlen, "%s: path too long", dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: cannot create files there", at);
    wp_result rc = WP_OK;
    if (close(fd) != 0) rc = wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: close of a probe file failed", at);
    if (unlink(probe) != 0 && rc == 0) rc = wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: cannot remove files there", at);
    return rc;
}

wp_result fs_fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot open directory", dir);
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    /* some file systems (and /proc-like mounts) refuse fsync on directories; that is not a
     * failure of ours, the data files themselves were synced */
    if (rc != 0 && saved != EINVAL && saved != EROFS)
        return wp_fail(WP_FAILED, err, errlen, "%s: fsync of directory failed: %s", dir, strerror(saved));
    return 0;
}

wp_result fs_remove_tree(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot stat", path);
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot open directory", path);
        struct dirent *e;
        wp_result rc = WP_OK;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[WP_PATH_MAX];
            rc = fs_join(child, sizeof child, path, e->d_name, err, errlen);
            if (rc == 0) rc = fs_remove_tree(child, err, errlen);
        }
        closedir(d);
        if (rc) return rc;
        if (rmdir(path) != 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove directory", path);
        return 0;
    }
    if (unlink(path) != 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot remove", path);
    return 0;
}

static void parent_dir(const char *path, char *out, size_t outlen) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, outlen, ".");
        return;
    }
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; /* "/x" lives in "/" */
    if (n >= outlen) n = outlen - 1;
    memcpy(out, path, n);
    out[n] = '\0';
}

wp_result fs_rename_durable(const char *from, const char *to, char *err, size_t errlen) {
    if (rename(from, to) != 0) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot rename to %s", from, to);
    char dir[WP_PATH_MAX];
    parent_dir(to, dir, sizeof dir);
    return fs_fsync_dir(dir, err, errlen);
}

wp_result fs_replace_dir(const char *from, const char *to, char *err, size_t errlen) {
    if (!fs_exists(to)) return fs_rename_durable(from, to, err, errlen);
    char dir[WP_PATH_MAX], old[WP_PATH_MAX];
    parent_dir(to, dir, sizeof dir);
    const char *gone = from; /* where the old copy ends up */
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot exchange with %s", from, to);
        /* an empty directory of our own, which rename(2) may replace: never a user's "to.old" */
        int none;
        wp_result rc = fs_create_beside(to, ".old", true, old, sizeof old, &none, err, errlen);
        if (rc == 0 && rename(to, old) != 0) {
            rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot rename to %s", to, old);
            rmdir(old);
        }
        if (rc == 0 && rename(from, to) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot rename to %s", from, to);
        if (rc) return rc;
        gone = old;
    }
    wp_result rc = fs_fsync_dir(dir, err, errlen);
    return rc ? rc : fs_remove_tree(gone, err, errlen);
}

wp_result fs_create_beside(const char *path, const char *tag, bool dir, char *tmp, size_t tmplen, int *fd, char *err,
                           size_t errlen) {
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    *fd = -1;
    if (tmplen) tmp[0] = '\0';
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char r[8];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return wp_fail_errno(WP_FAILED, err, errlen, "%s: getrandom failed", path);
        char suffix[sizeof r + 1];
        for (size_t i = 0; i < sizeof r; i++) suffix[i] = letters[r[i] % (sizeof letters - 1)];
        suffix[sizeof r] = '\0';
        char name[WP_PATH_MAX];
        int n = snprintf(name, sizeof name, "%s%s-%s", path, tag, suffix);
        if (n < 0 || (size_t)n >= tmplen || (size_t)n >= sizeof name) return wp_fail(WP_FAILED, err, errlen, "%s: path too long", path);
        if (dir ? mkdir(name, 0777) == 0 : (*fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) >= 0) {
            memcpy(tmp, name, (size_t)n + 1); /* only a name this call created: callers remove what tmp names */
            return 0;
        }
        if (errno != EEXIST) return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot create", name);
    }
    return wp_fail(WP_FAILED, err, errlen, "%s: 100 random names beside it are all taken", path);
}

wp_result fs_write_all(int fd, const void *buf, size_t n, const char *path, char *err, size_t errlen) {
    const char *p = buf;
    while (n > 0) {
        size_t part = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, p, part);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return wp_fail(WP_FAILED, err, errlen, "%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

wp_result fs_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    char tmp[WP_PATH_MAX];
    int fd;
    WP_TRY(fs_create_beside(path, ".tmp", false, tmp, sizeof tmp, &fd, err, errlen));
    wp_result rc = fs_write_all(fd, data, n, tmp, err, errlen);
    if (rc == 0 && fsync(fd) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: fsync failed", tmp);
    if (close(fd) != 0 && rc == 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: close failed", tmp);
    if (rc == 0) rc = fs_rename_durable(tmp, path, err, errlen);
    if (rc) unlink(tmp); /* ours: fs_create_beside made it */
    return rc;
}

/* What a path that is not a regular file is, for the message. */
static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a device or special file";
}

wp_result fs_open_regular(const char *path, uint64_t max_bytes, int *fd, uint64_t *size, char *err, size_t errlen) {
    *fd = -1;
    *size = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return wp_fail_errno(WP_BAD_INPUT, err, errlen, "%s: cannot open", path);
    struct stat st;
    wp_result rc = WP_OK;
    if (fstat(f, &st) != 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot stat", path);
    else if (!S_ISREG(st.st_mode))
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
    else if (max_bytes > 0 && (uint64_t)st.st_size > max_bytes)
        rc = wp_fail(WP_BAD_INPUT, err, errlen, "%s: %lld bytes, more than the %llu this file may have", path, (long long)st.st_size,
                     (unsigned long long)max_bytes);
    /* regular files ignore O_NONBLOCK today; cleared anyway so that no read can ever see EAGAIN */
    int fl = rc ? 0 : fcntl(f, F_GETFL);
    if (rc == 0 && (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0))
        rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: fcntl failed", path);
    if (rc) {
        close(f);
        return rc;
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return 0;
}

wp_result fs_read_small(const char *path, size_t max_bytes, char **data, size_t *size, char *err, size_t errlen) {
    *data = NULL;
    *size = 0;
    int fd;
    uint64_t want;
    WP_TRY(fs_open_regular(path, max_bytes, &fd, &want, err, errlen));
    char *buf = malloc((size_t)want + 1);
    if (!buf) {
        close(fd);
        return wp_fail(WP_FAILED, err, errlen, "%s: out of memory reading %llu bytes", path, (unsigned long long)want);
    }
    size_t got = 0;
    while (got < (size_t)want) {
        ssize_t r = read(fd, buf + got, (size_t)want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return wp_fail(WP_FAILED, err, errlen, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *data = buf;
    *size = got;
    return 0;
}

wp_result fs_finish_file(int *fd, const char *tmp, const void *header, size_t n, char *err, size_t errlen) {
    int f = *fd;
    *fd = -1;
    ssize_t put = pwrite(f, header, n, 0);
    wp_result rc = WP_OK;
    if (put != (ssize_t)n)
        rc = wp_fail(WP_FAILED, err, errlen, "%s: writing the header failed: %s", tmp, put < 0 ? strerror(errno) : "short write");
    else if (fsync(f) != 0)
        rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: fsync failed", tmp);
    if (close(f) != 0 && rc == 0) rc = wp_fail_errno(WP_FAILED, err, errlen, "%s: close failed", tmp);
    return rc;
}

wp_result fs_load_json(const char *path, size_t max_bytes, size_t flags, json_t **out, char *err, size_t errlen) {
    char *text;
    size_t size;
    *out = NULL;
    WP_TRY(fs_read_small(path, max_bytes, &text, &size, err, errlen));
    json_error_t je;
    *out = json_in_loadb(text, size, flags, &je);
    free(text);
    if (!*out) return wp_fail(WP_BAD_INPUT, err, errlen, "%s: not JSON: %s (line %d)", path, je.text, je.line);
    return 0;
}

wp_result fs_map_file(const char *path, fs_map *m, char *err, size_t errlen) {
    m->data = NULL;
    m->size = 0;
    int fd;
    uint64_t size;
    WP_TRY(fs_open_regular(path, 0, &fd, &size, err, errlen));
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return wp_fail_errno(WP_FAILED, err, errlen, "%s: cannot map %llu bytes", path, (unsigned long long)size);
        }
        m->data = p;
        m->size = (size_t)size;
    }
    close(fd); /* the mapping stays valid */
    return 0;
}

void fs_unmap(fs_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

uint32_t fs_crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);
}

uint32_t fs_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        size_t part = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        crc = (uint32_t)crc32(crc, p, (uInt)part);
        p += part;
        n -= part;
    }
    return crc;
}
