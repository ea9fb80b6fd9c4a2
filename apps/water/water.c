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

#define WT_SITES 3 /* O, H1, H2 */

typedef struct {
    double pos[WT_SITES][3];
    double vel[WT_SITES][3];
    double force[WT_SITES][3]; /* this step's forces (inter part added under the molecule's lock) */
    double fold[WT_SITES][3];  /* previous step's forces */
} wt_mol;

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
} wt_shared;

typedef struct {
    wt_shared *g;
    int tid;
} wt_arg;

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
static double wt_phase_time(const double *start, const double *end, int n)
{
    double lo = start[0], hi = end[0];
    for (int i = 1; i < n; i++) {
        lo = start[i] < lo ? start[i] : lo;
        hi = end[i] > hi ? end[i] : hi;
    }
    return hi - lo;
}

static const double WT_MASS[WT_SITES] = {16.0, 1.0, 1.0};
static const double WT_CHARGE[WT_SITES] = {-0.8, 0.4, 0.4};
static const double WT_ROH = 0.33;    /* O-H bond length */
static const double WT_RHH = 0.52208; /* H-H distance for a 104.5 degree angle */
static const double WT_KB = 50.0;     /* bond stiffness */

static void wt_spring(const double *a, const double *b, double r0, double *fa, double *fb, double *u)
{
    double d[3], r2 = 0.0;
    for (int k = 0; k < 3; k++) {
        d[k] = b[k] - a[k];
        r2 += d[k] * d[k];
    }
    double r = sqrt(r2), dr = r - r0;
    double s = -WT_KB * dr / r; /* force on b = s * d */
    for (int k = 0; k < 3; k++) {
        fb[k] += s * d[k];
        fa[k] -= s * d[k];
    }
    *u += 0.5 * WT_KB * dr * dr;
}

/* Intra-molecular forces of m (added to f), returns the intra potential energy. */
static double wt_intra(const wt_mol *m, double f[WT_SITES][3])
{
    double u = 0.0;
    wt_spring(m->pos[0], m->pos[1], WT_ROH, f[0], f[1], &u);
    wt_spring(m->pos[0], m->pos[2], WT_ROH, f[0], f[2], &u);
    wt_spring(m->pos[1], m->pos[2], WT_RHH, f[1], f[2], &u);
    return u;
}

/* Inter-molecular interaction of molecules a and b: forces added to fa and fb, returns the
 * potential energy (0 beyond the cutoff). Periodic minimum image on the oxygen separation. */
static double wt_pair(const wt_mol *a, const wt_mol *b, double box, double cutoff2, double fa[WT_SITES][3],
                      double fb[WT_SITES][3])
{
    double shift[3], r2 = 0.0;
    for (int k = 0; k < 3; k++) {
        double d = b->pos[0][k] - a->pos[0][k];
        shift[k] = -box * nearbyint(d / box);
        d += shift[k];
        r2 += d * d;
    }
    if (r2 >= cutoff2)
        return 0.0;
    double u = 0.0;
    /* Lennard-Jones between the oxygens (sigma = 1, epsilon = 1). */
    {
        double inv2 = 1.0 / r2, inv6 = inv2 * inv2 * inv2;
        u += 4.0 * (inv6 * inv6 - inv6);
        double s = 24.0 * (2.0 * inv6 * inv6 - inv6) * inv2; /* force on b = s * d */
        for (int k = 0; k < 3; k++) {
            double d = b->pos[0][k] + shift[k] - a->pos[0][k];
            fb[0][k] += s * d;
            fa[0][k] -= s * d;
        }
    }
    /* Coulomb between all sites. */
    for (int i = 0; i < WT_SITES; i++) {
        for (int j = 0; j < WT_SITES; j++) {
            double d[3], q2 = 0.0;
            for (int k = 0; k < 3; k++) {
                d[k] = b->pos[j][k] + shift[k] - a->pos[i][k];
                q2 += d[k] * d[k];
            }
            double qq = WT_CHARGE[i] * WT_CHARGE[j];
            double r = sqrt(q2);
            u += qq / r;
            double s = qq / (q2 * r);
            for (int k = 0; k < 3; k++) {
                fb[j][k] += s * d[k];
                fa[i][k] -= s * d[k];
            }
        }
    }
    return u;
}

/* Velocity-Verlet position half: x += v dt + f/m dt^2/2, wrap the molecule into the box, clear f. */
static void wt_predict(wt_mol *m, double dt, double box)
{
    for (int s = 0; s < WT_SITES; s++)
        for (int k = 0; k < 3; k++)
            m->pos[s][k] += m->vel[s][k] * dt + 0.5 * m->fold[s][k] / WT_MASS[s] * dt * dt;
    for (int k = 0; k < 3; k++) {
        double w = -box * floor(m->pos[0][k] / box);
        if (w != 0.0)
            for (int s = 0; s < WT_SITES; s++)
                m->pos[s][k] += w;
    }
    memset(m->force, 0, sizeof m->force);
}

/* Velocity-Verlet velocity half; returns the kinetic energy. */
static double wt_correct(wt_mol *m, double dt)
{
    double ke = 0.0;
    for (int s = 0; s < WT_SITES; s++)
        for (int k = 0; k < 3; k++) {
            m->vel[s][k] += 0.5 * (m->fold[s][k] + m->force[s][k]) / WT_MASS[s] * dt;
            m->fold[s][k] = m->force[s][k];
            ke += 0.5 * WT_MASS[s] * m->vel[s][k] * m->vel[s][k];
        }
    return ke;
}

static void *wt_worker(void *p)
{
    wt_arg *a = p;
    wt_shared *g = a->g;
    const long n = g->n;
    long lo, hi;
    app_block_range(n, g->nthreads, a->tid, &lo, &hi);
    double (*pf)[WT_SITES][3] = (double (*)[WT_SITES][3])(g->pforce + (size_t)a->tid * g->pstride);
    const long half = n / 2;

    app_barrier_wait(&g->bar);
    if (a->tid == 0)
        app_stats_mark(); /* Squall statistics: the timed phase starts */
    g->tstart[a->tid] = app_now();
    for (int step = 0; step < g->steps; step++) {
        /* predict + intra-molecular forces on own molecules */
        double upot = 0.0;
        for (long i = lo; i < hi; i++) {
            wt_predict(&g->mol[i], g->dt, g->box);
            upot += wt_intra(&g->mol[i], g->mol[i].force);
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
                for (int s = 0; s < WT_SITES; s++)
                    for (int k = 0; k < 3; k++)
                        g->mol[j].force[s][k] += pf[j][s][k];
                app_unlock(&g->mlock[j]);
            }
        }
        app_lock(&g->elock);
        g->epot[step] += upot;
        app_unlock(&g->elock);
        app_barrier_wait(&g->bar);

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

/* Serial reference: all pairs i<j, same functions. Returns the final total energy. */
static double wt_reference(wt_mol *m, long n, int steps, double box, double cutoff2, double dt, double *epot,
                           double *ekin)
{
    for (int step = 0; step < steps; step++) {
        double u = 0.0, ke = 0.0;
        for (long i = 0; i < n; i++) {
            wt_predict(&m[i], dt, box);
            u += wt_intra(&m[i], m[i].force);
        }
        for (long i = 0; i < n; i++)
            for (long j = i + 1; j < n; j++)
                u += wt_pair(&m[i], &m[j], box, cutoff2, m[i].force, m[j].force);
        for (long i = 0; i < n; i++)
            ke += wt_correct(&m[i], dt);
        epot[step] = u;
        ekin[step] = ke;
    }
    return steps ? epot[steps - 1] + ekin[steps - 1] : 0.0;
}

/* Molecules on a cubic lattice (spacing 1.3), random orientations and small random velocities. */
static double wt_init(wt_mol *m, long n)
{
    long side = 1;
    while (side * side * side < n)
        side++;
    const double a = 1.3, box = a * (double)side;
    const double half = 0.5 * 104.5 * 3.14159265358979323846 / 180.0;
    app_rng r;
    app_rng_seed(&r, 2024);
    for (long i = 0; i < n; i++) {
        long x = i % side, y = (i / side) % side, z = i / (side * side);
        double o[3] = {(x + 0.5) * a, (y + 0.5) * a, (z + 0.5) * a};
        /* random orthonormal pair e1, e2 */
        double e1[3], e2[3], t[3], nn;
        do {
            for (int k = 0; k < 3; k++)
                e1[k] = 2.0 * app_rng_double(&r) - 1.0;
            nn = e1[0] * e1[0] + e1[1] * e1[1] + e1[2] * e1[2];
        } while (nn < 1e-2 || nn > 1.0);
        for (int k = 0; k < 3; k++)
            e1[k] /= sqrt(nn);
        do {
            for (int k = 0; k < 3; k++)
                t[k] = 2.0 * app_rng_double(&r) - 1.0;
            double dot = t[0] * e1[0] + t[1] * e1[1] + t[2] * e1[2];
            for (int k = 0; k < 3; k++)
                e2[k] = t[k] - dot * e1[k];
            nn = e2[0] * e2[0] + e2[1] * e2[1] + e2[2] * e2[2];
        } while (nn < 1e-2);
        for (int k = 0; k < 3; k++)
            e2[k] /= sqrt(nn);
        for (int k = 0; k < 3; k++) {
            m[i].pos[0][k] = o[k];
            m[i].pos[1][k] = o[k] + WT_ROH * (cos(half) * e1[k] + sin(half) * e2[k]);
            m[i].pos[2][k] = o[k] + WT_ROH * (cos(half) * e1[k] - sin(half) * e2[k]);
        }
        for (int s = 0; s < WT_SITES; s++)
            for (int k = 0; k < 3; k++)
                m[i].vel[s][k] = (app_rng_double(&r) - 0.5) * 0.4 / sqrt(WT_MASS[s]);
    }
    return box;
}

/* Forces of the initial configuration into fold (so the first predict uses real forces). */
static void wt_initial_forces(wt_mol *m, long n, double box, double cutoff2)
{
    for (long i = 0; i < n; i++)
        memset(m[i].force, 0, sizeof m[i].force);
    for (long i = 0; i < n; i++)
        (void)wt_intra(&m[i], m[i].force);
    for (long i = 0; i < n; i++)
        for (long j = i + 1; j < n; j++)
            (void)wt_pair(&m[i], &m[j], box, cutoff2, m[i].force, m[j].force);
    for (long i = 0; i < n; i++)
        memcpy(m[i].fold, m[i].force, sizeof m[i].fold);
}

static const char *USAGE = "water: Water-nsquared style molecular dynamics with per-molecule locks\n"
                           "  -n N     molecules (default by size: tiny 216, small 2048, medium 4096, large 12288)\n"
                           "  -i S     time steps (default by size: tiny 3, small 9, medium 15, large 6)";

int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, USAGE);
    static const long NM[4] = {216, 2048, 4096, 12288};
    static const long NS[4] = {3, 9, 15, 6};
    int si = app_size_index(&o);
    long n = app_flag_long(argc, argv, &o, "-n", NM[si], 2, 10000000L);
    int steps = (int)app_flag_long(argc, argv, &o, "-i", NS[si], 1, 1000000);
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
    wt_arg *args = app_alloc((size_t)T, sizeof *args, "thread arguments");
    void **targs = app_alloc((size_t)T, sizeof(void *), "thread argument pointers");
    for (int i = 0; i < T; i++) {
        args[i].g = g;
        args[i].tid = i;
        targs[i] = &args[i];
    }

    app_run_team(T, wt_worker, targs);
    double time_s = wt_phase_time(g->tstart, g->tend, T);
    double etot = g->epot[steps - 1] + g->ekin[steps - 1];

    int ok = 0;
    char note[320];
    if (o.verify) {
        double *rp = app_alloc((size_t)steps, sizeof(double), "reference potentials");
        double *rk = app_alloc((size_t)steps, sizeof(double), "reference kinetics");
        double rtot = wt_reference(init, n, steps, g->box, g->cutoff2, g->dt, rp, rk);
        double maxd = 0.0;
        for (long i = 0; i < n; i++)
            for (int s = 0; s < WT_SITES; s++)
                for (int k = 0; k < 3; k++) {
                    double d = fabs(init[i].pos[s][k] - g->mol[i].pos[s][k]) / g->box;
                    if (!(d <= maxd))
                        maxd = d;
                }
        double de = 0.0;
        for (int s = 0; s < steps; s++) {
            double d1 = app_rel_diff(rp[s], g->epot[s]), d2 = app_rel_diff(rk[s], g->ekin[s]);
            if (!(d1 <= de))
                de = d1;
            if (!(d2 <= de))
                de = d2;
        }
        ok = maxd <= 1e-9 && de <= 1e-9 && isfinite(etot);
        snprintf(note, sizeof note,
                 "N=%ld steps=%d box=%.3f E0=%.6f E=%.6f Eref=%.6f max_pos_diff/box=%.3g max_energy_rel_diff=%.3g tol=1e-9",
                 n, steps, g->box, g->epot[0] + g->ekin[0], etot, rtot, maxd, de);
        free(rp);
        free(rk);
    } else {
        snprintf(note, sizeof note, "N=%ld steps=%d box=%.3f E0=%.6f E=%.6f (not verified)", n, steps, g->box,
                 g->epot[0] + g->ekin[0], etot);
    }
    app_finish("water", &o, time_s, ok, etot, note);
}
