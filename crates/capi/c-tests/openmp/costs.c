/* What OpenMP's basic operations cost: a parallel region's start and join, a team barrier,
 * a dynamic-schedule chunk, a critical section. Usage: costs [reps]. Prints "cost NAME X us"
 * lines and "ok costs" (every region ran with the full team). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    int full = 1, nt = omp_get_max_threads();
    double t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++) {
        #pragma omp parallel reduction(&&:full)
        full = omp_get_num_threads() == nt;
    }
    double region = (omp_get_wtime() - t0) / reps;
    double barrier = 0, chunk = 0, crit = 0;
    long chunks = 0, count = 0;
    #pragma omp parallel reduction(+:chunks)
    {
        #pragma omp barrier
        double b0 = omp_get_wtime();
        for (int r = 0; r < reps; r++) {
            #pragma omp barrier
        }
        #pragma omp master
        barrier = (omp_get_wtime() - b0) / reps;
        #pragma omp barrier
        double c0 = omp_get_wtime();
        #pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < reps * nt; i++) chunks++;
        #pragma omp master
        chunk = (omp_get_wtime() - c0) / reps;
        #pragma omp barrier
        double k0 = omp_get_wtime();
        for (int r = 0; r < reps; r++) {
            #pragma omp critical
            count++;
        }
        #pragma omp barrier
        #pragma omp master
        crit = (omp_get_wtime() - k0) / (reps * nt);
    }
    printf("cost threads %d\n", nt);
    printf("cost region start+join %.1f us\n", region * 1e6);
    printf("cost barrier %.1f us\n", barrier * 1e6);
    printf("cost dynamic chunk (per thread) %.1f us\n", chunk * 1e6);
    printf("cost critical section (per entry, contended) %.1f us\n", crit * 1e6);
    int ok = full && chunks == (long)reps * nt && count == (long)reps * nt;
    printf("%s costs\n", ok ? "ok" : "WRONG");
    return !ok;
}
