/*
 * mm - blocked dense matrix multiply C = A * B (the mm benchmark of the CRL / Split-C study,
 * seed 002 section 3.2: "multiplies two matrices, A and B, which are distributed in a
 * block-cyclic fashion. The result C shares no memory locations with A or B. Needed blocks
 * are fetched pairwise, just before they are used for multiplication").
 *
 * Owns: the three block-major matrices (each B x B block contiguous, row-major inside), their
 * 2-D block-cyclic distribution and the check. Must not touch: the harness beyond
 * its API.
 *
 * Thread (r, c) of a pr x pc grid computes every C block (I, J) with I mod pr == r and
 * J mod pc == c as sum over K of A_IK * B_KJ, reading whole row I of A blocks and column J of
 * B blocks; the same A and B blocks are read again and again by the threads of one grid row
 * or column (read-only sharing that rewards caching). `-r R` repeats the product R times.
 *
 * Distribution: C block (I,J) belongs to the thread that computes it. A is stored by block
 * rows and B by block columns (each contiguous); block row I of A is read by the pc threads of
 * grid row I mod pr and is dealt cyclically among them, block column J of B likewise among
 * the pr threads of grid column J mod pc. Each owner initialises its rows / columns before the
 * timed phase (entries are a hash of their position, so any thread can generate any block).
 * A thread then reads whole remote block rows of A and block columns of B (contiguous, so a
 * page-based DSM moves them in long runs) and writes only its own C blocks.
 *
 * Check: Freivalds: || C x - A (B x) || / || A (B x) || <= 1e-12 for a random x (O(n^2)).
 * Every C element sees the same operation order for every thread count, so `check` (sum of
 * C) is bit-identical across runs.
 */
#include "app.h"
#include "mm_kernel.h"

typedef struct {
    long n, b, nb;
    int reps, nthreads, pr, pc;
    double *a, *bm, *c; /* block-major, row-major inside; A and C by block rows (block (I,J) at
                         * (I*nb+J)*b*b), B by block columns (block (I,J) at (J*nb+I)*b*b) */
    app_barrier bar;
    double t0, t1;
} mm_shared;

typedef struct {
    mm_shared *g;
    int tid;
} mm_arg;

static inline double *mm_blk(const mm_shared *g, double *m, long I, long J)
{
    if (m == g->bm) /* B: a block column is contiguous */
        return m + (size_t)(J * g->nb + I) * (size_t)(g->b * g->b);
    return m + (size_t)(I * g->nb + J) * (size_t)(g->b * g->b);
}
static inline double *mm_elem(const mm_shared *g, double *m, long i, long j)
{
    return mm_blk(g, m, i / g->b, j / g->b) + (i % g->b) * g->b + (j % g->b);
}

/* Owner of block row I of A: rows I = r mod pr are read by the threads of grid row r, and are
 * dealt cyclically among them. Owner of block column J of B: likewise among the threads of
 * grid column J mod pc. */
static inline int mm_arow_owner(const mm_shared *g, long I)
{
    return (int)((I % g->pr) * g->pc + (I / g->pr) % g->pc);
}
static inline int mm_bcol_owner(const mm_shared *g, long J)
{
    return (int)(((J / g->pc) % g->pr) * g->pc + J % g->pc);
}

static void *mm_worker(void *p)
{
    mm_arg *arg = p;
    mm_shared *g = arg->g;
    int me = arg->tid;
    int myr = me / g->pc, myc = me % g->pc;
    long nb = g->nb, b = g->b, bb = b * b;
    double local[MM_LOCAL_MAX] __attribute__((aligned(64)));
    /* initialise my block rows of A, block columns of B and C blocks */
    for (long I = 0; I < nb; I++)
        for (long K = 0; K < nb; K++) {
            if (mm_arow_owner(g, I) == me) {
                double *ab = mm_blk(g, g->a, I, K);
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        ab[i * b + j] = mm_value(0, I * b + i, K * b + j, g->n);
            }
            if (I % g->pr == myr && K % g->pc == myc) /* my C block (I, K): first touch here */
                memset(mm_blk(g, g->c, I, K), 0, (size_t)bb * sizeof(double));
            if (mm_bcol_owner(g, I) == me) { /* block (K, I) of B: column I */
                double *bbk = mm_blk(g, g->bm, K, I);
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        bbk[i * b + j] = mm_value(1, K * b + i, I * b + j, g->n);
            }
        }
    app_barrier_wait(&g->bar);
    if (me == 0) {
        app_stats_mark(); /* Squall statistics: the timed phase starts */
        g->t0 = app_now();
    }
    for (int rep = 0; rep < g->reps; rep++) {
        for (long I = myr; I < nb; I += g->pr)
            for (long J = myc; J < nb; J += g->pc) {
                double *c = mm_blk(g, g->c, I, J);
                double *acc = bb <= MM_LOCAL_MAX ? local : c;
                memset(acc, 0, (size_t)bb * sizeof(double));
                for (long K = 0; K < nb; K++)
                    mm_kernel(acc, mm_blk(g, g->a, I, K), mm_blk(g, g->bm, K, J), g->b);
                if (acc != c) /* one store of the finished block: one write per C page */
                    memcpy(c, acc, (size_t)bb * sizeof(double));
            }
        app_barrier_wait(&g->bar);
    }
    if (me == 0) {
        g->t1 = app_now();
        app_stats_mark(); /* ... and ends */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    app_opts o;
    mm_opts mo = mm_parse(argc, argv, &o, "mm", "blocked matrix multiply C = A*B, block-cyclic C blocks");
    long n = mo.n, b = mo.b, reps = mo.reps;

    mm_shared *g = app_alloc(1, sizeof *g, "mm shared state");
    g->n = n;
    g->b = b;
    g->nb = n / b;
    g->reps = (int)reps;
    g->nthreads = o.threads;
    g->pr = 1;
    for (int d = 1; d * d <= o.threads; d++)
        if (o.threads % d == 0)
            g->pr = d;
    g->pc = o.threads / g->pr;
    /* every block is written first by its owner (mm_worker) */
    g->a = app_alloc_uninit((size_t)(n * n), sizeof(double), "matrix A");
    g->bm = app_alloc_uninit((size_t)(n * n), sizeof(double), "matrix B");
    g->c = app_alloc_uninit((size_t)(n * n), sizeof(double), "matrix C");
    app_rng r;
    app_rng_seed(&r, 778);
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(mm_arg, g, mm_worker, o.threads);

    double check = 0.0;
    for (size_t k = 0; k < (size_t)(n * n); k++)
        check += g->c[k];
    int ok = 0;
    char note[240];
    if (o.verify) {
        double *x = app_alloc((size_t)n, sizeof(double), "x"), *y = app_alloc((size_t)n, sizeof(double), "y");
        for (long i = 0; i < n; i++)
            x[i] = 2.0 * app_rng_double(&r) - 1.0;
        for (long i = 0; i < n; i++) { /* y = B x */
            double s = 0.0;
            for (long j = 0; j < n; j++)
                s += *mm_elem(g, g->bm, i, j) * x[j];
            y[i] = s;
        }
        double num = 0.0, den = 0.0;
        for (long i = 0; i < n; i++) { /* (A y)_i vs (C x)_i */
            double z = 0.0, w = 0.0;
            for (long j = 0; j < n; j++) {
                z += *mm_elem(g, g->a, i, j) * y[j];
                w += *mm_elem(g, g->c, i, j) * x[j];
            }
            num += (w - z) * (w - z);
            den += z * z;
        }
        double rel = sqrt(num / (den > 0 ? den : 1.0));
        ok = rel <= 1e-12;
        snprintf(note, sizeof note, "n %ld block %ld reps %ld grid %dx%d; Freivalds |Cx-A(Bx)|/|A(Bx)| = %.3e (tol 1e-12)",
                 n, b, reps, g->pr, g->pc, rel);
        free(x);
        free(y);
    } else {
        snprintf(note, sizeof note, "n %ld block %ld reps %ld; not verified", n, b, reps);
    }
    app_finish("mm", &o, g->t1 - g->t0, ok, check, note);
    return 0;
}
