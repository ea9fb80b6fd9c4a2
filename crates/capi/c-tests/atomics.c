/*
 * atomics.c - a plain POSIX threads program using C11 <stdatomic.h> and GCC's __atomic / __sync
 * builtins on shared (malloc'd) memory, as a program written for one machine does. Built
 * natively with -pthread, or for Squall with only the build line changed:
 *   cc atomics.c $(pkg-config --cflags --libs squall-pthread)
 * Threads are spread over the nodes, so every atomic is contended across nodes.
 *
 * usage: atomics counter P N   P threads x N increments of each kind; prints "ok counter" or
 *                              the counters that differ from what one machine gives
 *        atomics message R     R rounds of data written plainly and published through an
 *                              atomic (seq_cst store, release store, release fence), read on
 *                              another thread after an acquire; prints "ok message"
 *        atomics operators P N P threads x N updates with the operator forms on _Atomic
 *                              objects (x++, x += v, x -= v, x |= v, x *= v, x = v, reading x);
 *                              prints "ok operators"
 *        atomics cost N        N atomics from each node on one word; prints the time per op
 *        atomics wide          (Squall build only) a 16-byte atomic load of shared memory:
 *                              Squall cannot make it correct across nodes and must refuse it
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----- counter: every kind of atomic increment, and three spinlocks over plain counters ---- */

struct counters {
    atomic_long c11;     /* atomic_fetch_add */
    long sync_add;       /* __sync_fetch_and_add */
    int builtin_add;     /* __atomic_fetch_add, relaxed, 4 bytes */
    atomic_int cas;      /* compare-exchange loop */
    atomic_uchar small;  /* 1 byte: wraps */
    atomic_ushort half;  /* 2 bytes, counting down: wraps */
    atomic_uint bits;    /* fetch_or of each thread's bit */
    atomic_ulong xored;  /* fetch_xor */
    unsigned long anded; /* __atomic_and_fetch */
    atomic_flag flag;    /* spinlock (test_and_set / clear) over plain_a */
    long plain_a;
    atomic_int xlock;    /* spinlock (exchange acquire / store release) over plain_b */
    long plain_b;
    long sync_lock;      /* spinlock (__sync_lock_test_and_set / release) over plain_c */
    long plain_c;
    long n;
    pthread_barrier_t start; /* every thread has the counters in view before any starts */
};

struct counter_arg {
    struct counters *c;
    int id;
};

static unsigned long mix(long i, int t)
{
    return (unsigned long)(i + 1) * 2654435761ul ^ ((unsigned long)t << 40);
}

static void *count(void *p)
{
    struct counter_arg *a = p;
    struct counters *c = a->c;
    pthread_barrier_wait(&c->start);
    for (long i = 0; i < c->n; i++) {
        atomic_fetch_add(&c->c11, 1);
        __sync_fetch_and_add(&c->sync_add, 1);
        __atomic_fetch_add(&c->builtin_add, 1, __ATOMIC_RELAXED);
        int old = atomic_load(&c->cas);
        while (!atomic_compare_exchange_weak(&c->cas, &old, old + 1))
            ;
        atomic_fetch_add_explicit(&c->small, 1, memory_order_relaxed);
        atomic_fetch_sub(&c->half, 1);
        atomic_fetch_xor(&c->xored, mix(i, a->id));
        __atomic_and_fetch(&c->anded, ~(1ul << (i % 64)) | (1ul << a->id), __ATOMIC_ACQ_REL);

        while (atomic_flag_test_and_set(&c->flag))
            ;
        c->plain_a++;
        atomic_flag_clear(&c->flag);

        while (atomic_exchange_explicit(&c->xlock, 1, memory_order_acquire))
            ;
        c->plain_b++;
        atomic_store_explicit(&c->xlock, 0, memory_order_release);

        while (__sync_lock_test_and_set(&c->sync_lock, 1))
            ;
        c->plain_c++;
        __sync_lock_release(&c->sync_lock);
    }
    atomic_fetch_or(&c->bits, 1u << a->id);
    return NULL;
}

static int counter(int P, long N)
{
    struct counters *c = calloc(1, sizeof *c);
    struct counter_arg *args = malloc((size_t)P * sizeof *args);
    pthread_t *t = malloc((size_t)P * sizeof *t);
    if (!c || !args || !t) return 1;
    atomic_init(&c->c11, 0);
    atomic_flag_clear(&c->flag);
    c->anded = ~0ul;
    c->n = N;
    pthread_barrier_init(&c->start, NULL, (unsigned)P);
    double t0 = now_s();
    for (int i = 0; i < P; i++) {
        args[i].c = c;
        args[i].id = i;
        pthread_create(&t[i], NULL, count, &args[i]);
    }
    for (int i = 0; i < P; i++) pthread_join(t[i], NULL);
    double dt = now_s() - t0;

    /* What one machine gives, computed sequentially. */
    long total = (long)P * N;
    unsigned long xored = 0, anded = ~0ul;
    for (int id = 0; id < P; id++)
        for (long i = 0; i < N; i++) {
            xored ^= mix(i, id);
            anded &= ~(1ul << (i % 64)) | (1ul << id);
        }
    struct {
        const char *name;
        unsigned long got, want;
    } checks[] = {
        {"atomic_fetch_add", (unsigned long)atomic_load(&c->c11), (unsigned long)total},
        {"__sync_fetch_and_add", (unsigned long)c->sync_add, (unsigned long)total},
        {"__atomic_fetch_add", (unsigned long)c->builtin_add, (unsigned long)total},
        {"compare_exchange loop", (unsigned long)atomic_load(&c->cas), (unsigned long)total},
        {"1-byte fetch_add", atomic_load(&c->small), (unsigned long)(unsigned char)total},
        {"2-byte fetch_sub", atomic_load(&c->half), (unsigned long)(unsigned short)-total},
        {"fetch_or", atomic_load(&c->bits), (1ul << P) - 1},
        {"fetch_xor", atomic_load(&c->xored), xored},
        {"and_fetch", __atomic_load_n(&c->anded, __ATOMIC_SEQ_CST), anded},
        {"atomic_flag lock", (unsigned long)c->plain_a, (unsigned long)total},
        {"exchange lock", (unsigned long)c->plain_b, (unsigned long)total},
        {"__sync_lock lock", (unsigned long)c->plain_c, (unsigned long)total},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].got != checks[i].want) {
            printf("WRONG %s: %lu, one machine gives %lu\n", checks[i].name, checks[i].got,
                   checks[i].want);
            bad++;
        }
    printf("counter: %d threads x %ld iterations in %.3f s\n", P, N, dt);
    if (!bad) printf("ok counter %ld\n", total);
    return bad != 0;
}

/* ----- message passing: plain data published through an atomic ----------------------------- */

#define WORDS 1500 /* about three pages per buffer */

struct mailbox {
    long a[WORDS];
    atomic_int ready; /* seq_cst store / acquire load */
    atomic_int ack;
    long b[WORDS];
    long flag; /* __atomic_store_n release / __atomic_load_n acquire, then read plainly */
    long c[WORDS];
    atomic_long fenced; /* release fence + relaxed store / relaxed load + acquire fence */
    long rounds;
    long errors;
};

static void *writer(void *p)
{
    struct mailbox *m = p;
    for (long k = 1; k <= m->rounds; k++) {
        for (long i = 0; i < WORDS; i++) m->a[i] = k * 100000 + i;
        atomic_store(&m->ready, (int)k);
        for (long i = 0; i < WORDS; i++) m->b[i] = -(k * 100000 + i);
        __atomic_store_n(&m->flag, k, __ATOMIC_RELEASE);
        for (long i = 0; i < WORDS; i++) m->c[i] = k * 7 + i;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&m->fenced, k, memory_order_relaxed);
        /* The reader is done with round k before the buffers are written again. */
        while (atomic_load_explicit(&m->ack, memory_order_acquire) != k)
            ;
    }
    return NULL;
}

static void *reader(void *p)
{
    struct mailbox *m = p;
    long errors = 0;
    for (long k = 1; k <= m->rounds; k++) {
        while (atomic_load_explicit(&m->ready, memory_order_acquire) != k)
            ;
        for (long i = 0; i < WORDS; i++) errors += m->a[i] != k * 100000 + i;
        while (__atomic_load_n(&m->flag, __ATOMIC_ACQUIRE) != k)
            ;
        errors += m->flag != k; /* a plain read after the acquire sees the latest value */
        for (long i = 0; i < WORDS; i++) errors += m->b[i] != -(k * 100000 + i);
        while (atomic_load_explicit(&m->fenced, memory_order_relaxed) != k)
            ;
        atomic_thread_fence(memory_order_acquire);
        for (long i = 0; i < WORDS; i++) errors += m->c[i] != k * 7 + i;
        atomic_store_explicit(&m->ack, (int)k, memory_order_release);
    }
    m->errors = errors;
    return NULL;
}

static int message(long rounds)
{
    struct mailbox *m = calloc(1, sizeof *m);
    if (!m) return 1;
    m->rounds = rounds;
    pthread_t w, r;
    pthread_create(&r, NULL, reader, m);
    pthread_create(&w, NULL, writer, m);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    printf("message: %ld rounds, %ld stale words seen\n", rounds, m->errors);
    if (m->errors == 0) printf("ok message %ld\n", rounds);
    return m->errors != 0;
}

/* ----- operators: the _Atomic operator forms ---------------------------------------------- */

struct ops {
    _Atomic long count;          /* x++ and x += v */
    _Atomic int down;            /* x -= v */
    _Atomic unsigned short mask; /* x |= v */
    _Atomic unsigned long prod;  /* x *= v (a compare-exchange loop) */
    _Atomic long last;           /* x = v, then read */
    _Atomic int lock;            /* a lock made of operator forms: while (lock++); lock = 0 */
    long plain;
    long n;
    pthread_barrier_t start;
};

struct ops_arg {
    struct ops *o;
    int id;
};

static void *operate(void *p)
{
    struct ops_arg *a = p;
    struct ops *o = a->o;
    long first = o->count; /* every thread reads the object before any writes it */
    pthread_barrier_wait(&o->start);
    if (first != 0) return NULL;
    for (long i = 0; i < o->n; i++) {
        o->count++;
        o->count += 2;
        o->down -= 3;
        o->mask |= (unsigned short)(1u << ((a->id * 3 + i) % 16));
        if (i < 4) o->prod *= 3;
        o->last = a->id;
        while (o->lock++)
            ;
        o->plain++;
        o->lock = 0;
    }
    return NULL;
}

static int operators(int P, long N)
{
    struct ops *o = calloc(1, sizeof *o);
    struct ops_arg *args = malloc((size_t)P * sizeof *args);
    pthread_t *t = malloc((size_t)P * sizeof *t);
    if (!o || !args || !t) return 1;
    o->n = N;
    o->prod = 1;
    o->last = -1;
    pthread_barrier_init(&o->start, NULL, (unsigned)P);
    for (int i = 0; i < P; i++) {
        args[i].o = o;
        args[i].id = i;
        pthread_create(&t[i], NULL, operate, &args[i]);
    }
    for (int i = 0; i < P; i++) pthread_join(t[i], NULL);
    long total = (long)P * N;
    unsigned short mask = 0;
    unsigned long prod = 1;
    for (int id = 0; id < P; id++)
        for (long i = 0; i < N; i++) {
            mask |= (unsigned short)(1u << ((id * 3 + i) % 16));
            if (i < 4) prod *= 3;
        }
    int bad = 0;
    if (o->count != 3 * total) bad++, printf("WRONG x++ / x += v: %ld\n", (long)o->count);
    if (o->down != -3 * total) bad++, printf("WRONG x -= v: %d\n", (int)o->down);
    if (o->mask != mask) bad++, printf("WRONG x |= v: %#x\n", (unsigned)o->mask);
    if (o->prod != prod) bad++, printf("WRONG x *= v: %lu\n", (unsigned long)o->prod);
    if (o->last < 0 || o->last >= P) bad++, printf("WRONG x = v: %ld\n", (long)o->last);
    if (o->plain != total) bad++, printf("WRONG operator-form lock: %ld\n", o->plain);
    if (!bad) printf("ok operators %ld\n", total);
    return bad != 0;
}

/* ----- cost: time per atomic from the word's home node and from the others ----------------- */

struct cost {
    atomic_long word;
    long n;
    double relaxed_ns, seq_cst_ns;
    int node;
};

static void *measure(void *p)
{
    struct cost *c = p;
#ifdef SQUALL_PTHREAD_H
    c->node = squall_rank();
#endif
    double t0 = now_s();
    for (long i = 0; i < c->n; i++) atomic_fetch_add_explicit(&c->word, 1, memory_order_relaxed);
    double t1 = now_s();
    for (long i = 0; i < c->n; i++) atomic_fetch_add(&c->word, 1);
    double t2 = now_s();
    c->relaxed_ns = (t1 - t0) / (double)c->n * 1e9;
    c->seq_cst_ns = (t2 - t1) / (double)c->n * 1e9;
    return NULL;
}

static int cost(long n)
{
    struct cost *c = calloc(1, sizeof *c);
    if (!c) return 1;
    int nodes = 1;
#ifdef SQUALL_PTHREAD_H
    nodes = squall_size();
#endif
    c->n = n;
    measure(c); /* main's node: the word's home */
    printf("cost atomic_fetch_add from node %d (the home): relaxed %.0f ns, seq_cst %.0f ns\n",
           c->node, c->relaxed_ns, c->seq_cst_ns);
    /* One thread at a time, so each measures alone; round-robin placement visits every node. */
    for (int i = 0; i < nodes; i++) {
        pthread_t t;
        pthread_create(&t, NULL, measure, c);
        pthread_join(t, NULL);
        printf("cost atomic_fetch_add from node %d: relaxed %.0f ns, seq_cst %.0f ns\n", c->node,
               c->relaxed_ns, c->seq_cst_ns);
    }
    long want = 2 * n * (nodes + 1);
    long got = atomic_load(&c->word);
    if (got != want) {
        printf("WRONG cost word %ld, want %ld\n", got, want);
        return 1;
    }
    printf("ok cost\n");
    return 0;
}

#ifdef SQUALL_PTHREAD_H
struct pair {
    long a, b;
};

static int wide(void)
{
    struct pair *p = calloc(1, sizeof *p);
    struct pair out;
    if (!p) return 1;
    __atomic_load(p, &out, __ATOMIC_SEQ_CST); /* refused: the program ends here */
    printf("WRONG: a 16-byte atomic on shared memory was accepted (%ld)\n", out.a);
    return 1;
}
#endif

int main(int argc, char **argv)
{
#ifdef SQUALL_PTHREAD_H
    if (argc >= 2 && strcmp(argv[1], "wide") == 0) return wide();
#endif
    if (argc >= 4 && strcmp(argv[1], "counter") == 0)
        return counter(atoi(argv[2]), atol(argv[3]));
    if (argc >= 4 && strcmp(argv[1], "operators") == 0)
        return operators(atoi(argv[2]), atol(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "message") == 0) return message(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "cost") == 0) return cost(atol(argv[2]));
    fprintf(stderr, "usage: %s counter P N | operators P N | message ROUNDS | cost N\n", argv[0]);
    return 2;
}
