/* The thread pool: every slot of every task runs exactly once, with the
 * task's slot count, whichever thread claims it; tasks on fewer slots than
 * threads; back-to-back tasks with the workers asleep in between (the futex
 * path) and awake (the spin path); per-slot scratch stays with its slot. */
#include "base/threads.h"
#include "test.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

typedef struct count_job {
    _Atomic int hits[8];
    _Atomic int bad;
    int n;
    rp_pool *pool;
} count_job;

static void count_task(void *arg, int ith, int nth) {
    count_job *j = arg;
    if (nth != j->n || ith < 0 || ith >= nth)
        atomic_fetch_add(&j->bad, 1);
    else
        atomic_fetch_add(&j->hits[ith], 1);
    /* the slot's scratch: written and read back by the one thread running it */
    int *s = rp_pool_scratch(j->pool, ith, 64 * sizeof(int));
    if (!s) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    for (int i = 0; i < 64; i++) s[i] = ith * 1000 + i;
    for (int i = 0; i < 64; i++)
        if (s[i] != ith * 1000 + i) atomic_fetch_add(&j->bad, 1);
}

void test_threads_slots(void) {
    for (int nt = 1; nt <= 4; nt++) {
        rp_pool *p = rp_pool_new(nt);
        REQUIRE(p, "pool of %d", nt);
        int wrong = 0;
        for (int task = 0; task < 4000; task++) {
            count_job j = {.n = 1 + task % nt, .pool = p};
            rp_pool_run_n(p, j.n, count_task, &j);
            for (int s = 0; s < 8; s++) wrong += atomic_load(&j.hits[s]) != (s < j.n);
            wrong += atomic_load(&j.bad);
            if (task % 1000 == 999) { /* let the workers fall asleep */
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        CHECK(!wrong, "%d threads: %d slots not run exactly once with their count", nt, wrong);
        rp_pool_free(p);
    }
}
