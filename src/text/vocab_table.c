#include "text/vocab_table.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* ---- string -> id map ---------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

int32_t rp_vocab_find(const rp_vocab *v, const char *s, size_t len) {
    if (!v->map.slots) return -1;
    for (uint64_t h = hash_bytes(s, len) & v->map.mask;; h = (h + 1) & v->map.mask) {
        uint64_t e = v->map.slots[h];
        if (!e) return -1;
        int32_t id = (int32_t)(e - 1);
        if (v->len[id] == len && memcmp(v->text[id], s, len) == 0) return id;
    }
}

bool rp_vocab_map_build(rp_vocab *v) {
    uint64_t cap = 16;
    while (cap < (uint64_t)v->n_tokens * 2) cap <<= 1;
    v->map.slots = rp_calloc(cap, sizeof *v->map.slots, "vocabulary index");
    if (!v->map.slots) return false;
    v->map.mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint64_t h = hash_bytes(v->text[id], v->len[id]) & v->map.mask;
        bool dup = false;
        while (v->map.slots[h]) {
            int32_t o = (int32_t)(v->map.slots[h] - 1);
            if (v->len[o] == v->len[id] && memcmp(v->text[o], v->text[id], v->len[id]) == 0) {
                dup = true; /* keep the first id for a duplicated text, as llama.cpp does */
                break;
            }
            h = (h + 1) & v->map.mask;
        }
        if (!dup) v->map.slots[h] = (uint64_t)id + 1;
    }
    return true;
}

bool rp_tokvec_push(rp_tokvec *t, int32_t id) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *p = rp_realloc(t->v, cap * sizeof *p, "token buffer");
        if (!p) return false;
        t->v = p;
        t->cap = cap;
    }
    t->v[t->n++] = id;
    return true;
}
