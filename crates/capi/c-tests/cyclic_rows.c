/* An outsider's pthreads program, written with no thought of Squall: a plain global matrix,
 * rows dealt cyclically to the threads (rows of 5600 bytes straddle pages, so two threads
 * write most pages), a pthread_barrier per step, the step count read from stdin, a C11
 * atomic counter of rows done (sequentially consistent, between the barriers), and the
 * result checked by main. Usage: echo STEPS | cyclic_rows THREADS */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 96
#define COLS 700
static double m[ROWS][COLS];
static int nthreads, steps;
static pthread_barrier_t bar;
static atomic_long rows_done;

static double want(int s, int r, int c) { return s * 1000.0 + r + c * 0.001; }

static void *worker(void *arg)
{
    int me = *(int *)arg;
    for (int s = 1; s <= steps; s++) {
        for (int r = me; r < ROWS; r += nthreads) {
            for (int c = 0; c < COLS; c++)
                m[r][c] = want(s, r, c);
            atomic_fetch_add(&rows_done, 1);
        }
        pthread_barrier_wait(&bar);
        /* every thread checks the next thread's rows */
        for (int r = (me + 1) % nthreads; r < ROWS; r += nthreads)
            if (m[r][0] != want(s, r, 0) || m[r][COLS - 1] != want(s, r, COLS - 1)) {
                fprintf(stderr, "step %d: row %d stale\n", s, r);
                exit(1);
            }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 4;
    if (nthreads < 1 || nthreads > 64 || scanf("%d", &steps) != 1 || steps < 1) {
        fprintf(stderr, "usage: echo STEPS | %s THREADS (1..64)\n", argv[0]);
        return 2;
    }
    pthread_t t[64];
    int ids[64];
    pthread_barrier_init(&bar, NULL, nthreads);
    for (int i = 0; i < nthreads; i++) {
        ids[i] = i;
        pthread_create(&t[i], NULL, worker, &ids[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    double residual = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            residual += m[r][c] - want(steps, r, c);
    long done = atomic_load(&rows_done);
    printf("cyclic rows: %ld of %ld rows, residual %g: %s\n", done, (long)ROWS * steps,
           residual, done == (long)ROWS * steps && residual == 0 ? "ok" : "WRONG");
    return 0;
}
