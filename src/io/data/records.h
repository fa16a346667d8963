/* What prepare takes from one JSON record: a document's text (a string field), or a
 * conversation (a "messages" array of {"role", "content"} objects). Failures are 2 with the
 * reason in why (the caller adds the file and line). */
#ifndef WP_IO_RECORDS_H
#define WP_IO_RECORDS_H

#include <jansson.h>

#include "chat.h"
#include "result.h"

/* rec[field] as a string: *text points into rec (valid while rec lives). 2: rec is not an
 * object, has no such field, or the field is not a string. */
wp_result record_text(json_t *rec, const char *field, const char **text, size_t *len, char *why, size_t whylen);

/* rec["messages"] as chat messages into *msgs (grown as needed, *cap its room; the strings
 * point into rec). Each message an object with a "role" of system, user or assistant and a
 * string "content"; at least one message. */
wp_result record_messages(json_t *rec, chat_msg **msgs, int *n, int *cap, char *why, size_t whylen);

#endif
