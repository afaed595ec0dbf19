/* An open-addressing map from pointers to values (linear probing, power-of-two
 * capacity, at most half full). */
#include "base/ptrmap.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static size_t ptr_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

void *rp_ptrmap_get(const rp_ptrmap *m, const void *key) {
    if (!m->cap) return NULL;
    for (size_t i = ptr_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return NULL;
        if (m->keys[i] == key) return m->vals[i];
    }
}

rp_status rp_ptrmap_put(rp_ptrmap *m, const void *key, void *val) {
    RP_ASSERT(key && val);
    if ((m->n + 1) * 2 > m->cap) {
        rp_ptrmap g = {0};
        g.cap = m->cap ? m->cap * 2 : 64;
        g.keys = rp_calloc(g.cap, sizeof *g.keys, "pointer map");
        g.vals = rp_calloc(g.cap, sizeof *g.vals, "pointer map");
        if (!g.keys || !g.vals) {
            free(g.keys);
            free(g.vals);
            return RP_ERR_NOMEM;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) RP_ASSERT(!rp_ptrmap_put(&g, m->keys[i], m->vals[i]));
        rp_ptrmap_free(m);
        *m = g;
    }
    size_t i = ptr_hash(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return RP_OK;
}

void *rp_ptrmap_del(rp_ptrmap *m, const void *key) {
    if (!m->cap) return NULL;
    size_t i = ptr_hash(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) return NULL;
    void *val = m->vals[i];
    m->keys[i] = NULL;
    m->n--;
    /* re-insert the rest of the cluster so probes still find it */
    for (size_t j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
        const void *k = m->keys[j];
        void *v = m->vals[j];
        m->keys[j] = NULL;
        m->n--;
        RP_ASSERT(!rp_ptrmap_put(m, k, v));
    }
    return val;
}

void rp_ptrmap_free(rp_ptrmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
