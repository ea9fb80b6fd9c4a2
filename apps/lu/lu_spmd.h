/*
 * lu_spmd.h - what lu's SPMD versions share (lu_crl.c over CRL regions, lu_splitc.c over
 * Split-C global pointers): sizes, the 2-D scatter of blocks over the node grid, and the check
 * of the factors node 0 gathers. Owns: those. Must not touch: communication (each style owns
 * its own); the arithmetic is common/lu_kernels.h, the matrix common/lu_value.h, as in lu.c.
 */
#ifndef LU_SPMD_H
#define LU_SPMD_H
#include "app.h"
#include "lu_kernels.h"
#include "lu_value.h"

static const long LU_N[4] = {128, 2048, 4096, 6144};
static const long LU_BS[4] = {16, 32, 32, 32};

/* Parses lu's flags for the SPMD style `name` (its usage line "name: what"): the common ones,
 * -n (*n: matrix order) and -b (*b: block size); exits (2) if b does not divide n. */
static inline void lu_spmd_parse(int argc, char **argv, app_opts *o, const char *name, const char *what, long *n,
                                 long *b)
{
    static char usage[256];
    snprintf(usage, sizeof usage,
             "%s: %s\n"
             "  -n N   matrix order (multiple of B)\n"
             "  -b B   block size",
             name, what);
    app_parse_common(argc, argv, o, usage);
    int si = app_size_index(o);
    *n = app_flag_long(argc, argv, o, "-n", LU_N[si], 1, 1L << 16);
    *b = app_flag_long(argc, argv, o, "-b", LU_BS[si], 1, 4096);
    if (*n % *b) {
        fprintf(stderr, "%s: matrix order %ld is not a multiple of block size %ld\n", name, *n, *b);
        exit(2);
    }
}

/* Owner of block (I, J) on a pr x pc node grid (lu_driver.h's lu_owner). */
static inline int lu_spmd_owner(long I, long J, int pr, int pc)
{
    return (int)((I % pr) * pc + (J % pc));
}

/* The node grid of p nodes, as lu_driver.h makes its thread grid. */
static inline void lu_spmd_grid(int p, int *pr, int *pc)
{
    *pr = 1;
    for (int d = 1; d * d <= p; d++)
        if (p % d == 0)
            *pr = d;
    *pc = p / *pr;
}

/* The residual check of lu_driver.h on the gathered factors f (n x n column-major, L unit
 * lower below the diagonal, U upper): || L (U x) - A x || / || A x || for the same random x,
 * A regenerated sequentially from lu_value. *check gets the sum of the factors in lu's order. */
static inline double lu_spmd_residual(const double *f, long n, double *check)
{
    double *x = calloc((size_t)n, sizeof(double)), *y = calloc((size_t)n, sizeof(double));
    double *z = calloc((size_t)n, sizeof(double));
    if (!x || !y || !z) {
        fprintf(stderr, "lu: out of memory for the check\n");
        exit(2);
    }
    *check = 0.0;
    for (long j = 0; j < n; j++)
        for (long i = 0; i < n; i++)
            *check += f[i + j * n];
    app_rng r;
    app_rng_seed(&r, 12346);
    for (long i = 0; i < n; i++)
        x[i] = 2.0 * app_rng_double(&r) - 1.0;
    for (long j = 0; j < n; j++) /* y = A0 x */
        for (long i = 0; i < n; i++)
            y[i] += lu_value(i, j, n) * x[j];
    for (long j = 0; j < n; j++) /* z = U x */
        for (long i = 0; i <= j; i++)
            z[i] += f[i + j * n] * x[j];
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        double s = z[i];
        for (long k = 0; k < i; k++)
            s += f[i + k * n] * z[k];
        num += (s - y[i]) * (s - y[i]);
        den += y[i] * y[i];
    }
    free(x);
    free(y);
    free(z);
    return sqrt(num / (den > 0 ? den : 1.0));
}

#endif /* LU_SPMD_H */
