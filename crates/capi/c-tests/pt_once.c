/*
 * pt_once.c - pthread_once from threads on every node: the routine runs exactly once in the
 * whole job and what it wrote is visible to every caller. Two once controls: a static one
 * (PTHREAD_ONCE_INIT) and one in malloc'd memory. P threads (argv[1], default 4) and main call
 * both; the table the routine fills is summed by each caller and compared with the sum
 * computed here. Prints "ok once".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SQUALL_GLOBAL
#define SQUALL_GLOBAL
#endif

#define N 1000

struct shared {
    pthread_once_t once;      /* in malloc'd memory */
    pthread_barrier_t bar;
    pthread_mutex_t m;
    long *table;              /* filled by init_table */
    int runs_table;           /* times init_table ran */
    int runs_static;          /* times init_static ran */
    int callers_ok;
    int bad;
};

SQUALL_GLOBAL pthread_once_t static_once = PTHREAD_ONCE_INIT;
SQUALL_GLOBAL struct shared *S;     /* set by main before any thread starts */

static void init_table(void)
{
    struct shared *s = S;
    s->runs_table++;
    long *t = malloc(N * sizeof *t);
    for (int i = 0; i < N; i++) t[i] = (long)i * i;
    s->table = t;
}

static void init_static(void)
{
    S->runs_static++;
}

static long expected(void)
{
    long sum = 0;
    for (int i = 0; i < N; i++) sum += (long)i * i;
    return sum;
}

static void call_both(struct shared *s)
{
    pthread_once(&s->once, init_table);
    pthread_once(&static_once, init_static);
    long sum = 0;
    for (int i = 0; i < N; i++) sum += s->table[i];
    pthread_mutex_lock(&s->m);
    if (sum == expected() && s->runs_static == 1) s->callers_ok++;
    else {
        fprintf(stderr, "pt_once: a caller saw sum %ld (expected %ld), static runs %d\n", sum,
                expected(), s->runs_static);
        s->bad = 1;
    }
    pthread_mutex_unlock(&s->m);
}

static void *worker(void *arg)
{
    struct shared *s = arg;
    pthread_barrier_wait(&s->bar);  /* every thread calls at about the same time */
    call_both(s);
    call_both(s);                   /* a second call on the same node: no second run */
    return NULL;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    struct shared *s = calloc(1, sizeof *s);
    S = s;
    s->once = (pthread_once_t)PTHREAD_ONCE_INIT;
    pthread_barrier_init(&s->bar, NULL, p);
    pthread_mutex_init(&s->m, NULL);
    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++) pthread_create(&t[i], NULL, worker, s);
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);
    call_both(s);
    int want = 2 * p + 1;
    if (s->runs_table != 1 || s->runs_static != 1 || s->callers_ok != want) {
        fprintf(stderr, "pt_once: runs %d %d (expected 1 1), callers ok %d (expected %d)\n",
                s->runs_table, s->runs_static, s->callers_ok, want);
        return 1;
    }
    if (s->bad) return 1;
    printf("init ran once; %d callers saw its table\n", s->callers_ok);
    printf("ok once\n");
    return 0;
}
