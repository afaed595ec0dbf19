#include "base/threads.h"
#include "base/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* A task is n slots, fn(arg, slot, n) for slot in [0, n): every thread of
 * the pool (the caller included) claims slots from a shared counter until
 * none is left, so a thread the scheduler has taken away (a competing load on
 * the cores) does not hold the task up: the others run its slots. A slot is
 * run by exactly one thread, so its per-slot scratch (rp_pool_scratch, index
 * = slot) is never shared, and its arithmetic, fixed by (slot, n), does not
 * depend on which thread runs it.
 *
 * Between tasks, workers spin this many rounds (a PAUSE is 10-140 cycles:
 * tens of microseconds) for the next one, then sleep on a futex on the
 * generation counter; the caller wakes them only when one sleeps. The caller
 * waiting for slots in progress spins as long, then sleeps on a futex on the
 * done counter, woken by the thread finishing the last slot. */
#define SPIN_ROUNDS 20000

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
static void futex_wait(_Atomic int *word, int val) {
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic int *word) {
    syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}
#else
static void futex_wait(_Atomic int *word, int val) {
    (void)word;
    (void)val;
    sched_yield();
}
static void futex_wake(_Atomic int *word) {
    (void)word;
}
#endif

typedef struct worker {
    rp_pool *pool;
    int ith;
    pthread_t th;
    void *scratch; /* rp_pool_scratch of slot ith */
    size_t scratch_size;
} worker;

struct rp_pool {
    int n;
    worker *workers;
    rp_task_fn fn;
    void *arg;
    void *shared; /* rp_pool_shared_scratch */
    size_t shared_size;
    _Atomic int gen; /* task generation (futex word of sleeping workers) */
    /* the next slot to claim (bits 0-19) and the task's slot count (bits
     * 20-39), in one word: a claim that finds slot >= count is a thread
     * coming late from a finished task, never a slot of the next one */
    _Atomic long long next;
    _Atomic int n_done;   /* slots finished (futex word of the waiting caller) */
    _Atomic int sleepers; /* workers asleep or going to sleep on gen */
    _Atomic int waiting;  /* the caller asleep or going to sleep on n_done */
    _Atomic int stop;
};

/* claims and runs slots of the current task until none is left */
static void run_slots(rp_pool *p) {
    for (;;) {
        const long long v = atomic_fetch_add(&p->next, 1);
        const int s = (int)(v & 0xFFFFF), n = (int)((v >> 20) & 0xFFFFF);
        if (s >= n) return;
        p->fn(p->arg, s, n);
        if (atomic_fetch_add(&p->n_done, 1) + 1 == n && atomic_load(&p->waiting))
            futex_wake(&p->n_done);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    rp_pool *p = w->pool;
    int seen = 0;
    for (;;) {
        int g, spins = 0;
        while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ROUNDS) {
                CPU_RELAX();
                continue;
            }
            /* announce the sleep, then check once more (the caller reads
             * sleepers after bumping gen: one of the two sees the other) */
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_slots(p);
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
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen);
    for (int i = 1; i < p->n; i++) pthread_join(p->workers[i].th, NULL);
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
    /* the last task's slots are all done: no thread reads these now */
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n_done, 0);
    atomic_store(&p->next, (long long)n << 20);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers)) futex_wake(&p->gen);
    run_slots(p);
    int d, spins = 0;
    while ((d = atomic_load(&p->n_done)) != n && ++spins < SPIN_ROUNDS) CPU_RELAX();
    if (d != n) {
        atomic_store(&p->waiting, 1);
        while ((d = atomic_load(&p->n_done)) != n) futex_wait(&p->n_done, d);
        atomic_store(&p->waiting, 0);
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
