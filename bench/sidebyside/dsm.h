/* dsm.h: the thin layer the side-by-side kernels are written against. One SPMD program per
 * kernel: every node runs main, allocates the shared arrays collectively (blocked placement:
 * node r is the home of the r-th contiguous share), works on its share between barriers, and
 * node 0 checks the answer against a sequential computation.
 *
 * Builds (see README.md):
 *   default      Squall's C API (squall.h, `pkg-config --cflags --libs squall`)
 *   -DUSE_ARGO   ArgoDSM's C API (argo.h, -largo -largobackend-mpi, run by mpirun)
 *   -DDSM_SEQ    one process, plain malloc: the sequential baseline
 *
 * Every kernel prints one result line on node 0:
 *   @kernel {"kernel":"mm","impl":"squall","nodes":2,"n":1024,"iters":1,"s":0.8,"ok":1}
 * "s" is the time between the barrier after set-up and the barrier after the computation
 * (remote misses included), "ok" whether the answer matched the sequential computation. */
#ifndef DSM_H
#define DSM_H

#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(USE_ARGO)
#include "argo.h"
#define DSM_IMPL "argo"
/* ArgoDSM's global memory: ARGO_MEMORY_SIZE (bytes) if set, else 1 GiB. */
static inline void dsm_init(void) {
    const char *m = getenv("ARGO_MEMORY_SIZE");
    size_t size = m ? (size_t)strtoull(m, NULL, 10) : ((size_t)1 << 30);
    argo_init(size, 0);
}
static inline int dsm_rank(void) { return argo_node_id(); }
static inline int dsm_nodes(void) { return argo_number_of_nodes(); }
/* Collective; ArgoDSM's default allocation policy (naive) is blocked, like Squall's below. */
static inline void *dsm_alloc(size_t bytes) { return collective_alloc(bytes); }
static inline void dsm_barrier(void) { argo_barrier(1); }
static inline void dsm_finalize(void) { argo_finalize(); }

#elif defined(DSM_SEQ)
#define DSM_IMPL "seq"
static inline void dsm_init(void) {}
static inline int dsm_rank(void) { return 0; }
static inline int dsm_nodes(void) { return 1; }
static inline void *dsm_alloc(size_t bytes) { return calloc(1, bytes); }
static inline void dsm_barrier(void) {}
static inline void dsm_finalize(void) {}

#else
#include <squall.h>
#define DSM_IMPL "squall"
static inline void dsm_die(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, squall_last_error());
    exit(2);
}
static inline void dsm_init(void) {
    if (squall_init() != SQUALL_OK)
        dsm_die("squall_init");
}
static inline int dsm_rank(void) { return squall_rank(); }
static inline int dsm_nodes(void) { return squall_size(); }
/* Collective: every node gets rank 0's allocation, node r home of the r-th share. */
static inline void *dsm_alloc(size_t bytes) {
    void *p = squall_alloc_collective(bytes, SQUALL_PLACE_BLOCKED, 0);
    if (!p)
        dsm_die("squall_alloc_collective");
    return p;
}
static inline void dsm_barrier(void) {
    if (squall_barrier() != SQUALL_OK)
        dsm_die("squall_barrier");
}
static inline void dsm_finalize(void) { squall_finalize(); }
#endif

static inline double dsm_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The first index of share `r` of `n` items over `p` nodes (rounded to `align` items). */
static inline size_t dsm_share(size_t n, int r, int p, size_t align) {
    size_t per = (n / (size_t)p + align - 1) / align * align;
    size_t lo = per * (size_t)r;
    return lo < n ? lo : n;
}

/* `-n N` / `-i ITERS` (each kernel has its defaults). */
static inline void dsm_args(int argc, char **argv, size_t *n, size_t *iters) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-n") == 0)
            *n = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "-i") == 0)
            *iters = (size_t)strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [-n N] [-i ITERS]\n", argv[0]);
            exit(2);
        }
    }
}

static inline void dsm_report(const char *kernel, size_t n, size_t iters, double s, int ok) {
    if (dsm_rank() == 0) {
        printf("@kernel {\"kernel\":\"%s\",\"impl\":\"%s\",\"nodes\":%d,\"n\":%zu,"
               "\"iters\":%zu,\"s\":%.6f,\"ok\":%d}\n",
               kernel, DSM_IMPL, dsm_nodes(), n, iters, s, ok);
        fflush(stdout);
    }
}

#endif
