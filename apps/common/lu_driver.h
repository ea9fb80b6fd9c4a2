/*
 * lu_driver.h - the program shared by lu and clu (SPLASH-2 LU and contiguous LU): thread grid,
 * step structure, start-up and the residual check. The including file defines the matrix
 * layout first: LU_NAME, LU_USAGE, an `lu_layout` struct (the storage inside lu_shared),
 * and after this header the functions declared below.
 *
 * Owns: everything of the two programs but the layout. Must not touch: the harness beyond
 * its API.
 *
 * The n x n matrix is divided into B x B blocks; block (I,J) belongs to thread
 * (I mod pr) * pc + (J mod pc) on a pr x pc thread grid (2-D scatter). Step K: the owner of
 * (K,K) factors it; barrier; owners of the blocks below and right of it divide them by it;
 * barrier; owners of the interior blocks (I,J > K) subtract A_IK * A_KJ; barrier.
 * Before the timed phase every thread initialises its own blocks (entries are a hash of their
 * position), so each block is first written by its owner (SPLASH-2 LU initialises in main and
 * then has every processor touch its blocks "to remove cold-start misses"; on a page-based
 * DSM the first write also decides the page's home).
 *
 * Check: residual || L (U x) - A x || / || A x || for a random x against the original matrix
 * (regenerated from lu_value, O(n^2)), tolerance 1e-10 (the matrix is diagonally dominant, no pivoting).
 * The factors themselves do not depend on the thread count (each block sees the same
 * operation sequence), so `check` (sum of all factor entries) is identical across runs.
 */
#ifndef LU_DRIVER_H
#define LU_DRIVER_H
#include "app.h"
#include "lu_kernels.h"
#include "lu_value.h"

typedef struct {
    long n, b, nb;
    int nthreads, pr, pc;
    lu_layout m;
    app_barrier bar;
    double t0, t1;
} lu_shared;

typedef struct {
    lu_shared *g;
    int tid;
} lu_arg;

/* The layout, defined by the including program: the address of block (I,J), its leading
 * dimension, the address of element (i,j), and allocation of the matrix. */
static inline double *lu_blk(const lu_shared *g, long I, long J);
static inline long lu_ld(const lu_shared *g);
static inline double *lu_elem(const lu_shared *g, long i, long j);
static void lu_alloc_matrix(lu_shared *g);

static inline int lu_owner(const lu_shared *g, long I, long J)
{
    return (int)((I % g->pr) * g->pc + (J % g->pc));
}

static void *lu_worker(void *p)
{
    lu_arg *a = p;
    lu_shared *g = a->g;
    int me = a->tid;
    long nb = g->nb, b = g->b, ld = lu_ld(g);
    for (long J = 0; J < nb; J++) /* my blocks: their first writer is their owner */
        for (long I = 0; I < nb; I++)
            if (lu_owner(g, I, J) == me)
                for (long j = J * b; j < (J + 1) * b; j++)
                    for (long i = I * b; i < (I + 1) * b; i++)
                        *lu_elem(g, i, j) = lu_value(i, j, g->n);
    app_barrier_wait(&g->bar);
    if (me == 0)
        g->t0 = app_now();
    for (long K = 0; K < nb; K++) {
        double *d = lu_blk(g, K, K);
        if (lu_owner(g, K, K) == me)
            lu_factor_diag(d, ld, b);
        app_barrier_wait(&g->bar);
        for (long I = K + 1; I < nb; I++)
            if (lu_owner(g, I, K) == me)
                lu_div_below(lu_blk(g, I, K), ld, d, ld, b);
        for (long J = K + 1; J < nb; J++)
            if (lu_owner(g, K, J) == me)
                lu_div_right(lu_blk(g, K, J), ld, d, ld, b);
        app_barrier_wait(&g->bar);
        for (long J = K + 1; J < nb; J++)
            for (long I = K + 1; I < nb; I++)
                if (lu_owner(g, I, J) == me)
                    lu_mod_interior(lu_blk(g, I, J), ld, lu_blk(g, I, K), ld, lu_blk(g, K, J), ld, b);
        app_barrier_wait(&g->bar);
    }
    if (me == 0)
        g->t1 = app_now();
    return NULL;
}

int main(int argc, char **argv)
{
    static const char *usage = LU_USAGE
                               "  -n N   matrix order (multiple of B)\n"
                               "  -b B   block size";
    static const long N[4] = {128, 2048, 4096, 6144};
    static const long BS[4] = {16, 32, 32, 32};
    app_opts o;
    app_parse_common(argc, argv, &o, usage);
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", N[si], 1, 1L << 16);
    long b = app_flag_long(argc, argv, &o, "-b", BS[si], 1, 4096);
    if (n % b) {
        fprintf(stderr, LU_NAME ": matrix order %ld is not a multiple of block size %ld\n", n, b);
        return 2;
    }

    lu_shared *g = app_alloc(1, sizeof *g, LU_NAME " shared state");
    g->n = n;
    g->b = b;
    g->nb = n / b;
    g->nthreads = o.threads;
    g->pr = 1;
    for (int d = 1; d * d <= o.threads; d++)
        if (o.threads % d == 0)
            g->pr = d;
    g->pc = o.threads / g->pr;
    lu_alloc_matrix(g); /* uninitialised: the owners write their blocks (lu_worker) */
    app_rng r;
    app_rng_seed(&r, 12346);
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(lu_arg, g, lu_worker, o.threads);

    double check = 0.0;
    for (long j = 0; j < n; j++)
        for (long i = 0; i < n; i++)
            check += *lu_elem(g, i, j);
    int ok = 0;
    char note[240];
    if (o.verify) {
        double *x = app_alloc((size_t)n, sizeof(double), "x"), *y = app_alloc((size_t)n, sizeof(double), "y");
        double *z = app_alloc((size_t)n, sizeof(double), "z");
        for (long i = 0; i < n; i++)
            x[i] = 2.0 * app_rng_double(&r) - 1.0;
        for (long j = 0; j < n; j++) /* y = A0 x */
            for (long i = 0; i < n; i++)
                y[i] += lu_value(i, j, n) * x[j];
        for (long j = 0; j < n; j++) /* z = U x */
            for (long i = 0; i <= j; i++)
                z[i] += *lu_elem(g, i, j) * x[j];
        double num = 0.0, den = 0.0;
        for (long i = 0; i < n; i++) { /* (L z)_i = z_i + sum_{k<i} L_ik z_k */
            double s = z[i];
            for (long k = 0; k < i; k++)
                s += *lu_elem(g, i, k) * z[k];
            num += (s - y[i]) * (s - y[i]);
            den += y[i] * y[i];
        }
        double rel = sqrt(num / (den > 0 ? den : 1.0));
        ok = rel <= 1e-10;
        snprintf(note, sizeof note, "n %ld block %ld threads grid %dx%d; residual |LUx-Ax|/|Ax| = %.3e (tol 1e-10)", n,
                 b, g->pr, g->pc, rel);
        free(x);
        free(y);
        free(z);
    } else {
        snprintf(note, sizeof note, "n %ld block %ld; not verified", n, b);
    }
    app_finish(LU_NAME, &o, g->t1 - g->t0, ok, check, note);
    return 0;
}

#endif
