/* Helpers the backends share (not for forwards). */
#ifndef RP_BACKEND_IMPL_H
#define RP_BACKEND_IMPL_H

#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>

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
