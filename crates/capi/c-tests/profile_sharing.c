/*
 * profile_sharing.c - a plain POSIX threads program (no Squall in the source) with the two
 * sharing patterns `squall run --profile` tells apart. T threads run R rounds; in each:
 *  - every thread updates its own 64-byte blocks of one calloc'd array (block b belongs to
 *    thread b % T, so every page is written by every thread: false sharing), then
 *  - adds into the same words of a second calloc'd array under one mutex, `hot`, held for a
 *    while (true sharing, and the lock with the longest wait), then
 *  - waits at a barrier.
 * A second mutex, `cold`, is taken once per thread. main checks both arrays and the count
 * against values computed sequentially.
 *
 *   cc profile_sharing.c $(pkg-config --cflags --libs squall-pthread)
 * usage: profile_sharing T ROUNDS    prints "ok profile sharing"
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define PAGES 16
#define PER_BLOCK 8 /* doubles per 64-byte block */
#define N (PAGES * 4096 / sizeof(double))
#define WORDS 64
#define STRIDE 64 /* one counter per 512 bytes: 8 pages of counters */

static double *blocks;
static long *counters;
static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cold = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t bar;
static int T, R;
static long cold_count;
static volatile double sink;

static void *worker(void *p)
{
    int me = (int)(long)p;
    for (int r = 0; r < R; r++) {
        for (size_t i = 0; i < N; i++)
            if ((int)((i / PER_BLOCK) % (size_t)T) == me) blocks[i] += me + r;
        pthread_mutex_lock(&hot);
        for (int w = 0; w < WORDS; w++) counters[w * STRIDE] += me + 1;
        double x = 0;
        for (int k = 0; k < 200000; k++) x += k * 0.5;
        sink = x;
        pthread_mutex_unlock(&hot);
        if (r == 0) {
            pthread_mutex_lock(&cold);
            cold_count++;
            pthread_mutex_unlock(&cold);
        }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    T = argc > 1 ? atoi(argv[1]) : 4;
    R = argc > 2 ? atoi(argv[2]) : 10;
    if (T < 1 || R < 1) {
        fprintf(stderr, "usage: profile_sharing T ROUNDS\n");
        return 2;
    }
    blocks = calloc(N, sizeof(double)); /* site: false sharing */
    counters = calloc(WORDS * STRIDE, sizeof(long)); /* site: true sharing */
    if (!blocks || !counters) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    pthread_barrier_init(&bar, NULL, (unsigned)T);
    pthread_t *th = malloc((size_t)T * sizeof(pthread_t));
    for (long t = 0; t < T; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    long bad = 0;
    for (size_t i = 0; i < N; i++) {
        int owner = (int)((i / PER_BLOCK) % (size_t)T);
        double want = (double)R * owner + (double)R * (R - 1) / 2;
        if (blocks[i] != want) bad++;
    }
    long per = (long)R * T * (T + 1) / 2;
    for (int w = 0; w < WORDS; w++)
        if (counters[w * STRIDE] != per) bad++;
    if (cold_count != T) bad++;
    if (bad) {
        printf("WRONG: %ld mismatches\n", bad);
        return 1;
    }
    printf("ok profile sharing\n");
    free(th);
    return 0;
}
