/*
 * pt_rwlock.c - read-write locks whose readers share, with threads on every node.
 * Phase 1: all P threads (argv[1], default 4) take the read lock and stay inside until every
 * one of them is inside at the same time (counted under a separate mutex): readers overlap.
 * Phase 2: each thread alternates writes (increment every element of a shared array, with a
 * "writer inside" mark that must be clear on entry) and reads (the array must be uniform and no
 * writer inside); the final array is checked against the count computed here. Prints
 * "ok rwlock".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 64
#define WRITES 40

struct shared {
    pthread_rwlock_t rw;
    pthread_mutex_t m;       /* protects inside/max_inside */
    pthread_cond_t all_in;
    pthread_barrier_t bar;
    int p;
    int inside, max_inside;
    int writer_inside;       /* protected by rw */
    long data[N];            /* protected by rw */
    long reads_ok;           /* under m */
    int bad;
};

static void fail(struct shared *s, const char *what, long got)
{
    fprintf(stderr, "pt_rwlock: %s (got %ld)\n", what, got);
    s->bad = 1;
}

static void *worker(void *arg)
{
    struct shared *s = arg;
    /* phase 1: every reader inside at once */
    int rc = pthread_rwlock_rdlock(&s->rw);
    if (rc != 0) fail(s, "rdlock", rc);
    pthread_mutex_lock(&s->m);
    s->inside++;
    if (s->inside > s->max_inside) s->max_inside = s->inside;
    pthread_cond_broadcast(&s->all_in);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    while (s->inside < s->p) {
        if (pthread_cond_timedwait(&s->all_in, &s->m, &until) == ETIMEDOUT) {
            fail(s, "readers did not overlap: inside", s->inside);
            break;
        }
    }
    pthread_mutex_unlock(&s->m);
    /* a second read lock by the same reader is allowed */
    rc = pthread_rwlock_rdlock(&s->rw);
    if (rc != 0) fail(s, "recursive rdlock", rc);
    pthread_rwlock_unlock(&s->rw);
    rc = pthread_rwlock_trywrlock(&s->rw);
    if (rc != EDEADLK && rc != EBUSY) fail(s, "trywrlock while reading", rc);
    pthread_rwlock_unlock(&s->rw);
    pthread_barrier_wait(&s->bar);

    /* phase 2: writers exclusive, readers see whole writes */
    long ok = 0;
    for (int w = 0; w < WRITES; w++) {
        pthread_rwlock_wrlock(&s->rw);
        if (s->writer_inside) fail(s, "two writers inside", w);
        s->writer_inside = 1;
        for (int i = 0; i < N; i++) s->data[i]++;
        s->writer_inside = 0;
        pthread_rwlock_unlock(&s->rw);

        pthread_rwlock_rdlock(&s->rw);
        if (s->writer_inside) fail(s, "a reader saw a writer inside", w);
        long v = s->data[0];
        int uniform = 1;
        for (int i = 1; i < N; i++) uniform &= s->data[i] == v;
        if (!uniform) fail(s, "a reader saw a partial write", v);
        else ok++;
        pthread_rwlock_unlock(&s->rw);
    }
    pthread_mutex_lock(&s->m);
    s->reads_ok += ok;
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static struct timespec in_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* run while main holds the lock: timed attempts must time out */
static void *timed_try(void *arg)
{
    struct shared *s = arg;
    struct timespec d = in_ms(100);
    int rc = pthread_rwlock_timedwrlock(&s->rw, &d);
    if (rc != ETIMEDOUT) fail(s, "timedwrlock while main reads", rc);
    return NULL;
}

static void *timed_read(void *arg)
{
    struct shared *s = arg;
    struct timespec d = in_ms(100);
    int rc = pthread_rwlock_timedrdlock(&s->rw, &d);
    if (rc != ETIMEDOUT) fail(s, "timedrdlock while main writes", rc);
    d = in_ms(60000);
    rc = pthread_rwlock_timedrdlock(&s->rw, &d); /* main unlocks soon */
    if (rc != 0) fail(s, "timedrdlock after main's unlock", rc);
    else pthread_rwlock_unlock(&s->rw);
    return NULL;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    struct shared *s = calloc(1, sizeof *s);
    pthread_rwlock_init(&s->rw, NULL);
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->all_in, NULL);
    pthread_barrier_init(&s->bar, NULL, p);
    s->p = p;
    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++) pthread_create(&t[i], NULL, worker, s);
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);

    /* timed attempts from other threads (the second runs on node 1) */
    pthread_t tt;
    pthread_rwlock_rdlock(&s->rw);
    pthread_create(&tt, NULL, timed_try, s);
    pthread_join(tt, NULL);
    pthread_rwlock_unlock(&s->rw);
    pthread_rwlock_wrlock(&s->rw);
    pthread_create(&tt, NULL, timed_read, s);
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    pthread_rwlock_unlock(&s->rw);
    pthread_join(tt, NULL);

    long want = (long)p * WRITES;
    for (int i = 0; i < N; i++)
        if (s->data[i] != want) fail(s, "final element", s->data[i]);
    if (s->max_inside != p) fail(s, "readers inside at once", s->max_inside);
    if (s->reads_ok != want) fail(s, "uniform reads", s->reads_ok);
    if (pthread_rwlock_destroy(&s->rw) != 0) fail(s, "destroy", -1);
    if (s->bad) return 1;
    printf("readers inside at once %d of %d; data %ld each (expected %ld)\n", s->max_inside, p,
           s->data[0], want);
    printf("ok rwlock\n");
    return 0;
}
