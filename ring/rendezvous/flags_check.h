/* The rendezvous' check that every rank runs with the same job flags (wp_boot_info.job_flags:
 * "name=value" lines), without ever sending a flag's value over the wire.
 *
 * The handshake carries a 64-bit keyed hash of the whole text: the first 8 bytes of
 * HMAC-SHA-256 under the key "job id \0 secret". 64 bits, not the crc32 of wire version 2:
 * two different flags texts pass for equal with odds of 2^-64, not 2^-32. Keyed: the hash
 * only means something to whoever holds the job id (and the secret, when set), and the same
 * flags give other hashes in another job, so it cannot be looked up or compared across jobs.
 * SHA-256 rather than a faster keyed hash (SipHash): one hash per rank per job costs nothing,
 * and it is the standard with an independent reference everywhere (Python's hashlib, hmac).
 *
 * When the hashes differ, the joining rank sends one line per flag, "name=H" with H the same
 * keyed hash of that flag's value (16 hex digits), and rank 0 answers with the names that
 * differ. Each side then prints its own values: names cross the wire, values never do. Both
 * only after the peer showed the job id (and the secret, when set) in its handshake. */
#ifndef WP_RING_FLAGS_CHECK_H
#define WP_RING_FLAGS_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* The hash of the whole flags text; 0 (not compared) when flags is NULL; never 0 otherwise. */
uint64_t fc_hash(const char *flags, const char *job, const char *secret);

/* The per-flag list ("name=H\n" lines) of flags (NULL: empty); malloc'd, NULL when out of memory. */
char *fc_list(const char *flags, const char *job, const char *secret);

/* The names of the flags whose values differ between flags and the peer's per-flag list
 * `theirs` (or that one side lacks), as "--a, --b" (cut to fit); "" when none differ. */
void fc_differ(const char *flags, const char *job, const char *secret, const char *theirs, char *names,
               size_t nameslen);

/* This side's values of the named flags ("--a, --b" as above): "--a '1', --b '2'"; a name the
 * text lacks is "--c (none)". */
void fc_values(const char *flags, const char *names, char *out, size_t outlen);

#endif
