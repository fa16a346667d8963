/* Chrome-trace JSON writer (trace.h). */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wp_trace {
    FILE *f;
    pthread_mutex_t lock;
    int events;
    char path[256];
};

wp_trace *trace_open(const char *path, char *err, size_t errlen) {
    wp_trace *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "--trace: out of memory");
        return NULL;
    }
    if (!(t->f = fopen(path, "w"))) {
        snprintf(err, errlen, "--trace: cannot create '%s': %s", path, strerror(errno));
        free(t);
        return NULL;
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    pthread_mutex_init(&t->lock, NULL);
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", t->f);
    return t;
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void begin_event(wp_trace *t) {
    if (t->events++) fputs(",\n", t->f);
}

static void metadata(wp_trace *t, const char *what, int pid, int tid, const char *name) {
    pthread_mutex_lock(&t->lock);
    begin_event(t);
    fprintf(t->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", what, pid, tid);
    put_string(t->f, name);
    fputs("}}", t->f);
    pthread_mutex_unlock(&t->lock);
}

void trace_process(wp_trace *t, int pid, const char *name) { metadata(t, "process_name", pid, 0, name); }
void trace_thread(wp_trace *t, int pid, int tid, const char *name) { metadata(t, "thread_name", pid, tid, name); }

void trace_metadata(wp_trace *t, int pid, const char *name, const char *args_json) {
    pthread_mutex_lock(&t->lock);
    begin_event(t);
    fputs("{\"ph\":\"M\",\"name\":", t->f);
    put_string(t->f, name);
    fprintf(t->f, ",\"pid\":%d,\"tid\":0,\"args\":{%s}}", pid, args_json ? args_json : "");
    pthread_mutex_unlock(&t->lock);
}

void trace_span(wp_trace *t, int pid, int tid, const char *name, const char *cat, double t0_s, double dur_s,
                const char *args_json) {
    pthread_mutex_lock(&t->lock);
    begin_event(t);
    fputs("{\"ph\":\"X\",\"name\":", t->f);
    put_string(t->f, name);
    fputs(",\"cat\":", t->f);
    put_string(t->f, cat);
    fprintf(t->f, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", pid, tid, t0_s * 1e6, dur_s * 1e6);
    if (args_json && *args_json) fprintf(t->f, ",\"args\":{%s}", args_json);
    fputc('}', t->f);
    pthread_mutex_unlock(&t->lock);
}

wp_result trace_close(wp_trace *t, char *err, size_t errlen) {
    fputs("\n]}\n", t->f);
    int bad = ferror(t->f);
    int closed = fclose(t->f);
    wp_result rc = WP_OK;
    if (bad || closed != 0) {
        snprintf(err, errlen, "--trace: writing '%s' failed: %s", t->path, strerror(errno));
        rc = 1;
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
    return rc;
}
