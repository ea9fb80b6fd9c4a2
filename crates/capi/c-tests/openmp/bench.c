/* The program `squall bench omp` builds twice (plain `gcc -fopenmp` on the system's libgomp, and
 * with `pkg-config squall-openmp`) and runs with the same thread count. Written as OpenMP users
 * write code. Usage:
 *   bench ops REPS        parallel region start+join, team barrier, dynamic-schedule chunk
 *   bench stencil N ITERS 2-D Jacobi stencil on N x N (the kernel of apps.c), checked
 *   bench matmul N        blocked matrix multiply N x N (the kernel of apps.c), checked
 * Prints one line per measurement: "@omp {json}" with the operation, the per-operation times
 * (microseconds: thread 0's for regions and barriers, every thread's for chunks) or the kernel's seconds, the count of operations the
 * threads saw (threadprivate counters summed at the end, so counting costs nothing in the
 * timed part) and the count expected; "ok": 1 when they agree and the answers are right.
 * Exits 1 when something is wrong. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long seen;        /* operations this thread took part in */
static long index_sum;   /* dynamic loop: sum of the iterations this thread ran */
#pragma omp threadprivate(seen, index_sum)

static int wrong;

static void print_samples(const char *op, const double *us, long n, long count, long expect, int ok)
{
    printf("@omp {\"op\":\"%s\",\"threads\":%d,\"count\":%ld,\"expect\":%ld,\"ok\":%d,\"us\":[",
           op, omp_get_max_threads(), count, expect, ok);
    for (long i = 0; i < n; i++) printf("%s%.3f", i ? "," : "", us[i]);
    printf("]}\n");
    fflush(stdout);
    if (!ok) wrong = 1;
}

static long sum_seen(void)
{
    long total = 0;
    #pragma omp parallel reduction(+:total)
    {
        total += seen;
        seen = 0;
    }
    return total;
}

static void ops(int reps)
{
    int nt = omp_get_max_threads();
    double *us = malloc(sizeof(double) * (size_t)reps * (size_t)nt + 1);
    if (!us) exit(2);
    /* warm-up: the team exists before anything is timed */
    #pragma omp parallel
    seen = 0;

    /* parallel region start and join */
    int full = 1;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel
        {
            seen++;
            if (omp_get_num_threads() != nt) full = 0;
        }
        us[r] = (omp_get_wtime() - t0) * 1e6;
    }
    long regions = sum_seen();
    print_samples("region", us, reps, regions, (long)reps * nt, full && regions == (long)reps * nt);

    /* team barrier: thread 0 times each episode; afterwards a short untimed check that no
     * thread leaves a barrier before every thread has arrived */
    long early = 0;
    int rounds = 8;
    int *arrived = calloc((size_t)nt, sizeof(int));
    if (!arrived) exit(2);
    #pragma omp parallel reduction(+:early)
    {
        int me = omp_get_thread_num();
        #pragma omp barrier
        double last = omp_get_wtime();
        for (int r = 0; r < reps; r++) {
            #pragma omp barrier
            seen++;
            if (me == 0) {
                double now = omp_get_wtime();
                us[r] = (now - last) * 1e6;
                last = now;
            }
        }
        for (int r = 1; r <= rounds; r++) {
            arrived[me] = r;
            #pragma omp barrier
            for (int t = 0; t < nt; t++) early += arrived[t] < r;
            #pragma omp barrier
        }
    }
    long barriers = sum_seen();
    print_samples("barrier", us, reps, barriers, (long)reps * nt,
                  barriers == (long)reps * nt && early == 0);
    free(arrived);

    /* dynamic schedule, chunk size 1, each chunk 100 us of work (so every thread gets its share):
     * every thread times the hand-out, from the end of its last chunk's work to the start of
     * the next chunk (in its own buffer; gathered after the loop) */
    long n = (long)reps * nt, gathered = 0;
    long total_index = 0;
    #pragma omp parallel reduction(+:total_index)
    {
        double *gap = malloc(sizeof(double) * (size_t)n);
        long k = 0;
        if (!gap) exit(2);
        double last = omp_get_wtime();
        #pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < n; i++) {
            seen++;
            index_sum += i;
            double now = omp_get_wtime();
            gap[k++] = (now - last) * 1e6;
            while (omp_get_wtime() - now < 100e-6)
                ;
            last = omp_get_wtime();
        }
        long at;
        #pragma omp atomic capture
        { at = gathered; gathered += k; }
        memcpy(&us[at], gap, sizeof(double) * (size_t)k);
        free(gap);
        total_index += index_sum;
        index_sum = 0;
    }
    long chunks = sum_seen();
    print_samples("chunk", us, gathered, chunks, n, chunks == n && total_index == n * (n - 1) / 2);
    free(us);
}

static void stencil(int n, int iters)
{
    double *a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    double *b = malloc(sizeof(double) * (size_t)n * (size_t)n);
    double *sa = malloc(sizeof(double) * (size_t)n * (size_t)n);
    double *sb = malloc(sizeof(double) * (size_t)n * (size_t)n);
    if (!a || !b || !sa || !sb) exit(2);
    /* first touch in parallel, with the schedule the sweeps use */
    #pragma omp parallel for
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            a[(long)i * n + j] = b[(long)i * n + j] = (i == 0 || j == 0) ? 100.0 : (double)((i * 31 + j * 17) % 13);
    double t0 = omp_get_wtime();
    for (int it = 0; it < iters; it++) {
        #pragma omp parallel for
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                b[(long)i * n + j] = 0.25 * (a[(long)(i - 1) * n + j] + a[(long)(i + 1) * n + j] +
                                             a[(long)i * n + j - 1] + a[(long)i * n + j + 1]);
        #pragma omp parallel for
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                a[(long)i * n + j] = b[(long)i * n + j];
    }
    double t = omp_get_wtime() - t0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            sa[(long)i * n + j] = sb[(long)i * n + j] = (i == 0 || j == 0) ? 100.0 : (double)((i * 31 + j * 17) % 13);
    for (int it = 0; it < iters; it++) {
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                sb[(long)i * n + j] = 0.25 * (sa[(long)(i - 1) * n + j] + sa[(long)(i + 1) * n + j] +
                                              sa[(long)i * n + j - 1] + sa[(long)i * n + j + 1]);
        for (int i = 1; i < n - 1; i++)
            memcpy(&sa[(long)i * n + 1], &sb[(long)i * n + 1], sizeof(double) * (size_t)(n - 2));
    }
    long differ = 0;
    for (long k = 0; k < (long)n * n; k++) differ += a[k] != sa[k];
    printf("@omp {\"op\":\"stencil\",\"threads\":%d,\"n\":%d,\"iters\":%d,\"count\":%d,\"expect\":%d,"
           "\"ok\":%d,\"s\":%.6f}\n",
           omp_get_max_threads(), n, iters, iters, iters, differ == 0, t);
    if (differ) wrong = 1;
    free(a), free(b), free(sa), free(sb);
}

#define MB 32

static void matmul(int n)
{
    n = (n + MB - 1) / MB * MB;
    double *a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    double *b = malloc(sizeof(double) * (size_t)n * (size_t)n);
    double *c = malloc(sizeof(double) * (size_t)n * (size_t)n);
    if (!a || !b || !c) exit(2);
    #pragma omp parallel for
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            a[(long)i * n + j] = (double)((i + 2 * j) % 7) - 3;
            b[(long)i * n + j] = (double)((3 * i + j) % 5) - 2;
            c[(long)i * n + j] = 0;
        }
    double t0 = omp_get_wtime();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int bi = 0; bi < n; bi += MB)
        for (int bj = 0; bj < n; bj += MB)
            for (int bk = 0; bk < n; bk += MB)
                for (int i = bi; i < bi + MB; i++)
                    for (int k = bk; k < bk + MB; k++) {
                        double aik = a[(long)i * n + k];
                        for (int j = bj; j < bj + MB; j++) c[(long)i * n + j] += aik * b[(long)k * n + j];
                    }
    double t = omp_get_wtime() - t0;
    /* every 8th row against the plain triple loop (the same additions in the same order) */
    long differ = 0, rows = 0;
    for (int i = 0; i < n; i += 8, rows++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int k = 0; k < n; k++) acc += a[(long)i * n + k] * b[(long)k * n + j];
            differ += acc != c[(long)i * n + j];
        }
    printf("@omp {\"op\":\"matmul\",\"threads\":%d,\"n\":%d,\"count\":%ld,\"expect\":%ld,\"ok\":%d,"
           "\"s\":%.6f}\n",
           omp_get_max_threads(), n, rows, (long)(n + 7) / 8, differ == 0, t);
    if (differ) wrong = 1;
    free(a), free(b), free(c);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "ops";
    int x = argc > 2 ? atoi(argv[2]) : 0, y = argc > 3 ? atoi(argv[3]) : 0;
    if (!strcmp(what, "ops")) ops(x > 0 ? x : 100);
    else if (!strcmp(what, "stencil")) stencil(x > 2 ? x : 512, y > 0 ? y : 20);
    else if (!strcmp(what, "matmul")) matmul(x > 0 ? x : 256);
    else {
        fprintf(stderr, "usage: bench ops REPS | stencil N ITERS | matmul N\n");
        return 2;
    }
    return wrong;
}
