/*
 * xstate - exhaustive integer solver (DSM/IP's `xstate` workload, seed 004 section 4.2).
 *
 * Owns: the search of the integer box [-R,R]^3 for every zero of the family of expressions
 * f_k(x,y,z) = x^3 + y^3 + z^3 - k, k = 1..K, the shared solution array and its check.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Sharing pattern (what the seed describes): almost all work is computation on private
 * variables; the threads share only a read-mostly table of cubes, a globally shared array of
 * solutions protected by ONE lock (appended to whenever a thread finds a zero), and one
 * barrier at the end of execution (plus the start barrier that opens the timed phase).
 * The x values are dealt out cyclically (x = -R + tid, step T) for load balance.
 *
 * Check: an independent O(R^2) algorithm (for each (x,y), the z with z^3 in [1-t, K-t] are
 * found by integer cube roots) recomputes the solution set; the parallel set, sorted, must be
 * identical (exact compare), and every stored solution must satisfy its equation.
 */
#include "app.h"

typedef struct {
    int x, y, z, k;
} xs_solution;

typedef struct {
    long r;            /* box half-width */
    long kmax;         /* k = 1..kmax */
    int nthreads;
    long long *cube;   /* cube[i] = (i - r)^3, i in [0, 2r] (read-only while threads run) */
    xs_solution *sols; /* shared solution array, appended under `lock` */
    long cap;          /* capacity of sols */
    long nsol;         /* solutions found (may exceed cap; the excess is counted, not stored) */
    app_lock_t lock;   /* the single lock of the workload */
    app_barrier start; /* opens the timed phase */
    app_barrier end;   /* end-of-execution barrier */
    double *tstart, *tend; /* per-thread phase start/end stamps */
} xs_shared;

typedef struct {
    xs_shared *g;
    int tid;
} xs_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
static void xs_record(xs_shared *g, int x, int y, int z, long long k)
{
    app_lock(&g->lock);
    long i = g->nsol++;
    if (i < g->cap) {
        g->sols[i].x = x;
        g->sols[i].y = y;
        g->sols[i].z = z;
        g->sols[i].k = (int)k;
    }
    app_unlock(&g->lock);
}

static void *xs_worker(void *p)
{
    xs_arg *a = p;
    xs_shared *g = a->g;
    const long n = 2 * g->r + 1;
    const long long kmax = g->kmax;
    const long long *cube = g->cube;

    app_barrier_wait(&g->start);
    g->tstart[a->tid] = app_now();
    for (long xi = a->tid; xi < n; xi += g->nthreads) {
        long long cx = cube[xi];
        for (long yi = 0; yi < n; yi++) {
            long long cxy = cx + cube[yi];
            for (long zi = 0; zi < n; zi++) {
                long long s = cxy + cube[zi];
                if (s >= 1 && s <= kmax)
                    xs_record(g, (int)(xi - g->r), (int)(yi - g->r), (int)(zi - g->r), s);
            }
        }
    }
    app_barrier_wait(&g->end);
    g->tend[a->tid] = app_now();
    return NULL;
}

/* Largest z with z^3 <= v. */
static long long xs_icbrt_floor(long long v)
{
    long long z = (long long)llround(cbrt((double)v));
    while (z * z * z > v)
        z--;
    while ((z + 1) * (z + 1) * (z + 1) <= v)
        z++;
    return z;
}

static int xs_cmp(const void *pa, const void *pb)
{
    const xs_solution *a = pa, *b = pb;
    if (a->k != b->k)
        return a->k < b->k ? -1 : 1;
    if (a->x != b->x)
        return a->x < b->x ? -1 : 1;
    if (a->y != b->y)
        return a->y < b->y ? -1 : 1;
    if (a->z != b->z)
        return a->z < b->z ? -1 : 1;
    return 0;
}

/* Independent reference: for every (x, y) the z with 1 - t <= z^3 <= K - t. Returns the
 * number of solutions; stores up to cap of them in out. */
static long xs_reference(long r, long kmax, xs_solution *out, long cap)
{
    long cnt = 0;
    for (long long x = -r; x <= r; x++) {
        for (long long y = -r; y <= r; y++) {
            long long t = x * x * x + y * y * y;
            long long zlo = xs_icbrt_floor(1 - t - 1) + 1; /* smallest z with z^3 >= 1 - t */
            long long zhi = xs_icbrt_floor(kmax - t);
            if (zlo < -r)
                zlo = -r;
            if (zhi > r)
                zhi = r;
            for (long long z = zlo; z <= zhi; z++) {
                if (cnt < cap) {
                    out[cnt].x = (int)x;
                    out[cnt].y = (int)y;
                    out[cnt].z = (int)z;
                    out[cnt].k = (int)(t + z * z * z);
                }
                cnt++;
            }
        }
    }
    return cnt;
}

static const char *USAGE = "xstate: exhaustive search of [-R,R]^3 for the zeros of x^3+y^3+z^3-k, k=1..K\n"
                           "  -r R    box half-width (default by size: tiny 80, small 580, medium 1100, large 1900)\n"
                           "  -k K    largest k (default 100)";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long R[4] = {80, 580, 1100, 1900};
    long r = app_flag_long(argc, argv, &o, "-r", R[app_size_index(&o)], 1, 100000);
    long kmax = app_flag_long(argc, argv, &o, "-k", 100, 1, 1000000000L);
    int T = o.threads;

    xs_shared *g = app_alloc(1, sizeof *g, "xstate shared state");
    g->r = r;
    g->kmax = kmax;
    g->nthreads = T;
    g->cube = app_alloc((size_t)(2 * r + 1), sizeof(long long), "cube table");
    for (long i = 0; i <= 2 * r; i++) {
        long long v = i - r;
        g->cube[i] = v * v * v;
    }
    /* Parametric families (x = -y, z^3 = k) give about 3 (2R+1) solutions per cube k <= K. */
    long cubes = 0;
    for (long c = 1; c * c * c <= kmax; c++)
        cubes++;
    g->cap = 6 * (2 * r + 1) * (cubes + 1) + 100000;
    g->sols = app_alloc((size_t)g->cap, sizeof(xs_solution), "solution array");
    app_lock_init(&g->lock);
    app_barrier_init(&g->start, T);
    app_barrier_init(&g->end, T);
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    xs_arg *args = app_alloc((size_t)T, sizeof *args, "thread arguments");
    void **argv_t = app_alloc((size_t)T, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < T; i++) {
        args[i].g = g;
        args[i].tid = i;
        argv_t[i] = &args[i];
    }

    app_run_team(T, xs_worker, argv_t);
    double time_s = app_phase_time(g->tstart, g->tend, T);

    long n = g->nsol;
    char note[256];
    int ok = 0;
    if (o.verify) {
        if (n > g->cap) {
            snprintf(note, sizeof note, "%ld solutions overflow the array of %ld", n, g->cap);
        } else {
            long bad = 0;
            for (long i = 0; i < n; i++) {
                long long x = g->sols[i].x, y = g->sols[i].y, z = g->sols[i].z;
                if (x * x * x + y * y * y + z * z * z != g->sols[i].k)
                    bad++;
            }
            qsort(g->sols, (size_t)n, sizeof(xs_solution), xs_cmp);
            xs_solution *ref = app_alloc((size_t)g->cap, sizeof(xs_solution), "reference solutions");
            long nref = xs_reference(r, kmax, ref, g->cap);
            long diff = 0;
            if (nref <= g->cap) {
                qsort(ref, (size_t)nref, sizeof(xs_solution), xs_cmp);
                for (long i = 0; i < n && i < nref; i++)
                    if (xs_cmp(&ref[i], &g->sols[i]) != 0)
                        diff++;
            }
            ok = (bad == 0 && nref == n && diff == 0);
            snprintf(note, sizeof note, "R=%ld K=%ld solutions=%ld reference=%ld invalid=%ld mismatched=%ld", r,
                     kmax, n, nref, bad, diff);
            free(ref);
        }
    } else {
        snprintf(note, sizeof note, "R=%ld K=%ld solutions=%ld (not verified)", r, kmax, n);
    }
    app_finish("xstate", &o, time_s, ok, (double)n, note);
}
