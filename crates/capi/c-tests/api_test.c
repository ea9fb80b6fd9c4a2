/*
 * api_test.c - multi-node tests of the C API (squall.h), SPMD style: every node runs main,
 * calls squall_init(), and starts T native threads of its own where a scenario needs them.
 *
 * usage: api_test SCENARIO [T]
 *   locks T     every thread of every node increments one counter under one lock: exact count
 *   barrier T   rounds of write-own-slot / barrier / check-all-slots with T threads per node
 *   condvar T   producers on every node, T consumers per node, bounded buffer on conditions
 *   flags       node 0 publishes data behind a flag; the others wait on it (two rounds)
 *   atomics T   fetch_add counter and a compare-swap race across all threads of all nodes
 *   threads     node 0 creates threads on every node (explicit and round-robin) and joins them
 *   misuse      unlock not held, relock, destroy held lock, join unknown thread, bad arguments
 *   before-init (no launcher) calls before squall_init fail clearly; then a one-node job
 * Prints "ok SCENARIO" on rank 0 and exits 0 on success; exits 1 with a message otherwise.
 */
#include <squall.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_;

#define FAIL(...)                                                                   \
    do {                                                                            \
        fprintf(stderr, "api_test: node %d: ", rank_);                               \
        fprintf(stderr, __VA_ARGS__);                                               \
        fprintf(stderr, " (last error: %s)\n", squall_last_error());                 \
        exit(1);                                                                    \
    } while (0)

#define CHECK(rc)                                                                   \
    do {                                                                            \
        int rc_ = (rc);                                                             \
        if (rc_ < 0) FAIL("%s returned %d", #rc, rc_);                              \
    } while (0)

typedef void *(*thread_fn)(void *);

static void run_local_threads(int t, thread_fn fn, void *args, size_t arg_size)
{
    pthread_t *ids = calloc((size_t)t, sizeof(pthread_t));
    for (int i = 0; i < t; i++)
        if (pthread_create(&ids[i], NULL, fn, (char *)args + (size_t)i * arg_size) != 0)
            FAIL("pthread_create failed");
    for (int i = 0; i < t; i++) pthread_join(ids[i], NULL);
    free(ids);
}

struct targ {
    int gid;      /* thread number in the job */
    int nthreads; /* threads in the job */
    uint64_t *shared;
};

/* ---------------------------------------------------------------- locks */
#define LOCK_ITERS 200
static void *locks_worker(void *p)
{
    struct targ *a = p;
    for (int i = 0; i < LOCK_ITERS; i++) {
        CHECK(squall_lock(1));
        uint64_t v = a->shared[0];
        a->shared[0] = v + 1;
        CHECK(squall_unlock(1));
    }
    return NULL;
}

/* ---------------------------------------------------------------- barrier */
#define BARRIER_ROUNDS 5
static void *barrier_worker(void *p)
{
    struct targ *a = p;
    int serial = 0;
    for (int r = 1; r <= BARRIER_ROUNDS; r++) {
        a->shared[a->gid * 8] = (uint64_t)r; /* one cache line per thread */
        int rc = squall_barrier_n(100, (uint32_t)a->nthreads);
        CHECK(rc);
        if (rc == SQUALL_SERIAL) serial++;
        for (int g = 0; g < a->nthreads; g++)
            if (a->shared[g * 8] != (uint64_t)r)
                FAIL("round %d: thread %d sees slot %d = %llu", r, a->gid, g,
                     (unsigned long long)a->shared[g * 8]);
        CHECK(squall_barrier_n(101, (uint32_t)a->nthreads));
    }
    /* count serial returns: exactly one per episode of barrier 100 */
    uint64_t old;
    CHECK(squall_atomic_fetch_add(&a->shared[a->nthreads * 8], (uint64_t)serial, &old));
    return NULL;
}

/* ---------------------------------------------------------------- condvar */
#define CAP 4
#define ITEMS_PER_PRODUCER 60
struct queue {
    uint64_t buf[CAP];
    uint64_t head, count, taken, total, sum;
};
enum { QLOCK = 200, NOT_EMPTY = 201, NOT_FULL = 202 };

static void *consumer(void *p)
{
    struct targ *a = p;
    struct queue *q = (struct queue *)a->shared;
    for (;;) {
        CHECK(squall_lock(QLOCK));
        while (q->count == 0 && q->taken < q->total) CHECK(squall_cond_wait(NOT_EMPTY, QLOCK));
        if (q->taken == q->total) {
            CHECK(squall_unlock(QLOCK));
            return NULL;
        }
        uint64_t v = q->buf[q->head];
        q->head = (q->head + 1) % CAP;
        q->count--;
        q->taken++;
        q->sum += v;
        if (q->taken == q->total) CHECK(squall_cond_broadcast(NOT_EMPTY));
        CHECK(squall_cond_signal(NOT_FULL));
        CHECK(squall_unlock(QLOCK));
    }
}

static void *producer(void *p)
{
    struct targ *a = p;
    struct queue *q = (struct queue *)a->shared;
    for (int i = 1; i <= ITEMS_PER_PRODUCER; i++) {
        uint64_t v = (uint64_t)rank_ * 1000 + (uint64_t)i;
        CHECK(squall_lock(QLOCK));
        while (q->count == CAP) CHECK(squall_cond_wait(NOT_FULL, QLOCK));
        q->buf[(q->head + q->count) % CAP] = v;
        q->count++;
        CHECK(squall_cond_signal(NOT_EMPTY));
        CHECK(squall_unlock(QLOCK));
    }
    return NULL;
}

/* ---------------------------------------------------------------- atomics */
#define ATOMIC_ITERS 100
static void *atomics_worker(void *p)
{
    struct targ *a = p;
    uint64_t old;
    for (int i = 0; i < ATOMIC_ITERS; i++) CHECK(squall_atomic_fetch_add(&a->shared[0], 1, &old));
    CHECK(squall_atomic_compare_swap(&a->shared[1], 0, (uint64_t)a->gid + 1, &old));
    if (old == 0) CHECK(squall_atomic_fetch_add(&a->shared[2], 1, &old));
    return NULL;
}

/* ---------------------------------------------------------------- threads */
static void *remote_thread(void *p)
{
    uint64_t *slot = p;
    slot[0] = (uint64_t)squall_rank() + 1;
    slot[1] = slot[2] * 3; /* slot[2] was written by the creator before the create */
    return (void *)(uintptr_t)(slot[2] + 7);
}

static void scenario_threads(void)
{
    if (rank_ == 0) {
        int n = 2 * size_;
        uint64_t *slots = squall_calloc((size_t)n * 8, sizeof(uint64_t));
        uint64_t *tids = calloc((size_t)n, sizeof(uint64_t));
        if (!slots) FAIL("squall_calloc failed");
        for (int i = 0; i < n; i++) {
            slots[i * 8 + 2] = (uint64_t)(i + 10);
            int node = i < size_ ? i : SQUALL_ANY_NODE;
            CHECK(squall_thread_create(node, remote_thread, &slots[i * 8], &tids[i]));
        }
        for (int i = 0; i < n; i++) {
            void *ret = NULL;
            CHECK(squall_thread_join(tids[i], &ret));
            if ((uintptr_t)ret != (uintptr_t)(i + 17)) FAIL("thread %d returned %p", i, ret);
            if (i < size_ && slots[i * 8] != (uint64_t)i + 1)
                FAIL("thread %d created on node %d ran on node %d", i, i, (int)slots[i * 8] - 1);
            if (slots[i * 8] == 0) FAIL("thread %d never wrote its slot", i);
            if (slots[i * 8 + 1] != (uint64_t)(i + 10) * 3)
                FAIL("thread %d did not see the creator's write (got %llu)", i,
                     (unsigned long long)slots[i * 8 + 1]);
        }
        /* a joined thread cannot be joined again */
        if (squall_thread_join(tids[0], NULL) != SQUALL_ERR_UNKNOWN_THREAD)
            FAIL("a second join of thread %llu did not fail with SQUALL_ERR_UNKNOWN_THREAD",
                 (unsigned long long)tids[0]);
        CHECK(squall_free(slots));
        free(tids);
    }
    CHECK(squall_barrier());
}

/* ---------------------------------------------------------------- misuse */
static void expect(int got, int want, const char *what, const char *needle)
{
    if (got != want) FAIL("%s returned %d, expected %d", what, got, want);
    const char *e = squall_last_error();
    if (needle && !strstr(e, needle)) FAIL("%s: error text \"%s\" does not mention \"%s\"", what, e, needle);
}

static void scenario_misuse(void)
{
    uint64_t lock = 5000 + (uint64_t)rank_;
    expect(squall_unlock(lock), SQUALL_ERR_NOT_HELD, "unlock of a lock not held", "does not hold");
    CHECK(squall_lock(lock));
    expect(squall_lock(lock), SQUALL_ERR_DEADLOCK, "relock", "already holds");
    expect(squall_lock_destroy(lock), SQUALL_ERR_IN_USE, "destroy of a held lock", "in use");
    CHECK(squall_unlock(lock));
    CHECK(squall_lock_destroy(lock));
    expect(squall_thread_join(0xdead0000beefULL, NULL), SQUALL_ERR_UNKNOWN_THREAD, "join of an unknown thread",
           NULL);
    uint64_t t;
    expect(squall_thread_create(SQUALL_ANY_NODE, NULL, NULL, &t), SQUALL_ERR_INVALID, "create with a null function",
           "null");
    expect(squall_thread_create(size_ + 3, remote_thread, NULL, &t), SQUALL_ERR_INVALID,
           "create on a node that does not exist", "does not exist");
    int local = 0;
    expect(squall_free(&local), SQUALL_ERR_NOT_SQUALL, "free of a stack address", "not a squall address");
    expect(squall_barrier_n(77, 0), SQUALL_ERR_INVALID, "barrier with 0 participants", "participant");
    if (squall_malloc_placed(64, 42, 0) != NULL) FAIL("an unknown placement was accepted");
    expect(SQUALL_ERR_INVALID, SQUALL_ERR_INVALID, "unknown placement", "placement");
    if (squall_malloc_placed(64, SQUALL_PLACE_NODE, (uint64_t)size_) != NULL) FAIL("a placement on a missing node was accepted");
    void *p = squall_malloc(100);
    if (!p) FAIL("squall_malloc failed");
    CHECK(squall_free(p));
    expect(squall_free(p), SQUALL_ERR_NOT_SQUALL, "double free", "freed");
    CHECK(squall_barrier());
}

static void scenario_before_init(void)
{
    expect(squall_rank(), SQUALL_ERR_NOT_INITIALISED, "squall_rank before init", "squall_init");
    expect(squall_lock(1), SQUALL_ERR_NOT_INITIALISED, "squall_lock before init", "squall run");
    if (squall_malloc(10) != NULL) FAIL("squall_malloc before init returned memory");
    expect(SQUALL_ERR_NOT_INITIALISED, SQUALL_ERR_NOT_INITIALISED, "squall_malloc before init", "not initialised");
    if (squall_initialized()) FAIL("squall_initialized() is 1 before init");
    CHECK(squall_init());
    if (squall_size() != 1 || squall_rank() != 0) FAIL("without the launcher the job is not one node");
    uint64_t *c = squall_malloc(64);
    if (!c) FAIL("malloc failed");
    c[0] = 0;
    struct targ args[4];
    for (int i = 0; i < 4; i++) args[i] = (struct targ){i, 4, c};
    run_local_threads(4, locks_worker, args, sizeof args[0]);
    if (c[0] != 4 * LOCK_ITERS) FAIL("one-node lock counter is %llu", (unsigned long long)c[0]);
}

int main(int argc, char **argv)
{
    const char *scenario = argc > 1 ? argv[1] : "";
    int t = argc > 2 ? atoi(argv[2]) : 3;
    if (strcmp(scenario, "before-init") == 0) {
        scenario_before_init();
        CHECK(squall_finalize());
        printf("ok %s\n", scenario);
        return 0;
    }
    CHECK(squall_init());
    rank_ = squall_rank();
    size_ = squall_size();
    int nthreads = t * size_;
    struct targ *args = calloc((size_t)t, sizeof *args);

    if (strcmp(scenario, "locks") == 0 || strcmp(scenario, "barrier") == 0 ||
        strcmp(scenario, "condvar") == 0 || strcmp(scenario, "atomics") == 0) {
        uint64_t *shared = squall_alloc_collective(((size_t)nthreads + 1) * 64 + 4096, SQUALL_PLACE_NODE, 0);
        if (!shared) FAIL("squall_alloc_collective failed");
        if (rank_ == 0 && strcmp(scenario, "condvar") == 0)
            ((struct queue *)shared)->total = (uint64_t)size_ * ITEMS_PER_PRODUCER;
        CHECK(squall_barrier());
        for (int i = 0; i < t; i++) args[i] = (struct targ){rank_ * t + i, nthreads, shared};
        if (strcmp(scenario, "locks") == 0) {
            run_local_threads(t, locks_worker, args, sizeof *args);
        } else if (strcmp(scenario, "barrier") == 0) {
            run_local_threads(t, barrier_worker, args, sizeof *args);
        } else if (strcmp(scenario, "condvar") == 0) {
            pthread_t prod;
            pthread_create(&prod, NULL, producer, &args[0]);
            run_local_threads(t, consumer, args, sizeof *args);
            pthread_join(prod, NULL);
        } else {
            run_local_threads(t, atomics_worker, args, sizeof *args);
        }
        CHECK(squall_barrier());
        if (rank_ == 0) {
            if (strcmp(scenario, "locks") == 0) {
                CHECK(squall_lock(1));
                uint64_t v = shared[0];
                CHECK(squall_unlock(1));
                if (v != (uint64_t)nthreads * LOCK_ITERS)
                    FAIL("lock counter is %llu, expected %llu", (unsigned long long)v,
                         (unsigned long long)nthreads * LOCK_ITERS);
            } else if (strcmp(scenario, "barrier") == 0) {
                uint64_t serial;
                CHECK(squall_atomic_load(&shared[nthreads * 8], &serial));
                if (serial != BARRIER_ROUNDS) FAIL("%llu serial returns in %d episodes", (unsigned long long)serial, BARRIER_ROUNDS);
            } else if (strcmp(scenario, "condvar") == 0) {
                struct queue *q = (struct queue *)shared;
                CHECK(squall_lock(QLOCK));
                uint64_t want = 0;
                for (int r = 0; r < size_; r++)
                    for (int i = 1; i <= ITEMS_PER_PRODUCER; i++) want += (uint64_t)r * 1000 + (uint64_t)i;
                if (q->taken != q->total || q->sum != want)
                    FAIL("consumed %llu of %llu items, sum %llu (expected %llu)", (unsigned long long)q->taken,
                         (unsigned long long)q->total, (unsigned long long)q->sum, (unsigned long long)want);
                CHECK(squall_unlock(QLOCK));
            } else {
                uint64_t v, winners;
                CHECK(squall_atomic_load(&shared[0], &v));
                CHECK(squall_atomic_load(&shared[2], &winners));
                if (v != (uint64_t)nthreads * ATOMIC_ITERS)
                    FAIL("atomic counter is %llu, expected %llu", (unsigned long long)v,
                         (unsigned long long)nthreads * ATOMIC_ITERS);
                if (winners != 1) FAIL("%llu threads won the compare-swap race", (unsigned long long)winners);
            }
        }
        CHECK(squall_barrier());
    } else if (strcmp(scenario, "flags") == 0) {
        uint64_t *data = squall_alloc_collective(8192, SQUALL_PLACE_FIRST_TOUCH, 0);
        if (!data) FAIL("squall_alloc_collective failed");
        for (uint64_t round = 1; round <= 2; round++) {
            if (rank_ == 0) {
                for (int i = 0; i < 1024; i++) data[i] = round * 100000 + (uint64_t)i;
                CHECK(squall_flag_set(300 + round));
            } else {
                CHECK(squall_flag_wait(300 + round));
                for (int i = 0; i < 1024; i++)
                    if (data[i] != round * 100000 + (uint64_t)i)
                        FAIL("round %llu: word %d is %llu after the flag", (unsigned long long)round, i,
                             (unsigned long long)data[i]);
            }
            CHECK(squall_barrier());
            if (rank_ == 0) CHECK(squall_flag_clear(300 + round));
            CHECK(squall_barrier());
        }
    } else if (strcmp(scenario, "threads") == 0) {
        scenario_threads();
    } else if (strcmp(scenario, "misuse") == 0) {
        scenario_misuse();
    } else {
        FAIL("unknown scenario \"%s\"", scenario);
    }
    free(args);
    CHECK(squall_finalize());
    if (rank_ == 0) printf("ok %s\n", scenario);
    return 0;
}
