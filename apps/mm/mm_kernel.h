/*
 * mm_kernel.h - the block kernel and the matrix entries of mm, shared by its three styles:
 * mm.c (page-based threads), mm_crl.c (CRL regions) and mm_splitc.c (Split-C global
 * pointers). Owns: the arithmetic of one block product and the value of every entry. Must
 * not touch: distribution or communication (each style owns its own).
 */
#ifndef MM_KERNEL_H
#define MM_KERNEL_H
#include "app.h"

/* c += a * bm for B x B row-major blocks. Four C elements of a row at a time are summed in
 * registers over k and stored once (per element the additions keep the order k = 0..b-1, so
 * the result is bit-identical to the plain i-k-j loop). The plain loop `c[i][j] += a[i][k] *
 * b[k][j]` (two loads and a store per multiply-add) ran 1.6x slower or not depending only on
 * where the compiler happened to place its 32-byte inner loop relative to a 64-byte fetch
 * boundary (same code in the seq and native builds, different addresses): this form is as
 * fast at every loop alignment (apps/mm/README.md). */
static void mm_kernel(double *restrict c, const double *restrict a, const double *restrict bm, long b)
{
    for (long i = 0; i < b; i++) {
        const double *ai = a + i * b;
        double *ci = c + i * b;
        long j = 0;
        for (; j + 4 <= b; j += 4) {
            double s0 = ci[j], s1 = ci[j + 1], s2 = ci[j + 2], s3 = ci[j + 3];
            const double *bk = bm + j;
            for (long k = 0; k < b; k++, bk += b) {
                double x = ai[k];
                s0 += x * bk[0];
                s1 += x * bk[1];
                s2 += x * bk[2];
                s3 += x * bk[3];
            }
            ci[j] = s0;
            ci[j + 1] = s1;
            ci[j + 2] = s2;
            ci[j + 3] = s3;
        }
        for (; j < b; j++) {
            double s = ci[j];
            for (long k = 0; k < b; k++)
                s += ai[k] * bm[k * b + j];
            ci[j] = s;
        }
    }
}

/* A C block up to this many doubles (64 KiB, B <= 90) is summed in a buffer on the worker's
 * stack and stored into C once; bigger blocks are summed in place. */
enum { MM_LOCAL_MAX = 8192 };

/* Entry (i, j) of A (which 0) or B (which 1): uniform in [-1, 1), a function of the position
 * only, so the owner of a block can generate it. */
static double mm_value(int which, long i, long j, long n)
{
    app_rng r;
    app_rng_seed(&r, 777ULL + (unsigned long long)which * 0x9E3779B97F4A7C15ULL + (unsigned long long)(i * n + j));
    return 2.0 * app_rng_double(&r) - 1.0;
}

/* The process grid of mm: pr x pc = p with pr the largest divisor of p up to sqrt(p). */
static inline void mm_grid(int p, int *pr, int *pc)
{
    *pr = 1;
    for (int d = 1; d * d <= p; d++)
        if (p % d == 0)
            *pr = d;
    *pc = p / *pr;
}

/* Freivalds check of the SPMD styles: C (n x n, plain row-major, gathered by the caller)
 * against A and B regenerated from mm_value, sequentially: || C x - A (B x) || / || A (B x) ||
 * for a random x. Returns that relative error. */
static inline double mm_freivalds(const double *c, long n)
{
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    if (!x || !y) {
        fprintf(stderr, "mm: out of memory for the check\n");
        exit(2);
    }
    app_rng r;
    app_rng_seed(&r, 778);
    for (long i = 0; i < n; i++)
        x[i] = 2.0 * app_rng_double(&r) - 1.0;
    for (long i = 0; i < n; i++) { /* y = B x */
        double s = 0.0;
        for (long j = 0; j < n; j++)
            s += mm_value(1, i, j, n) * x[j];
        y[i] = s;
    }
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        double z = 0.0, w = 0.0;
        for (long j = 0; j < n; j++) {
            z += mm_value(0, i, j, n) * y[j];
            w += c[i * n + j] * x[j];
        }
        num += (w - z) * (w - z);
        den += z * z;
    }
    free(x);
    free(y);
    return sqrt(num / (den > 0 ? den : 1.0));
}

/* The options every style of mm takes: matrix order `-n` (a multiple of the block size),
 * block size `-b` and repetitions `-r`, after the common ones. `name` and `what` head the
 * usage text. Exits with status 2 naming the problem when the order is not a multiple of the
 * block size. */
typedef struct {
    long n, b, reps;
} mm_opts;

static inline mm_opts mm_parse(int argc, char **argv, app_opts *o, const char *name, const char *what)
{
    static char usage[512];
    snprintf(usage, sizeof usage,
             "%s: %s\n"
             "  -n N   matrix order (multiple of B)\n"
             "  -b B   block size\n"
             "  -r R   repetitions of the product",
             name, what);
    static const long N[4] = {128, 1408, 3200, 5120};
    app_parse_common(argc, argv, o, usage);
    int si = app_size_index(o);
    mm_opts m;
    m.n = app_flag_long(argc, argv, o, "-n", N[si], 1, 1L << 16);
    m.b = app_flag_long(argc, argv, o, "-b", 32, 1, 4096);
    m.reps = app_flag_long(argc, argv, o, "-r", 1, 1, 1L << 20);
    if (m.n % m.b) {
        fprintf(stderr, "%s: matrix order %ld is not a multiple of block size %ld\n", name, m.n, m.b);
        exit(2);
    }
    return m;
}

#endif /* MM_KERNEL_H */
