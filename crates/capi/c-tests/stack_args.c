/*
 * The most common pthreads idiom, unchanged: an array of argument structs on main's stack,
 * one per thread, passed by address to pthread_create. Each worker reads its inputs from its
 * struct, writes its results back into it and fills an array on ITS OWN stack whose address it
 * stores in the struct; main reads that array through the pointer while the worker waits at a
 * barrier (its frame is still live). The worker then ends with pthread_exit (called from a
 * nested function) or a plain return, its value the address of its struct on main's stack,
 * which join must give back. Workers also compare pthread_self() with the id main stored.
 * A thread created with a 32 MiB stack (pthread_attr_setstacksize) uses 16 MiB of it (more
 * than the 8 MiB default), and detached threads (pthread_attr_setdetachstate) report through
 * a counter. main ends with pthread_exit after creating one more thread that prints the verdict a
 * little later: the process must live until that thread ends.
 * Every result is checked against the same computation done sequentially here.
 * Usage: stack_args [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOCAL 512

struct arg {
    int id;
    long first, count;   /* inputs */
    pthread_t self_id;   /* written by main after pthread_create */
    long sum;            /* output */
    int self_ok;         /* output: pthread_self() == self_id */
    long *local;         /* output: the worker's stack array */
};

static pthread_barrier_t filled, checked;
static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static int ids_ready;

static long f(long i) { return (i * 7919) % 1000 + i / 3; }

static void finish(struct arg *a, long *local)
{
    a->local = local;
    pthread_barrier_wait(&filled);  /* main reads local[] now */
    pthread_barrier_wait(&checked);
    if (a->id % 2)
        pthread_exit(a);            /* from a nested function */
}

static void *worker(void *p)
{
    struct arg *a = p;
    long local[LOCAL];
    long s = 0;
    for (long i = a->first; i < a->first + a->count; i++)
        s += f(i);
    a->sum = s;
    for (int i = 0; i < LOCAL; i++)
        local[i] = (long)a->id * 100000 + i * 3;
    for (;;) {
        pthread_mutex_lock(&ids_lock);
        int ready = ids_ready;
        pthread_mutex_unlock(&ids_lock);
        if (ready)
            break;
    }
    a->self_ok = pthread_equal(pthread_self(), a->self_id);
    finish(a, local);
    return a;                       /* even ids: a plain return */
}

#define BIG (16L << 20)
static long big_sum;

static void *big_stack(void *arg)
{
    volatile char buf[BIG]; /* needs a stack bigger than the default */
    long s = 0;
    for (long i = 0; i < BIG; i += 4096)
        buf[i] = (char)(i / 4096 % 100);
    for (long i = 0; i < BIG; i += 4096)
        s += buf[i];
    big_sum = s;
    return arg;
}

static pthread_mutex_t flag_lock = PTHREAD_MUTEX_INITIALIZER;
static int detached_ran;

static void *detached(void *arg)
{
    pthread_mutex_lock(&flag_lock);
    detached_ran += (int)(long)arg;
    pthread_mutex_unlock(&flag_lock);
    return NULL;
}

static void *announce(void *msg)
{
    usleep(200 * 1000); /* main has called pthread_exit by now */
    printf("%s\n", (char *)msg);
    fflush(stdout);
    free(msg);
    return NULL;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    if (p < 1 || p > 64) {
        fprintf(stderr, "usage: stack_args [THREADS <= 64]\n");
        return 2;
    }
    struct arg args[64];
    pthread_t t[64];
    pthread_barrier_init(&filled, NULL, p + 1);
    pthread_barrier_init(&checked, NULL, p + 1);
    for (int i = 0; i < p; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].id = i;
        args[i].first = 1000L * i;
        args[i].count = 1000 + 37L * i;
        if (pthread_create(&t[i], NULL, worker, &args[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
        args[i].self_id = t[i];
    }
    pthread_mutex_lock(&ids_lock);
    ids_ready = 1;
    pthread_mutex_unlock(&ids_lock);
    pthread_barrier_wait(&filled);
    int bad = 0;
    for (int i = 0; i < p; i++)
        for (int k = 0; k < LOCAL; k++)
            if (args[i].local[k] != (long)i * 100000 + k * 3) {
                fprintf(stderr, "thread %d: local[%d] = %ld read through its pointer\n", i, k,
                        args[i].local[k]);
                bad = 1;
                break;
            }
    pthread_barrier_wait(&checked);
    for (int i = 0; i < p; i++) {
        void *ret = NULL;
        if (pthread_join(t[i], &ret) != 0) {
            fprintf(stderr, "join %d failed\n", i);
            return 1;
        }
        long want = 0;
        for (long k = args[i].first; k < args[i].first + args[i].count; k++)
            want += f(k);
        if (args[i].sum != want) {
            fprintf(stderr, "thread %d: sum %ld, want %ld\n", i, args[i].sum, want);
            bad = 1;
        }
        if (ret != &args[i]) {
            fprintf(stderr, "thread %d: returned %p, its argument is at %p\n", i, ret,
                    (void *)&args[i]);
            bad = 1;
        }
        if (!args[i].self_ok) {
            fprintf(stderr, "thread %d: pthread_self() differs from pthread_create's id\n", i);
            bad = 1;
        }
    }
    if (pthread_equal(pthread_self(), t[0])) {
        fprintf(stderr, "main's pthread_self() equals a worker's id\n");
        bad = 1;
    }
    /* pthread_attr_setstacksize is honoured (16 MiB of locals in a 32 MiB stack). */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 2 * BIG);
    pthread_t tb;
    void *bret = NULL;
    if (pthread_create(&tb, &attr, big_stack, &big_sum) != 0 || pthread_join(tb, &bret) != 0)
        return 1;
    long want_big = 0;
    for (long i = 0; i < BIG; i += 4096)
        want_big += i / 4096 % 100;
    if (big_sum != want_big || bret != &big_sum) {
        fprintf(stderr, "big-stack thread: sum %ld, want %ld\n", big_sum, want_big);
        bad = 1;
    }
    /* Detached threads run; nobody joins them. */
    pthread_attr_setstacksize(&attr, 1 << 20);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t td;
    for (long k = 1; k <= 3; k++)
        if (pthread_create(&td, &attr, detached, (void *)k) != 0)
            return 1;
    pthread_attr_destroy(&attr);
    for (;;) {
        pthread_mutex_lock(&flag_lock);
        int ran = detached_ran;
        pthread_mutex_unlock(&flag_lock);
        if (ran == 1 + 2 + 3)
            break;
    }
    if (bad)
        return 1;
    char *msg = malloc(64);
    snprintf(msg, 64, "ok stack args %d threads", p);
    pthread_t last;
    /* Thread number p+4 (from 0) main creates: under SQUALL_THREAD_PLACEMENT=round-robin (as the
     * test runs it) on node (p+4) mod N = node 0 for p = 2N and N = 2 or 4 (rank 0 prints). */
    if (pthread_create(&last, NULL, announce, msg) != 0)
        return 1;
    pthread_exit(NULL);
}
