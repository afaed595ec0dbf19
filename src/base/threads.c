#include "base/threads.h"
#include "base/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Workers spin this many rounds (a PAUSE is 10-140 cycles: tens of
 * microseconds) for a new task before sleeping: a decode step issues a task
 * every few tens of microseconds, and sleeping in between would add a futex
 * round trip to each. The caller waiting for the workers spins as long, then
 * yields its core, so an oversubscribed machine (more runnable threads than
 * cores) still lets a descheduled worker finish. */
#define SPIN_ROUNDS 20000

typedef struct worker {
    rp_pool *pool;
    int ith;
    pthread_t th;
    void *scratch; /* rp_pool_scratch */
    size_t scratch_size;
} worker;

struct rp_pool {
    int n;
    worker *workers;
    rp_task_fn fn;
    void *arg;
    int n_active;
    void *shared; /* rp_pool_shared_scratch */
    size_t shared_size;
    _Atomic unsigned gen;
    _Atomic int n_done;
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p) {
    worker *w = p;
    rp_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
            if (++spins < SPIN_ROUNDS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = g;
        if (w->ith < pool->n_active) pool->fn(pool->arg, w->ith, pool->n_active);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
    }
}

rp_pool *rp_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    rp_pool *p = rp_calloc(1, sizeof *p, "thread pool");
    if (!p) return NULL;
    p->n = n_threads;
    p->workers = rp_calloc((size_t)n_threads, sizeof *p->workers, "thread pool");
    if (!p->workers) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        if (pthread_create(&p->workers[i].th, NULL, worker_main, &p->workers[i]) != 0) {
            p->n = i; /* join what was started */
            rp_pool_free(p);
            rp_fail(RP_ERR_NOMEM, "cannot start thread %d of %d", i, n_threads);
            return NULL;
        }
    }
    return p;
}

void rp_pool_free(rp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->workers[i].th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int i = 0; i < p->n; i++) rp_free_aligned(p->workers[i].scratch);
    rp_free_aligned(p->shared);
    free(p->workers);
    free(p);
}

int rp_pool_size(const rp_pool *p) {
    return p->n;
}

void *rp_pool_scratch(rp_pool *p, int ith, size_t size) {
    worker *w = &p->workers[ith];
    if (w->scratch_size >= size) return w->scratch;
    rp_free_aligned(w->scratch);
    w->scratch = rp_alloc_aligned(size, "thread scratch");
    w->scratch_size = w->scratch ? size : 0;
    return w->scratch;
}

void *rp_pool_shared_scratch(rp_pool *p, size_t size) {
    if (p->shared_size >= size) return p->shared;
    rp_free_aligned(p->shared);
    p->shared = rp_alloc_aligned(size, "shared thread scratch");
    p->shared_size = p->shared ? size : 0;
    return p->shared;
}

void rp_pool_run_n(rp_pool *p, int n, rp_task_fn fn, void *arg) {
    if (n > p->n) n = p->n;
    if (n < 1) n = 1;
    if (p->n == 1 || n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_active = n;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, n);
    for (int spins = 0; atomic_load_explicit(&p->n_done, memory_order_acquire) != p->n - 1;
         spins++) {
        if (spins < SPIN_ROUNDS)
            CPU_RELAX();
        else
            sched_yield();
    }
}

void rp_pool_run(rp_pool *p, rp_task_fn fn, void *arg) {
    rp_pool_run_n(p, p->n, fn, arg);
}

int rp_default_threads(void) {
    return rp_n_physical_cores();
}

int rp_n_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs in /proc/cpuinfo; fall back
     * to the online CPU count. */
    FILE *fp = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (fp) {
        char line[256];
        int phys = 0, seen_pairs[1024][2], n_pairs = 0;
        while (fgets(line, sizeof line, fp)) {
            if (!strncmp(line, "physical id", 11)) phys = atoi(strchr(line, ':') + 1);
            if (!strncmp(line, "core id", 7)) {
                int core = atoi(strchr(line, ':') + 1);
                int dup = 0;
                for (int i = 0; i < n_pairs; i++)
                    if (seen_pairs[i][0] == phys && seen_pairs[i][1] == core) dup = 1;
                if (!dup && n_pairs < 1024) {
                    seen_pairs[n_pairs][0] = phys;
                    seen_pairs[n_pairs][1] = core;
                    n_pairs++;
                }
            }
        }
        fclose(fp);
        n = n_pairs;
    }
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

void rp_split_range(long n, int ith, int nth, long align, long *a, long *b) {
    if (align < 1) align = 1;
    long blocks = (n + align - 1) / align;
    long per = blocks / nth, rem = blocks % nth;
    long b0 = ith * per + (ith < rem ? ith : rem);
    long b1 = b0 + per + (ith < rem ? 1 : 0);
    *a = RP_MIN(b0 * align, n);
    *b = RP_MIN(b1 * align, n);
}
