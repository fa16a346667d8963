/* The rendezvous' job flags check (see flags_check.h). */
#include "flags_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"

/* 8 bytes of HMAC-SHA-256 under "job \0 secret" of the parts "what \0 text". */
static uint64_t keyed(const char *job, const char *secret, const char *what, const char *text, size_t textlen) {
    char key[256];
    size_t jl = strnlen(job, 127), sl = strnlen(secret, 127);
    memcpy(key, job, jl);
    key[jl] = 0;
    memcpy(key + jl + 1, secret, sl);
    const void *msg[2] = {what, text};
    size_t len[2] = {strlen(what) + 1, textlen};
    uint8_t mac[SHA256_BYTES];
    hmac_sha256(key, jl + 1 + sl, msg, len, 2, mac);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h = h << 8 | mac[i];
    return h;
}

uint64_t fc_hash(const char *flags, const char *job, const char *secret) {
    if (!flags) return 0;
    uint64_t h = keyed(job, secret, "weipipe job flags", flags, strlen(flags));
    return h ? h : 1; /* 0 means "not compared" */
}

/* One "name=value" line: its name and value. Returns the start of the next line. */
static const char *split_line(const char *p, size_t *namelen, const char **value, size_t *valuelen) {
    size_t len = strcspn(p, "\n"), n = strcspn(p, "=");
    if (n > len) n = len;
    *namelen = n;
    *value = p + n + (n < len);
    *valuelen = len - n - (n < len);
    return p + len + (p[len] == '\n');
}

/* The hash of one flag: its name and value, so that equal values of two flags differ. */
static uint64_t flag_hash(const char *job, const char *secret, const char *line, size_t len) {
    return keyed(job, secret, "weipipe job flag", line, len);
}

char *fc_list(const char *flags, const char *job, const char *secret) {
    const char *p = flags ? flags : "";
    size_t cap = 1, used = 0;
    for (const char *q = p; *q; q++) cap += *q == '\n' ? 18 : 1;
    char *out = malloc(cap + 18);
    if (!out) return NULL;
    while (*p) {
        size_t n, vl;
        const char *v, *next = split_line(p, &n, &v, &vl);
        used += (size_t)snprintf(out + used, cap + 18 - used, "%.*s=%016llx\n", (int)n, p,
                                 (unsigned long long)flag_hash(job, secret, p, (size_t)(v - p) + vl));
        p = next;
    }
    out[used] = 0;
    return out;
}

/* The hash the list `theirs` gives flag `name` (of n bytes); whether it has one. */
static int their_hash(const char *theirs, const char *name, size_t n, unsigned long long *h) {
    for (const char *p = theirs; *p;) {
        size_t tn, vl;
        const char *v, *next = split_line(p, &tn, &v, &vl);
        char hex[17];
        if (tn == n && memcmp(p, name, n) == 0 && vl == 16) {
            memcpy(hex, v, 16);
            hex[16] = 0;
            char *end;
            *h = strtoull(hex, &end, 16);
            return *end == 0;
        }
        p = next;
    }
    return 0;
}

static void add_name(char *names, size_t nameslen, const char *name, size_t n) {
    size_t used = strlen(names);
    if (used + n + 8 >= nameslen) {
        if (used + 5 < nameslen && !strstr(names, "...")) snprintf(names + used, nameslen - used, ", ...");
        return;
    }
    snprintf(names + used, nameslen - used, "%s--%.*s", used ? ", " : "", (int)n, name);
}

void fc_differ(const char *flags, const char *job, const char *secret, const char *theirs, char *names,
               size_t nameslen) {
    names[0] = 0;
    const char *mine = flags ? flags : "";
    for (const char *p = mine; *p;) {
        size_t n, vl;
        const char *v, *next = split_line(p, &n, &v, &vl);
        unsigned long long h;
        if (!their_hash(theirs, p, n, &h) || h != flag_hash(job, secret, p, (size_t)(v - p) + vl))
            add_name(names, nameslen, p, n);
        p = next;
    }
    for (const char *p = theirs; *p;) { /* the flags only the peer has (another weipipe version) */
        size_t n, vl;
        const char *v, *next = split_line(p, &n, &v, &vl);
        bool found = false;
        for (const char *q = mine; *q && !found;) {
            size_t qn, qvl;
            const char *qv, *qnext = split_line(q, &qn, &qv, &qvl);
            found = qn == n && memcmp(q, p, n) == 0;
            q = qnext;
        }
        if (!found) add_name(names, nameslen, p, n);
        p = next;
    }
}

void fc_values(const char *flags, const char *names, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = 0;
    for (const char *p = names; *p && used + 8 < outlen;) {
        p += strspn(p, ", ");
        if (strncmp(p, "--", 2) != 0) break; /* "..." */
        const char *name = p + 2;
        size_t n = strcspn(name, ",");
        const char *value = NULL;
        size_t vl = 0;
        for (const char *q = flags ? flags : ""; *q && !value;) {
            size_t qn, qvl;
            const char *qv, *next = split_line(q, &qn, &qv, &qvl);
            if (qn == n && memcmp(q, name, n) == 0) value = qv, vl = qvl;
            q = next;
        }
        int k = value ? snprintf(out + used, outlen - used, "%s--%.*s '%.*s'", used ? ", " : "", (int)n, name, (int)vl, value)
                      : snprintf(out + used, outlen - used, "%s--%.*s (none)", used ? ", " : "", (int)n, name);
        used = k < 0 || (size_t)k >= outlen - used ? outlen - 1 : used + (size_t)k;
        p = name + n;
    }
}
