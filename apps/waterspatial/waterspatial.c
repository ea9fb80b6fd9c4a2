/*
 * waterspatial - SPLASH-2 WATER-SPATIAL-style molecular dynamics: molecules in a uniform 3-D
 * grid of cells, forces from the neighbouring cells within the cutoff, cell lists updated as
 * molecules move (seed 000 §3.2 Water-spatial; issue 21 item 6).
 *
 * Owns: the cell grid (a linked list of molecules per cell, a lock per cell), the partition of
 * the cells among threads, the step loop, and the check against a sequential cell-list
 * simulation. The water model itself (3-site molecules, bonds, Coulomb and Lennard-Jones,
 * cutoff with periodic minimum image, velocity Verlet, initial lattice) is
 * apps/water/water_kernel.h, shared with apps/water.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Written as outsiders write it: plain globals for the molecules, the cell heads, the list
 * links and the cell locks. The cutoff is a fixed 2.6 (two lattice spacings) and the box is
 * cut into C x C x C cells of edge box/C >= cutoff, so every molecule within the cutoff of a
 * molecule lies in its own cell or one of the 26 around it. The cells are numbered z-major
 * and each thread owns a contiguous range of them (slabs in z). Each step:
 *   predict (x += v dt + ...) and intra-molecular forces of the molecules in own cells; barrier
 *   move: every molecule of an own cell whose oxygen left the cell is unlinked from it and
 *     linked into its new cell, each list changed under that cell's lock (the new cell may
 *     belong to another thread);                                                    barrier
 *   inter-molecular forces: for every molecule of an own cell, every molecule of the 27
 *     cells around (each pair seen from both sides, each side adding only its own force:
 *     no locks); half of each pair's energy; the thread's potential summed under a lock;
 *                                                                                   barrier
 *   correct (velocities) of own molecules; kinetic energy summed under the lock;   barrier
 *
 * Sharing pattern: a thread reads the molecules of the cells next to its slab (the boundary
 * planes of its neighbours' slabs) each step; molecules migrate between cells and so between
 * threads, and the links of a cell list are written by whoever moves a molecule into it
 * (the cell-list updates of the seed, under per-cell locks); energies under one lock.
 *
 * Check: main copies the initial state, and after the team ends reruns the whole simulation
 * sequentially with its own cell lists rebuilt from scratch every step (a plain loop over
 * the half shell of neighbour cells, each pair once); positions within 1e-9 of the box and
 * every step's energies within relative 1e-9 (only the summation order differs).
 */
#include "app.h"

#include "../water/water_kernel.h"

static const char *ws_usage_what = "Water-spatial: molecules in a 3-D grid of cells, per-cell locks on the cell lists";

#define CUTOFF 2.6

/* Shared state: plain globals. */
APP_GLOBAL static long nmol;
APP_GLOBAL static int steps, nthreads, ncell; /* ncell cells per edge */
APP_GLOBAL static double box, cutoff2, dt;
APP_GLOBAL static wt_mol *mol;
APP_GLOBAL static int *cell_head;   /* ncell^3: first molecule of each cell, -1 if none */
APP_GLOBAL static int *mol_next;    /* per molecule: the next one in its cell, -1 at the end */
APP_GLOBAL static app_lock_t *cell_lock;
APP_GLOBAL static app_lock_t energy_lock;
APP_GLOBAL static double *epot, *ekin; /* per step */
APP_GLOBAL static long *moves;         /* per thread: molecules it moved to another cell */
APP_GLOBAL static app_barrier bar;
APP_GLOBAL static double *t_start, *t_end;

/* Cell of a position (already wrapped into [0, box)). */
static int cell_of(const double *p, int nc, double bx)
{
    int c[3];
    for (int k = 0; k < 3; k++) {
        c[k] = (int)(p[k] / bx * nc);
        c[k] = c[k] < 0 ? 0 : (c[k] >= nc ? nc - 1 : c[k]);
    }
    return (c[2] * nc + c[1]) * nc + c[0];
}

/* Cell (x, y, z) moved by (dx, dy, dz) with periodic wrap. */
static int cell_near(int c, int dx, int dy, int dz, int nc)
{
    int x = c % nc, y = (c / nc) % nc, z = c / (nc * nc);
    x = (x + dx + nc) % nc;
    y = (y + dy + nc) % nc;
    z = (z + dz + nc) % nc;
    return (z * nc + y) * nc + x;
}

/* water_kernel.h's lattice puts every oxygen mid-cell, where a few steps of its cold start
 * move none of them to another cell. Liquid-like start instead: the lattice shifted by half a
 * spacing (so half its planes lie on cell faces), each molecule moved rigidly by up to
 * +-0.12 per axis, and velocities VEL_SCALE times the kernel's. */
#define VEL_SCALE 4.0
static void ws_displace(wt_mol *m, long n, double bx)
{
    app_rng r;
    app_rng_seed(&r, 4242);
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            double s = -0.65 + 0.24 * (app_rng_double(&r) - 0.5);
            double w = m[i].pos[0][k] + s;
            s -= bx * floor(w / bx); /* wrap the oxygen into [0, box) */
            for (int a = 0; a < WT_SITES; a++)
                m[i].pos[a][k] += s;
        }
        for (int a = 0; a < WT_SITES; a++)
            for (int k = 0; k < 3; k++)
                m[i].vel[a][k] *= VEL_SCALE;
    }
}

static void *ws_worker(void *arg)
{
    int tid = app_tid(arg);
    long c0, c1;
    app_block_range((long)ncell * ncell * ncell, nthreads, tid, &c0, &c1);
    long moved = 0;
    app_barrier_wait(&bar);
    t_start[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    for (int step = 0; step < steps; step++) {
        /* predict + intra-molecular forces */
        double u = 0.0;
        for (long c = c0; c < c1; c++)
            for (int i = cell_head[c]; i >= 0; i = mol_next[i]) {
                wt_predict(&mol[i], dt, box);
                u += wt_intra(&mol[i], mol[i].force);
            }
        app_barrier_wait(&bar);

        /* move molecules that left their cell */
        for (long c = c0; c < c1; c++) {
            int leaving = -1;
            app_lock(&cell_lock[c]);
            int *link = &cell_head[c];
            while (*link >= 0) {
                int i = *link;
                if (cell_of(mol[i].pos[0], ncell, box) != c) {
                    *link = mol_next[i];
                    mol_next[i] = leaving;
                    leaving = i;
                } else {
                    link = &mol_next[i];
                }
            }
            app_unlock(&cell_lock[c]);
            while (leaving >= 0) {
                int i = leaving;
                leaving = mol_next[i];
                int d = cell_of(mol[i].pos[0], ncell, box);
                app_lock(&cell_lock[d]);
                mol_next[i] = cell_head[d];
                cell_head[d] = i;
                app_unlock(&cell_lock[d]);
                moved++;
            }
        }
        app_barrier_wait(&bar);

        /* inter-molecular forces from the 27 cells around each own cell */
        double half = 0.0;
        for (long c = c0; c < c1; c++)
            for (int i = cell_head[c]; i >= 0; i = mol_next[i]) {
                double fi[WT_SITES][3], fj[WT_SITES][3];
                memset(fi, 0, sizeof fi);
                memset(fj, 0, sizeof fj);
                for (int dz = -1; dz <= 1; dz++)
                    for (int dy = -1; dy <= 1; dy++)
                        for (int dx = -1; dx <= 1; dx++) {
                            int nb = cell_near((int)c, dx, dy, dz, ncell);
                            for (int j = cell_head[nb]; j >= 0; j = mol_next[j])
                                if (j != i)
                                    half += wt_pair(&mol[i], &mol[j], box, cutoff2, fi, fj);
                        }
                for (int s = 0; s < WT_SITES; s++)
                    for (int k = 0; k < 3; k++)
                        mol[i].force[s][k] += fi[s][k];
            }
        app_lock(&energy_lock);
        epot[step] += u + 0.5 * half;
        app_unlock(&energy_lock);
        app_barrier_wait(&bar);

        /* correct own molecules */
        double ke = 0.0;
        for (long c = c0; c < c1; c++)
            for (int i = cell_head[c]; i >= 0; i = mol_next[i])
                ke += wt_correct(&mol[i], dt);
        app_lock(&energy_lock);
        ekin[step] += ke;
        app_unlock(&energy_lock);
        app_barrier_wait(&bar);
    }
    moves[tid] = moved;
    t_end[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    return NULL;
}

/* Sequential inter-molecular forces of m (added to each force) over cell lists built from
 * scratch (molecule ids bucketed per cell in id order), each pair once over the half shell of
 * neighbour cells; returns the potential energy. */
static double ws_cell_forces(wt_mol *m, long n)
{
    long nc3 = (long)ncell * ncell * ncell;
    int *count = app_alloc((size_t)nc3 + 1, sizeof(int), "reference cell counts");
    int *fill = app_alloc((size_t)nc3, sizeof(int), "reference fill");
    int *members = app_alloc((size_t)n, sizeof(int), "reference cell members");
    int *cellof = app_alloc((size_t)n, sizeof(int), "reference cells");
    for (long i = 0; i < n; i++) {
        cellof[i] = cell_of(m[i].pos[0], ncell, box);
        count[cellof[i] + 1]++;
    }
    for (long c = 0; c < nc3; c++)
        count[c + 1] += count[c];
    for (long i = 0; i < n; i++)
        members[count[cellof[i]] + fill[cellof[i]]++] = (int)i;
    double u = 0.0;
    for (long c = 0; c < nc3; c++)
        for (int a = count[c]; a < count[c + 1]; a++) {
            int i = members[a];
            /* same cell: pairs with a later member */
            for (int b = a + 1; b < count[c + 1]; b++) {
                int j = members[b];
                u += wt_pair(&m[i], &m[j], box, cutoff2, m[i].force, m[j].force);
            }
            /* the 13 neighbour cells with a larger offset index (each neighbour pair once) */
            for (int off = 14; off < 27; off++) {
                int nb = cell_near((int)c, off % 3 - 1, (off / 3) % 3 - 1, off / 9 - 1, ncell);
                for (int b = count[nb]; b < count[nb + 1]; b++) {
                    int j = members[b];
                    u += wt_pair(&m[i], &m[j], box, cutoff2, m[i].force, m[j].force);
                }
            }
        }
    free(count);
    free(fill);
    free(members);
    free(cellof);
    return u;
}

/* The sequential reference: the same model and integrator with ws_cell_forces. Fills rp/rk
 * per step. */
static void ws_reference(wt_mol *m, long n, int nsteps, double *rp, double *rk)
{
    for (int step = 0; step < nsteps; step++) {
        double u = 0.0, ke = 0.0;
        for (long i = 0; i < n; i++) {
            wt_predict(&m[i], dt, box);
            u += wt_intra(&m[i], m[i].force);
        }
        u += ws_cell_forces(m, n);
        for (long i = 0; i < n; i++)
            ke += wt_correct(&m[i], dt);
        rp[step] = u;
        rk[step] = ke;
    }
}

int main(int argc, char **argv)
{
    app_opts o;
    static char usage[512];
    snprintf(usage, sizeof usage,
             "waterspatial: %s\n"
             "  -n N     molecules (default by size: tiny 512, small 4096, medium 8000, large 27000)\n"
             "  -i S     time steps (default by size: tiny 3, small 6, medium 6, large 4)",
             ws_usage_what);
    app_parse_common(argc, argv, &o, usage);
    static const long NM[4] = {512, 4096, 8000, 27000};
    static const long NS[4] = {3, 6, 6, 4};
    int si = app_size_index(&o);
    nmol = app_flag_long(argc, argv, &o, "-n", NM[si], 27, 10000000L);
    steps = (int)app_flag_long(argc, argv, &o, "-i", NS[si], 1, 1000000);
    nthreads = o.threads;
    dt = 0.01;

    mol = app_alloc((size_t)nmol, sizeof(wt_mol), "molecules");
    box = wt_init(mol, nmol);
    ws_displace(mol, nmol, box);
    ncell = (int)floor(box / CUTOFF);
    if (ncell < 3) {
        fprintf(stderr, "waterspatial: box %.3f holds fewer than 3 cells of the cutoff %.1f: use more molecules\n",
                box, CUTOFF);
        exit(2);
    }
    cutoff2 = CUTOFF * CUTOFF;
    /* forces of the initial configuration into fold (so the first predict uses real forces) */
    for (long i = 0; i < nmol; i++)
        (void)wt_intra(&mol[i], mol[i].force);
    (void)ws_cell_forces(mol, nmol);
    for (long i = 0; i < nmol; i++)
        memcpy(mol[i].fold, mol[i].force, sizeof mol[i].fold);
    wt_mol *init = NULL;
    if (o.verify) {
        init = app_alloc((size_t)nmol, sizeof(wt_mol), "reference molecules");
        memcpy(init, mol, sizeof(wt_mol) * (size_t)nmol);
    }
    long nc3 = (long)ncell * ncell * ncell;
    cell_head = app_alloc((size_t)nc3, sizeof(int), "cell heads");
    mol_next = app_alloc((size_t)nmol, sizeof(int), "cell links");
    cell_lock = app_alloc((size_t)nc3, sizeof(app_lock_t), "cell locks");
    for (long c = 0; c < nc3; c++) {
        cell_head[c] = -1;
        app_lock_init(&cell_lock[c]);
    }
    for (long i = nmol - 1; i >= 0; i--) { /* each list in molecule order */
        int c = cell_of(mol[i].pos[0], ncell, box);
        mol_next[i] = cell_head[c];
        cell_head[c] = (int)i;
    }
    app_lock_init(&energy_lock);
    epot = app_alloc((size_t)steps, sizeof(double), "potential energies");
    ekin = app_alloc((size_t)steps, sizeof(double), "kinetic energies");
    moves = app_alloc((size_t)nthreads, sizeof(long), "moves per thread");
    app_barrier_init(&bar, nthreads);
    t_start = app_alloc((size_t)nthreads, sizeof(double), "start stamps");
    t_end = app_alloc((size_t)nthreads, sizeof(double), "end stamps");

    app_run_team(nthreads, ws_worker, NULL);

    double etot = epot[steps - 1] + ekin[steps - 1];
    long moved = 0, listed = 0;
    for (int t = 0; t < nthreads; t++)
        moved += moves[t];
    for (long c = 0; c < nc3; c++)
        for (int i = cell_head[c]; i >= 0 && listed <= nmol; i = mol_next[i])
            listed++;
    int ok = 0;
    char note[400];
    if (o.verify) {
        double *rp = app_alloc((size_t)steps, sizeof(double), "reference potentials");
        double *rk = app_alloc((size_t)steps, sizeof(double), "reference kinetics");
        ws_reference(init, nmol, steps, rp, rk);
        double maxd = 0.0, de = 0.0;
        long misplaced = 0;
        for (long i = 0; i < nmol; i++)
            for (int s = 0; s < WT_SITES; s++)
                for (int k = 0; k < 3; k++) {
                    double d = fabs(init[i].pos[s][k] - mol[i].pos[s][k]) / box;
                    if (!(d <= maxd))
                        maxd = d;
                }
        /* every molecule is listed in the cell its position says (as of the last move phase,
         * so checked against the positions of the last predict: the cells of the lists) */
        for (long c = 0; c < nc3; c++)
            for (int i = cell_head[c]; i >= 0; i = mol_next[i]) {
                double p[3];
                for (int k = 0; k < 3; k++)
                    p[k] = mol[i].pos[0][k];
                misplaced += cell_of(p, ncell, box) != c;
            }
        for (int s = 0; s < steps; s++) {
            double d1 = app_rel_diff(rp[s], epot[s]), d2 = app_rel_diff(rk[s], ekin[s]);
            de = d1 > de ? d1 : de;
            de = d2 > de ? d2 : de;
        }
        ok = maxd <= 1e-9 && de <= 1e-9 && isfinite(etot) && listed == nmol && misplaced == 0;
        snprintf(note, sizeof note,
                 "N=%ld steps=%d box=%.3f cells=%d^3 cutoff=%.1f moves=%ld E0=%.6f E=%.6f Eref=%.6f "
                 "max_pos_diff/box=%.3g max_energy_rel_diff=%.3g listed=%ld misplaced=%ld tol=1e-9",
                 nmol, steps, box, ncell, CUTOFF, moved, epot[0] + ekin[0], etot, rp[steps - 1] + rk[steps - 1], maxd,
                 de, listed, misplaced);
        free(rp);
        free(rk);
    } else {
        snprintf(note, sizeof note, "N=%ld steps=%d box=%.3f cells=%d^3 moves=%ld E0=%.6f E=%.6f (not verified)", nmol,
                 steps, box, ncell, moved, epot[0] + ekin[0], etot);
    }
    app_finish("waterspatial", &o, app_phase_time(t_start, t_end, nthreads), ok, etot, note);
}
