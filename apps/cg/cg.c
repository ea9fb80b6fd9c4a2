/*
 * cg - sparse conjugate gradient with the NAS CG kernel's structure: an inverse power
 * iteration whose every outer step solves A z = x with a fixed number (25) of unpreconditioned
 * CG iterations on a random sparse symmetric positive definite matrix, then
 * zeta = shift + 1 / (x . z) and x = z / ||z||.
 *
 * Owns: the CSR matrix, the vectors, the row partition, the reductions and the check. Must
 * not touch: the harness beyond its API.
 *
 * Sharing pattern (the NAS CG pattern): rows are block-partitioned; every vector is shared.
 * The sparse matrix-vector product q = A p reads p at the random column indices of the
 * thread's rows, i.e. nearly all of p, written by all threads in the previous step (irregular
 * all-to-all reads); everything else is row-local. Each dot product is a reduction: every
 * thread writes its partial sum into its own slot (a page of its own), a barrier, then every
 * thread adds the slots in thread order (two alternating slot arrays, so a slot is never
 * rewritten before everyone has read it). 3 barriers per CG iteration: the reductions of p.q and r.r, and p
 * complete before the next product (every remote read of p is in the product, before the
 * p.q reduction, so p can be rewritten right after the r.r reduction).
 *
 * Rows are split in whole pages of the vectors (512 rows; the vectors are page-aligned), and
 * every thread writes its own rows of every vector first, so no vector page has two writers
 * and each is first touched on its writer's node. As the NAS CG code does ("one iteration
 * untimed to init all code and data page tables"), every thread runs one outer step before
 * the timed phase and starts again from x = 1: the matrix rows and the remote parts of the
 * vectors are in place when the clock starts.
 *
 * Matrix: n rows; for every row i, `nzr` random partners j with a value v in [0,1) give the
 * symmetric pair A_ij = A_ji += v; the diagonal is the row's absolute sum plus 1 (strictly
 * diagonally dominant, hence SPD).
 *
 * Check: main reruns the same algorithm sequentially; zeta must agree within relative 1e-10
 * (reductions are summed in a different order for different thread counts) and the final
 * ||x - A z|| / ||x|| must be below 1e-6.
 */
#include "app.h"

#define CG_ITERS 25
#define CG_PAD 512   /* doubles per partial slot: one 4 KiB page, so each has one writer */
#define CG_ALIGN 512 /* rows per partition chunk: one 4 KiB page of each vector */

typedef struct {
    long n, nnz;
    int niter, nthreads;
    double shift;
    long *rowptr;
    int *col;
    double *val;
    double *x, *z, *p, *q, *r;
    double *partial;  /* 2 * nthreads * CG_PAD */
    double zeta, rnorm;
    app_barrier *bar; /* the team's barrier (a barrier of one for the reference rerun) */
    double t0, t1;
} cg_shared;

typedef struct {
    cg_shared *g;
    int tid;
} cg_arg;

/* Per-thread reduction state: which of the two slot arrays the next reduction uses. */
typedef struct {
    cg_shared *g;
    int me, buf;
} cg_red;

/* Combines each thread's partial value; every thread returns the same sum (thread order). */
static double cg_allreduce(cg_red *rd, double mine)
{
    cg_shared *g = rd->g;
    double *slots = g->partial + (size_t)rd->buf * (size_t)g->nthreads * CG_PAD;
    slots[(size_t)rd->me * CG_PAD] = mine;
    app_barrier_wait(g->bar);
    double s = 0.0;
    for (int t = 0; t < g->nthreads; t++)
        s += slots[(size_t)t * CG_PAD];
    rd->buf ^= 1;
    return s;
}

static void cg_matvec(const cg_shared *g, double *out, const double *in, long lo, long hi)
{
    for (long i = lo; i < hi; i++) {
        double s = 0.0;
        for (long k = g->rowptr[i]; k < g->rowptr[i + 1]; k++)
            s += g->val[k] * in[g->col[k]];
        out[i] = s;
    }
}

/* The whole kernel (niter outer steps from x = 1) for rows [lo, hi); with one thread and the
 * full range it is the reference. */
static void cg_run(cg_shared *g, cg_red *rd, long lo, long hi, int niter)
{
    double *x = g->x, *z = g->z, *p = g->p, *q = g->q, *r = g->r;
    for (long i = lo; i < hi; i++)
        x[i] = 1.0;
    app_barrier_wait(g->bar);
    for (int it = 0; it < niter; it++) {
        double rho = 0.0;
        for (long i = lo; i < hi; i++) {
            z[i] = 0.0;
            r[i] = x[i];
            p[i] = x[i];
            rho += r[i] * r[i];
        }
        rho = cg_allreduce(rd, rho); /* also publishes p */
        for (int c = 0; c < CG_ITERS; c++) {
            cg_matvec(g, q, p, lo, hi);
            double d = 0.0;
            for (long i = lo; i < hi; i++)
                d += p[i] * q[i];
            d = cg_allreduce(rd, d);
            double alpha = rho / d, rho0 = rho;
            rho = 0.0;
            for (long i = lo; i < hi; i++) {
                z[i] += alpha * p[i];
                r[i] -= alpha * q[i];
                rho += r[i] * r[i];
            }
            rho = cg_allreduce(rd, rho); /* everyone is past q = A p: p may change */
            double beta = rho / rho0;
            for (long i = lo; i < hi; i++)
                p[i] = r[i] + beta * p[i];
            app_barrier_wait(g->bar); /* p complete before the next product */
        }
        /* residual ||x - A z|| (q = A z) and x . z, ||z|| */
        cg_matvec(g, q, z, lo, hi);
        double rr = 0.0, xz = 0.0, zz = 0.0;
        for (long i = lo; i < hi; i++) {
            rr += (x[i] - q[i]) * (x[i] - q[i]);
            xz += x[i] * z[i];
            zz += z[i] * z[i];
        }
        rr = cg_allreduce(rd, rr);
        xz = cg_allreduce(rd, xz);
        zz = cg_allreduce(rd, zz);
        double zeta = g->shift + 1.0 / xz;
        double inv = 1.0 / sqrt(zz);
        for (long i = lo; i < hi; i++)
            x[i] = inv * z[i];
        if (rd->me == 0) {
            g->zeta = zeta;
            g->rnorm = sqrt(rr); /* ||x|| = 1 after the first step; step 0 has ||x||^2 = n */
            if (it == 0)
                g->rnorm /= sqrt((double)g->n);
        }
        app_barrier_wait(g->bar); /* x complete */
    }
}

static void *cg_worker(void *p)
{
    cg_arg *arg = p;
    cg_shared *g = arg->g;
    cg_red rd = {g, arg->tid, 0};
    long lo, hi;
    app_block_range_aligned(g->n, g->nthreads, arg->tid, CG_ALIGN, &lo, &hi);
    /* z, p, q, r are first written in the step; q is written by the product before it is read */
    cg_run(g, &rd, lo, hi, 1); /* untimed warm-up step, as NAS CG */
    app_barrier_wait(g->bar);
    if (arg->tid == 0) {
        app_stats_mark(); /* Squall statistics: the timed phase starts */
        g->t0 = app_now();
    }
    cg_run(g, &rd, lo, hi, g->niter);
    if (arg->tid == 0) {
        g->t1 = app_now();
        app_stats_mark(); /* ... and ends */
    }
    return NULL;
}

/* Builds the random symmetric diagonally dominant CSR matrix. */
static void cg_make_matrix(cg_shared *g, long nzr, unsigned long long seed)
{
    long n = g->n, npairs = n * nzr;
    long *pi = app_alloc((size_t)npairs, sizeof(long), "pair rows");
    long *pj = app_alloc((size_t)npairs, sizeof(long), "pair columns");
    double *pv = app_alloc((size_t)npairs, sizeof(double), "pair values");
    long *cnt = app_alloc((size_t)n + 1, sizeof(long), "row counts");
    double *diag = app_alloc((size_t)n, sizeof(double), "diagonal");
    app_rng r;
    app_rng_seed(&r, seed);
    long np = 0;
    for (long i = 0; i < n; i++)
        for (long k = 0; k < nzr; k++) {
            long j = (long)app_rng_below(&r, (unsigned long long)n);
            double v = app_rng_double(&r);
            if (j == i)
                continue;
            pi[np] = i;
            pj[np] = j;
            pv[np] = v;
            np++;
            cnt[i]++;
            cnt[j]++;
            diag[i] += v;
            diag[j] += v;
        }
    g->nnz = 2 * np + n;
    g->rowptr = app_alloc((size_t)n + 1, sizeof(long), "row pointers");
    g->col = app_alloc((size_t)g->nnz, sizeof(int), "column indices");
    g->val = app_alloc((size_t)g->nnz, sizeof(double), "values");
    for (long i = 0; i < n; i++)
        g->rowptr[i + 1] = g->rowptr[i] + cnt[i] + 1;
    long *fill = cnt; /* reuse as the fill cursor */
    for (long i = 0; i < n; i++) {
        fill[i] = g->rowptr[i] + 1;
        g->col[g->rowptr[i]] = (int)i;
        g->val[g->rowptr[i]] = diag[i] + 1.0;
    }
    for (long k = 0; k < np; k++) {
        long a = fill[pi[k]]++, b = fill[pj[k]]++;
        g->col[a] = (int)pj[k];
        g->val[a] = pv[k];
        g->col[b] = (int)pi[k];
        g->val[b] = pv[k];
    }
    free(pi);
    free(pj);
    free(pv);
    free(cnt);
    free(diag);
}

int main(int argc, char **argv)
{
    static const char *usage = "cg: NAS-CG-style inverse power iteration with 25-step CG solves\n"
                               "  -n N   rows\n"
                               "  -z Z   random off-diagonal pairs per row\n"
                               "  -i I   outer iterations";
    static const long N[4] = {2000, 100000, 400000, 200000};
    static const long IT[4] = {3, 20, 25, 30};
    static const long Z[4] = {8, 8, 8, 48};
    app_opts o;
    app_parse_common(argc, argv, &o, usage);
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", N[si], 2, 1L << 30);
    long nzr = app_flag_long(argc, argv, &o, "-z", Z[si], 1, 1000);
    long niter = app_flag_long(argc, argv, &o, "-i", IT[si], 1, 1L << 20);

    cg_shared *g = app_alloc(1, sizeof *g, "cg shared state");
    g->n = n;
    g->niter = (int)niter;
    g->nthreads = o.threads;
    g->shift = 10.0;
    cg_make_matrix(g, nzr, 2718);
    /* every thread initialises its own rows of the vectors (cg_run) */
    g->x = app_alloc_uninit((size_t)n, sizeof(double), "x");
    g->z = app_alloc_uninit((size_t)n, sizeof(double), "z");
    g->p = app_alloc_uninit((size_t)n, sizeof(double), "p");
    g->q = app_alloc_uninit((size_t)n, sizeof(double), "q");
    g->r = app_alloc_uninit((size_t)n, sizeof(double), "r");
    g->partial = app_alloc_uninit((size_t)(2 * o.threads * CG_PAD), sizeof(double), "reduction slots");
    g->bar = app_alloc(1, sizeof *g->bar, "team barrier");
    app_barrier_init(g->bar, o.threads);

    APP_RUN_TEAM_OF(cg_arg, g, cg_worker, o.threads);

    double zeta = g->zeta, rnorm = g->rnorm;
    int ok = 0;
    char note[260];
    if (o.verify) {
        /* sequential rerun on the same matrix: one "thread", full range, barrier of one */
        app_barrier *solo = app_alloc(1, sizeof *solo, "reference barrier");
        app_barrier_init(solo, 1);
        g->bar = solo;
        g->nthreads = 1;
        cg_red rd = {g, 0, 0};
        cg_run(g, &rd, 0, n, g->niter);
        g->nthreads = o.threads;
        double d = app_rel_diff(zeta, g->zeta);
        ok = d <= 1e-10 && rnorm <= 1e-6 && isfinite(zeta);
        snprintf(note, sizeof note,
                 "n %ld nnz %ld outer %ld x 25 CG; zeta rel diff vs sequential %.3e (tol 1e-10); final |x-Az|/|x| "
                 "%.3e (tol 1e-6)",
                 n, g->nnz, niter, d, rnorm);
    } else {
        snprintf(note, sizeof note, "n %ld nnz %ld outer %ld; final |x-Az|/|x| %.3e; not verified", n, g->nnz, niter,
                 rnorm);
    }
    app_finish("cg", &o, g->t1 - g->t0, ok, zeta, note);
    return 0;
}
