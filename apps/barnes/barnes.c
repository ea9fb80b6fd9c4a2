/*
 * barnes - Barnes-Hut N-body simulation with a parallel tree build under locks (SPLASH-2 Barnes;
 * Shasta/Cashmere seed 000 §3.2 and §4.2.3/§4.3, Tempest seed 001 §4.3, CRL/Split-C seed 002 §3.2).
 *
 * Owns: the bodies (Plummer model), the octree of cells, the locked parallel insertion, the
 * centre-of-mass pass, the force walk, the leapfrog update and the checks.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Sharing pattern, per time step (barriers between phases):
 *   bounding box: each thread reduces its own bodies into its slot; thread 0 resets the root;
 *   tree build: every thread inserts its bodies into the ONE shared octree. A cell slot is
 *     read and changed only under the cell's lock (a hashed array of locks): descend if it holds
 *     a cell, store the body if empty, or, if it holds a body, allocate a new cell from the
 *     thread's own chunk of the cell array (Barnes-chunk), move the old body into it, publish
 *     it in the slot, and continue. Fine-grain locking and false sharing on 96-byte cells;
 *     publishing under the parent's lock also makes the build race-free (the flag
 *     synchronisation Cashmere needed);
 *   centre of mass: the 64 grandchildren of the root are shared out round-robin; thread 0
 *     finishes the two top levels;
 *   forces: each thread walks the tree for its block of bodies (read-shared tree, reads of
 *     other threads' bodies' mass and position), writing only its own bodies' acc/phi/cost;
 *   update: leapfrog on own bodies (writes pos/vel that others read next step).
 * Bodies are 120 bytes; `--padded` pads them to 128 bytes (Shasta's "Padded" variant), so a
 * body never straddles a 128-byte block.
 *
 * The tree is unique for a set of positions (one body per leaf, fixed octant order), so the
 * arithmetic does not depend on the insertion order or thread count.
 * Checks: (1) with T > 1, a 1-thread rerun from the same initial bodies must give bit-identical
 * positions and velocities; (2) tree forces at the final positions (serial rebuild) compared with
 * direct summation for 64 sample bodies: RMS relative acceleration error <= 2% (theta = 0.5).
 */
#include "app.h"

typedef struct {
    int type; /* 1 = body */
    int cost; /* interactions in the last force walk */
    double mass;
    double pos[3];
    double vel[3];
    double acc[3];
    double acc_old[3]; /* previous step's acceleration (leapfrog velocity correction) */
    double phi;
} bh_body; /* 120 bytes */

typedef struct {
    bh_body b;
    char pad[128 - sizeof(bh_body)];
} bh_body_padded;

/* child encoding: 0 empty; > 0 cell index; < 0 body -(index + 1) */
typedef struct {
    double center[3];
    double half; /* half the side length */
    double mass;
    double cm[3];
    int child[8];
} bh_cell; /* 96 bytes */

#define BH_ROOT 1
#define BH_NLOCKS 2048
#define BH_MAXDEPTH 60

typedef struct {
    bh_cell *cells;    /* index 0 unused, 1 = root, then the per-thread chunks */
    long chunk;        /* cells per thread chunk */
    app_lock_t *locks; /* BH_NLOCKS cell locks */
    char *bodies;      /* n bodies with `stride` bytes each */
    size_t stride;
    long n;
    double theta2, eps2;
} bh_tree;

typedef struct {
    bh_tree t;
    int nthreads;
    int steps;
    double dt;
    double *bbox; /* nthreads x 6 (min xyz, max xyz) */
    app_barrier bar;
    double *tstart, *tend; /* per-thread phase start/end stamps */
    double tree_s; /* time in tree build + c.o.m. (thread 0's view) */
    int serial_tree; /* --serial-tree: thread 0 builds the whole tree (Cashmere's restructuring) */
    long *used;    /* cells taken from each thread's chunk in the last step (statistics) */
} bh_shared;

typedef struct {
    bh_shared *g;
    int tid;
} bh_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
static inline bh_body *bh_b(const bh_tree *t, long i)
{
    return (bh_body *)(t->bodies + (size_t)i * t->stride);
}

static inline int bh_octant(const bh_cell *c, const double *p)
{
    return (p[0] >= c->center[0]) | ((p[1] >= c->center[1]) << 1) | ((p[2] >= c->center[2]) << 2);
}

static void bh_cell_init(bh_cell *c, const bh_cell *parent, int oct)
{
    double h = parent->half * 0.5;
    for (int k = 0; k < 3; k++)
        c->center[k] = parent->center[k] + ((oct >> k) & 1 ? h : -h);
    c->half = h;
    c->mass = 0.0;
    c->cm[0] = c->cm[1] = c->cm[2] = 0.0;
    for (int k = 0; k < 8; k++)
        c->child[k] = 0;
}

/* Inserts body i; new cells come from [*next, end). Every slot access is under the cell's lock. */
static void bh_insert(bh_tree *t, long i, long *next, long end)
{
    const double *p = bh_b(t, i)->pos;
    long c = BH_ROOT;
    for (int depth = 0;; depth++) {
        if (depth > BH_MAXDEPTH) {
            fprintf(stderr, "barnes: tree deeper than %d levels inserting body %ld (coincident bodies?)\n",
                    BH_MAXDEPTH, i);
            exit(2);
        }
        bh_cell *cell = &t->cells[c];
        int oct = bh_octant(cell, p);
        app_lock_t *l = &t->locks[c % BH_NLOCKS];
        app_lock(l);
        int ch = cell->child[oct];
        if (ch == 0) {
            cell->child[oct] = (int)-(i + 1);
            app_unlock(l);
            return;
        }
        if (ch > 0) {
            app_unlock(l);
            c = ch;
            continue;
        }
        /* slot holds a body: split it into a new cell from this thread's chunk */
        if (*next >= end) {
            app_unlock(l);
            fprintf(stderr, "barnes: cell chunk exhausted (%ld cells per thread) inserting body %ld\n",
                    t->chunk, i);
            exit(2);
        }
        long nc = (*next)++;
        bh_cell *ncell = &t->cells[nc];
        bh_cell_init(ncell, cell, oct);
        long ob = -(long)ch - 1;
        ncell->child[bh_octant(ncell, bh_b(t, ob)->pos)] = ch;
        cell->child[oct] = (int)nc; /* publish, still under the parent's lock */
        app_unlock(l);
        c = nc;
    }
}

/* Centre of mass of the subtree at cell c (children in fixed order: deterministic). */
static void bh_com(bh_tree *t, long c)
{
    bh_cell *cell = &t->cells[c];
    double m = 0.0, s[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < 8; k++) {
        int ch = cell->child[k];
        if (ch == 0)
            continue;
        const double *p;
        double cm;
        if (ch > 0) {
            bh_com(t, ch);
            cm = t->cells[ch].mass;
            p = t->cells[ch].cm;
        } else {
            const bh_body *b = bh_b(t, -(long)ch - 1);
            cm = b->mass;
            p = b->pos;
        }
        m += cm;
        for (int d = 0; d < 3; d++)
            s[d] += cm * p[d];
    }
    cell->mass = m;
    for (int d = 0; d < 3; d++)
        cell->cm[d] = m > 0.0 ? s[d] / m : cell->center[d];
}

/* Centre of mass of cell c from its children's (already computed) values only. */
static void bh_com_shallow(bh_tree *t, long c)
{
    bh_cell *cell = &t->cells[c];
    double m = 0.0, s[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < 8; k++) {
        int ch = cell->child[k];
        if (ch == 0)
            continue;
        const double *p;
        double cm;
        if (ch > 0) {
            cm = t->cells[ch].mass;
            p = t->cells[ch].cm;
        } else {
            const bh_body *b = bh_b(t, -(long)ch - 1);
            cm = b->mass;
            p = b->pos;
        }
        m += cm;
        for (int d = 0; d < 3; d++)
            s[d] += cm * p[d];
    }
    cell->mass = m;
    for (int d = 0; d < 3; d++)
        cell->cm[d] = m > 0.0 ? s[d] / m : cell->center[d];
}

static inline void bh_interact(const double *p, const double *q, double m, double eps2, double *acc, double *phi)
{
    double d[3] = {q[0] - p[0], q[1] - p[1], q[2] - p[2]};
    double r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + eps2;
    double inv = 1.0 / sqrt(r2);
    double mi3 = m * inv * inv * inv;
    *phi -= m * inv;
    for (int k = 0; k < 3; k++)
        acc[k] += mi3 * d[k];
}

/* Tree walk for body i: acceleration and potential into acc/phi, returns the interaction count. */
static int bh_walk(const bh_tree *t, long i, double acc[3], double *phi)
{
    const double *p = bh_b(t, i)->pos;
    long stack[8 * (BH_MAXDEPTH + 2)];
    int sp = 0, cost = 0;
    acc[0] = acc[1] = acc[2] = 0.0;
    *phi = 0.0;
    stack[sp++] = BH_ROOT;
    while (sp > 0) {
        const bh_cell *c = &t->cells[stack[--sp]];
        for (int k = 7; k >= 0; k--) { /* pushed in reverse: visited in octant order */
            int ch = c->child[k];
            if (ch == 0)
                continue;
            if (ch < 0) {
                long j = -(long)ch - 1;
                if (j != i) {
                    const bh_body *b = bh_b(t, j);
                    bh_interact(p, b->pos, b->mass, t->eps2, acc, phi);
                    cost++;
                }
                continue;
            }
            const bh_cell *cc = &t->cells[ch];
            double d[3] = {cc->cm[0] - p[0], cc->cm[1] - p[1], cc->cm[2] - p[2]};
            double r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            double size = 2.0 * cc->half;
            if (size * size < t->theta2 * r2) {
                bh_interact(p, cc->cm, cc->mass, t->eps2, acc, phi);
                cost++;
            } else {
                stack[sp++] = ch;
            }
        }
    }
    return cost;
}

/* Root cell enclosing the box [lo, hi] (a cube, slightly enlarged). */
static void bh_root(bh_tree *t, const double lo[3], const double hi[3])
{
    bh_cell *r = &t->cells[BH_ROOT];
    double side = 0.0;
    for (int k = 0; k < 3; k++) {
        r->center[k] = 0.5 * (lo[k] + hi[k]);
        if (hi[k] - lo[k] > side)
            side = hi[k] - lo[k];
    }
    r->half = 0.5 * side * 1.0001 + 1e-12;
    r->mass = 0.0;
    r->cm[0] = r->cm[1] = r->cm[2] = 0.0;
    for (int k = 0; k < 8; k++)
        r->child[k] = 0;
}

static void *bh_worker(void *p)
{
    bh_arg *a = p;
    bh_shared *g = a->g;
    bh_tree *t = &g->t;
    const int T = g->nthreads, tid = a->tid;
    long lo, hi;
    app_block_range(t->n, T, tid, &lo, &hi);
    const long cbeg = BH_ROOT + 1 + (long)tid * t->chunk, cend = cbeg + t->chunk;
    const double dthf = 0.5 * g->dt;
    long maxused = 0;

    app_barrier_wait(&g->bar);
    g->tstart[tid] = app_now();
    for (int step = 0; step < g->steps; step++) {
        double ts = app_now();
        /* bounding box of own bodies */
        double *bb = &g->bbox[tid * 6];
        for (int k = 0; k < 3; k++) {
            bb[k] = INFINITY;
            bb[3 + k] = -INFINITY;
        }
        for (long i = lo; i < hi; i++)
            for (int k = 0; k < 3; k++) {
                double x = bh_b(t, i)->pos[k];
                if (x < bb[k])
                    bb[k] = x;
                if (x > bb[3 + k])
                    bb[3 + k] = x;
            }
        app_barrier_wait(&g->bar);
        if (tid == 0) {
            double blo[3] = {INFINITY, INFINITY, INFINITY}, bhi[3] = {-INFINITY, -INFINITY, -INFINITY};
            for (int q = 0; q < T; q++)
                for (int k = 0; k < 3; k++) {
                    if (g->bbox[q * 6 + k] < blo[k])
                        blo[k] = g->bbox[q * 6 + k];
                    if (g->bbox[q * 6 + 3 + k] > bhi[k])
                        bhi[k] = g->bbox[q * 6 + 3 + k];
                }
            bh_root(t, blo, bhi);
        }
        app_barrier_wait(&g->bar);

        /* parallel tree build under cell locks (or, with --serial-tree, thread 0 alone) */
        long next = cbeg;
        if (!g->serial_tree) {
            for (long i = lo; i < hi; i++)
                bh_insert(t, i, &next, cend);
        } else if (tid == 0) {
            for (long i = 0; i < t->n; i++)
                bh_insert(t, i, &next, cend);
        }
        if (next - cbeg > maxused)
            maxused = next - cbeg;
        app_barrier_wait(&g->bar);

        /* centre of mass: grandchildren of the root round-robin, then the top two levels */
        const bh_cell *root = &t->cells[BH_ROOT];
        for (int k = 0; k < 64; k++) {
            if (k % T != tid)
                continue;
            int c1 = root->child[k / 8];
            if (c1 <= 0)
                continue;
            int c2 = t->cells[c1].child[k % 8];
            if (c2 > 0)
                bh_com(t, c2);
        }
        app_barrier_wait(&g->bar);
        if (tid == 0) {
            for (int k = 0; k < 8; k++)
                if (root->child[k] > 0)
                    bh_com_shallow(t, root->child[k]);
            bh_com_shallow(t, BH_ROOT);
            g->tree_s += app_now() - ts;
        }
        app_barrier_wait(&g->bar);

        /* forces on own bodies */
        for (long i = lo; i < hi; i++) {
            bh_body *b = bh_b(t, i);
            double acc[3], phi;
            int cost = bh_walk(t, i, acc, &phi);
            for (int k = 0; k < 3; k++) {
                b->acc_old[k] = b->acc[k];
                b->acc[k] = acc[k];
                if (step > 0)
                    b->vel[k] += (acc[k] - b->acc_old[k]) * dthf;
            }
            b->phi = phi;
            b->cost = cost;
        }
        app_barrier_wait(&g->bar);

        /* leapfrog update of own bodies */
        for (long i = lo; i < hi; i++) {
            bh_body *b = bh_b(t, i);
            for (int k = 0; k < 3; k++) {
                double dv = b->acc[k] * dthf;
                double vm = b->vel[k] + dv;
                b->pos[k] += vm * g->dt;
                b->vel[k] = vm + dv;
            }
        }
        app_barrier_wait(&g->bar);
    }
    g->tend[tid] = app_now();
    g->used[tid] = maxused; /* own slot, read by main after the join */
    return NULL;
}

/* Plummer model (Aarseth, Henon & Wielen), total mass 1, standard units. */
static void bh_plummer(bh_tree *t, unsigned long long seed)
{
    app_rng r;
    app_rng_seed(&r, seed);
    const double rsc = 3.0 * 3.14159265358979323846 / 16.0, vsc = sqrt(1.0 / rsc);
    double cmp[3] = {0, 0, 0}, cmv[3] = {0, 0, 0};
    for (long i = 0; i < t->n; i++) {
        bh_body *b = bh_b(t, i);
        memset(b, 0, sizeof *b);
        b->type = 1;
        b->mass = 1.0 / (double)t->n;
        double u;
        do
            u = app_rng_double(&r);
        while (u < 1e-6 || u > 0.999);
        double rad = 1.0 / sqrt(pow(u, -2.0 / 3.0) - 1.0);
        double dir[3], nn;
        do {
            for (int k = 0; k < 3; k++)
                dir[k] = 2.0 * app_rng_double(&r) - 1.0;
            nn = dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2];
        } while (nn > 1.0 || nn < 1e-4);
        for (int k = 0; k < 3; k++)
            b->pos[k] = rsc * rad * dir[k] / sqrt(nn);
        double x, y;
        do {
            x = app_rng_double(&r);
            y = 0.1 * app_rng_double(&r);
        } while (y > x * x * pow(1.0 - x * x, 3.5));
        double v = x * sqrt(2.0) * pow(1.0 + rad * rad, -0.25);
        do {
            for (int k = 0; k < 3; k++)
                dir[k] = 2.0 * app_rng_double(&r) - 1.0;
            nn = dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2];
        } while (nn > 1.0 || nn < 1e-4);
        for (int k = 0; k < 3; k++) {
            b->vel[k] = vsc * v * dir[k] / sqrt(nn);
            cmp[k] += b->pos[k] * b->mass;
            cmv[k] += b->vel[k] * b->mass;
        }
    }
    for (long i = 0; i < t->n; i++)
        for (int k = 0; k < 3; k++) {
            bh_body *b = bh_b(t, i);
            b->pos[k] -= cmp[k];
            b->vel[k] -= cmv[k];
        }
}

/* Runs the simulation on the bodies in g->t with nthreads threads. */
static void bh_run(bh_shared *g, int nthreads)
{
    g->nthreads = nthreads;
    g->tree_s = 0.0;
    app_barrier_init(&g->bar, nthreads);
    bh_arg *args = app_alloc((size_t)nthreads, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)nthreads, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < nthreads; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }
    app_run_team(nthreads, bh_worker, targs);
    free(args);
    free(targs);
}

/* Serial tree at the current positions, then tree vs direct forces for `samples` bodies.
 * Returns the RMS relative acceleration error. */
static double bh_accuracy(bh_tree *t, int samples)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (long i = 0; i < t->n; i++)
        for (int k = 0; k < 3; k++) {
            double x = bh_b(t, i)->pos[k];
            lo[k] = x < lo[k] ? x : lo[k];
            hi[k] = x > hi[k] ? x : hi[k];
        }
    bh_root(t, lo, hi);
    long next = BH_ROOT + 1;
    for (long i = 0; i < t->n; i++)
        bh_insert(t, i, &next, BH_ROOT + 1 + t->chunk);
    bh_com(t, BH_ROOT);
    double se = 0.0;
    int cnt = 0;
    for (int s = 0; s < samples && s < t->n; s++) {
        long i = (long)((double)s * (double)t->n / (double)samples);
        double at[3], ad[3] = {0, 0, 0}, phi, phid = 0.0;
        (void)bh_walk(t, i, at, &phi);
        for (long j = 0; j < t->n; j++)
            if (j != i)
                bh_interact(bh_b(t, i)->pos, bh_b(t, j)->pos, bh_b(t, j)->mass, t->eps2, ad, &phid);
        double num = 0.0, den = 0.0;
        for (int k = 0; k < 3; k++) {
            num += (at[k] - ad[k]) * (at[k] - ad[k]);
            den += ad[k] * ad[k];
        }
        se += den > 0.0 ? num / den : num;
        cnt++;
    }
    return cnt ? sqrt(se / cnt) : 0.0;
}

static const char *USAGE = "barnes: Barnes-Hut N-body (Plummer model) with a parallel tree build under cell locks\n"
                           "  -n N       bodies (default by size: tiny 1024, small 20000, medium 65536, large 220000)\n"
                           "  -i S       time steps (default 4)\n"
                           "  --theta X  opening tolerance (default 0.5)\n"
                           "  --padded   pad bodies from 120 to 128 bytes\n"
                           "  --serial-tree  thread 0 builds the tree alone (Cashmere's restructured Barnes)";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long NB[4] = {1024, 20000, 65536, 220000};
    long n = app_flag_long(argc, argv, &o, "-n", NB[app_size_index(&o)], 2, 50000000L);
    int steps = (int)app_flag_long(argc, argv, &o, "-i", 4, 1, 1000000);
    double theta = app_flag_double(argc, argv, NULL, "--theta", 0.5, 0.0, 2.0);
    int padded = app_flag_present(argc, argv, "--padded");
    int serial_tree = app_flag_present(argc, argv, "--serial-tree");
    int T = o.threads;

    bh_shared *g = app_alloc(1, sizeof *g, "barnes shared state");
    bh_tree *t = &g->t;
    t->n = n;
    t->stride = padded ? sizeof(bh_body_padded) : sizeof(bh_body);
    t->bodies = app_alloc((size_t)n, t->stride, "bodies");
    t->theta2 = theta * theta;
    t->eps2 = 0.05 * 0.05;
    /* One body per leaf needs fewer than n cells in all for these distributions; a chunk of
     * n + 1000 per thread (2n + 1000 for one thread) leaves room for any imbalance. */
    t->chunk = (T == 1 || serial_tree ? 2 * n : n) + 1000;
    t->cells = app_alloc((size_t)(BH_ROOT + 1) + (size_t)T * (size_t)t->chunk, sizeof(bh_cell), "cells");
    t->locks = app_alloc(BH_NLOCKS, sizeof(app_lock_t), "cell locks");
    for (int i = 0; i < BH_NLOCKS; i++)
        app_lock_init(&t->locks[i]);
    g->steps = steps;
    g->serial_tree = serial_tree;
    g->dt = 0.0125;
    g->bbox = app_alloc((size_t)T * 6, sizeof(double), "bounding boxes");
    g->used = app_alloc((size_t)T, sizeof(long), "cell chunk use");
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    bh_plummer(t, 123);
    char *init = NULL;
    if (o.verify && T > 1) {
        init = app_alloc((size_t)n, t->stride, "initial bodies");
        memcpy(init, t->bodies, (size_t)n * t->stride);
    }

    bh_run(g, T);
    double time_s = app_phase_time(g->tstart, g->tend, T), tree_s = g->tree_s;
    long maxcells = 0;
    for (int i = 0; i < T; i++)
        maxcells = g->used[i] > maxcells ? g->used[i] : maxcells;

    double ke = 0.0, pe = 0.0, cost = 0.0;
    for (long i = 0; i < n; i++) {
        const bh_body *b = bh_b(t, i);
        ke += 0.5 * b->mass * (b->vel[0] * b->vel[0] + b->vel[1] * b->vel[1] + b->vel[2] * b->vel[2]);
        pe += 0.5 * b->mass * b->phi;
        cost += b->cost;
    }
    double check = 0.0;
    for (long i = 0; i < n; i++)
        check += fabs(bh_b(t, i)->pos[0]) + fabs(bh_b(t, i)->pos[1]) + fabs(bh_b(t, i)->pos[2]);

    int ok = 0;
    char note[400];
    if (o.verify) {
        long diff = 0;
        if (init) {
            char *par = app_alloc((size_t)n, t->stride, "parallel result");
            memcpy(par, t->bodies, (size_t)n * t->stride);
            memcpy(t->bodies, init, (size_t)n * t->stride);
            bh_run(g, 1);
            for (long i = 0; i < n; i++) {
                const bh_body *a = (const bh_body *)(par + (size_t)i * t->stride), *b = bh_b(t, i);
                if (memcmp(a->pos, b->pos, sizeof a->pos) != 0 || memcmp(a->vel, b->vel, sizeof a->vel) != 0)
                    diff++;
            }
            free(par);
        }
        double err = bh_accuracy(t, 64);
        ok = diff == 0 && err <= 0.02 && isfinite(check);
        snprintf(note, sizeof note,
                 "N=%ld steps=%d theta=%.2f body=%zuB tree=%s KE=%.6f PE=%.6f interactions/body=%.0f tree_s=%.3f "
                 "cells/thread<=%ld differing_vs_1thread=%ld%s rms_force_err=%.4f tol=0.02",
                 n, steps, theta, t->stride, serial_tree ? "serial" : "parallel", ke, pe, cost / (double)n, tree_s,
                 maxcells, diff,
                 init ? "" : "(same run)", err);
    } else {
        snprintf(note, sizeof note, "N=%ld steps=%d theta=%.2f body=%zuB KE=%.6f PE=%.6f tree_s=%.3f (not verified)",
                 n, steps, theta, t->stride, ke, pe, tree_s);
    }
    app_finish("barnes", &o, time_s, ok, check, note);
}
