/*
 * basic_costs.c - the basic-cost table of CableS (section 3.2, Table 4) measured through the C
 * API of Squall: thread creation, mutex lock/unlock (local and remote, first time and again),
 * condition wait/signal/broadcast, barriers, and atomics. A single-system-image program: rank
 * 0 runs main and places helper threads on node 1. Needs at least 2 nodes.
 *
 * usage: squall run -n 2 basic_costs [REPS]
 * Prints one line per mechanism: "cost <name> <microseconds>", then "ok basic costs".
 *
 * Lock ids: the manager of lock id L is node L % size, so an id with L % size == 0 is "local"
 * to node 0 (its token starts here) and L % size == 1 is "remote" (managed by node 1).
 */
#include <squall.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int size_;

#define CHECK(x)                                                                             \
    do {                                                                                     \
        int rc_ = (x);                                                                       \
        if (rc_ < 0) {                                                                       \
            fprintf(stderr, "basic_costs: %s returned %d: %s\n", #x, rc_, squall_last_error()); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static void report(const char *name, double seconds, int reps)
{
    printf("cost %-34s %10.1f us\n", name, seconds * 1e6 / reps);
}

static uint64_t id_on(int node, uint64_t k)
{
    /* an id managed by `node`: k * size + node */
    return k * (uint64_t)size_ + (uint64_t)node;
}

static void *nothing(void *p) { return p; }

/* Helper on node 1: takes and releases lock `*p` once, so that the token moves there. */
static void *grab(void *p)
{
    uint64_t id = *(uint64_t *)p;
    CHECK(squall_lock(id));
    CHECK(squall_unlock(id));
    return NULL;
}

struct condbench {
    uint64_t lock, cond, phase, reps;
};

/* Helper on node 1 for the condition costs: waits `reps` times for the phase to change. */
static void *cond_waiter(void *p)
{
    struct condbench *c = p;
    CHECK(squall_lock(c->lock));
    for (uint64_t r = 1; r <= c->reps; r++)
        while (c->phase < r) CHECK(squall_cond_wait(c->cond, c->lock));
    CHECK(squall_unlock(c->lock));
    return NULL;
}

struct barbench {
    uint64_t id;
    uint32_t total, reps;
};

static void *bar_worker(void *p)
{
    struct barbench *b = p;
    for (uint32_t r = 0; r < b->reps; r++) CHECK(squall_barrier_n(b->id, b->total));
    return NULL;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    CHECK(squall_init_ssi());
    size_ = squall_size();
    if (size_ < 2) {
        fprintf(stderr, "basic_costs: run it on at least 2 nodes (squall run -n 2 ...)\n");
        return 2;
    }
    double t;
    uint64_t tid;

    /* thread create + join, local and remote */
    for (int node = 0; node < 2; node++) {
        t = squall_wtime();
        for (int r = 0; r < reps; r++) {
            CHECK(squall_thread_create(node, nothing, NULL, &tid));
            CHECK(squall_thread_join(tid, NULL));
        }
        report(node == 0 ? "local thread create+join" : "remote thread create+join", squall_wtime() - t, reps);
    }

    /* mutex lock: first use of a lock managed here / on node 1, then again (token cached) */
    for (int node = 0; node < 2; node++) {
        double first = 0, again = 0, unlock = 0;
        for (int r = 0; r < reps; r++) {
            uint64_t id = id_on(node, 1000 + (uint64_t)r);
            t = squall_wtime();
            CHECK(squall_lock(id));
            first += squall_wtime() - t;
            t = squall_wtime();
            CHECK(squall_unlock(id));
            unlock += squall_wtime() - t;
            t = squall_wtime();
            CHECK(squall_lock(id));
            again += squall_wtime() - t;
            CHECK(squall_unlock(id));
        }
        report(node == 0 ? "local mutex lock (first time)" : "remote mutex lock (first time)", first, reps);
        report(node == 0 ? "local mutex lock (again)" : "remote-managed lock (again)", again, reps);
        if (node == 0) report("mutex unlock", unlock, reps);
    }

    /* lock whose token is on node 1 (a thread there used it last) */
    {
        uint64_t *idp = squall_malloc(sizeof *idp);
        double sum = 0;
        for (int r = 0; r < reps; r++) {
            *idp = id_on(0, 5000 + (uint64_t)r);
            CHECK(squall_thread_create(1, grab, idp, &tid));
            CHECK(squall_thread_join(tid, NULL));
            t = squall_wtime();
            CHECK(squall_lock(*idp));
            sum += squall_wtime() - t;
            CHECK(squall_unlock(*idp));
        }
        report("mutex lock (token on another node)", sum, reps);
        squall_free(idp);
    }

    /* condition signal / broadcast with the waiter on node 1 */
    for (int bcast = 0; bcast < 2; bcast++) {
        struct condbench *c = squall_calloc(1, sizeof *c);
        c->lock = id_on(0, 7000 + (uint64_t)bcast);
        c->cond = 9000 + (uint64_t)bcast;
        c->reps = (uint64_t)reps;
        CHECK(squall_thread_create(1, cond_waiter, c, &tid));
        double sum = 0;
        for (int r = 1; r <= reps; r++) {
            CHECK(squall_lock(c->lock));
            c->phase = (uint64_t)r;
            t = squall_wtime();
            CHECK(bcast ? squall_cond_broadcast(c->cond) : squall_cond_signal(c->cond));
            sum += squall_wtime() - t;
            CHECK(squall_unlock(c->lock));
        }
        CHECK(squall_thread_join(tid, NULL));
        report(bcast ? "conditional broadcast" : "conditional signal", sum, reps);
        squall_free(c);
    }

    /* barrier of one thread per node (the runtime's node barrier) */
    {
        struct barbench *b = squall_calloc(1, sizeof *b);
        b->id = 11000;
        b->total = (uint32_t)size_;
        b->reps = (uint32_t)reps;
        uint64_t *tids = calloc((size_t)size_, sizeof *tids);
        for (int n = 1; n < size_; n++) CHECK(squall_thread_create(n, bar_worker, b, &tids[n]));
        t = squall_wtime();
        for (int r = 0; r < reps; r++) CHECK(squall_barrier_n(b->id, b->total));
        double s = squall_wtime() - t;
        for (int n = 1; n < size_; n++) CHECK(squall_thread_join(tids[n], NULL));
        report("barrier (one thread per node)", s, reps);
        free(tids);
        squall_free(b);
    }

    /* atomics on a word homed at node 1 */
    {
        uint64_t *w = squall_malloc_placed(4096, SQUALL_PLACE_NODE, 1);
        uint64_t old;
        t = squall_wtime();
        for (int r = 0; r < reps; r++) CHECK(squall_atomic_fetch_add(w, 1, &old));
        report("remote atomic fetch_add", squall_wtime() - t, reps);
        squall_free(w);
    }
    printf("ok basic costs (%d nodes, %d repetitions)\n", size_, reps);
    CHECK(squall_finalize());
    return 0;
}
