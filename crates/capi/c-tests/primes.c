/*
 * primes.c - a plain POSIX threads program (no Squall in the source): counts the primes below
 * N with T threads taking chunks from a shared work counter. Uses a static mutex
 * (PTHREAD_MUTEX_INITIALIZER), a mutex in malloc'd memory, a condition (start gate) and a
 * barrier. Built natively with -pthread, or for Squall with only the compile/link line changed:
 *   cc primes.c $(pkg-config --cflags --libs squall-pthread)
 * usage: primes N T     prints "primes below N: COUNT"
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CHUNK 1000

struct work {
    pthread_mutex_t lock; /* guards next */
    pthread_cond_t go_cond;
    pthread_barrier_t done;
    long next, n;
    int go;
    long total;  /* guarded by total_lock */
    long chunks; /* guarded by total_lock: one increment per chunk, from every node */
    long per_thread[256];
};

static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_prime(long v)
{
    if (v < 2) return 0;
    for (long d = 2; d * d <= v; d++)
        if (v % d == 0) return 0;
    return 1;
}

struct arg {
    struct work *w;
    int id;
};

static void *worker(void *p)
{
    struct arg *a = p;
    struct work *w = a->w;
    pthread_mutex_lock(&w->lock);
    while (!w->go) pthread_cond_wait(&w->go_cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
    long mine = 0;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        long start = w->next;
        w->next += CHUNK;
        pthread_mutex_unlock(&w->lock);
        if (start >= w->n) break;
        long end = start + CHUNK < w->n ? start + CHUNK : w->n;
        for (long v = start; v < end; v++) mine += is_prime(v);
        pthread_mutex_lock(&total_lock);
        w->chunks++;
        pthread_mutex_unlock(&total_lock);
    }
    w->per_thread[a->id] = mine;
    pthread_mutex_lock(&total_lock);
    w->total += mine;
    pthread_mutex_unlock(&total_lock);
    pthread_barrier_wait(&w->done);
    /* after the barrier every thread sees every other thread's count */
    long sum = 0;
    for (int i = 0; i < 256; i++) sum += w->per_thread[i];
    return (void *)sum;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int t = argc > 2 ? atoi(argv[2]) : 4;
    if (t < 1 || t > 256) return 2;
    struct work *w = calloc(1, sizeof *w);
    struct arg *args = malloc(sizeof *args * (size_t)t);
    pthread_t *ids = malloc(sizeof *ids * (size_t)t);
    if (!w || !args || !ids) return 2;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->go_cond, NULL);
    pthread_barrier_init(&w->done, NULL, (unsigned)t);
    w->n = n;
    for (int i = 0; i < t; i++) {
        args[i].w = w;
        args[i].id = i;
        if (pthread_create(&ids[i], NULL, worker, &args[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    pthread_mutex_lock(&w->lock);
    w->go = 1;
    pthread_cond_broadcast(&w->go_cond);
    pthread_mutex_unlock(&w->lock);
    int bad = 0;
    for (int i = 0; i < t; i++) {
        void *r;
        pthread_join(ids[i], &r);
        if ((long)r != w->total) bad = 1;
    }
    pthread_mutex_lock(&total_lock);
    printf("primes below %ld: %ld\n", n, w->total);
    pthread_mutex_unlock(&total_lock);
    if (bad) fprintf(stderr, "a thread saw a different sum after the barrier\n");
    if (w->chunks != (n + CHUNK - 1) / CHUNK) {
        fprintf(stderr, "%ld chunks counted under the static mutex, expected %ld\n", w->chunks,
                (n + CHUNK - 1) / CHUNK);
        bad = 1;
    }
    pthread_barrier_destroy(&w->done);
    pthread_cond_destroy(&w->go_cond);
    pthread_mutex_destroy(&w->lock);
    free(ids);
    free(args);
    free(w);
    return bad;
}
