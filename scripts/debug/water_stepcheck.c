/*
 * water_stepcheck - DEBUG build of apps/water/water.c for the Water wrong-answer hunt (see
 * README.md here): after every force phase thread 0 recomputes all forces from the shared
 * positions and names the first wrong molecule and whose locked add it lacks; every thread logs
 * its critical sections privately (mmap) and prints the wrong molecule's entries, then exit 3.
 * Below: apps/water/water.c's own header.
 */
/*
 * water - Water-nsquared style molecular dynamics (SPLASH-2; Shasta/Cashmere seed 000 §3.2,
 * CRL/Split-C seed 002 §3.2).
 *
 * Owns: the molecule array, the rigid-ish 3-site water model (harmonic O-H and H-H bonds,
 * Coulomb between all charged sites of two molecules, Lennard-Jones between oxygens, all
 * within a molecule-based cutoff and periodic minimum image), the velocity-Verlet integrator,
 * and the check against a serial recomputation.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Sharing pattern (as Water-nsquared): the shared array of molecule structures (288 bytes each)
 * is split into equal contiguous chunks, one per thread. Each step:
 *   predict + intra-molecular forces on own molecules;                     barrier
 *   inter-molecular forces: thread p computes the pairs (i, i+1 .. i+n/2) for its molecules i,
 *     accumulating into a private force buffer, then adds each touched molecule's contribution
 *     into the shared molecule under THAT MOLECULE'S LOCK (per-molecule locks: the migratory
 *     sharing the seed describes); the potential energy is summed under a global lock; barrier
 *   correct (velocity update) on own molecules; kinetic energy summed under the lock; barrier
 *
 * Check: a serial recomputation (plain loop over all pairs i<j with the same pair function and
 * integrator) from the same initial state; final positions must agree within 1e-9 of the box
 * length and the final energies within relative 1e-9 (only the force summation order differs).
 */
#include "app.h"

#include "water_kernel.h"

typedef struct {
    long n;
    int steps;
    int nthreads;
    double box, cutoff2, dt;
    wt_mol *mol;
    app_lock_t *mlock;  /* one lock per molecule */
    double *pforce;     /* nthreads private buffers of n*9 doubles, pstride apart (whole pages) */
    size_t pstride;
    app_lock_t elock;   /* energy sums */
    double *epot, *ekin; /* per step totals */
    app_barrier bar;
    double *tstart, *tend; /* per-thread phase start/end stamps */
    int *tnode;
    volatile long bad_mol, bad_step;
    long *seq;
} wt_shared;
#include <sys/mman.h>
#include <time.h>
typedef struct { int step, j, kind; double before, after; long ta, tb, seq; } dbg_ent;
static long dbg_now(void) { struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); return ts.tv_sec * 1000000000L + ts.tv_nsec; }
#define DBG_MAX 40000


#include <squall.h>
static void dbg_check(wt_shared *g, int step);


typedef struct {
    wt_shared *g;
    int tid;
} wt_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
static void *wt_worker(void *p)
{
    wt_arg *a = p;
    wt_shared *g = a->g;
    const long n = g->n;
    long lo, hi;
    app_block_range(n, g->nthreads, a->tid, &lo, &hi);
    double (*pf)[WT_SITES][3] = (double (*)[WT_SITES][3])(g->pforce + (size_t)a->tid * g->pstride);
    const long half = n / 2;
    dbg_ent *log = mmap(NULL, sizeof(dbg_ent) * DBG_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long nlog = 0;

    g->tnode[a->tid] = squall_rank();
    app_barrier_wait(&g->bar);
    if (a->tid == 0)
        app_stats_mark(); /* Squall statistics: the timed phase starts */
    g->tstart[a->tid] = app_now();
    for (int step = 0; step < g->steps; step++) {
        /* predict + intra-molecular forces on own molecules */
        double upot = 0.0;
        for (long i = lo; i < hi; i++) {
            double b0 = g->mol[i].force[0][1];
            long ta = dbg_now();
            wt_predict(&g->mol[i], g->dt, g->box);
            upot += wt_intra(&g->mol[i], g->mol[i].force);
            if (nlog < DBG_MAX)
                log[nlog++] = (dbg_ent){step, (int)i, 0, b0, g->mol[i].force[0][1], ta, dbg_now(), -1};
        }
        app_barrier_wait(&g->bar);

        /* inter-molecular forces into the private buffer */
        memset(pf, 0, sizeof(double) * (size_t)n * 9);
        for (long i = lo; i < hi; i++) {
            long cnt = (n % 2 == 0 && i >= half) ? half - 1 : half; /* each pair once */
            for (long o = 1; o <= cnt; o++) {
                long j = (i + o) % n;
                upot += wt_pair(&g->mol[i], &g->mol[j], g->box, g->cutoff2, pf[i], pf[j]);
            }
        }
        /* add the contributions into the shared molecules, each under its own lock; the
         * touched range is [lo, hi + n/2), visited from lo so threads start apart */
        long touched = (hi - lo) + half;
        if (touched > n)
            touched = n;
        if (hi > lo) {
            for (long o = 0; o < touched; o++) {
                long j = (lo + o) % n;
                app_lock(&g->mlock[j]);
                long ta = dbg_now();
                double b0 = g->mol[j].force[0][1];
                long sq = g->seq[j];
                g->seq[j] = sq + 1;
                for (int s = 0; s < WT_SITES; s++)
                    for (int k = 0; k < 3; k++)
                        g->mol[j].force[s][k] += pf[j][s][k];
                if (nlog < DBG_MAX)
                    log[nlog++] = (dbg_ent){step, (int)j, 1, b0, g->mol[j].force[0][1], ta, dbg_now(), sq};
                app_unlock(&g->mlock[j]);
            }
        }
        app_lock(&g->elock);
        g->epot[step] += upot;
        app_unlock(&g->elock);
        app_barrier_wait(&g->bar);
        if (a->tid == 0)
            dbg_check(g, step);
        app_barrier_wait(&g->bar);
        if (g->bad_mol >= 0) {
            for (long e = 0; e < nlog; e++)
                if (log[e].j == g->bad_mol && log[e].step >= g->bad_step - 1)
                    fprintf(stderr, "LOG t%d node%d step %d mol %d %s before %.17g after %.17g ta %ld tb %ld seq %ld page %#lx\n", a->tid,
                            g->tnode[a->tid], log[e].step, log[e].j, log[e].kind ? "add" : "own", log[e].before,
                            log[e].after, log[e].ta, log[e].tb, log[e].seq, (unsigned long)((uintptr_t)&g->mol[log[e].j].force[0][1] >> 12));
            fflush(stderr);
            app_barrier_wait(&g->bar);
            if (a->tid == 0)
                exit(3);
            app_barrier_wait(&g->bar);
        }
        nlog = 0;

        /* correct own molecules */
        double ke = 0.0;
        for (long i = lo; i < hi; i++)
            ke += wt_correct(&g->mol[i], g->dt);
        app_lock(&g->elock);
        g->ekin[step] += ke;
        app_unlock(&g->elock);
        app_barrier_wait(&g->bar);
    }
    g->tend[a->tid] = app_now();
    if (a->tid == 0)
        app_stats_mark(); /* ... and ends (every thread passed the step's last barrier) */
    return NULL;
}

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    wt_parse(argc, argv, &o, "water", "Water-nsquared style molecular dynamics with per-molecule locks", &n, &steps);
    int T = o.threads;

    wt_shared *g = app_alloc(1, sizeof *g, "water shared state");
    g->n = n;
    g->steps = steps;
    g->nthreads = T;
    g->dt = 0.004;
    g->mol = app_alloc((size_t)n, sizeof(wt_mol), "molecules");
    g->box = wt_init(g->mol, n);
    double rc = 0.5 * g->box;
    g->cutoff2 = rc * rc;
    wt_initial_forces(g->mol, n, g->box, g->cutoff2);
    wt_mol *init = NULL;
    if (o.verify) {
        init = app_alloc((size_t)n, sizeof(wt_mol), "reference molecules");
        memcpy(init, g->mol, sizeof(wt_mol) * (size_t)n);
    }
    g->mlock = app_alloc((size_t)n, sizeof(app_lock_t), "molecule locks");
    for (long i = 0; i < n; i++)
        app_lock_init(&g->mlock[i]);
    /* thread t's private buffer is the t-th slice, page-aligned, first written by t itself */
    g->pstride = ((size_t)n * 9 + 511) / 512 * 512;
    g->pforce = app_alloc_uninit((size_t)T * g->pstride, sizeof(double), "private force buffers");
    app_lock_init(&g->elock);
    g->epot = app_alloc((size_t)steps, sizeof(double), "potential energies");
    g->ekin = app_alloc((size_t)steps, sizeof(double), "kinetic energies");
    app_barrier_init(&g->bar, T);
    g->tstart = app_alloc((size_t)T, sizeof(double), "phase start stamps");
    g->tend = app_alloc((size_t)T, sizeof(double), "phase end stamps");
    g->tnode = app_alloc((size_t)T, sizeof(int), "thread nodes");
    g->seq = app_alloc((size_t)n, sizeof(long), "lock sequence numbers");
    for (long i = 0; i < n; i++)
        g->seq[i] = 0;
    g->bad_mol = -1;
    g->bad_step = -1;
    wt_arg *args = app_alloc((size_t)T, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)T, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < T; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }

    app_run_team(T, wt_worker, targs);
    double time_s = app_phase_time(g->tstart, g->tend, T);
    double etot = g->epot[steps - 1] + g->ekin[steps - 1];

    int ok = 0;
    char note[320];
    if (o.verify) {
        double rtot, maxd, de;
        ok = wt_verify(init, g->mol, n, steps, g->box, g->cutoff2, g->dt, g->epot, g->ekin, etot, &rtot, &maxd, &de);
        snprintf(note, sizeof note,
                 "N=%ld steps=%d box=%.3f E0=%.6f E=%.6f Eref=%.6f max_pos_diff/box=%.3g max_energy_rel_diff=%.3g tol=1e-9",
                 n, steps, g->box, g->epot[0] + g->ekin[0], etot, rtot, maxd, de);
    } else {
        snprintf(note, sizeof note, "N=%ld steps=%d box=%.3f E0=%.6f E=%.6f (not verified)", n, steps, g->box,
                 g->epot[0] + g->ekin[0], etot);
    }
    app_finish("water", &o, time_s, ok, etot, note);
}

/* Debug: after the force phase, recompute every molecule's force from the shared positions and
 * name any molecule whose shared force differs, with each thread's share of it. */
static void dbg_check(wt_shared *g, int step)
{
    long n = g->n;
    int T = g->nthreads;
    static wt_mol *ref;
    static double (*per)[WT_SITES][3]; /* per[t*n + j]: thread t's contributions to j */
    if (!ref) {
        ref = malloc(sizeof(wt_mol) * (size_t)n);
        per = malloc(sizeof(double) * 9 * (size_t)n * (size_t)T);
    }
    memcpy(ref, g->mol, sizeof(wt_mol) * (size_t)n);
    memset(per, 0, sizeof(double) * 9 * (size_t)n * (size_t)T);
    const long half = n / 2;
    for (long i = 0; i < n; i++) {
        memset(ref[i].force, 0, sizeof ref[i].force);
        wt_intra(&ref[i], ref[i].force);
    }
    for (int t = 0; t < T; t++) {
        long lo, hi;
        app_block_range(n, T, t, &lo, &hi);
        for (long i = lo; i < hi; i++) {
            long cnt = (n % 2 == 0 && i >= half) ? half - 1 : half;
            for (long o = 1; o <= cnt; o++) {
                long j = (i + o) % n;
                wt_pair(&ref[i], &ref[j], g->box, g->cutoff2, per[(size_t)t * n + i], per[(size_t)t * n + j]);
            }
        }
    }
    int bad = 0;
    for (long j = 0; j < n; j++) {
        for (int s = 0; s < WT_SITES; s++)
            for (int k = 0; k < 3; k++) {
                double want = ref[j].force[s][k];
                for (int t = 0; t < T; t++)
                    want += per[(size_t)t * n + j][s][k];
                double got = g->mol[j].force[s][k];
                double d = got - want;
                if (fabs(d) > 1e-9 * (1.0 + fabs(want))) {
                    bad++;
                    if (g->bad_mol < 0) {
                        g->bad_mol = j;
                        g->bad_step = step;
                        fprintf(stderr, "DBG mol %ld force[0][1] per-thread:", j);
                        for (int t = 0; t < T; t++)
                            fprintf(stderr, " t%d %.17g", t, per[(size_t)t * n + j][0][1]);
                        fprintf(stderr, " intra %.17g\n", ref[j].force[0][1]);
                    }
                    if (bad <= 40) {
                        char cand[256] = "";
                        int len = 0;
                        for (int t = 0; t < T; t++) {
                            double c = per[(size_t)t * n + j][s][k];
                            if (fabs(c + d) <= 1e-9 * (1.0 + fabs(c)))
                                len += snprintf(cand + len, sizeof cand - len, " lost-add-of-t%d(node%d)", t, g->tnode[t]);
                        }
                        long lo, hi, owner = -1;
                        for (int t = 0; t < T; t++) {
                            app_block_range(n, T, t, &lo, &hi);
                            if (j >= lo && j < hi)
                                owner = t;
                        }
                        fprintf(stderr,
                                "DBG step %d mol %ld site %d k %d got %.17g want %.17g diff %.3g addr %p page %#lx owner t%ld(node%d)%s\n",
                                step, j, s, k, got, want, d, (void *)&g->mol[j].force[s][k],
                                (unsigned long)((uintptr_t)&g->mol[j].force[s][k] >> 12), owner,
                                owner >= 0 ? g->tnode[owner] : -1, cand);
                    }
                }
            }
    }
    if (bad) {
        fprintf(stderr, "DBG step %d: %d force components wrong\n", step, bad);
        fflush(stderr);
    }
}
