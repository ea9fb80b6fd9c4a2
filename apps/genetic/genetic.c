/*
 * genetic - iterative genetic algorithm over a shared population (DSM/IP's `genetic` workload,
 * seed 004 §4.2).
 *
 * Owns: the population, breeding (selection, crossover, mutation), the fitness metric, the
 * replacement of the least fit, and the check against a serial recomputation.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * The algorithm "breeds" a specific 64-bit integer (the target) from a random population.
 * Fitness of a genome x: for every base b = 2..B, the number of the target's base-b digit
 * positions where x has the same digit. Only x == target reaches the maximum. Evaluating it
 * is the workload's "think time": private computation, no shared access.
 *
 * Each generation has two phases separated by barriers, and the reader/writer roles change:
 *   phase 1 (breed): every thread READS the shared population (kept sorted, fittest first) to
 *     pick parents, and WRITES the offspring slots of its own block; it then sorts its block;
 *   phase 2 (remove the least fit): the new population is the fitter half of the old one merged
 *     with the offspring (the old less fit half is removed). A parallel merge: every thread
 *     READS all sorted sources (binary searches) to rank its own offspring block and its share
 *     of the old fitter half, and WRITES each of those individuals at its rank in the new
 *     population buffer: scattered writes by all threads to the same pages. Everyone reads the
 *     new population in the next phase 1. The two buffers alternate by generation parity.
 * Offspring k of generation g uses a PRNG seeded by (seed, g, k), and the population order is
 * a total order (fitness, then genome), so the result does not depend on the thread count.
 *
 * Check: a serial recomputation (same breeding function, qsort instead of block sorts and a
 * merge) must give the identical final population (exact compare of genomes and fitnesses).
 */
#include "app.h"

typedef struct {
    unsigned long long genome;
    long long fitness;
} ga_ind;

typedef struct {
    long pop;          /* population size (even) */
    int gens;          /* generations */
    int bmax;          /* fitness uses bases 2..bmax */
    int nthreads;
    unsigned long long target;
    unsigned long long seed;
    ga_ind *buf[2];    /* population buffers: generation g reads buf[g & 1], writes buf[(g + 1) & 1] */
    ga_ind *off;       /* offspring, pop/2 slots, blocks owned by threads */
    long *found;       /* first generation whose best genome is the target (-1: never) */
    app_barrier bar;
    double *tstart, *tend; /* per-thread phase start/end stamps */
} ga_shared;

typedef struct {
    ga_shared *g;
    int tid;
} ga_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
static long long ga_fitness(unsigned long long x, unsigned long long t, int bmax)
{
    long long f = 0;
    for (unsigned long long b = 2; b <= (unsigned long long)bmax; b++) {
        unsigned long long u = x, v = t;
        while (v) {
            f += (u % b) == (v % b);
            u /= b;
            v /= b;
        }
    }
    return f;
}

/* Fittest first; ties broken by genome so the order is total. */
static int ga_before(const ga_ind *a, const ga_ind *b)
{
    if (a->fitness != b->fitness)
        return a->fitness > b->fitness;
    return a->genome < b->genome;
}

static int ga_cmp(const void *pa, const void *pb)
{
    const ga_ind *a = pa, *b = pb;
    if (ga_before(a, b))
        return -1;
    if (ga_before(b, a))
        return 1;
    return 0;
}

/* Offspring k of generation gen, bred from the sorted population cur[0..pop). */
static ga_ind ga_breed(const ga_ind *cur, long pop, unsigned long long target, int bmax, unsigned long long seed,
                       int gen, long k)
{
    app_rng r;
    app_rng_seed(&r, seed ^ ((unsigned long long)gen << 40) ^ (unsigned long long)k * 0x9E3779B97F4A7C15ULL);
    /* rank-biased selection: the smaller of two uniform ranks */
    long i1 = (long)app_rng_below(&r, (unsigned long long)pop), i2 = (long)app_rng_below(&r, (unsigned long long)pop);
    long j1 = (long)app_rng_below(&r, (unsigned long long)pop), j2 = (long)app_rng_below(&r, (unsigned long long)pop);
    unsigned long long pa = cur[i1 < i2 ? i1 : i2].genome;
    unsigned long long pb = cur[j1 < j2 ? j1 : j2].genome;
    unsigned long long mask = app_rng_next(&r);
    ga_ind c;
    c.genome = (pa & mask) | (pb & ~mask);
    for (int m = 0; m < 2; m++)
        if (app_rng_below(&r, 2))
            c.genome ^= 1ULL << app_rng_below(&r, 64);
    c.fitness = ga_fitness(c.genome, target, bmax);
    return c;
}

static void ga_sort_block(ga_ind *a, long n)
{
    qsort(a, (size_t)n, sizeof(ga_ind), ga_cmp);
}

/* Number of elements of the sorted a[0..n) that come before x in the merged order: those
 * strictly before it, plus equal ones if `equal_first` (they belong to an earlier source). */
static long ga_count_before(const ga_ind *a, long n, const ga_ind *x, int equal_first)
{
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        int before = ga_before(&a[mid], x) || (equal_first && !ga_before(x, &a[mid]));
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Parallel merge, the part of thread `tid`: sources are source 0 = cur[0..pop/2) (the fitter
 * half) and source t+1 = thread t's sorted offspring block. Each element of the thread's own
 * offspring block and of its share of source 0 is written at its rank in next. Ranks are unique
 * (equal individuals are ordered by source, then position) and cover 0..pop-1. */
static void ga_merge_part(const ga_shared *g, const ga_ind *cur, ga_ind *next, int tid)
{
    long half = g->pop / 2;
    int T = g->nthreads;
    const ga_ind *src[T + 1];
    long len[T + 1];
    src[0] = cur;
    len[0] = half;
    for (int t = 0; t < T; t++) {
        long lo, hi;
        app_block_range(half, T, t, &lo, &hi);
        src[t + 1] = &g->off[lo];
        len[t + 1] = hi - lo;
    }
    long lo0, hi0;
    app_block_range(half, T, tid, &lo0, &hi0);
    for (int pass = 0; pass < 2; pass++) {
        int s = pass == 0 ? 0 : tid + 1;
        long kb = pass == 0 ? lo0 : 0, ke = pass == 0 ? hi0 : len[s];
        for (long k = kb; k < ke; k++) {
            const ga_ind *x = &src[s][k];
            long rank = k;
            for (int o = 0; o <= T; o++)
                if (o != s)
                    rank += ga_count_before(src[o], len[o], x, o < s);
            next[rank] = *x;
        }
    }
}

static void *ga_worker(void *p)
{
    ga_arg *a = p;
    ga_shared *g = a->g;
    long half = g->pop / 2, lo, hi;
    app_block_range(half, g->nthreads, a->tid, &lo, &hi);

    app_barrier_wait(&g->bar);
    g->tstart[a->tid] = app_now();
    for (int gen = 0; gen < g->gens; gen++) {
        const ga_ind *cur = g->buf[gen & 1];
        ga_ind *next = g->buf[(gen + 1) & 1];
        /* phase 1: breed the own offspring block from the shared population, sort it */
        for (long k = lo; k < hi; k++)
            g->off[k] = ga_breed(cur, g->pop, g->target, g->bmax, g->seed, gen, k);
        ga_sort_block(&g->off[lo], hi - lo);
        app_barrier_wait(&g->bar);
        /* phase 2: parallel merge into the other buffer */
        ga_merge_part(g, cur, next, a->tid);
        app_barrier_wait(&g->bar);
        /* next is not written again before generation gen + 2's phase 2 */
        if (a->tid == 0 && *g->found < 0 && next[0].genome == g->target)
            *g->found = gen;
    }
    g->tend[a->tid] = app_now();
    return NULL;
}

static void ga_init_pop(ga_ind *pop, long n, unsigned long long target, int bmax, unsigned long long seed)
{
    app_rng r;
    app_rng_seed(&r, seed * 31 + 7);
    for (long i = 0; i < n; i++) {
        pop[i].genome = app_rng_next(&r);
        pop[i].fitness = ga_fitness(pop[i].genome, target, bmax);
    }
    qsort(pop, (size_t)n, sizeof(ga_ind), ga_cmp);
}

static const char *USAGE =
    "genetic: genetic algorithm breeding a 64-bit target integer over a shared population\n"
    "  -p P      population size, even (default by size: tiny 512, small 4096, medium 16384, large 32768)\n"
    "  -g G      generations (default by size: tiny 10, small 180, medium 250, large 600)\n"
    "  -b B      fitness compares digits in bases 2..B, the think time (default 40)\n"
    "  --seed S  seed of the population, target and breeding (default 1)";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long PP[4] = {512, 4096, 16384, 32768};
    static const long GG[4] = {10, 180, 250, 600};
    int si = app_size_index(&o);
    long pop = app_flag_long(argc, argv, &o, "-p", PP[si], 2, 100000000L);
    int gens = (int)app_flag_long(argc, argv, &o, "-g", GG[si], 1, 1000000);
    int bmax = (int)app_flag_long(argc, argv, &o, "-b", 40, 2, 1000000);
    long seed = app_flag_long(argc, argv, NULL, "--seed", 1, 0, 0x7fffffffffffffffL);
    if (pop % 2)
        pop++;
    int T = o.threads;

    ga_shared *g = app_alloc(1, sizeof *g, "genetic shared state");
    g->pop = pop;
    g->gens = gens;
    g->bmax = bmax;
    g->nthreads = T;
    g->seed = (unsigned long long)seed;
    app_rng tr;
    app_rng_seed(&tr, g->seed + 1000003);
    g->target = app_rng_next(&tr) | (1ULL << 63);
    g->buf[0] = app_alloc((size_t)pop, sizeof(ga_ind), "population");
    g->buf[1] = app_alloc((size_t)pop, sizeof(ga_ind), "next population");
    g->off = app_alloc((size_t)(pop / 2), sizeof(ga_ind), "offspring");
    g->found = app_alloc(1, sizeof(long), "found generation");
    *g->found = -1;
    ga_init_pop(g->buf[0], pop, g->target, bmax, g->seed);
    app_barrier_init(&g->bar, T);
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    ga_arg *args = app_alloc((size_t)T, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)T, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < T; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }

    app_run_team(T, ga_worker, targs);
    const ga_ind *fin = g->buf[gens & 1];
    double time_s = app_phase_time(g->tstart, g->tend, T);

    long long maxfit = ga_fitness(g->target, g->target, bmax);
    double total = 0.0;
    for (long i = 0; i < pop; i++)
        total += (double)fin[i].fitness;

    int ok = 0;
    char note[320];
    if (o.verify) {
        ga_ind *ref = app_alloc((size_t)pop, sizeof(ga_ind), "reference population");
        ga_ind *tmp = app_alloc((size_t)pop, sizeof(ga_ind), "reference scratch");
        ga_init_pop(ref, pop, g->target, bmax, g->seed);
        long half = pop / 2;
        for (int gen = 0; gen < gens; gen++) {
            memcpy(tmp, ref, sizeof(ga_ind) * (size_t)half);
            for (long k = 0; k < half; k++)
                tmp[half + k] = ga_breed(ref, pop, g->target, bmax, g->seed, gen, k);
            qsort(tmp, (size_t)pop, sizeof(ga_ind), ga_cmp);
            memcpy(ref, tmp, sizeof(ga_ind) * (size_t)pop);
        }
        long diff = 0, badfit = 0;
        for (long i = 0; i < pop; i++) {
            if (ref[i].genome != fin[i].genome || ref[i].fitness != fin[i].fitness)
                diff++;
            if (fin[i].fitness != ga_fitness(fin[i].genome, g->target, bmax))
                badfit++;
        }
        ok = diff == 0 && badfit == 0;
        snprintf(note, sizeof note,
                 "P=%ld G=%d B=%d best=%lld max=%lld found_gen=%ld differing=%ld bad_fitness=%ld (exact compare)", pop,
                 gens, bmax, fin[0].fitness, maxfit, *g->found, diff, badfit);
        free(ref);
        free(tmp);
    } else {
        snprintf(note, sizeof note, "P=%ld G=%d B=%d best=%lld max=%lld found_gen=%ld (not verified)", pop, gens,
                 bmax, fin[0].fitness, maxfit, *g->found);
    }
    app_finish("genetic", &o, time_s, ok, total, note);
}
