/* Small helpers over jansson shared by every JSON reader (config.json, plan
 * files, server requests), so their messages describe values the same way. */
#ifndef RP_JSON_UTIL_H
#define RP_JSON_UTIL_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a number", "a boolean"
 * or "null": what a value is, for messages like "field 'x' must be a string,
 * not an integer". */
const char *rp_json_kind(const json_t *v);

/* A JSON file of at most max bytes (a regular file: a FIFO or device is
 * refused, see rp_open_regular). NULL with *read_failed and the message
 * recorded when it cannot be read; NULL with err filled when it does not parse. */
#include <stdbool.h>
#include <stddef.h>
json_t *rp_json_load_path(const char *path, size_t max, size_t flags, json_error_t *err,
                          bool *read_failed);

#endif
