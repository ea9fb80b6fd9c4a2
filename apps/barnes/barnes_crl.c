/*
 * barnes_crl - barnes (Barnes-Hut N-body, barnes.c) written against CRL regions (crl.h), the
 * CRL version of seed 002 section 3.2 (barnes/crl): a region for every tree node, bodies and
 * cells alike; a node is locked by opening its region for writing.
 *
 * Owns: the body and cell regions, the per-node pools of cell regions, the region-id to
 * mapping table, the tree build, centre of mass and force walk over regions, and the gathering
 * for the check. Must not touch: the physics, the initial state, the serial reference and the
 * checks (barnes_kernel.h, shared with barnes.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/barnes_crl -s tiny`). The bodies are first
 * renumbered in Morton order (bh_morton_sort), so node q's contiguous block of them is a compact
 * region of space (SPLASH-2's costzones without the cost weighting): it creates (homes) and fills their
 * regions (120 bytes each), and the nodes broadcast their region ids in turn. Cells are 104-byte
 * regions (geometry, mass, centre of mass, eight child slots holding a region id or a body
 * index); each node keeps a pool of cell regions it created (homed on it), reused every step
 * and grown on demand, so a cell's id travels only inside its parent's slot. Each step, as
 * barnes.c:
 *   bounding box of own bodies (read operations), min/max reductions; node 0 resets the root
 *     cell (a region homed on node 0) in a write operation; barrier
 *   tree build: each node inserts its bodies. A slot is read in a read operation; a slot that
 *     holds a cell is descended without locking (a published cell stays); an empty slot or a
 *     slot holding a body is changed inside a WRITE OPERATION on the cell (the cell lock of
 *     barnes.c), re-read there: store the body, or take a cell from the pool, fill it in a
 *     write operation of its own, move the old body into it and publish it in the slot while
 *     the parent is still open for writing; barrier
 *   centre of mass: the root's 64 grandchildren in blocks over the nodes (each subtree's
 *     cells read, then written with their mass and centre), node 0 the top two levels; barrier
 *   forces: each node walks the tree for its bodies, every cell and body it visits read in a
 *     read operation (cached after the first miss: nobody writes the tree in this phase);
 *     results in a private array; barrier
 *   update: each own body's acceleration, velocity and position written in one write
 *     operation (the seed's body lock); barrier.
 *
 * Check: node 0 reads every body and compares with barnes_kernel.h's serial run from the same
 * initial bodies: positions and velocities bit-identical (the tree is unique and every sum runs
 * in octant order), then tree forces vs direct summation at the final positions (RMS <= 2%).
 */
#include "app.h"

#include "barnes_kernel.h"
#include <crl.h>
#include "spmd.h" /* after crl.h: its CRL helpers */

enum { BHC_EMPTY = 0, BHC_CELL = 1, BHC_BODY = 2 };

typedef struct {
    double center[3];
    double half;
    double mass;
    double cm[3];
    rid_t child[8];          /* region id of a child cell, or a body's index */
    unsigned char kind[8];   /* BHC_EMPTY, BHC_CELL or BHC_BODY */
} bhc_cell; /* 104 bytes */

/* Mapped cell regions by region id (open addressing; a mapping stays for the whole run). */
typedef struct {
    rid_t *key;
    bhc_cell **val; /* NULL: free slot */
    size_t cap, used;
} bhc_map;

static bhc_map cellmap;

static size_t bhc_slot(const bhc_map *m, rid_t id)
{
    size_t h = ((size_t)id * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
    while (m->val[h] != NULL && m->key[h] != id)
        h = (h + 1) & (m->cap - 1);
    return h;
}

static void bhc_put(bhc_map *m, rid_t id, bhc_cell *c)
{
    if (2 * (m->used + 1) > m->cap) {
        bhc_map g = {0};
        g.cap = m->cap ? 2 * m->cap : 1024;
        g.key = app_alloc(g.cap, sizeof(rid_t), "cell map keys");
        g.val = app_alloc(g.cap, sizeof(bhc_cell *), "cell map values");
        for (size_t k = 0; k < m->cap; k++)
            if (m->val[k] != NULL)
                bhc_put(&g, m->key[k], m->val[k]);
        free(m->key);
        free(m->val);
        *m = g;
    }
    size_t h = bhc_slot(m, id);
    if (m->val[h] == NULL)
        m->used++;
    m->key[h] = id;
    m->val[h] = c;
}

/* The mapped cell of region `id` (mapped on first use). */
static bhc_cell *bhc_get(rid_t id)
{
    if (cellmap.cap) {
        size_t h = bhc_slot(&cellmap, id);
        if (cellmap.val[h] != NULL)
            return cellmap.val[h];
    }
    bhc_cell *c = rgn_map(id);
    bhc_put(&cellmap, id, c);
    return c;
}

/* This node's cell regions: the first `next` are in this step's tree. */
typedef struct {
    bhc_cell **cell;
    long n, cap, next, maxused;
} bhc_pool;

static bhc_cell *bhc_take(bhc_pool *p)
{
    if (p->next == p->n) {
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 256;
            p->cell = realloc(p->cell, (size_t)p->cap * sizeof *p->cell);
            if (p->cell == NULL) {
                fprintf(stderr, "barnes_crl: out of memory for the cell pool\n");
                exit(2);
            }
        }
        rid_t id = rgn_create((unsigned)sizeof(bhc_cell));
        p->cell[p->n++] = bhc_get(id);
    }
    return p->cell[p->next++];
}

typedef struct {
    long n;
    bh_body **body;  /* mapped body regions */
    bhc_cell *root;  /* mapped root region (homed on node 0) */
    bhc_pool pool;
    double theta2;
} bhc_tree;

/* Position (and mass) of body j, read in a read operation. */
static void bhc_body_pm(const bhc_tree *t, long j, double pm[4])
{
    bh_body *b = t->body[j];
    rgn_start_read(b);
    pm[0] = b->pos[0];
    pm[1] = b->pos[1];
    pm[2] = b->pos[2];
    pm[3] = b->mass;
    rgn_end_read(b);
}

/* Inserts body i (position p): barnes.c's bh_insert with the cell lock as a write operation. */
static void bhc_insert(bhc_tree *t, long i, const double *p)
{
    bhc_cell *c = t->root;
    for (int depth = 0;; depth++) {
        bh_depth_check(depth, i);
        rgn_start_read(c);
        int oct = bh_octant(c->center, p);
        int kind = c->kind[oct];
        rid_t ch = c->child[oct];
        rgn_end_read(c);
        if (kind == BHC_CELL) { /* a published cell stays for the step: no lock needed */
            c = bhc_get(ch);
            continue;
        }
        double ob[4] = {0, 0, 0, 0};
        int have_ob = kind == BHC_BODY;
        if (have_ob) /* read the body to move before locking the cell */
            bhc_body_pm(t, (long)ch, ob);
        rgn_start_write(c);
        rid_t seen = ch;
        kind = c->kind[oct];
        ch = c->child[oct];
        if (kind == BHC_EMPTY) {
            c->kind[oct] = BHC_BODY;
            c->child[oct] = (rid_t)i;
            rgn_end_write(c);
            return;
        }
        if (kind == BHC_CELL) {
            rgn_end_write(c);
            c = bhc_get(ch);
            continue;
        }
        if (!have_ob || ch != seen) /* a body arrived meanwhile */
            bhc_body_pm(t, (long)ch, ob);
        /* slot holds a body: split it into a new cell from this node's pool */
        bhc_cell *nc = bhc_take(&t->pool);
        rgn_start_write(nc);
        bh_child_geom(c->center, c->half, oct, nc->center, &nc->half);
        nc->mass = 0.0;
        nc->cm[0] = nc->cm[1] = nc->cm[2] = 0.0;
        memset(nc->child, 0, sizeof nc->child);
        memset(nc->kind, 0, sizeof nc->kind);
        int o2 = bh_octant(nc->center, ob);
        nc->kind[o2] = BHC_BODY;
        nc->child[o2] = ch;
        rid_t nid = rgn_rid(nc);
        rgn_end_write(nc);
        c->kind[oct] = BHC_CELL;
        c->child[oct] = nid; /* publish, still inside the parent's write operation */
        rgn_end_write(c);
        c = nc;
    }
}

/* Centre of mass of the subtree at c (children first, in octant order) into *m and cm; with
 * `deep` 0 the child cells' values are read, not computed. The cell is written with them. */
static void bhc_com(const bhc_tree *t, bhc_cell *c, int deep, double *mout, double cmout[3])
{
    bhc_cell copy;
    rgn_start_read(c);
    copy = *c;
    rgn_end_read(c);
    double m = 0.0, s[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < 8; k++) {
        if (copy.kind[k] == BHC_CELL) {
            bhc_cell *cc = bhc_get(copy.child[k]);
            double cm, p[3];
            if (deep) {
                bhc_com(t, cc, 1, &cm, p);
            } else {
                rgn_start_read(cc);
                cm = cc->mass;
                memcpy(p, cc->cm, sizeof p);
                rgn_end_read(cc);
            }
            bh_com_add(&m, s, cm, p);
        } else if (copy.kind[k] == BHC_BODY) {
            double pm[4];
            bhc_body_pm(t, (long)copy.child[k], pm);
            bh_com_add(&m, s, pm[3], pm);
        }
    }
    double cm[3];
    bh_com_finish(m, s, copy.center, cm);
    rgn_start_write(c);
    c->mass = m;
    memcpy(c->cm, cm, sizeof cm);
    rgn_end_write(c);
    *mout = m;
    memcpy(cmout, cm, sizeof cm);
}

/* bh_walk over regions: every cell and body visited is read in a read operation. */
static int bhc_walk(const bhc_tree *t, long i, const double *p, double acc[3], double *phi)
{
    bhc_cell *stack[8 * (BH_MAXDEPTH + 2)];
    int sp = 0, cost = 0;
    acc[0] = acc[1] = acc[2] = 0.0;
    *phi = 0.0;
    stack[sp++] = t->root;
    while (sp > 0) {
        bhc_cell *c = stack[--sp];
        rid_t child[8];
        unsigned char kind[8];
        rgn_start_read(c);
        memcpy(child, c->child, sizeof child);
        memcpy(kind, c->kind, sizeof kind);
        rgn_end_read(c);
        for (int k = 7; k >= 0; k--) { /* pushed in reverse: visited in octant order */
            if (kind[k] == BHC_EMPTY)
                continue;
            if (kind[k] == BHC_BODY) {
                long j = (long)child[k];
                if (j != i) {
                    double q[4];
                    bhc_body_pm(t, j, q);
                    bh_interact(p, q, q[3], BH_EPS2, acc, phi);
                    cost++;
                }
                continue;
            }
            bhc_cell *cc = bhc_get(child[k]);
            double cm[3], mass, half;
            rgn_start_read(cc);
            memcpy(cm, cc->cm, sizeof cm);
            mass = cc->mass;
            half = cc->half;
            rgn_end_read(cc);
            if (bh_far(cm, half, p, t->theta2)) {
                bh_interact(p, cm, mass, BH_EPS2, acc, phi);
                cost++;
            } else {
                stack[sp++] = cc;
            }
        }
    }
    return cost;
}

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    double theta;
    bh_parse(argc, argv, &o, "barnes_crl", "Barnes-Hut N-body over CRL regions (SPMD; a region per body and per cell)",
             NULL, &n, &steps, &theta);
    int me, p;
    crl_spmd_start(&o, &me, &p);

    /* Every node builds the same initial bodies (deterministic); node q keeps its block. */
    bh_body *init = app_alloc((size_t)n, sizeof(bh_body), "initial bodies");
    bh_plummer((char *)init, sizeof(bh_body), n, 123);
    long *old = bh_morton_sort(init, n); /* node q's block: a compact region of space */
    long lo, hi;
    app_block_range(n, p, me, &lo, &hi);

    bhc_tree t = {0};
    t.n = n;
    t.theta2 = theta * theta;
    rid_t *ids = app_alloc((size_t)n, sizeof(rid_t), "body region ids");
    crl_block_regions(ids, init, n, sizeof(bh_body), p, me);
    rid_t root_id = 0;
    if (me == 0) {
        root_id = rgn_create((unsigned)sizeof(bhc_cell));
        rgn_bcast_send((int)sizeof root_id, &root_id);
    } else {
        rgn_bcast_recv((int)sizeof root_id, &root_id);
    }
    t.root = bhc_get(root_id);
    t.body = app_alloc((size_t)n, sizeof(bh_body *), "mapped bodies");
    for (long i = 0; i < n; i++)
        t.body[i] = rgn_map(ids[i]);

    long mine = hi - lo;
    double (*acc)[3] = app_alloc_uninit((size_t)(mine ? mine : 1), sizeof *acc, "accelerations");
    double *phi = app_alloc_uninit((size_t)(mine ? mine : 1), sizeof(double), "potentials");
    int *cost = app_alloc_uninit((size_t)(mine ? mine : 1), sizeof(int), "interaction counts");
    double (*pos)[3] = app_alloc_uninit((size_t)(mine ? mine : 1), sizeof *pos, "own positions");

    rgn_barrier();
    double t0 = spmd_clock(me);
    for (int step = 0; step < steps; step++) {
        /* bounding box of own bodies */
        double blo[3] = {INFINITY, INFINITY, INFINITY}, bhi[3] = {-INFINITY, -INFINITY, -INFINITY};
        for (long i = lo; i < hi; i++) {
            double pm[4];
            bhc_body_pm(&t, i, pm);
            for (int k = 0; k < 3; k++) {
                pos[i - lo][k] = pm[k];
                blo[k] = pm[k] < blo[k] ? pm[k] : blo[k];
                bhi[k] = pm[k] > bhi[k] ? pm[k] : bhi[k];
            }
        }
        for (int k = 0; k < 3; k++) {
            blo[k] = rgn_reduce_dmin(blo[k]);
            bhi[k] = rgn_reduce_dmax(bhi[k]);
        }
        if (me == 0) {
            rgn_start_write(t.root);
            bh_root_geom(blo, bhi, t.root->center, &t.root->half);
            t.root->mass = 0.0;
            t.root->cm[0] = t.root->cm[1] = t.root->cm[2] = 0.0;
            memset(t.root->child, 0, sizeof t.root->child);
            memset(t.root->kind, 0, sizeof t.root->kind);
            rgn_end_write(t.root);
        }
        rgn_barrier();

        /* tree build */
        t.pool.next = 0;
        for (long i = lo; i < hi; i++)
            bhc_insert(&t, i, pos[i - lo]);
        if (t.pool.next > t.pool.maxused)
            t.pool.maxused = t.pool.next;
        rgn_barrier();

        /* centre of mass: the root's 64 grandchildren in blocks (node q's block of space), then
         * the top two levels */
        bhc_cell root;
        rgn_start_read(t.root);
        root = *t.root;
        rgn_end_read(t.root);
        for (int k = 0; k < 64; k++) {
            if (k * p / 64 != me || root.kind[k / 8] != BHC_CELL)
                continue;
            bhc_cell *c1 = bhc_get(root.child[k / 8]);
            rgn_start_read(c1);
            int kind = c1->kind[k % 8];
            rid_t c2 = c1->child[k % 8];
            rgn_end_read(c1);
            if (kind == BHC_CELL) {
                double m, cm[3];
                bhc_com(&t, bhc_get(c2), 1, &m, cm);
            }
        }
        rgn_barrier();
        if (me == 0) {
            double m, cm[3];
            for (int k = 0; k < 8; k++)
                if (root.kind[k] == BHC_CELL)
                    bhc_com(&t, bhc_get(root.child[k]), 0, &m, cm);
            bhc_com(&t, t.root, 0, &m, cm);
        }
        rgn_barrier();

        /* forces on own bodies, into private arrays */
        for (long i = lo; i < hi; i++)
            cost[i - lo] = bhc_walk(&t, i, pos[i - lo], acc[i - lo], &phi[i - lo]);
        rgn_barrier();

        /* update: each own body in one write operation */
        for (long i = lo; i < hi; i++) {
            bh_body *b = t.body[i];
            rgn_start_write(b);
            bh_set_acc(b, acc[i - lo], phi[i - lo], cost[i - lo], step, 0.5 * BH_DT);
            bh_move(b, BH_DT);
            rgn_end_write(b);
        }
        rgn_barrier();
    }
    double t1 = spmd_clock(me);
    double maxcells = rgn_reduce_dmax((double)t.pool.maxused);

    int ok = 1;
    double check = 0.0;
    char note[400];
    if (me == 0) {
        ok = 0;
        bh_body *fin = app_alloc((size_t)n, sizeof(bh_body), "gathered bodies");
        for (long i = 0; i < n; i++) {
            rgn_start_read(t.body[i]);
            fin[i] = *t.body[i];
            rgn_end_read(t.body[i]);
        }
        bh_body *orig = app_alloc((size_t)n, sizeof(bh_body), "bodies in generation order");
        for (long i = 0; i < n; i++)
            orig[old[i]] = fin[i];
        double ke, pe, ipb;
        bh_summary(orig, n, &ke, &pe, &ipb, &check); /* the sums in barnes.c's order */
        free(orig);
        if (o.verify) {
            long diff;
            double err;
            ok = bh_verify(init, fin, n, steps, theta, &diff, &err) && isfinite(check);
            snprintf(note, sizeof note,
                     "crl regions (one per body and per cell); N=%ld steps=%d theta=%.2f KE=%.6f PE=%.6f "
                     "interactions/body=%.0f cells/node<=%.0f differing_vs_serial=%ld rms_force_err=%.4f tol=0.02",
                     n, steps, theta, ke, pe, ipb, maxcells, diff, err);
        } else {
            snprintf(note, sizeof note, "crl regions; N=%ld steps=%d theta=%.2f KE=%.6f PE=%.6f (not verified)", n,
                     steps, theta, ke, pe);
        }
        free(fin);
    }
    rgn_barrier();
    if (me == 0)
        app_finish("barnes", &o, t1 - t0, ok, check, note);
    return 0;
}
