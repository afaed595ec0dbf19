/* A persistent thread pool. The calling thread is worker 0; the others spin
 * briefly on a generation counter before sleeping, so back-to-back tasks (one
 * per matmul in a forward pass) cost no thread creation and little latency. */
#ifndef RP_THREADS_H
#define RP_THREADS_H

#include <stddef.h>

typedef void (*rp_task_fn)(void *arg, int ith, int nth);
typedef struct rp_pool rp_pool;

/* NULL on failure (error recorded). n_threads >= 1. */
rp_pool *rp_pool_new(int n_threads);
void rp_pool_free(rp_pool *p);
int rp_pool_size(const rp_pool *p);
/* Runs fn(arg, i, n) for i in [0, n) on n threads and returns when all are done. */
void rp_pool_run(rp_pool *p, rp_task_fn fn, void *arg);
/* Like rp_pool_run but on at most n threads (n >= 1); the rest sit it out. */
void rp_pool_run_n(rp_pool *p, int n, rp_task_fn fn, void *arg);

/* Per-thread scratch of at least size bytes (64-byte aligned), owned by the
 * pool and reused across tasks; only thread ith may call this, from inside a
 * task (ith 0 is the caller). NULL if it cannot be allocated. */
void *rp_pool_scratch(rp_pool *p, int ith, size_t size);

/* A buffer of at least size bytes (64-byte aligned) owned by the pool, for
 * the caller to share with the threads of the tasks it runs (results of one
 * task read by the next); reused across calls, so only one user at a time.
 * Call from the caller's thread outside tasks. NULL if it cannot be
 * allocated. */
void *rp_pool_shared_scratch(rp_pool *p, size_t size);

/* Physical cores of this machine (at least 1). */
int rp_n_physical_cores(void);

/* Split [0, n) into nth near-equal parts aligned to `align`; part ith is [*a, *b). */
void rp_split_range(long n, int ith, int nth, long align, long *a, long *b);

#endif
