/*
 * barnes_kernel.h - the physics of barnes (Barnes-Hut N-body, SPLASH-2 style), shared by
 * barnes.c (pthreads on page-based shared memory), barnes_crl.c (CRL regions) and
 * barnes_splitc.c (Split-C global pointers).
 *
 * Owns: the body and cell records, the octant and opening rules, the pairwise interaction, the
 * leapfrog halves, the Plummer initial state, a serial octree over an array of bodies (insert,
 * centre of mass, force walk), the serial reference run, the checks and the option parsing.
 * Must not touch: how bodies and cells are shared (each version owns that).
 *
 * The octree is unique for a set of positions (one body per leaf) and every sum runs in fixed
 * octant order, so any version that builds the same tree and walks it in the same order gets
 * bit-identical positions and velocities: that is the check of every style.
 */
#ifndef BARNES_KERNEL_H
#define BARNES_KERNEL_H

#include <stddef.h>

/* Position and mass come first: the tree reads a body as four consecutive doubles (`bh_pm`),
 * so it also walks arrays of bare (pos, mass) records (barnes_splitc's replica). */
typedef struct {
    double pos[3];
    double mass;
    double vel[3];
    double acc[3];
    double acc_old[3]; /* previous step's acceleration (leapfrog velocity correction) */
    double phi;
    int type; /* 1 = body */
    int cost; /* interactions in the last force walk */
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
#define BH_MAXDEPTH 60
#define BH_EPS2 (0.05 * 0.05)
#define BH_DT 0.0125

/* A tree over an array of bodies: body i's position and mass are the four doubles at
 * bodies + i * stride. Cells: index 0 unused, 1 the root, the rest handed out by the builder. */
typedef struct {
    bh_cell *cells;
    long chunk;  /* cells per builder's chunk after the root */
    char *bodies;
    size_t stride;
    long n;
    double theta2, eps2;
} bh_tree;

static inline bh_body *bh_b(const bh_tree *t, long i)
{
    return (bh_body *)(t->bodies + (size_t)i * t->stride);
}

/* Body i's position (3 doubles) followed by its mass. */
static inline const double *bh_pm(const bh_tree *t, long i)
{
    return (const double *)(t->bodies + (size_t)i * t->stride);
}

static inline int bh_octant(const double *center, const double *p)
{
    return (p[0] >= center[0]) | ((p[1] >= center[1]) << 1) | ((p[2] >= center[2]) << 2);
}

/* Geometry of the child in octant `oct` of a cell at `pcenter` with half side `phalf`. */
static inline void bh_child_geom(const double *pcenter, double phalf, int oct, double *center, double *half)
{
    double h = phalf * 0.5;
    for (int k = 0; k < 3; k++)
        center[k] = pcenter[k] + ((oct >> k) & 1 ? h : -h);
    *half = h;
}

static inline void bh_cell_init(bh_cell *c, const bh_cell *parent, int oct)
{
    bh_child_geom(parent->center, parent->half, oct, c->center, &c->half);
    c->mass = 0.0;
    c->cm[0] = c->cm[1] = c->cm[2] = 0.0;
    for (int k = 0; k < 8; k++)
        c->child[k] = 0;
}

/* Root geometry enclosing the box [lo, hi] (a cube, slightly enlarged). */
static inline void bh_root_geom(const double lo[3], const double hi[3], double center[3], double *half)
{
    double side = 0.0;
    for (int k = 0; k < 3; k++) {
        center[k] = 0.5 * (lo[k] + hi[k]);
        if (hi[k] - lo[k] > side)
            side = hi[k] - lo[k];
    }
    *half = 0.5 * side * 1.0001 + 1e-12;
}

static inline void bh_root(bh_tree *t, const double lo[3], const double hi[3])
{
    bh_cell *r = &t->cells[BH_ROOT];
    bh_root_geom(lo, hi, r->center, &r->half);
    r->mass = 0.0;
    r->cm[0] = r->cm[1] = r->cm[2] = 0.0;
    for (int k = 0; k < 8; k++)
        r->child[k] = 0;
}

/* Adds a child of mass cm at p to the running sums of a centre of mass. */
static inline void bh_com_add(double *m, double s[3], double cm, const double *p)
{
    *m += cm;
    for (int d = 0; d < 3; d++)
        s[d] += cm * p[d];
}

/* The centre of mass from the sums (the geometric centre of an empty cell). */
static inline void bh_com_finish(double m, const double s[3], const double *center, double cm[3])
{
    for (int d = 0; d < 3; d++)
        cm[d] = m > 0.0 ? s[d] / m : center[d];
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

/* The opening rule: a cell (centre of mass cm, half side `half`) is far enough from p to act
 * as one body. */
static inline int bh_far(const double *cm, double half, const double *p, double theta2)
{
    double d[3] = {cm[0] - p[0], cm[1] - p[1], cm[2] - p[2]};
    double r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    double size = 2.0 * half;
    return size * size < theta2 * r2;
}

/* Force-phase result of a body: the velocity correction with the previous acceleration. */
static inline void bh_set_acc(bh_body *b, const double acc[3], double phi, int cost, int step, double dthf)
{
    for (int k = 0; k < 3; k++) {
        b->acc_old[k] = b->acc[k];
        b->acc[k] = acc[k];
        if (step > 0)
            b->vel[k] += (acc[k] - b->acc_old[k]) * dthf;
    }
    b->phi = phi;
    b->cost = cost;
}

/* Leapfrog kick-drift-kick of a body. */
static inline void bh_move(bh_body *b, double dt)
{
    const double dthf = 0.5 * dt;
    for (int k = 0; k < 3; k++) {
        double dv = b->acc[k] * dthf;
        double vm = b->vel[k] + dv;
        b->pos[k] += vm * dt;
        b->vel[k] = vm + dv;
    }
}

/* Depth guard of every insertion. */
static inline void bh_depth_check(int depth, long i)
{
    if (depth > BH_MAXDEPTH) {
        fprintf(stderr, "barnes: tree deeper than %d levels inserting body %ld (coincident bodies?)\n", BH_MAXDEPTH,
                i);
        exit(2);
    }
}

/* Serial insertion of body i; new cells come from [*next, end). */
static inline void bh_insert_serial(bh_tree *t, long i, long *next, long end)
{
    const double *p = bh_pm(t, i);
    long c = BH_ROOT;
    for (int depth = 0;; depth++) {
        bh_depth_check(depth, i);
        bh_cell *cell = &t->cells[c];
        int oct = bh_octant(cell->center, p);
        int ch = cell->child[oct];
        if (ch == 0) {
            cell->child[oct] = (int)-(i + 1);
            return;
        }
        if (ch > 0) {
            c = ch;
            continue;
        }
        if (*next >= end) {
            fprintf(stderr, "barnes: cell pool exhausted (%ld cells) inserting body %ld\n", t->chunk, i);
            exit(2);
        }
        long nc = (*next)++;
        bh_cell *ncell = &t->cells[nc];
        bh_cell_init(ncell, cell, oct);
        ncell->child[bh_octant(ncell->center, bh_pm(t, -(long)ch - 1))] = ch;
        cell->child[oct] = (int)nc;
        c = nc;
    }
}

/* Centre of mass of cell c from its children's values; with `deep`, the child cells' own
 * centres first (children in fixed order: deterministic). */
static inline void bh_com_at(bh_tree *t, long c, int deep)
{
    bh_cell *cell = &t->cells[c];
    double m = 0.0, s[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < 8; k++) {
        int ch = cell->child[k];
        if (ch == 0)
            continue;
        if (ch > 0) {
            if (deep)
                bh_com_at(t, ch, 1);
            bh_com_add(&m, s, t->cells[ch].mass, t->cells[ch].cm);
        } else {
            const double *pm = bh_pm(t, -(long)ch - 1);
            bh_com_add(&m, s, pm[3], pm);
        }
    }
    cell->mass = m;
    bh_com_finish(m, s, cell->center, cell->cm);
}

static inline void bh_com(bh_tree *t, long c)
{
    bh_com_at(t, c, 1);
}

static inline void bh_com_shallow(bh_tree *t, long c)
{
    bh_com_at(t, c, 0);
}

/* Tree walk for body i: acceleration and potential into acc/phi, returns the interaction count. */
static inline int bh_walk(const bh_tree *t, long i, double acc[3], double *phi)
{
    const double *p = bh_pm(t, i);
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
                    const double *q = bh_pm(t, j);
                    bh_interact(p, q, q[3], t->eps2, acc, phi);
                    cost++;
                }
                continue;
            }
            const bh_cell *cc = &t->cells[ch];
            if (bh_far(cc->cm, cc->half, p, t->theta2)) {
                bh_interact(p, cc->cm, cc->mass, t->eps2, acc, phi);
                cost++;
            } else {
                stack[sp++] = ch;
            }
        }
    }
    return cost;
}

/* Bounding box of bodies [lo, hi) into lo3/hi3 (extended, not reset). */
static inline void bh_bbox(const bh_tree *t, long lo, long hi, double lo3[3], double hi3[3])
{
    for (long i = lo; i < hi; i++)
        for (int k = 0; k < 3; k++) {
            double x = bh_pm(t, i)[k];
            if (x < lo3[k])
                lo3[k] = x;
            if (x > hi3[k])
                hi3[k] = x;
        }
}

/* Serial tree of all bodies at their current positions (root from the bounding box). */
static inline void bh_build_serial(bh_tree *t)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    bh_bbox(t, 0, t->n, lo, hi);
    bh_root(t, lo, hi);
    long next = BH_ROOT + 1;
    for (long i = 0; i < t->n; i++)
        bh_insert_serial(t, i, &next, BH_ROOT + 1 + t->chunk);
    bh_com(t, BH_ROOT);
}

/* Cells a serial tree of n bodies may need (one body per leaf needs fewer than n cells for
 * these distributions; 2n + 1000 leaves room for any). */
static inline long bh_serial_cells(long n)
{
    return 2 * n + 1000;
}

/* Serial tree at the current positions, then tree vs direct forces for `samples` bodies.
 * Returns the RMS relative acceleration error. `t->cells` must hold bh_serial_cells(n) + 2. */
static inline double bh_accuracy(bh_tree *t, int samples)
{
    long chunk = t->chunk;
    t->chunk = bh_serial_cells(t->n);
    bh_build_serial(t);
    t->chunk = chunk;
    double se = 0.0;
    int cnt = 0;
    for (int s = 0; s < samples && s < t->n; s++) {
        long i = (long)((double)s * (double)t->n / (double)samples);
        double at[3], ad[3] = {0, 0, 0}, phi, phid = 0.0;
        (void)bh_walk(t, i, at, &phi);
        for (long j = 0; j < t->n; j++)
            if (j != i)
                bh_interact(bh_pm(t, i), bh_pm(t, j), bh_pm(t, j)[3], t->eps2, ad, &phid);
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

/* Plummer model (Aarseth, Henon & Wielen), total mass 1, standard units. */
static inline void bh_plummer(char *bodies, size_t stride, long n, unsigned long long seed)
{
    app_rng r;
    app_rng_seed(&r, seed);
    const double rsc = 3.0 * 3.14159265358979323846 / 16.0, vsc = sqrt(1.0 / rsc);
    double cmp[3] = {0, 0, 0}, cmv[3] = {0, 0, 0};
    for (long i = 0; i < n; i++) {
        bh_body *b = (bh_body *)(bodies + (size_t)i * stride);
        memset(b, 0, sizeof *b);
        b->type = 1;
        b->mass = 1.0 / (double)n;
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
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            bh_body *b = (bh_body *)(bodies + (size_t)i * stride);
            b->pos[k] -= cmp[k];
            b->vel[k] -= cmv[k];
        }
}

/* Morton (space-filling curve) key of p in the cube [lo, lo + side): 21 bits per axis, each
 * 3-bit digit in bh_octant's order (x lowest), the top level first. */
static inline unsigned long long bh_morton(const double *p, const double lo[3], double side)
{
    unsigned long long key = 0, q[3];
    for (int k = 0; k < 3; k++) {
        double f = (p[k] - lo[k]) / side * 2097152.0;
        q[k] = f <= 0.0 ? 0 : f >= 2097151.0 ? 2097151 : (unsigned long long)f;
    }
    for (int bit = 20; bit >= 0; bit--)
        for (int k = 2; k >= 0; k--)
            key = (key << 1) | ((q[k] >> bit) & 1);
    return key;
}

typedef struct {
    unsigned long long key;
    long idx;
} bh_keyed;

static inline int bh_keyed_cmp(const void *a, const void *b)
{
    const bh_keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Renumbers n contiguous bodies in Morton order of their positions, so that a block partition
 * by index gives each node a compact region of space (SPLASH-2's costzones, without the cost
 * weighting: the tree and the results do not depend on the numbering). Returns the old index
 * of each new one (the caller frees it). */
static inline long *bh_morton_sort(bh_body *b, long n)
{
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            lo[k] = b[i].pos[k] < lo[k] ? b[i].pos[k] : lo[k];
            hi[k] = b[i].pos[k] > hi[k] ? b[i].pos[k] : hi[k];
        }
    double side = 0.0;
    for (int k = 0; k < 3; k++)
        side = hi[k] - lo[k] > side ? hi[k] - lo[k] : side;
    side = side > 0.0 ? side * 1.0001 : 1.0;
    bh_keyed *ks = app_alloc((size_t)n, sizeof *ks, "morton keys");
    for (long i = 0; i < n; i++) {
        ks[i].key = bh_morton(b[i].pos, lo, side);
        ks[i].idx = i;
    }
    qsort(ks, (size_t)n, sizeof *ks, bh_keyed_cmp);
    bh_body *tmp = app_alloc((size_t)n, sizeof *tmp, "morton-ordered bodies");
    for (long i = 0; i < n; i++)
        tmp[i] = b[ks[i].idx];
    memcpy(b, tmp, (size_t)n * sizeof *b);
    long *old = app_alloc((size_t)n, sizeof *old, "morton permutation");
    for (long i = 0; i < n; i++)
        old[i] = ks[i].idx;
    free(tmp);
    free(ks);
    return old;
}

/* Kinetic and potential energy, interactions per body and the check value (sum of |x|+|y|+|z|
 * over the final positions) of n contiguous bodies. */
static inline void bh_summary(const bh_body *b, long n, double *ke, double *pe, double *ipb, double *check)
{
    double cost = 0.0;
    *ke = *pe = *check = 0.0;
    for (long i = 0; i < n; i++) {
        *ke += 0.5 * b[i].mass * (b[i].vel[0] * b[i].vel[0] + b[i].vel[1] * b[i].vel[1] + b[i].vel[2] * b[i].vel[2]);
        *pe += 0.5 * b[i].mass * b[i].phi;
        cost += b[i].cost;
    }
    for (long i = 0; i < n; i++)
        *check += fabs(b[i].pos[0]) + fabs(b[i].pos[1]) + fabs(b[i].pos[2]);
    *ipb = n ? cost / (double)n : 0.0;
}

/* The check of the styled versions: runs the simulation again serially on `init` (n contiguous
 * bodies, overwritten) and counts the bodies whose final position or velocity in `fin` is not
 * bit-identical to it (`*diff`); then the accuracy of the tree forces at the final positions
 * (`*err`, RMS relative error of 64 samples against direct summation). Returns whether
 * diff == 0 and err <= 2%. */
static inline int bh_verify(bh_body *init, const bh_body *fin, long n, int steps, double theta, long *diff, double *err)
{
    bh_tree t = {0};
    t.n = n;
    t.bodies = (char *)init;
    t.stride = sizeof(bh_body);
    t.theta2 = theta * theta;
    t.eps2 = BH_EPS2;
    t.chunk = bh_serial_cells(n);
    t.cells = app_alloc((size_t)(BH_ROOT + 1 + t.chunk), sizeof(bh_cell), "reference cells");
    for (int step = 0; step < steps; step++) {
        bh_build_serial(&t);
        for (long i = 0; i < n; i++) {
            double acc[3], phi;
            int cost = bh_walk(&t, i, acc, &phi);
            bh_set_acc(&init[i], acc, phi, cost, step, 0.5 * BH_DT);
        }
        for (long i = 0; i < n; i++)
            bh_move(&init[i], BH_DT);
    }
    *diff = 0;
    for (long i = 0; i < n; i++)
        if (memcmp(init[i].pos, fin[i].pos, sizeof init[i].pos) != 0 ||
            memcmp(init[i].vel, fin[i].vel, sizeof init[i].vel) != 0)
            (*diff)++;
    memcpy(init, fin, (size_t)n * sizeof *init);
    *err = bh_accuracy(&t, 64);
    free(t.cells);
    return *diff == 0 && *err <= 0.02;
}

/* The options every style of barnes takes, after the common ones: bodies `-n`, steps `-i`,
 * `--theta`. `name` and `what` head the usage text, `extra` (or NULL) adds lines. */
static inline void bh_parse(int argc, char **argv, app_opts *o, const char *name, const char *what,
                            const char *extra, long *n, int *steps, double *theta)
{
    static char usage[1024];
    snprintf(usage, sizeof usage,
             "%s: %s\n"
             "  -n N       bodies (default by size: tiny 512, small 20000, medium 65536, large 220000)\n"
             "  -i S       time steps (default 4)\n"
             "  --theta X  opening tolerance (default 0.5)%s%s",
             name, what, extra ? "\n" : "", extra ? extra : "");
    static const long NB[4] = {512, 20000, 65536, 220000}; /* tiny: seed 002 Table 3's 512 bodies */
    app_parse_common(argc, argv, o, usage);
    *n = app_flag_long(argc, argv, o, "-n", NB[app_size_index(o)], 2, 50000000L);
    *steps = (int)app_flag_long(argc, argv, o, "-i", 4, 1, 1000000);
    *theta = app_flag_double(argc, argv, NULL, "--theta", 0.5, 0.0, 2.0);
}

#endif /* BARNES_KERNEL_H */
