/*
 * em3d - electromagnetic wave propagation on a bipartite graph (Tempest/Blizzard seed 001 §4.2,
 * Shasta/Cashmere seed 000 §3.2).
 *
 * Owns: the E/H node graph, its generation with a chosen fraction of remote edges, the
 * iteration (new E from weighted H neighbours, barrier, new H from weighted E neighbours,
 * barrier) and the check against a serial recomputation.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Sharing pattern: nodes are distributed in blocks (thread p owns E[lo..hi) and H[lo..hi)).
 * Each node has `degree` in-edges; a fraction F of them (--remote-frac) come from nodes of
 * threads at most S away (--span, Split-C's dist_span), from the W nodes of that thread's block
 * facing this one (--window), so a thread reads a bounded set of remote nodes (<= 2*S*W per
 * kind) whatever N is. Each half step a thread writes only its own nodes' values and reads its
 * neighbours' values: producer-consumer sharing that repeats every iteration.
 *   default (EM3D-TSM): the value lives inside the node structure, mixed with the edge lists,
 *     so a remote read brings in mostly unused bytes;
 *   --separate-values (EM3D-value): values live in two separate dense arrays.
 *
 * Check: the same graph is iterated serially from the saved initial values; every E and H
 * value must match with max relative difference <= 1e-12 (each node's sum is over the same
 * edges in the same order, so native and seq results are in fact bit-identical on x86-64).
 */
#include "app.h"

#define EM_MAXD 16

typedef struct {
    double value; /* used unless --separate-values */
    int degree;
    int owner;
    int from[EM_MAXD];      /* indices into the other kind's node array */
    double coeff[EM_MAXD];  /* edge weights */
} em_node;

typedef struct {
    long n;         /* nodes of each kind */
    int iters;
    int nthreads;
    int separate;   /* --separate-values */
    int degree;     /* in-edges per node */
    double frac;    /* fraction of remote edges */
    long span, window;
    em_node *e, *h; /* E and H nodes */
    double *ev, *hv; /* separate value arrays (only with --separate-values) */
    app_barrier bar;
    double *tstart, *tend; /* per-thread phase start/end stamps */
} em_shared;

typedef struct {
    em_shared *g;
    int tid;
} em_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
/* New value of node `nd` (old value v) from the values of its sources. */
static inline double em_step_inline(double v, const em_node *nd, const em_node *src)
{
    for (int k = 0; k < nd->degree; k++)
        v -= nd->coeff[k] * src[nd->from[k]].value;
    return v;
}

static inline double em_step_sep(double v, const em_node *nd, const double *src)
{
    for (int k = 0; k < nd->degree; k++)
        v -= nd->coeff[k] * src[nd->from[k]];
    return v;
}

static void em_build(em_node *nodes, double *values, long n, int degree, int nthreads, int p, double frac,
                     long span, long window, unsigned long long seed);

static void *em_worker(void *p)
{
    em_arg *a = p;
    em_shared *g = a->g;
    long lo, hi;
    app_block_range(g->n, g->nthreads, a->tid, &lo, &hi);
    /* every thread builds its own nodes (the Split-C generator is parallel too), so each page
     * of the graph is first touched by the thread that owns it */
    em_build(g->e, g->ev, g->n, g->degree, g->nthreads, a->tid, g->frac, g->span, g->window, 1);
    em_build(g->h, g->hv, g->n, g->degree, g->nthreads, a->tid, g->frac, g->span, g->window, 2);

    app_barrier_wait(&g->bar);
    if (a->tid == 0)
        app_stats_mark(); /* Squall statistics: the timed phase starts */
    g->tstart[a->tid] = app_now();
    for (int it = 0; it < g->iters; it++) {
        if (g->separate) {
            for (long i = lo; i < hi; i++)
                g->ev[i] = em_step_sep(g->ev[i], &g->e[i], g->hv);
            app_barrier_wait(&g->bar);
            for (long i = lo; i < hi; i++)
                g->hv[i] = em_step_sep(g->hv[i], &g->h[i], g->ev);
        } else {
            for (long i = lo; i < hi; i++)
                g->e[i].value = em_step_inline(g->e[i].value, &g->e[i], g->h);
            app_barrier_wait(&g->bar);
            for (long i = lo; i < hi; i++)
                g->h[i].value = em_step_inline(g->h[i].value, &g->h[i], g->e);
        }
        app_barrier_wait(&g->bar);
    }
    g->tend[a->tid] = app_now();
    if (a->tid == 0)
        app_stats_mark(); /* ... and ends (every thread passed the last barrier) */
    return NULL;
}

/* Initial value of node i of kind `kind` (1 = E, 2 = H): a function of the position only, so
 * the thread that builds the node can compute it and main can recompute it for the check. */
static double em_init_value(int kind, long i)
{
    app_rng r;
    app_rng_seed(&r, 42ULL * 0x100000001B3ULL + (unsigned long long)kind * 0x9E3779B97F4A7C15ULL +
                         (unsigned long long)i);
    return app_rng_double(&r);
}

/* Builds the in-edges and initial values of thread p's block of nodes[0..n) (sources in the
 * other kind's array), as the Split-C EM3D generator does, each processor building its own
 * part: each edge is remote with probability frac, and a remote edge comes from a processor
 * (thread) at most `span` away (q in [p-span, p+span], q != p, no wrap-around: the threads'
 * blocks are slabs of one object). Which node of q: one of the `window` nodes of q's block
 * nearest p (its first `window` nodes if q > p, its last if q < p: the slab face towards p),
 * so the remote nodes a thread reads are at most 2*span*window whatever N is (nearest-neighbour
 * sharing, as Shasta/Cashmere report for Em3d). A local edge comes from a window of `window`
 * nodes around the node itself (spatial locality: the working set does not grow with N).
 * The graph depends only on (n, nthreads, the flags, seed), not on which thread builds it. */
static void em_build(em_node *nodes, double *values, long n, int degree, int nthreads, int p, double frac,
                     long span, long window, unsigned long long seed)
{
    long lo, hi;
    app_block_range(n, nthreads, p, &lo, &hi);
    /* processors within span on each side (clipped at the ends of the line) */
    long below = p < span ? p : span;
    long above = (nthreads - 1 - p) < span ? (nthreads - 1 - p) : span;
    for (long i = lo; i < hi; i++) {
        app_rng r;
        app_rng_seed(&r, seed * 0x100000001B3ULL + (unsigned long long)i);
        em_node *nd = &nodes[i];
        nd->degree = degree;
        nd->owner = p;
        for (int k = 0; k < degree; k++) {
            int q = p;
            if (below + above > 0 && app_rng_double(&r) < frac) {
                long d = (long)app_rng_below(&r, (unsigned long long)(below + above));
                q = d < below ? p - 1 - (int)d : p + 1 + (int)(d - below);
            }
            long qlo, qhi;
            app_block_range(n, nthreads, q, &qlo, &qhi);
            if (qhi == qlo) { /* more threads than nodes: take a local edge */
                q = p;
                qlo = lo;
                qhi = hi;
            }
            long wlo, whi;
            if (q == p) { /* a window around the node itself */
                wlo = i - window / 2;
                whi = wlo + window;
                if (wlo < qlo) {
                    wlo = qlo;
                    whi = qlo + window;
                }
                if (whi > qhi) {
                    whi = qhi;
                    wlo = qhi - window > qlo ? qhi - window : qlo;
                }
            } else if (q > p) { /* the face of q's slab towards p */
                wlo = qlo;
                whi = qhi - qlo > window ? qlo + window : qhi;
            } else {
                whi = qhi;
                wlo = qhi - qlo > window ? qhi - window : qlo;
            }
            long src = wlo + (long)app_rng_below(&r, (unsigned long long)(whi - wlo));
            nd->from[k] = (int)src;
            nd->coeff[k] = (app_rng_double(&r) - 0.5) / degree;
        }
        nd->value = em_init_value((int)seed, i);
        if (values)
            values[i] = nd->value;
    }
}

/* Remote edges of the graph (in-edges of `nodes` whose source, in `other`, belongs to another
 * thread) and, into *remote_nodes, the distinct remote sources per thread (`mark`: n ints,
 * zeroed). For the note only. */
static long em_count_remote(const em_node *nodes, const em_node *other, long n, int *mark, long *remote_nodes)
{
    long remote = 0;
    for (long i = 0; i < n; i++) {
        int p = nodes[i].owner;
        for (int k = 0; k < nodes[i].degree; k++) {
            long src = nodes[i].from[k];
            if (other[src].owner != p) {
                remote++;
                if (mark[src] != p + 1) {
                    mark[src] = p + 1;
                    (*remote_nodes)++;
                }
            }
        }
    }
    return remote;
}

static const char *USAGE =
    "em3d: electromagnetic propagation on a bipartite E/H graph\n"
    "  -n N               nodes of each kind (default by size: tiny 4000, small 120000, medium 500000, large 2000000)\n"
    "  -d D               in-edges per node, 1..16 (default 10)\n"
    "  -i I               iterations (default by size: tiny 20, small 100, medium 150, large 120)\n"
    "  --remote-frac F    fraction of edges from other threads' nodes (default 0.2)\n"
    "  --span S           a remote edge comes from a thread at most S away (default 1)\n"
    "  --window W         remote edges come from the W nodes of that thread's block nearest this\n"
    "                     thread, local edges from W nodes around the node (default 1000)\n"
    "  --separate-values  keep node values in separate arrays (EM3D-value) instead of in the nodes";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long N[4] = {4000, 120000, 500000, 2000000};
    static const long I[4] = {20, 100, 150, 120};
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", N[si], 1, 100000000L);
    int degree = (int)app_flag_long(argc, argv, &o, "-d", 10, 1, EM_MAXD);
    int iters = (int)app_flag_long(argc, argv, &o, "-i", I[si], 1, 1000000);
    double frac = app_flag_double(argc, argv, NULL, "--remote-frac", 0.2, 0.0, 1.0);
    int separate = app_flag_present(argc, argv, "--separate-values");
    long span = app_flag_long(argc, argv, NULL, "--span", 1, 1, 1000000L);
    long window = app_flag_long(argc, argv, NULL, "--window", 1000, 1, 100000000L);
    int T = o.threads;

    em_shared *g = app_alloc(1, sizeof *g, "em3d shared state");
    g->n = n;
    g->iters = iters;
    g->nthreads = T;
    g->separate = separate;
    g->degree = degree;
    g->frac = frac;
    g->span = span;
    g->window = window;
    /* built by the team, each thread its own nodes (em_worker) */
    g->e = app_alloc_uninit((size_t)n, sizeof(em_node), "E nodes");
    g->h = app_alloc_uninit((size_t)n, sizeof(em_node), "H nodes");
    if (separate) {
        g->ev = app_alloc_uninit((size_t)n, sizeof(double), "E values");
        g->hv = app_alloc_uninit((size_t)n, sizeof(double), "H values");
    }
    app_barrier_init(&g->bar, T);
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    em_arg *args = app_alloc((size_t)T, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)T, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < T; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }

    app_run_team(T, em_worker, targs);
    double time_s = app_phase_time(g->tstart, g->tend, T);

    const double *ev = separate ? g->ev : NULL, *hv = separate ? g->hv : NULL;
    double sum = 0.0;
    for (long i = 0; i < n; i++)
        sum += (separate ? ev[i] : g->e[i].value) + (separate ? hv[i] : g->h[i].value);

    int ok = 0;
    char note[320];
    if (o.verify) {
        /* Serial recomputation with separate value arrays from the initial values. */
        double *e0 = app_alloc((size_t)n, sizeof(double), "initial E values");
        double *h0 = app_alloc((size_t)n, sizeof(double), "initial H values");
        for (long i = 0; i < n; i++) {
            e0[i] = em_init_value(1, i);
            h0[i] = em_init_value(2, i);
        }
        /* distinct remote sources per thread, summed over threads and both kinds */
        int *mark = app_alloc((size_t)n, sizeof(int), "remote-node marks");
        long remote_nodes = 0;
        long remote = em_count_remote(g->e, g->h, n, mark, &remote_nodes);
        memset(mark, 0, sizeof(int) * (size_t)n);
        remote += em_count_remote(g->h, g->e, n, mark, &remote_nodes);
        free(mark);
        for (int it = 0; it < iters; it++) {
            for (long i = 0; i < n; i++)
                e0[i] = em_step_sep(e0[i], &g->e[i], h0);
            for (long i = 0; i < n; i++)
                h0[i] = em_step_sep(h0[i], &g->h[i], e0);
        }
        double maxrel = 0.0;
        for (long i = 0; i < n; i++) {
            double a = separate ? ev[i] : g->e[i].value;
            double b = separate ? hv[i] : g->h[i].value;
            double d1 = app_rel_diff(a, e0[i]), d2 = app_rel_diff(b, h0[i]);
            if (!(d1 <= maxrel))
                maxrel = d1;
            if (!(d2 <= maxrel))
                maxrel = d2;
        }
        ok = maxrel <= 1e-12 && isfinite(sum);
        snprintf(note, sizeof note,
                 "N=%ld D=%d iters=%d span=%ld window=%ld remote_frac=%.3f remote_edges=%ld remote_nodes=%ld layout=%s "
                 "max_rel_diff=%.3g tol=1e-12",
                 n, degree, iters, span, window, frac, remote, remote_nodes, separate ? "separate-values" : "values-in-nodes", maxrel);
    } else {
        snprintf(note, sizeof note, "N=%ld D=%d iters=%d span=%ld window=%ld remote_frac=%.3f layout=%s (not verified)",
                 n, degree, iters, span, window, frac, separate ? "separate-values" : "values-in-nodes");
    }
    app_finish("em3d", &o, time_s, ok, sum, note);
}
