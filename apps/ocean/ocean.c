/*
 * ocean - a stencil in the style of SPLASH-2 Ocean and DSM/IP's `sea` (seed 000 section 3.2,
 * seed 004 section 4.2): several coupled grids relaxed with Jacobi sweeps, partitioned into
 * square-like tiles, with a lock-protected global error reduction every time step.
 *
 * Owns: the grids, the tile partition, the reduction and the check. Must not touch: the
 * harness in common/app.h beyond its API.
 *
 * Data: `nf` fields (default 3), each an (n+2) x (n+2) grid of doubles with a fixed boundary,
 * double-buffered (cur/next), all in one allocation so a tile is a set of non-contiguous row
 * pieces (as in the non-contiguous Ocean). Step: for every field f and interior point,
 *     next_f = (1-c) * avg4(cur_f) + c * cur_{f+1 mod nf} + src_f(i,j)
 * then the buffers swap. Threads form a pr x pc grid of tiles (pr*pc = threads, as square as
 * possible, more tile rows than columns, numbered column-major: see main); each thread
 * relaxes its tile of every field, reads the one-point halo of its
 * neighbours' tiles (row and column direction), and adds its tile's sum of |next - cur| of
 * field 0 to a shared accumulator under a lock (the global residual Ocean checks).
 *
 * `--sea` switches to DSM/IP's integer `sea`: int32 grids, each new point is the integer
 * average (sum / 5) of its four neighbours and the next field's point; residuals are exact.
 *
 * Jacobi updates read only the previous buffer, so grids are independent of the partition:
 * main recomputes sequentially and compares every point exactly. The residual sum differs
 * between thread counts only by summation order (relative tolerance 1e-9; exact for --sea).
 */
#include "app.h"

#include <stdint.h>

typedef struct {
    long n, w;          /* interior size, row width n+2 */
    int nf, steps, nthreads, pr, pc;
    int sea;            /* 1: int32 grids (DSM/IP sea), 0: double grids */
    double c;           /* coupling (double grids) */
    void *buf[2];       /* each nf * w * w elements */
    double *resid;      /* per step, accumulated under lock */
    app_lock_t lock;
    app_barrier bar;
    double t0, t1;
} ocean_shared;

typedef struct {
    ocean_shared *g;
    int tid;
} ocean_arg;

static double ocean_source(int f, long i, long j, long n)
{
    /* a small fixed forcing: a wind-like source near the top for field 0, a sink for others */
    double y = (double)i / (double)(n + 1), x = (double)j / (double)(n + 1);
    return (f == 0 ? 1e-3 : -2e-4 * (double)f) * (1.0 - y) * x * (1.0 - x);
}

static void ocean_init(double *a, long n, long w, int nf)
{
    for (int f = 0; f < nf; f++)
        for (long i = 0; i < w; i++)
            for (long j = 0; j < w; j++) {
                double v = 0.0;
                if (i == 0)
                    v = 1.0 / (double)(f + 1);
                else if (j == 0 || j == n + 1)
                    v = 0.25 * (double)f;
                a[((size_t)f * (size_t)w + (size_t)i) * (size_t)w + (size_t)j] = v;
            }
}

/* Relaxes rows [r0,r1) x cols [c0,c1) of every field from cur into nxt; returns sum |d| of field 0. */
static double ocean_relax(const double *cur, double *nxt, long n, long w, int nf, double c, long r0, long r1,
                          long c0, long c1)
{
    double err = 0.0;
    size_t fs = (size_t)w * (size_t)w;
    for (int f = 0; f < nf; f++) {
        const double *a = cur + (size_t)f * fs;
        const double *b = cur + (size_t)((f + 1) % nf) * fs;
        double *o = nxt + (size_t)f * fs;
        for (long i = r0; i < r1; i++)
            for (long j = c0; j < c1; j++) {
                size_t k = (size_t)i * (size_t)w + (size_t)j;
                double avg = 0.25 * (a[k - (size_t)w] + a[k + (size_t)w] + a[k - 1] + a[k + 1]);
                double v = (1.0 - c) * avg + c * b[k] + ocean_source(f, i, j, n);
                if (f == 0)
                    err += fabs(v - a[k]);
                o[k] = v;
            }
    }
    return err;
}

static void ocean_init_int(int32_t *a, long n, long w, int nf)
{
    for (int f = 0; f < nf; f++)
        for (long i = 0; i < w; i++)
            for (long j = 0; j < w; j++) {
                int32_t v = 0;
                if (i == 0)
                    v = 1000000 / (f + 1);
                else if (j == 0 || j == n + 1)
                    v = 250000 * f;
                a[((size_t)f * (size_t)w + (size_t)i) * (size_t)w + (size_t)j] = v;
            }
}

/* Integer (sea) relaxation of rows [r0,r1) x cols [c0,c1); returns sum |d| of field 0. */
static double ocean_relax_int(const int32_t *cur, int32_t *nxt, long w, int nf, long r0, long r1, long c0, long c1)
{
    long long err = 0;
    size_t fs = (size_t)w * (size_t)w;
    for (int f = 0; f < nf; f++) {
        const int32_t *a = cur + (size_t)f * fs;
        const int32_t *b = cur + (size_t)((f + 1) % nf) * fs;
        int32_t *o = nxt + (size_t)f * fs;
        for (long i = r0; i < r1; i++)
            for (long j = c0; j < c1; j++) {
                size_t k = (size_t)i * (size_t)w + (size_t)j;
                int64_t sum = (int64_t)a[k - (size_t)w] + a[k + (size_t)w] + a[k - 1] + a[k + 1] + b[k];
                int32_t v = (int32_t)(sum / 5);
                if (f == 0)
                    err += v > a[k] ? v - a[k] : a[k] - v;
                o[k] = v;
            }
    }
    return (double)err;
}

/* One step on the given rows/cols in either representation. */
static double ocean_step(const ocean_shared *g, const void *cur, void *nxt, long r0, long r1, long c0, long c1)
{
    if (g->sea)
        return ocean_relax_int(cur, nxt, g->w, g->nf, r0, r1, c0, c1);
    return ocean_relax(cur, nxt, g->n, g->w, g->nf, g->c, r0, r1, c0, c1);
}

static void *ocean_worker(void *p)
{
    ocean_arg *a = p;
    ocean_shared *g = a->g;
    /* column-major tile numbering: consecutive threads are vertically adjacent tiles (see main) */
    int tr = a->tid % g->pr, tc = a->tid / g->pr;
    long r0, r1, c0, c1;
    app_block_range(g->n, g->pr, tr, &r0, &r1);
    app_block_range(g->n, g->pc, tc, &c0, &c1);
    app_barrier_wait(&g->bar);
    if (a->tid == 0) {
        app_stats_mark(); /* Squall statistics: the timed phase starts */
        g->t0 = app_now();
    }
    for (int s = 0; s < g->steps; s++) {
        double e = ocean_step(g, g->buf[s & 1], g->buf[(s + 1) & 1], r0 + 1, r1 + 1, c0 + 1, c1 + 1);
        app_lock(&g->lock);
        g->resid[s] += e;
        app_unlock(&g->lock);
        app_barrier_wait(&g->bar);
    }
    if (a->tid == 0) {
        g->t1 = app_now();
        app_stats_mark(); /* ... and ends */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static const char *usage = "ocean: Jacobi relaxation of several coupled grids, tiled\n"
                               "  -n N   interior grid size (N x N per field)\n"
                               "  -f F   number of fields (grids)\n"
                               "  -i I   time steps\n"
                               "  --sea  integer grids and integer averaging (DSM/IP's sea)";
    static const long N[4] = {130, 1026, 2050, 3074};
    static const long ST[4] = {10, 140, 160, 400};
    app_opts o;
    app_parse_common(argc, argv, &o, usage);
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", N[si], 2, 1L << 16);
    long nf = app_flag_long(argc, argv, &o, "-f", 3, 1, 64);
    long steps = app_flag_long(argc, argv, &o, "-i", ST[si], 1, 1L << 24);

    ocean_shared *g = app_alloc(1, sizeof *g, "ocean shared state");
    g->n = n;
    g->w = n + 2;
    g->nf = (int)nf;
    g->steps = (int)steps;
    g->nthreads = o.threads;
    g->c = 0.05;
    g->sea = app_flag_present(argc, argv, "--sea");
    size_t esz = g->sea ? sizeof(int32_t) : sizeof(double);
    /* Tile grid: pr x pc = threads, as square as possible with pc (tile columns) the smaller
     * factor: a tile boundary between columns puts a page shared by two tiles on every grid
     * row, one between rows only on the boundary row. Tiles are numbered column-major, so
     * threads t, t+1, ... are vertically adjacent and threads t, t+pr, ... share a tile row.
     * Squall places thread t on node (t+1) mod N; with pr a multiple of N the threads of one node
     * then share tile rows and nodes meet only at tile-row boundaries, as on Cashmere (seed
     * 000), whose SMP nodes held consecutive processors and SPLASH-2 numbered tiles row-major.
     * The column halos stay non-contiguous; on one machine the numbering changes nothing. */
    g->pc = 1;
    for (int d = 1; d * d <= o.threads; d++)
        if (o.threads % d == 0)
            g->pc = d;
    g->pr = o.threads / g->pc;
    if (g->pr > n || g->pc > n) {
        fprintf(stderr, "ocean: %d threads make %dx%d tiles, too many for a %ldx%ld grid\n", o.threads, g->pr,
                g->pc, n, n);
        return 2;
    }
    size_t cells = (size_t)nf * (size_t)g->w * (size_t)g->w;
    g->buf[0] = app_alloc(cells, esz, "ocean grid 0");
    g->buf[1] = app_alloc(cells, esz, "ocean grid 1");
    g->resid = app_alloc((size_t)steps, sizeof(double), "residual per step");
    for (int k = 0; k < 2; k++) {
        if (g->sea)
            ocean_init_int(g->buf[k], n, g->w, g->nf);
        else
            ocean_init(g->buf[k], n, g->w, g->nf);
    }
    app_lock_init(&g->lock);
    app_barrier_init(&g->bar, o.threads);

    APP_RUN_TEAM_OF(ocean_arg, g, ocean_worker, o.threads);

    const void *res = g->buf[steps & 1];
    double check = 0.0;
    for (size_t k = 0; k < cells; k++)
        check += g->sea ? (double)((const int32_t *)res)[k] : ((const double *)res)[k];
    double last_resid = g->resid[steps - 1];
    int ok = 0;
    char note[240];
    if (o.verify) {
        void *r[2];
        for (int k = 0; k < 2; k++) {
            r[k] = app_alloc(cells, esz, "reference grid");
            if (g->sea)
                ocean_init_int(r[k], n, g->w, g->nf);
            else
                ocean_init(r[k], n, g->w, g->nf);
        }
        double worst = 0.0;
        for (long s = 0; s < steps; s++) {
            double e = ocean_step(g, r[s & 1], r[(s + 1) & 1], 1, n + 1, 1, n + 1);
            double d = app_rel_diff(e, g->resid[s]);
            if (d > worst)
                worst = d;
        }
        const char *ref = r[steps & 1];
        long bad = 0;
        for (size_t k = 0; k < cells; k++)
            bad += memcmp(ref + k * esz, (const char *)res + k * esz, esz) != 0;
        double tol = g->sea ? 0.0 : 1e-9;
        ok = bad == 0 && worst <= tol;
        snprintf(note, sizeof note,
                 "%s %ld fields %ldx%ld steps %ld tiles %dx%d; exact grid compare: %ld mismatches; residual rel diff "
                 "%.2e (tol %g); final residual %.6e",
                 g->sea ? "sea int32" : "double", nf, n, n, steps, g->pr, g->pc, bad, worst, tol, last_resid);
        free(r[0]);
        free(r[1]);
    } else {
        snprintf(note, sizeof note, "%s %ld fields %ldx%ld steps %ld tiles %dx%d; not verified",
                 g->sea ? "sea int32" : "double", nf, n, n, steps, g->pr, g->pc);
    }
    app_finish("ocean", &o, g->t1 - g->t0, ok, check, note);
    return 0;
}
