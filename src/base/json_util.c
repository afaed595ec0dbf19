#include "base/json_util.h"
#include "base/util.h"

#include <stdlib.h>

const char *rp_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

json_t *rp_json_load_path(const char *path, size_t max, size_t flags, json_error_t *err,
                          bool *read_failed) {
    char *text;
    size_t len;
    *read_failed = false;
    if (rp_read_file_max(path, max, &text, &len)) {
        *read_failed = true;
        return NULL;
    }
    json_t *o = json_loadb(text, len, flags, err);
    free(text);
    return o;
}
