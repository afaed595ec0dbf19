/* Small helpers over jansson shared by every JSON reader (config.json, plan
 * files, server requests), so their messages describe values the same way. */
#ifndef RP_JSON_UTIL_H
#define RP_JSON_UTIL_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a number", "a boolean"
 * or "null": what a value is, for messages like "field 'x' must be a string,
 * not an integer". */
const char *rp_json_kind(const json_t *v);

#endif
