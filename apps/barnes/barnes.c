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

#include "barnes_kernel.h"

#define BH_NLOCKS 2048

typedef struct {
    bh_tree t;
    app_lock_t *locks; /* BH_NLOCKS cell locks */
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

/* Inserts body i; new cells come from [*next, end). Every slot access is under the cell's lock. */
static void bh_insert(bh_tree *t, app_lock_t *locks, long i, long *next, long end)
{
    const double *p = bh_pm(t, i);
    long c = BH_ROOT;
    for (int depth = 0;; depth++) {
        bh_depth_check(depth, i);
        bh_cell *cell = &t->cells[c];
        int oct = bh_octant(cell->center, p);
        app_lock_t *l = &locks[c % BH_NLOCKS];
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
        ncell->child[bh_octant(ncell->center, bh_pm(t, -(long)ch - 1))] = ch;
        cell->child[oct] = (int)nc; /* publish, still under the parent's lock */
        app_unlock(l);
        c = nc;
    }
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
                bh_insert(t, g->locks, i, &next, cend);
        } else if (tid == 0) {
            for (long i = 0; i < t->n; i++)
                bh_insert(t, g->locks, i, &next, cend);
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
            bh_set_acc(b, acc, phi, cost, step, dthf);
        }
        app_barrier_wait(&g->bar);

        /* leapfrog update of own bodies */
        for (long i = lo; i < hi; i++)
            bh_move(bh_b(t, i), g->dt);
        app_barrier_wait(&g->bar);
    }
    g->tend[tid] = app_now();
    g->used[tid] = maxused; /* own slot, read by main after the join */
    return NULL;
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

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    double theta;
    bh_parse(argc, argv, &o, "barnes", "Barnes-Hut N-body (Plummer model) with a parallel tree build under cell locks",
             "  --padded   pad bodies from 120 to 128 bytes\n"
             "  --serial-tree  thread 0 builds the tree alone (Cashmere's restructured Barnes)",
             &n, &steps, &theta);
    int padded = app_flag_present(argc, argv, "--padded");
    int serial_tree = app_flag_present(argc, argv, "--serial-tree");
    int T = o.threads;

    bh_shared *g = app_alloc(1, sizeof *g, "barnes shared state");
    bh_tree *t = &g->t;
    t->n = n;
    t->stride = padded ? sizeof(bh_body_padded) : sizeof(bh_body);
    t->bodies = app_alloc((size_t)n, t->stride, "bodies");
    t->theta2 = theta * theta;
    t->eps2 = BH_EPS2;
    /* One body per leaf needs fewer than n cells in all for these distributions; a chunk of
     * n + 1000 per thread (2n + 1000 for one thread) leaves room for any imbalance. */
    t->chunk = (T == 1 || serial_tree ? 2 * n : n) + 1000;
    t->cells = app_alloc((size_t)(BH_ROOT + 1) + (size_t)T * (size_t)t->chunk, sizeof(bh_cell), "cells");
    g->locks = app_alloc(BH_NLOCKS, sizeof(app_lock_t), "cell locks");
    for (int i = 0; i < BH_NLOCKS; i++)
        app_lock_init(&g->locks[i]);
    g->steps = steps;
    g->serial_tree = serial_tree;
    g->dt = BH_DT;
    g->bbox = app_alloc((size_t)T * 6, sizeof(double), "bounding boxes");
    g->used = app_alloc((size_t)T, sizeof(long), "cell chunk use");
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    bh_plummer(t->bodies, t->stride, t->n, 123);
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
