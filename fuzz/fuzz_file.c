/* The scratch files of the fuzz targets (fuzz.h). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

static const char *scratch_dir(void) {
    struct stat st;
    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static char path[256];
    snprintf(path, sizeof path, "%s/weipipe-fuzz-%d-%s", scratch_dir(), (int)getpid(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return NULL;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) {
            close(fd);
            return NULL;
        }
        done += (size_t)n;
    }
    return close(fd) == 0 ? path : NULL;
}
