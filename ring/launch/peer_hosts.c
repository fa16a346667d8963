/* Who may join a rendezvous (see peer_hosts.h). */
#include "peer_hosts.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct expand_ctx {
    int (*emit)(const char *host, void *ctx);
    void *ctx;
    long count;
} expand_ctx;

/* One item without top-level commas: expand its first bracket, recurse on the rest. */
static int expand_item(const char *item, size_t len, expand_ctx *x) {
    const char *open = memchr(item, '[', len);
    char host[256];
    if (!open) {
        if (len == 0 || len >= sizeof host || ++x->count > PH_MAX_HOSTS) return -1;
        memcpy(host, item, len);
        host[len] = 0;
        return x->emit(host, x->ctx) ? -1 : 0;
    }
    const char *close = memchr(open, ']', len - (size_t)(open - item));
    if (!close || close == open + 1) return -1;
    size_t pre = (size_t)(open - item), post = len - (size_t)(close + 1 - item);
    for (const char *r = open + 1; r < close;) {
        const char *comma = memchr(r, ',', (size_t)(close - r)), *end = comma ? comma : close;
        char *stop;
        size_t width = strspn(r, "0123456789");
        if (width == 0 || width > 9) return -1;
        long lo = strtol(r, &stop, 10), hi = lo;
        if (stop < end && *stop == '-') {
            const char *h = stop + 1;
            if (!isdigit((unsigned char)*h)) return -1;
            hi = strtol(h, &stop, 10);
        }
        if (stop != end || hi < lo || hi - lo >= PH_MAX_HOSTS) return -1;
        for (long k = lo; k <= hi; k++) {
            char built[512];
            int n = snprintf(built, sizeof built, "%.*s%0*ld%.*s", (int)pre, item, (int)width, k, (int)post, close + 1);
            if (n < 0 || (size_t)n >= sizeof built || expand_item(built, (size_t)n, x) != 0) return -1;
        }
        r = comma ? comma + 1 : close;
    }
    return 0;
}

int ph_expand(const char *list, int (*emit)(const char *host, void *ctx), void *ctx) {
    expand_ctx x = {emit, ctx, 0};
    const char *p = list;
    while (*p) {
        size_t len = 0;
        int depth = 0;
        for (; p[len] && (p[len] != ',' || depth > 0); len++) depth += p[len] == '[' ? 1 : p[len] == ']' ? -1 : 0;
        if (depth != 0 || expand_item(p, len, &x) != 0) return -1;
        p += len + (p[len] == ',');
    }
    return x.count > 0 ? 0 : -1;
}

/* Addresses are appended as resolved and made a sorted set once at the end (sort_unique): a
 * search of the set per address made 65536 hosts take 15 s (issue 42). */
static int add_addr(ph_set *set, const char *addr) {
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        void *a = realloc(set->addr, cap * sizeof *set->addr);
        if (!a) return -1;
        set->addr = a;
        set->cap = cap;
    }
    snprintf(set->addr[set->n++], sizeof set->addr[0], "%s", addr);
    return 0;
}

typedef struct resolve_ctx {
    ph_set *set;
    char *err;
    size_t errlen;
    const char *var;
} resolve_ctx;

static int resolve_host(const char *host, void *arg) {
    resolve_ctx *r = arg;
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        snprintf(r->err, r->errlen, "%s: host '%s' does not resolve: %s", r->var, host, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *ai = res; ai && rc == 0; ai = ai->ai_next) {
        char ip[48];
        const void *a = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                                 : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) && inet_ntop(ai->ai_family, a, ip, sizeof ip))
            rc = add_addr(r->set, ip);
    }
    freeaddrinfo(res);
    if (rc != 0) snprintf(r->err, r->errlen, "%s: out of memory for the addresses of '%s'", r->var, host);
    return rc;
}

static int addr_cmp(const void *a, const void *b) { return strcmp(a, b); }

static void sort_unique(ph_set *set) {
    if (set->n == 0) return;
    qsort(set->addr, set->n, sizeof set->addr[0], addr_cmp);
    size_t k = 1;
    for (size_t i = 1; i < set->n; i++)
        if (strcmp(set->addr[i], set->addr[k - 1]) != 0) memcpy(set->addr[k++], set->addr[i], sizeof set->addr[0]);
    set->n = k;
}

int ph_resolve(const char *list, const char *var, ph_set *set, char *err, size_t errlen) {
    resolve_ctx r = {set, err, errlen, var};
    memset(set, 0, sizeof *set);
    err[0] = 0;
    if (ph_expand(list, resolve_host, &r) != 0) {
        if (!err[0])
            snprintf(err, errlen, "%s='%.80s' is not a host list (names, or Slurm's name[01-04,7] ranges)", var, list);
        ph_free(set);
        return 2;
    }
    sort_unique(set);
    return 0;
}

bool ph_allowed(const ph_set *set, const char *from) {
    char ip[64];
    const char *colon = strrchr(from, ':');
    size_t n = colon ? (size_t)(colon - from) : strlen(from);
    if (n > 1 && from[0] == '[' && from[n - 1] == ']') from++, n -= 2;
    if (n > 7 && strncmp(from, "::ffff:", 7) == 0 && memchr(from + 7, '.', n - 7)) from += 7, n -= 7;
    if (n >= sizeof ip) return false;
    memcpy(ip, from, n);
    ip[n] = 0;
    return set->n > 0 && bsearch(ip, set->addr, set->n, sizeof set->addr[0], addr_cmp) != NULL;
}

void ph_free(ph_set *set) {
    free(set->addr);
    memset(set, 0, sizeof *set);
}
