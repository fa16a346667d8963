/* The hosts that may join a rendezvous (WEIPIPE_PEERS, bootstrap.h): a host list in Slurm's
 * syntax ("gpu[03-05,9],cpu1", "rack[1-2]-n[01-02]"), expanded, each name resolved to its
 * addresses (getaddrinfo, IPv4 and IPv6) once when rank 0 opens the rendezvous. A connection
 * from any other address is dropped before its handshake is read. */
#ifndef WP_RING_PEER_HOSTS_H
#define WP_RING_PEER_HOSTS_H

#include <stdbool.h>
#include <stddef.h>

#define PH_MAX_HOSTS 65536 /* a list that expands to more is refused (a typo like [1-99999999]) */

/* Calls emit(host, ctx) for each host of list, in order; stops at emit's non-zero return.
 * 0; -1 when list is malformed (an unclosed or empty bracket, a range that runs backwards,
 * more than PH_MAX_HOSTS hosts) or emit stopped. */
int ph_expand(const char *list, int (*emit)(const char *host, void *ctx), void *ctx);

typedef struct ph_set {
    size_t n, cap;
    char (*addr)[48]; /* numeric addresses, as inet_ntop writes them: sorted (strcmp), distinct */
} ph_set;

/* Expand and resolve list into set. 0; 2 with err naming the malformed list or the host that
 * does not resolve (var: the variable it came from, for the message). */
int ph_resolve(const char *list, const char *var, ph_set *set, char *err, size_t errlen);
/* Whether the address of from ("ip:port", "[ip6]:port", sock.h) is in the set; an IPv4 peer
 * seen as ::ffff:a.b.c.d on a dual-stack listener counts as a.b.c.d. */
bool ph_allowed(const ph_set *set, const char *from);
void ph_free(ph_set *set);

#endif
