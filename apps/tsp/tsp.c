/*
 * tsp - branch-and-bound travelling salesman (Shasta/Cashmere seed 000 §3.2, TreadMarks' TSP).
 *
 * Owns: the random instance, the shared work queue of partial tours, the shared bound and best
 * tour, the depth-first search, and the check against Held-Karp dynamic programming.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Sharing pattern (as in the seed): a work queue of partial tours lives in shared memory under
 * one lock. A thread pops a partial tour; if it is shorter than the split depth it expands it
 * and pushes the children (pruned by the bound) back; otherwise it searches the subtree
 * depth-first on private data. The bound (length of the best tour so far) is READ WITHOUT A
 * LOCK on every pruning test (a benign race: a stale bound only prunes less); it is written
 * under a second lock together with the best tour, re-checked under that lock. The search is
 * non-deterministic (the sooner a good tour is found the more is pruned), the answer is not.
 *
 * Check: the optimal length is recomputed by Held-Karp dynamic programming (n <= 22), or by
 * a serial run of the same branch and bound for bigger n; the best tour must be a permutation
 * starting at city 0 whose length equals the reported bound.
 */
#include "app.h"

#include <limits.h>
#include <sched.h>

#define TSP_MAXN 32

typedef struct {
    int len;   /* length of the partial tour */
    int depth; /* cities on the path (path[0] = 0) */
    unsigned int visited;
    unsigned char path[TSP_MAXN];
} tsp_task;

typedef struct {
    int n;
    int split;         /* partial tours with fewer cities than this are expanded via the queue */
    int nthreads;
    int *dist;         /* n x n, read-only */
    int *minedge;      /* cheapest edge into each city, read-only */
    unsigned char *order; /* order[c*n + i]: i-th nearest city to c, read-only */
    /* work queue (a stack of tasks) under qlock */
    app_lock_t qlock;
    tsp_task *queue;
    long cap, top;
    int expanding;     /* threads that popped a task they will expand (more tasks may come) */
    long pushed;       /* statistics */
    /* bound: read without a lock, written under block */
    volatile int best;
    app_lock_t block;
    unsigned char best_path[TSP_MAXN];
    long nodes;        /* search nodes, summed under block at the end */
    app_barrier bar;
    double *tstart, *tend; /* per-thread phase start/end stamps */
} tsp_shared;

typedef struct {
    tsp_shared *g;
    int tid;
} tsp_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
/* Lower bound for completing a partial tour: every unvisited city and city 0 must still be
 * entered once, each by at least its cheapest edge. */
static int tsp_rest(const tsp_shared *g, unsigned int visited)
{
    int s = g->minedge[0];
    for (int c = 1; c < g->n; c++)
        if (!(visited & (1u << c)))
            s += g->minedge[c];
    return s;
}

static void tsp_offer(tsp_shared *g, int total, const unsigned char *path)
{
    if (total >= g->best) /* unlocked read */
        return;
    app_lock(&g->block);
    if (total < g->best) {
        memcpy(g->best_path, path, (size_t)g->n);
        g->best = total;
    }
    app_unlock(&g->block);
}

/* Depth-first search below path[0..depth) on private data; rest = tsp_rest(visited). */
static void tsp_dfs(tsp_shared *g, unsigned char *path, int depth, int len, unsigned int visited, int rest,
                    long *nodes)
{
    const int n = g->n;
    int last = path[depth - 1];
    (*nodes)++;
    if (depth == n) {
        tsp_offer(g, len + g->dist[last * n], path);
        return;
    }
    const unsigned char *ord = &g->order[last * n];
    for (int i = 0; i < n - 1; i++) {
        int c = ord[i];
        if (visited & (1u << c))
            continue;
        int nl = len + g->dist[last * n + c];
        int nr = rest - g->minedge[c];
        if (nl + nr >= g->best) /* unlocked read of the shared bound */
            continue;
        path[depth] = (unsigned char)c;
        tsp_dfs(g, path, depth + 1, nl, visited | (1u << c), nr, nodes);
    }
}

static void tsp_push_children(tsp_shared *g, const tsp_task *t)
{
    const int n = g->n;
    tsp_task kids[TSP_MAXN];
    int nk = 0;
    int last = t->path[t->depth - 1];
    int rest = tsp_rest(g, t->visited);
    const unsigned char *ord = &g->order[last * n];
    /* Farthest first onto the stack, so the nearest child is popped first. */
    for (int i = n - 2; i >= 0; i--) {
        int c = ord[i];
        if (t->visited & (1u << c))
            continue;
        int nl = t->len + g->dist[last * n + c];
        if (nl + rest - g->minedge[c] >= g->best)
            continue;
        tsp_task *k = &kids[nk++];
        *k = *t;
        k->len = nl;
        k->path[k->depth++] = (unsigned char)c;
        k->visited |= 1u << c;
    }
    app_lock(&g->qlock);
    if (g->top + nk > g->cap) {
        fprintf(stderr, "tsp: work queue overflow (capacity %ld tasks)\n", g->cap);
        exit(2);
    }
    for (int i = 0; i < nk; i++)
        g->queue[g->top++] = kids[i];
    g->pushed += nk;
    g->expanding--;
    app_unlock(&g->qlock);
}

static void *tsp_worker(void *p)
{
    tsp_arg *a = p;
    tsp_shared *g = a->g;
    long nodes = 0;
    unsigned char path[TSP_MAXN];

    app_barrier_wait(&g->bar);
    g->tstart[a->tid] = app_now();
    for (;;) {
        tsp_task t;
        app_lock(&g->qlock);
        while (g->top == 0 && g->expanding > 0) {
            app_unlock(&g->qlock);
            sched_yield();
            app_lock(&g->qlock);
        }
        if (g->top == 0) {
            app_unlock(&g->qlock);
            break;
        }
        t = g->queue[--g->top];
        int expand = t.depth < g->split;
        if (expand)
            g->expanding++;
        app_unlock(&g->qlock);

        if (expand) {
            nodes++;
            tsp_push_children(g, &t);
        } else {
            int rest = tsp_rest(g, t.visited);
            if (t.len + rest >= g->best)
                continue;
            memcpy(path, t.path, (size_t)t.depth);
            tsp_dfs(g, path, t.depth, t.len, t.visited, rest, &nodes);
        }
    }
    app_lock(&g->block);
    g->nodes += nodes;
    app_unlock(&g->block);
    app_barrier_wait(&g->bar);
    g->tend[a->tid] = app_now();
    return NULL;
}

/* Held-Karp: optimal tour length through all n cities starting and ending at 0. */
static long tsp_held_karp(const int *dist, int n)
{
    if (n == 1)
        return 0;
    int m = n - 1; /* cities 1..n-1 are bits 0..m-1 */
    size_t states = (size_t)1 << m;
    int *dp = malloc(states * (size_t)m * sizeof(int));
    if (dp == NULL) {
        fprintf(stderr, "tsp: out of memory for the Held-Karp table (n=%d)\n", n);
        exit(2);
    }
    for (size_t s = 0; s < states * (size_t)m; s++)
        dp[s] = INT_MAX;
    for (int j = 0; j < m; j++)
        dp[((size_t)1 << j) * (size_t)m + (size_t)j] = dist[j + 1];
    for (size_t s = 1; s < states; s++) {
        for (int j = 0; j < m; j++) {
            int v = dp[s * (size_t)m + (size_t)j];
            if (v == INT_MAX || !(s & ((size_t)1 << j)))
                continue;
            for (int k = 0; k < m; k++) {
                if (s & ((size_t)1 << k))
                    continue;
                size_t ns = s | ((size_t)1 << k);
                int nv = v + dist[(j + 1) * n + (k + 1)];
                if (nv < dp[ns * (size_t)m + (size_t)k])
                    dp[ns * (size_t)m + (size_t)k] = nv;
            }
        }
    }
    long best = LONG_MAX;
    for (int j = 0; j < m; j++) {
        long v = (long)dp[(states - 1) * (size_t)m + (size_t)j] + dist[(j + 1) * n];
        if (v < best)
            best = v;
    }
    free(dp);
    return best;
}

static void tsp_setup(tsp_shared *g, int n, unsigned long long seed)
{
    g->n = n;
    g->dist = app_alloc((size_t)n * (size_t)n, sizeof(int), "distance matrix");
    g->minedge = app_alloc((size_t)n, sizeof(int), "cheapest edges");
    g->order = app_alloc((size_t)n * (size_t)n, 1, "neighbour order");
    int x[TSP_MAXN], y[TSP_MAXN];
    app_rng r;
    app_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        x[i] = (int)app_rng_below(&r, 1000);
        y[i] = (int)app_rng_below(&r, 1000);
    }
    for (int i = 0; i < n; i++) {
        int me = INT_MAX;
        for (int j = 0; j < n; j++) {
            double dx = x[i] - x[j], dy = y[i] - y[j];
            g->dist[i * n + j] = (int)lround(sqrt(dx * dx + dy * dy));
            if (j != i && g->dist[i * n + j] < me)
                me = g->dist[i * n + j];
        }
        g->minedge[i] = n > 1 ? me : 0;
    }
    for (int i = 0; i < n; i++) {
        /* neighbours of i other than i itself, nearest first (ties by index): insertion sort */
        unsigned char *ord = &g->order[i * n];
        int k = 0;
        for (int j = 0; j < n; j++) {
            if (j == i)
                continue;
            int pos = k++;
            while (pos > 0 && g->dist[i * n + ord[pos - 1]] > g->dist[i * n + j]) {
                ord[pos] = ord[pos - 1];
                pos--;
            }
            ord[pos] = (unsigned char)j;
        }
    }
}

/* Runs the team on a fresh queue; returns the optimal length. */
static int tsp_solve(tsp_shared *g, int nthreads)
{
    g->nthreads = nthreads;
    g->top = 0;
    g->expanding = 0;
    g->pushed = 0;
    g->nodes = 0;
    g->best = INT_MAX;
    tsp_task root;
    memset(&root, 0, sizeof root);
    root.depth = 1;
    root.visited = 1u;
    g->queue[g->top++] = root;
    app_barrier_init(&g->bar, nthreads);
    tsp_arg *args = app_alloc((size_t)nthreads, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)nthreads, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < nthreads; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }
    app_run_team(nthreads, tsp_worker, targs);
    free(args);
    free(targs);
    return g->best;
}

static const char *USAGE = "tsp: branch-and-bound travelling salesman with a shared work queue and bound\n"
                           "  -n N      cities, 2..32 (default by size: tiny 13, small 19, medium 19, large 22)\n"
                           "  --split D partial tours of fewer than D cities go through the queue (default 4)\n"
                           "  --seed S  instance seed (default by size: tiny 1, small 1, medium 4, large 2)";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long NC[4] = {13, 19, 19, 22};
    static const long SEED[4] = {1, 1, 4, 2}; /* instances picked for ~1.9 s, ~5 s, ~40 s sequential */
    int n = (int)app_flag_long(argc, argv, &o, "-n", NC[app_size_index(&o)], 2, TSP_MAXN);
    int split = (int)app_flag_long(argc, argv, NULL, "--split", 4, 1, TSP_MAXN);
    long seed = app_flag_long(argc, argv, NULL, "--seed", SEED[app_size_index(&o)], 0, LONG_MAX);
    int T = o.threads;

    tsp_shared *g = app_alloc(1, sizeof *g, "tsp shared state");
    tsp_setup(g, n, (unsigned long long)seed);
    g->split = split < n ? split : n;
    /* Every queued task is a path prefix of < split cities; the stack holds at most the
     * unexpanded siblings along the expansion frontier, bounded by the number of prefixes. */
    long cap = 1;
    for (int d = 1, w = 1; d <= g->split && d < n; d++) {
        w = w * (n - d) > 1000000 ? 1000000 : w * (n - d);
        cap += w;
    }
    g->cap = cap + (long)T * n + 16;
    g->queue = app_alloc((size_t)g->cap, sizeof(tsp_task), "work queue");
    app_lock_init(&g->qlock);
    app_lock_init(&g->block);
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");

    int best = tsp_solve(g, T);
    double time_s = app_phase_time(g->tstart, g->tend, T);
    long nodes = g->nodes, pushed = g->pushed;

    /* The best tour must be a permutation from city 0 of the reported length. */
    unsigned int seen = 0;
    long len = 0;
    int perm_ok = g->best_path[0] == 0;
    for (int i = 0; i < n; i++) {
        int c = g->best_path[i], nx = g->best_path[(i + 1) % n];
        if (c >= n || nx >= n || (seen & (1u << c))) {
            perm_ok = 0;
            break;
        }
        seen |= 1u << c;
        len += g->dist[c * n + nx];
    }
    perm_ok = perm_ok && len == best;

    int ok = 0;
    char note[256];
    if (o.verify) {
        long ref;
        const char *how;
        if (n <= 22) {
            ref = tsp_held_karp(g->dist, n);
            how = "held-karp";
        } else {
            ref = tsp_solve(g, 1);
            how = "serial branch-and-bound";
        }
        ok = perm_ok && ref == best;
        snprintf(note, sizeof note, "n=%d split=%d seed=%ld best=%d reference=%ld (%s) tour_ok=%d nodes=%ld tasks=%ld",
                 n, g->split, seed, best, ref, how, perm_ok, nodes, pushed);
    } else {
        snprintf(note, sizeof note, "n=%d split=%d seed=%ld best=%d tour_ok=%d nodes=%ld tasks=%ld (not verified)", n,
                 g->split, seed, best, perm_ok, nodes, pushed);
    }
    app_finish("tsp", &o, time_s, ok, (double)best, note);
}
