/*
 * sor - red-black successive over-relaxation (the Rice/TreadMarks SOR kernel of the
 * Shasta-vs-Cashmere study, seed 000 section 3.2).
 *
 * Owns: the SOR grid, its band partition and its check. Must not touch: the harness in
 * common/app.h beyond its API.
 *
 * The logical grid has (m+2) x (n+2) points with a fixed boundary. Points are coloured by
 * (i+j) parity and stored in two arrays, red and black, each (m+2) rows of (n+2)/2 doubles,
 * as in the original code. Every iteration updates all red interior points from their black
 * neighbours, then (after a barrier) all black points from the red ones. Each thread owns a
 * band of contiguous interior rows and initialises it itself before the timed phase (as the
 * TreadMarks code does); sharing is nearest-neighbour across band edges only.
 *
 * Because a colour is updated only from the other colour, the result does not depend on the
 * partition: the parallel grid must equal, bit for bit, the grid of a sequential recomputation
 * with the same code (check = sum of all grid points).
 */
#include "app.h"

typedef struct {
    long m, n, w;        /* interior rows, interior columns (n even), stored row width (n+2)/2 */
    int iters, nthreads;
    double omega;
    double *red, *black; /* (m+2) x w each */
    app_barrier bar;
    double t0, t1;
} sor_shared;

typedef struct {
    sor_shared *g;
    int tid;
} sor_arg;

/* Address of logical point (i, j) in the colour array it belongs to. */
static inline double *sor_at(double *red, double *black, long w, long i, long j)
{
    return ((i + j) & 1) ? &black[i * w + j / 2] : &red[i * w + j / 2];
}

/* Rows [ilo, ihi) of the grid: fixed boundary values and a zero interior. */
static void sor_init(double *red, double *black, long m, long n, long w, long ilo, long ihi)
{
    for (long i = ilo; i < ihi; i++)
        for (long j = 0; j < n + 2; j++) {
            double v = 0.0;
            if (i == 0)
                v = 1.0;
            else if (j == 0)
                v = 0.5 + 0.5 * (double)i / (double)(m + 1);
            else if (i == m + 1 || j == n + 1)
                v = 0.0;
            *sor_at(red, black, w, i, j) = v;
        }
}

/* Updates colour `color` (0 red, 1 black) on interior rows [rlo, rhi). */
static void sor_sweep(double *red, double *black, long n, long w, double omega, int color, long rlo, long rhi)
{
    double *dst = color ? black : red;
    const double *src = color ? red : black;
    for (long i = rlo; i < rhi; i++) {
        /* first interior j with (i+j)&1 == color */
        long j0 = 1 + ((i + 1 + color) & 1);
        for (long j = j0; j <= n; j += 2) {
            long k = j / 2;
            /* neighbours (i-1,j), (i+1,j), (i,j-1), (i,j+1) are of the other colour */
            double s = src[(i - 1) * w + k] + src[(i + 1) * w + k] + src[i * w + (j - 1) / 2] +
                       src[i * w + (j + 1) / 2];
            double *p = &dst[i * w + k];
            *p = (1.0 - omega) * *p + omega * 0.25 * s;
        }
    }
}

static void *sor_worker(void *p)
{
    sor_arg *a = p;
    sor_shared *g = a->g;
    long lo, hi;
    app_block_range(g->m, g->nthreads, a->tid, &lo, &hi);
    lo += 1;
    hi += 1;
    /* each thread initialises its own band (the first and last also the boundary rows), as
     * the TreadMarks SOR does: every page is first touched by the thread that will write it */
    sor_init(g->red, g->black, g->m, g->n, g->w, a->tid == 0 ? 0 : lo,
             a->tid == g->nthreads - 1 ? g->m + 2 : hi);
    app_barrier_wait(&g->bar);
    if (a->tid == 0) {
        app_stats_mark(); /* Squall statistics: the timed phase starts */
        g->t0 = app_now();
    }
    for (int it = 0; it < g->iters; it++) {
        sor_sweep(g->red, g->black, g->n, g->w, g->omega, 0, lo, hi);
        app_barrier_wait(&g->bar);
        sor_sweep(g->red, g->black, g->n, g->w, g->omega, 1, lo, hi);
        app_barrier_wait(&g->bar);
    }
    if (a->tid == 0) {
        g->t1 = app_now();
        app_stats_mark(); /* ... and ends */
    }
    return NULL;
}

static double sor_sum(const double *red, const double *black, long m, long w)
{
    double s = 0.0;
    for (long i = 0; i < (m + 2) * w; i++)
        s += red[i] + black[i];
    return s;
}

int main(int argc, char **argv)
{
    static const char *usage = "sor: red-black SOR on an (m+2)x(n+2) grid\n"
                               "  -m M   interior rows\n"
                               "  -n N   interior columns (even)\n"
                               "  -i I   iterations (one red + one black sweep each)";
    static const long M[4] = {256, 2048, 4096, 6144};
    static const long IT[4] = {10, 180, 250, 400};
    app_opts o;
    app_parse_common(argc, argv, &o, usage);
    int si = app_size_index(&o);
    long m = app_flag_long(argc, argv, &o, "-m", M[si], 1, 1L << 20);
    long n = app_flag_long(argc, argv, &o, "-n", M[si], 2, 1L << 20);
    long iters = app_flag_long(argc, argv, &o, "-i", IT[si], 1, 1L << 30);
    if (n % 2) {
        fprintf(stderr, "sor: -n must be even (got %ld)\n", n);
        return 2;
    }
    if (o.threads > m) {
        fprintf(stderr, "sor: %d threads for %ld rows; use at most one thread per row\n", o.threads, m);
        return 2;
    }

    sor_shared *g = app_alloc(1, sizeof *g, "sor shared state");
    g->m = m;
    g->n = n;
    g->w = (n + 2) / 2;
    g->iters = (int)iters;
    g->nthreads = o.threads;
    g->omega = 1.25;
    g->red = app_alloc_uninit((size_t)((m + 2) * g->w), sizeof(double), "red grid");
    g->black = app_alloc_uninit((size_t)((m + 2) * g->w), sizeof(double), "black grid");
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(sor_arg, g, sor_worker, o.threads);

    double check = sor_sum(g->red, g->black, m, g->w);
    int ok = 0;
    char note[200];
    if (o.verify) {
        /* sequential recomputation with the same sweep code: must match bit for bit */
        double *rr = app_alloc((size_t)((m + 2) * g->w), sizeof(double), "reference red grid");
        double *rb = app_alloc((size_t)((m + 2) * g->w), sizeof(double), "reference black grid");
        sor_init(rr, rb, m, n, g->w, 0, m + 2);
        for (long it = 0; it < iters; it++) {
            sor_sweep(rr, rb, n, g->w, g->omega, 0, 1, m + 1);
            sor_sweep(rr, rb, n, g->w, g->omega, 1, 1, m + 1);
        }
        long bad = 0;
        for (long i = 0; i < (m + 2) * g->w; i++)
            bad += (rr[i] != g->red[i]) + (rb[i] != g->black[i]);
        ok = bad == 0;
        snprintf(note, sizeof note, "grid %ldx%ld iters %ld; exact compare with sequential recomputation: %ld mismatches",
                 m, n, iters, bad);
        free(rr);
        free(rb);
    } else {
        snprintf(note, sizeof note, "grid %ldx%ld iters %ld; not verified", m, n, iters);
    }
    app_finish("sor", &o, g->t1 - g->t0, ok, check, note);
    return 0;
}
