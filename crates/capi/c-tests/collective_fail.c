/*
 * collective_fail.c - a collective allocation that cannot succeed: every node of an SPMD job
 * asks squall_alloc_collective() for SIZE_GIB gibibytes (100 by default: more than the
 * default 64 GiB global range). Rank 0's allocation fails, and every node must get the same
 * failure (NULL and the error text naming node 0 and the cause) within a second of the
 * barrier before it, instead of waiting for an address that will never come.
 *
 * usage: collective_fail [SIZE_GIB]
 * Every node prints "collective_fail: node R: refused in N ms: ERROR" on stderr and exits 1
 * (the program cannot go on without its array); "WRONG" if the allocation succeeded or the
 * failure took more than a second.
 */
#include <squall.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    unsigned long long gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 100;
    if (squall_init() != SQUALL_OK) {
        fprintf(stderr, "collective_fail: squall_init: %s\n", squall_last_error());
        return 2;
    }
    int rank = squall_rank();
    if (squall_barrier() != SQUALL_OK) {
        fprintf(stderr, "collective_fail: node %d: barrier: %s\n", rank, squall_last_error());
        return 2;
    }
    double t0 = now_ms();
    double *a = squall_alloc_collective((size_t)gib << 30, SQUALL_PLACE_DEFAULT, 0);
    double took = now_ms() - t0;
    if (a != NULL) {
        printf("WRONG: node %d: a collective allocation of %llu GiB succeeded\n", rank, gib);
        squall_finalize();
        return 1;
    }
    if (took > 1000.0) {
        printf("WRONG: node %d: the failure took %.0f ms\n", rank, took);
    }
    fprintf(stderr, "collective_fail: node %d: refused in %.0f ms: %s\n", rank, took,
            squall_last_error());
    squall_finalize();
    return 1;
}
