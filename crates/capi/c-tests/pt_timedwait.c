#define _GNU_SOURCE /* pthread_cond_clockwait */
/*
 * pt_timedwait.c - pthread_cond_timedwait with threads on every node. Each of P threads
 * (argv[1], default 4): (1) waits on a condition nobody signals with a deadline 150 ms away:
 * it must return ETIMEDOUT, holding the mutex, not before the deadline; the same on a
 * condition made with CLOCK_MONOTONIC; (2) waits for its turn with a deadline 60 s away, and
 * main signals it: it must return 0 well before the deadline with its turn set. The counts
 * are checked against P. Also pthread_cond_clockwait, and pthread_mutex_timedlock on a mutex
 * main holds (times out) and then releases (succeeds). Prints "ok timedwait".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct shared {
    pthread_mutex_t m, held;
    pthread_barrier_t bar;
    pthread_cond_t never, mono, back;
    pthread_cond_t *turn_cond;  /* one per thread: main signals it */
    int turn;                 /* whose turn: thread i waits for turn == i + 1 */
    int waiting;              /* threads in phase 2 */
    int timeouts, signalled;
    double max_late_ms, max_wake_ms;
    int bad;
};

struct arg {
    struct shared *s;
    int i;
};

static struct timespec after(clockid_t c, long ms)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static double ms_past(clockid_t c, struct timespec t)
{
    struct timespec n;
    clock_gettime(c, &n);
    return (n.tv_sec - t.tv_sec) * 1e3 + (n.tv_nsec - t.tv_nsec) * 1e-6;
}

static void timeout_on(struct shared *s, pthread_cond_t *c, clockid_t clock, int i)
{
    pthread_mutex_lock(&s->m);
    struct timespec d = after(clock, 150);
    int rc = pthread_cond_timedwait(c, &s->m, &d);
    while (rc == 0) rc = pthread_cond_timedwait(c, &s->m, &d); /* spurious wake-ups */
    double late = ms_past(clock, d);
    if (rc != ETIMEDOUT || late < 0) {
        fprintf(stderr, "pt_timedwait: thread %d: rc %d, %.3f ms after the deadline\n", i, rc,
                late);
        s->bad = 1;
    } else {
        s->timeouts++;                 /* the mutex is held again */
        if (late > s->max_late_ms) s->max_late_ms = late;
    }
    pthread_mutex_unlock(&s->m);
}

static void *worker(void *p)
{
    struct arg *a = p;
    struct shared *s = a->s;
    timeout_on(s, &s->never, CLOCK_REALTIME, a->i);
    timeout_on(s, &s->mono, CLOCK_MONOTONIC, a->i);
    /* the clock named in the call */
    pthread_mutex_lock(&s->m);
    struct timespec cd = after(CLOCK_MONOTONIC, 100);
    int crc = 0;
    while (crc == 0) crc = pthread_cond_clockwait(&s->never, &s->m, CLOCK_MONOTONIC, &cd);
    if (crc != ETIMEDOUT || ms_past(CLOCK_MONOTONIC, cd) < 0) {
        fprintf(stderr, "pt_timedwait: thread %d: clockwait rc %d\n", a->i, crc);
        s->bad = 1;
    }
    pthread_mutex_unlock(&s->m);

    pthread_mutex_lock(&s->m);
    s->waiting++;
    pthread_cond_signal(&s->back);
    struct timespec d = after(CLOCK_REALTIME, 60000);
    int rc = 0;
    while (s->turn != a->i + 1 && rc == 0) rc = pthread_cond_timedwait(&s->turn_cond[a->i], &s->m, &d);
    if (rc != 0 || s->turn != a->i + 1) {
        fprintf(stderr, "pt_timedwait: thread %d was not woken by its signal (rc %d)\n", a->i, rc);
        s->bad = 1;
    } else {
        s->signalled++;
        s->turn = 0;                   /* hand back to main */
        pthread_cond_signal(&s->back);
    }
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static void *timed_locker(void *p)
{
    struct shared *s = p;
    struct timespec d = after(CLOCK_REALTIME, 100);
    int rc = pthread_mutex_timedlock(&s->held, &d);
    if (rc != ETIMEDOUT || ms_past(CLOCK_REALTIME, d) < 0) {
        fprintf(stderr, "pt_timedwait: timedlock of a held mutex returned %d\n", rc);
        s->bad = 1;
    }
    pthread_barrier_wait(&s->bar);   /* main releases the mutex after this */
    d = after(CLOCK_REALTIME, 60000);
    rc = pthread_mutex_timedlock(&s->held, &d);
    if (rc != 0) {
        fprintf(stderr, "pt_timedwait: timedlock of a released mutex returned %d\n", rc);
        s->bad = 1;
    } else {
        pthread_mutex_unlock(&s->held);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    struct shared *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->never, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->mono, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->back, NULL);
    s->turn_cond = malloc(sizeof *s->turn_cond * p);
    for (int i = 0; i < p; i++) pthread_cond_init(&s->turn_cond[i], NULL);

    struct arg *args = malloc(sizeof *args * p);
    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++) {
        args[i].s = s;
        args[i].i = i;
        pthread_create(&t[i], NULL, worker, &args[i]);
    }
    /* wait (plain wait) until every thread waits for its turn, then give each its turn */
    pthread_mutex_lock(&s->m);
    while (s->waiting < p) pthread_cond_wait(&s->back, &s->m);
    for (int i = 0; i < p; i++) {
        struct timespec sent;
        clock_gettime(CLOCK_MONOTONIC, &sent);
        s->turn = i + 1;
        pthread_cond_signal(&s->turn_cond[i]);
        while (s->turn != 0) pthread_cond_wait(&s->back, &s->m);
        double wake = ms_past(CLOCK_MONOTONIC, sent);
        if (wake > s->max_wake_ms) s->max_wake_ms = wake;
    }
    pthread_mutex_unlock(&s->m);
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);

    /* pthread_mutex_timedlock from two threads (nodes 0 and 1) while main holds the mutex */
    pthread_mutex_init(&s->held, NULL);
    pthread_barrier_init(&s->bar, NULL, 3);
    pthread_mutex_lock(&s->held);
    pthread_t tl[2];
    for (int i = 0; i < 2; i++) pthread_create(&tl[i], NULL, timed_locker, s);
    pthread_barrier_wait(&s->bar);   /* both timed out */
    pthread_mutex_unlock(&s->held);
    for (int i = 0; i < 2; i++) pthread_join(tl[i], NULL);

    if (s->timeouts != 2 * p || s->signalled != p || s->bad) {
        fprintf(stderr, "pt_timedwait: timeouts %d (expected %d), signalled %d (expected %d)\n",
                s->timeouts, 2 * p, s->signalled, p);
        return 1;
    }
    if (s->max_wake_ms > 30000) {
        fprintf(stderr, "pt_timedwait: a signalled waiter took %.1f ms\n", s->max_wake_ms);
        return 1;
    }
    printf("timeouts %d, at most %.2f ms after the deadline; signalled %d, woken in at most "
           "%.2f ms\n", s->timeouts, s->max_late_ms, s->signalled, s->max_wake_ms);
    printf("ok timedwait\n");
    return 0;
}
