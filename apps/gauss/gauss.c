/*
 * gauss - solves A x = b by Gaussian elimination and back-substitution with the rows
 * distributed cyclically (the Gauss kernel of the Shasta-vs-Cashmere study, seed 000
 * section 3.2: "For load balance, the rows are distributed among processors cyclically").
 *
 * Owns: the row-major matrix (one allocation, row stride n, so a 512-double row is one 4 KiB
 * page and a 1700-double row is not page aligned: the study's false-sharing case), the
 * elimination schedule and the check. Must not touch: the harness beyond its API.
 *
 * Step k: every thread eliminates column k from its own rows i > k (row i belongs to thread
 * i mod T) reading pivot row k, then a barrier. No pivoting (the matrix is diagonally
 * dominant). Back-substitution is done by thread 0 after the last barrier (timed), reading
 * the whole upper triangle.
 *
 * Check: b = A * xtrue for a known xtrue (0.5 + (j mod 10)/10); the residual ||A x - b|| / ||b|| against a copy
 * of the original system must be <= 1e-10. Each row sees the same operation order for every
 * thread count, so x and `check` (sum of x) are bit-identical across runs.
 */
#include "app.h"

typedef struct {
    long n;
    int nthreads;
    double *a, *b, *x; /* a: n x n row-major; b, x: n */
    app_barrier bar;
    double t0, t1;
} gauss_shared;

typedef struct {
    gauss_shared *g;
    int tid;
} gauss_arg;

static void *gauss_worker(void *p)
{
    gauss_arg *arg = p;
    gauss_shared *g = arg->g;
    long n = g->n;
    int me = arg->tid, T = g->nthreads;
    double *a = g->a, *b = g->b;
    app_barrier_wait(&g->bar);
    if (me == 0)
        g->t0 = app_now();
    for (long k = 0; k < n - 1; k++) {
        const double *pk = a + k * n;
        double piv = pk[k], bk = b[k];
        /* first row > k that this thread owns */
        long i = k + 1 + (((long)me - (k + 1)) % T + T) % T;
        for (; i < n; i += T) {
            double *ri = a + i * n;
            double f = ri[k] / piv;
            for (long j = k + 1; j < n; j++)
                ri[j] -= f * pk[j];
            ri[k] = 0.0;
            b[i] -= f * bk;
        }
        app_barrier_wait(&g->bar);
    }
    if (me == 0) {
        for (long k = n - 1; k >= 0; k--) {
            const double *rk = a + k * n;
            double s = b[k];
            for (long j = k + 1; j < n; j++)
                s -= rk[j] * g->x[j];
            g->x[k] = s / rk[k];
        }
        g->t1 = app_now();
    }
    return NULL;
}

/* The exact solution the right-hand side is built from. */
static double gauss_xtrue(long j)
{
    return 0.5 + (double)(j % 10) / 10.0;
}

int main(int argc, char **argv)
{
    static const char *usage = "gauss: Gaussian elimination with cyclic rows, then back-substitution\n"
                               "  -n N   system order";
    static const long N[4] = {200, 1700, 2000, 3600};
    app_opts o;
    app_parse_common(argc, argv, &o, usage);
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", N[si], 1, 1L << 16);

    gauss_shared *g = app_alloc(1, sizeof *g, "gauss shared state");
    g->n = n;
    g->nthreads = o.threads;
    g->a = app_alloc((size_t)(n * n), sizeof(double), "matrix");
    g->b = app_alloc((size_t)n, sizeof(double), "right-hand side");
    g->x = app_alloc((size_t)n, sizeof(double), "solution");
    double *a0 = app_alloc((size_t)(n * n), sizeof(double), "copy of the matrix");
    double *b0 = app_alloc((size_t)n, sizeof(double), "copy of the right-hand side");
    app_rng r;
    app_rng_seed(&r, 4242);
    for (long i = 0; i < n; i++) {
        double s = 0.0;
        for (long j = 0; j < n; j++) {
            double v = 2.0 * app_rng_double(&r) - 1.0;
            if (i == j)
                v += (double)n;
            g->a[i * n + j] = v;
            a0[i * n + j] = v;
            s += v * gauss_xtrue(j);
        }
        g->b[i] = s; /* A * xtrue */
        b0[i] = s;
    }
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(gauss_arg, g, gauss_worker, o.threads);

    double check = 0.0, maxdev = 0.0;
    for (long i = 0; i < n; i++) {
        check += g->x[i];
        if (fabs(g->x[i] - gauss_xtrue(i)) > maxdev)
            maxdev = fabs(g->x[i] - gauss_xtrue(i));
    }
    int ok = 0;
    char note[240];
    if (o.verify) {
        double num = 0.0, den = 0.0;
        for (long i = 0; i < n; i++) {
            double s = 0.0;
            for (long j = 0; j < n; j++)
                s += a0[i * n + j] * g->x[j];
            num += (s - b0[i]) * (s - b0[i]);
            den += b0[i] * b0[i];
        }
        double rel = sqrt(num / (den > 0 ? den : 1.0));
        ok = rel <= 1e-10 && isfinite(check);
        snprintf(note, sizeof note, "n %ld; residual |Ax-b|/|b| = %.3e (tol 1e-10); max |x-xtrue| = %.3e", n, rel, maxdev);
    } else {
        snprintf(note, sizeof note, "n %ld; not verified", n);
    }
    app_finish("gauss", &o, g->t1 - g->t0, ok, check, note);
    return 0;
}
