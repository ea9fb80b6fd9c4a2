/*
 * water_kernel.h - the physics of water (Water-nsquared style molecular dynamics), shared by
 * water.c (pthreads on page-based shared memory), water_crl.c (CRL regions) and
 * water_splitc.c (Split-C global pointers).
 *
 * Owns: the molecule record, the 3-site water model (harmonic bonds, Coulomb between sites,
 * Lennard-Jones between oxygens, cutoff and periodic minimum image), the velocity-Verlet halves,
 * the initial configuration and forces, and the serial reference the checks compare against.
 * Must not touch: how the molecules are shared (each version owns that).
 */
#ifndef WATER_KERNEL_H
#define WATER_KERNEL_H

#define WT_SITES 3 /* O, H1, H2 */

typedef struct {
    double pos[WT_SITES][3];
    double vel[WT_SITES][3];
    double force[WT_SITES][3]; /* this step's forces (inter part added under the molecule's lock) */
    double fold[WT_SITES][3];  /* previous step's forces */
} wt_mol;

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
static inline void wt_initial_forces(wt_mol *m, long n, double box, double cutoff2)
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

/* The check of every style: runs the whole simulation again sequentially on `init` (which it
 * overwrites) and compares it with the parallel run: the final positions `fin` relative to the
 * box and every step's potential and kinetic energies. Returns whether both agree within 1e-9;
 * `*rtot` gets the reference's final energy, `*maxd` and `*de` the largest differences. */
static inline int wt_verify(wt_mol *init, const wt_mol *fin, long n, int steps, double box, double cutoff2, double dt,
                     const double *epot, const double *ekin, double etot, double *rtot, double *maxd, double *de)
{
    double *rp = app_alloc((size_t)steps, sizeof(double), "reference potentials");
    double *rk = app_alloc((size_t)steps, sizeof(double), "reference kinetics");
    *rtot = wt_reference(init, n, steps, box, cutoff2, dt, rp, rk);
    *maxd = 0.0;
    for (long i = 0; i < n; i++)
        for (int s = 0; s < WT_SITES; s++)
            for (int k = 0; k < 3; k++) {
                double d = fabs(init[i].pos[s][k] - fin[i].pos[s][k]) / box;
                if (!(d <= *maxd))
                    *maxd = d;
            }
    *de = 0.0;
    for (int s = 0; s < steps; s++) {
        double d1 = app_rel_diff(rp[s], epot[s]), d2 = app_rel_diff(rk[s], ekin[s]);
        if (!(d1 <= *de))
            *de = d1;
        if (!(d2 <= *de))
            *de = d2;
    }
    free(rp);
    free(rk);
    return *maxd <= 1e-9 && *de <= 1e-9 && isfinite(etot);
}

/* The options every style of water takes, after the common ones: molecules `-n` and time
 * steps `-i`, with defaults by size. `name` and `what` head the usage text. */
static inline void wt_parse(int argc, char **argv, app_opts *o, const char *name, const char *what, long *n,
                            int *steps)
{
    static char usage[512];
    snprintf(usage, sizeof usage,
             "%s: %s\n"
             "  -n N     molecules (default by size: tiny 216, small 2048, medium 4096, large 12288)\n"
             "  -i S     time steps (default by size: tiny 3, small 9, medium 15, large 6)",
             name, what);
    static const long NM[4] = {216, 2048, 4096, 12288};
    static const long NS[4] = {3, 9, 15, 6};
    app_parse_common(argc, argv, o, usage);
    int si = app_size_index(o);
    *n = app_flag_long(argc, argv, o, "-n", NM[si], 2, 10000000L);
    *steps = (int)app_flag_long(argc, argv, o, "-i", NS[si], 1, 1000000);
}

#endif /* WATER_KERNEL_H */
