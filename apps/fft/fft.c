/*
 * fft - 1-D complex FFT by the transpose-based six-step method (SPLASH-2 FFT; the fft of the
 * CRL / Split-C study, seed 002 section 3.2, whose only communication is the data remapping
 * between local FFT phases).
 *
 * Owns: the data arrays, the row partition, the transposes and the check. Must not touch:
 * the harness beyond its API.
 *
 * n = n1 * n2 points (n1 = 2^floor(m/2), n2 = 2^ceil(m/2)); with j = j1 + n1*j2 and
 * k = k2 + n2*k1:
 *   1. T[j1][j2] = x[j1 + n1*j2]          transpose (all-to-all read of x)
 *   2. FFT of length n2 on every row of T   local
 *   3. T[j1][k2] *= w_n^(j1*k2)              local twiddle
 *      barrier
 *   4. U[k2][j1] = T[j1][k2]                transpose (all-to-all)
 *   5. FFT of length n1 on every row of U   local
 *      barrier
 *   6. X[k1*n2 + k2] = U[k2][k1]            transpose (all-to-all)
 *      barrier
 * Every thread owns a contiguous block of destination rows in each transpose and FFT phase,
 * so a thread writes only its own rows and reads a column strip of every other thread's rows.
 * The roots of unity w_n^e (one table of n, read-only) serve all row FFTs. `-r R` repeats the
 * whole transform R times (x is left untouched).
 *
 * Check: the output is compared with an independent sequential radix-2 FFT of all n points
 * (max error / max magnitude <= 1e-10) and, at 4 output points, with a direct DFT using fresh
 * cos/sin (relative 1e-8). The result does not depend on the thread count (each point sees the
 * same operations), so `check` (sum of re + im over X) is identical across runs.
 */
#include "app.h"
#include "fft_kernel.h"

typedef struct {
    long n, n1, n2;
    int m, reps, nthreads;
    cplx *x, *t, *u, *w; /* input, scratch (then output), scratch, roots w_n^e */
    app_barrier bar;
    double t0, t1;
} fft_shared;

typedef struct {
    fft_shared *g;
    int tid;
} fft_arg;

/* dst[r][c] = src[c][r] for destination rows [r0, r1): dst is rows x cols, src is cols x rows. */
static void fft_transpose(cplx *dst, const cplx *src, long rows, long cols, long r0, long r1)
{
    (void)rows;
    const long TB = 32;
    for (long rr = r0; rr < r1; rr += TB)
        for (long cc = 0; cc < cols; cc += TB) {
            long re = rr + TB < r1 ? rr + TB : r1, ce = cc + TB < cols ? cc + TB : cols;
            for (long r = rr; r < re; r++)
                for (long c = cc; c < ce; c++)
                    dst[r * cols + c] = src[c * rows + r];
        }
}

static void *fft_worker(void *p)
{
    fft_arg *arg = p;
    fft_shared *g = arg->g;
    int me = arg->tid;
    long n = g->n, n1 = g->n1, n2 = g->n2;
    long a0, a1, b0, b1;
    app_block_range(n1, g->nthreads, me, &a0, &a1); /* rows of T and of X */
    app_block_range(n2, g->nthreads, me, &b0, &b1); /* rows of U */
    app_barrier_wait(&g->bar);
    if (me == 0) {
        app_stats_mark(); /* Squall statistics: the timed phase starts */
        g->t0 = app_now();
    }
    for (int rep = 0; rep < g->reps; rep++) {
        /* 1: T (n1 x n2) = transpose of x viewed as n2 x n1 */
        fft_transpose(g->t, g->x, n1, n2, a0, a1);
        for (long j1 = a0; j1 < a1; j1++) {
            cplx *row = g->t + j1 * n2;
            fft_row(row, n2, g->w, n);                  /* 2 */
            for (long k2 = 1; k2 < n2; k2++)            /* 3 */
                row[k2] = cmul(row[k2], g->w[j1 * k2]);
        }
        app_barrier_wait(&g->bar);
        /* 4: U (n2 x n1) = transpose of T */
        fft_transpose(g->u, g->t, n2, n1, b0, b1);
        for (long k2 = b0; k2 < b1; k2++)
            fft_row(g->u + k2 * n1, n1, g->w, n); /* 5 */
        app_barrier_wait(&g->bar);
        /* 6: X (n1 x n2) = transpose of U, into t */
        fft_transpose(g->t, g->u, n1, n2, a0, a1);
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
    long m, reps;
    fft_parse(argc, argv, &o, "fft", "1-D complex FFT, six-step (transpose based)", &m, &reps);

    fft_shared *g = app_alloc(1, sizeof *g, "fft shared state");
    g->m = (int)m;
    g->n = 1L << m;
    g->n1 = 1L << (m / 2);
    g->n2 = 1L << (m - m / 2);
    g->reps = (int)reps;
    g->nthreads = o.threads;
    long n = g->n;
    g->x = app_alloc((size_t)n, sizeof(cplx), "input");
    g->t = app_alloc((size_t)n, sizeof(cplx), "scratch/output");
    g->u = app_alloc((size_t)n, sizeof(cplx), "scratch");
    g->w = app_alloc((size_t)n, sizeof(cplx), "roots of unity");
    const double tau = 6.283185307179586476925286766559;
    for (long e = 0; e < n; e++) {
        double ang = tau * (double)e / (double)n;
        g->w[e].re = cos(ang);
        g->w[e].im = -sin(ang);
    }
    app_rng r;
    app_rng_seed(&r, 99);
    for (long i = 0; i < n; i++) {
        g->x[i].re = 2.0 * app_rng_double(&r) - 1.0;
        g->x[i].im = 2.0 * app_rng_double(&r) - 1.0;
    }
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(fft_arg, g, fft_worker, o.threads);

    const cplx *X = g->t;
    double check = 0.0;
    for (long k = 0; k < n; k++)
        check += X[k].re + X[k].im;
    int ok = 0;
    char note[260];
    if (o.verify) {
        cplx *ref = app_alloc((size_t)n, sizeof(cplx), "reference");
        memcpy(ref, g->x, (size_t)n * sizeof(cplx));
        fft_row(ref, n, g->w, n);
        double maxerr = 0.0, maxmag = 0.0;
        for (long k = 0; k < n; k++) {
            double e = hypot(ref[k].re - X[k].re, ref[k].im - X[k].im);
            double mg = hypot(ref[k].re, ref[k].im);
            if (e > maxerr || e != e)
                maxerr = e != e ? INFINITY : e;
            if (mg > maxmag)
                maxmag = mg;
        }
        double relfull = maxerr / (maxmag > 0 ? maxmag : 1.0);
        /* direct DFT at a few points, fresh trig */
        long pts[4] = {0, 1, n / 3, n - 1};
        double worst = 0.0;
        for (int q = 0; q < 4; q++) {
            long k = pts[q];
            double sr = 0.0, si2 = 0.0;
            for (long j = 0; j < n; j++) {
                long e = (long)(((unsigned long)j * (unsigned long)k) % (unsigned long)n);
                double ang = tau * (double)e / (double)n, c = cos(ang), s = -sin(ang);
                sr += g->x[j].re * c - g->x[j].im * s;
                si2 += g->x[j].re * s + g->x[j].im * c;
            }
            double d = hypot(sr - X[k].re, si2 - X[k].im) / (maxmag > 0 ? maxmag : 1.0);
            if (d > worst || d != d)
                worst = d != d ? INFINITY : d;
        }
        ok = relfull <= 1e-10 && worst <= 1e-8;
        snprintf(note, sizeof note,
                 "n 2^%ld (%ldx%ld) reps %ld; vs radix-2 reference max err/max mag %.3e (tol 1e-10); direct DFT at 4 "
                 "points %.3e (tol 1e-8)",
                 m, g->n1, g->n2, reps, relfull, worst);
        free(ref);
    } else {
        snprintf(note, sizeof note, "n 2^%ld (%ldx%ld) reps %ld; not verified", m, g->n1, g->n2, reps);
    }
    app_finish("fft", &o, g->t1 - g->t0, ok, check, note);
    return 0;
}
