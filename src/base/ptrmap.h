/* A map from pointers to values (a weight's bytes to its device copy). */
#ifndef RP_BASE_PTRMAP_H
#define RP_BASE_PTRMAP_H

#include "reprise.h"

#include <stddef.h>

/* An open-addressing map from pointers (a weight's bytes) to values. */
typedef struct rp_ptrmap {
    const void **keys;
    void **vals;
    size_t cap, n; /* cap: a power of two (0 before the first insert) */
} rp_ptrmap;

void *rp_ptrmap_get(const rp_ptrmap *m, const void *key);
/* NULL val is not allowed; RP_ERR_NOMEM when growing fails. */
rp_status rp_ptrmap_put(rp_ptrmap *m, const void *key, void *val);
/* Removes key; its value, or NULL if absent. */
void *rp_ptrmap_del(rp_ptrmap *m, const void *key);
void rp_ptrmap_free(rp_ptrmap *m);

#endif
