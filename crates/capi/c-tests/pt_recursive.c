#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
/*
 * pt_recursive.c - recursive and error-checking mutexes with threads on every node.
 * P threads (argv[1], default 4) each call a recursive function that locks the same recursive
 * mutex at every level (one made with pthread_mutexattr_settype, one with the static
 * PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP) and counts in shared data; the total is checked
 * against the count computed here. Also: trylock of a held recursive mutex, a condition wait
 * with a recursive mutex held twice, and relock of error-checking / normal mutexes (EDEADLK,
 * Squall's documented choice for normal mutexes). Prints "ok recursive".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef SQUALL_GLOBAL
#define SQUALL_GLOBAL
#endif

#define ROUNDS 50
#define DEPTH 4

struct shared {
    pthread_mutex_t rec;      /* recursive, from an attribute */
    pthread_mutex_t check;    /* error-checking */
    pthread_mutex_t normal;   /* default attributes */
    pthread_cond_t cond;
    long count;               /* changed under rec */
    long inside;              /* threads inside rec: must stay <= 1 */
    long static_count;        /* changed under static_rec */
    int ready;                /* cond-wait handshake under rec */
    int bad;
};

SQUALL_GLOBAL pthread_mutex_t static_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void fail(struct shared *s, const char *what, int got)
{
    fprintf(stderr, "pt_recursive: %s (got %d)\n", what, got);
    s->bad = 1;
}

static void nest(struct shared *s, int depth)
{
    int rc = pthread_mutex_lock(&s->rec);
    if (rc != 0) fail(s, "lock of the recursive mutex", rc);
    s->inside++;
    if (s->inside != 1) fail(s, "two threads inside the recursive mutex", (int)s->inside);
    s->count++;
    s->inside--;
    if (depth > 0) nest(s, depth - 1);
    rc = pthread_mutex_unlock(&s->rec);
    if (rc != 0) fail(s, "unlock of the recursive mutex", rc);
}

static void nest_static(struct shared *s, int depth)
{
    pthread_mutex_lock(&static_rec);
    s->static_count++;
    if (depth > 0) nest_static(s, depth - 1);
    pthread_mutex_unlock(&static_rec);
}

static void *worker(void *arg)
{
    struct shared *s = arg;
    for (int r = 0; r < ROUNDS; r++) {
        nest(s, DEPTH);
        nest_static(s, DEPTH);
    }
    /* trylock of a recursive mutex this thread holds adds a level */
    int rc = pthread_mutex_lock(&s->rec);
    if (rc != 0) fail(s, "lock before trylock", rc);
    rc = pthread_mutex_trylock(&s->rec);
    if (rc != 0) fail(s, "trylock of a held recursive mutex", rc);
    s->count++;
    pthread_mutex_unlock(&s->rec);
    pthread_mutex_unlock(&s->rec);
    return NULL;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    struct shared *s = malloc(sizeof *s);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->rec, &a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&s->check, &a);
    pthread_mutexattr_destroy(&a);
    pthread_mutex_init(&s->normal, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->count = s->inside = s->static_count = 0;
    s->ready = 0;
    s->bad = 0;

    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++)
        if (pthread_create(&t[i], NULL, worker, s) != 0) fail(s, "create", i);
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);

    long want = (long)p * ROUNDS * (DEPTH + 1) + p;
    long want_static = (long)p * ROUNDS * (DEPTH + 1);
    if (s->count != want) fail(s, "recursive count", (int)s->count);
    if (s->static_count != want_static) fail(s, "static recursive count", (int)s->static_count);

    /* misuse stays diagnosable: error-checking and normal mutexes report a relock */
    if (pthread_mutex_lock(&s->check) != 0) fail(s, "errorcheck lock", -1);
    int rc = pthread_mutex_lock(&s->check);
    if (rc != EDEADLK) fail(s, "errorcheck relock", rc);
    pthread_mutex_unlock(&s->check);
    rc = pthread_mutex_unlock(&s->check);
    if (rc != EPERM) fail(s, "errorcheck unlock when not held", rc);
#ifdef SQUALL_PTHREAD_H
    /* POSIX lets a normal mutex deadlock here; squall reports the relock instead */
    pthread_mutex_lock(&s->normal);
    rc = pthread_mutex_lock(&s->normal);
    if (rc != EDEADLK) fail(s, "normal relock (squall reports EDEADLK)", rc);
    pthread_mutex_unlock(&s->normal);
#endif
    /* a recursive mutex held twice is fully released by a condition wait */
    pthread_mutex_lock(&s->rec);
    pthread_mutex_lock(&s->rec);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    rc = pthread_cond_timedwait(&s->cond, &s->rec, &ts);
    if (rc != ETIMEDOUT) fail(s, "timed wait with a recursive mutex", rc);
    pthread_mutex_unlock(&s->rec);
    rc = pthread_mutex_unlock(&s->rec);
    if (rc != 0) fail(s, "second unlock after the wait", rc);
    rc = pthread_mutex_unlock(&s->rec);
    if (rc != EPERM) fail(s, "third unlock (not held)", rc);
    if (pthread_mutex_destroy(&s->rec) != 0) fail(s, "destroy", -1);

    if (s->bad) return 1;
    printf("count %ld static %ld (expected %ld %ld)\n", s->count, s->static_count, want, want_static);
    printf("ok recursive\n");
    return 0;
}
