/*
 * barnes_splitc - barnes (Barnes-Hut N-body, barnes.c) written against Split-C global pointers
 * (squall.h: symmetric memory, bulk one-way stores, all_store_sync), the Split-C version of
 * seed 002 section 3.2 with its lesson applied: the seed's barnes/sc dereferenced remote tree
 * nodes one by one (no caching: 10x the bytes of barnes/crl), its barnes-cache/sc cached them
 * by hand; here every node keeps a copy of what the tree is built from - each body's position
 * and mass, 32 bytes - pushed by the bodies' owners in bulk, and builds the tree itself.
 *
 * Owns: the distribution of the bodies over the nodes' symmetric memory, the replica of the
 * positions and masses and its two alternating buffers, the pushes, and the gathering for the
 * check. Must not touch: the physics, the serial tree, the initial state, the serial reference
 * and the checks (barnes_kernel.h, shared with barnes.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/barnes_splitc -s tiny`). Node q keeps the
 * block of bodies barnes.c's thread q owns in a symmetric array (`mine`, 120-byte bodies). Each
 * step:
 *   push: the node writes its bodies' (position, mass) records into its block of this step's
 *     replica buffer and PUSHES that block to every other node with one bulk one-way store
 *     (Split-C's bulk_store into the same symmetric address there); all_store_sync completes
 *     every node's stores (and is the step's only synchronisation);
 *   tree: every node builds the whole octree from the replica locally (barnes_kernel.h's serial
 *     insertion and centre of mass: the tree is unique, so every node builds the same one) - no
 *     cell ever crosses the network, no cell locks;
 *   forces and update of own bodies, local.
 * The replica alternates between two buffers step by step, so a node still walking its tree
 * over step s's positions is never overwritten by a faster node's step s + 1 push (which goes to
 * the other buffer; all_store_sync keeps nodes within one step of each other).
 *
 * Check: node 0 reads every node's bodies (blocking bulk reads) and compares with
 * barnes_kernel.h's serial run from the same initial bodies: positions and velocities
 * bit-identical, then tree forces vs direct summation at the final positions (RMS <= 2%).
 */
#include "app.h"
#include "spmd.h"

#include "barnes_kernel.h"

/* A body's position and mass: what the tree is built from (bh_pm's layout). */
typedef struct {
    double pos[3];
    double mass;
} bhs_pm;

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    double theta;
    bh_parse(argc, argv, &o, "barnes_splitc",
             "Barnes-Hut N-body over Split-C global pointers (SPMD; positions pushed with bulk one-way stores)", NULL,
             &n, &steps, &theta);
    int me, p;
    spmd_start(&o, &me, &p);

    bh_body *init = app_alloc((size_t)n, sizeof(bh_body), "initial bodies");
    bh_plummer((char *)init, sizeof(bh_body), n, 123);
    long chunk;
    long *qlo = spmd_blocks(n, p, &chunk);
    long lo = qlo[me], hi = qlo[me + 1];
    /* symmetric: my bodies; two replica buffers of every body's position and mass */
    bh_body *mine = spmd_alloc((size_t)chunk * sizeof(bh_body), "bodies");
    bhs_pm *rep[2];
    rep[0] = spmd_alloc((size_t)n * sizeof(bhs_pm), "replica 0");
    rep[1] = spmd_alloc((size_t)n * sizeof(bhs_pm), "replica 1");
    for (long i = lo; i < hi; i++)
        mine[i - lo] = init[i];

    bh_tree t = {0};
    t.n = n;
    t.stride = sizeof(bhs_pm);
    t.theta2 = theta * theta;
    t.eps2 = BH_EPS2;
    t.chunk = bh_serial_cells(n);
    t.cells = app_alloc_uninit((size_t)(BH_ROOT + 1 + t.chunk), sizeof(bh_cell), "cells");

    OK(squall_barrier());
    double t0 = spmd_clock(me);
    for (int step = 0; step < steps; step++) {
        bhs_pm *r = rep[step & 1];
        for (long i = lo; i < hi; i++) {
            memcpy(r[i].pos, mine[i - lo].pos, sizeof r[i].pos);
            r[i].mass = mine[i - lo].mass;
        }
        if (hi > lo)
            for (int k = 1; k < p; k++) {
                SquallGptr to = {(uint32_t)((me + k) % p), &r[lo]};
                OK(squall_gptr_store(to, &r[lo], (size_t)(hi - lo) * sizeof(bhs_pm)));
            }
        OK(squall_all_store_sync());

        t.bodies = (char *)r;
        bh_build_serial(&t);
        for (long i = lo; i < hi; i++) {
            double acc[3], phi;
            int cost = bh_walk(&t, i, acc, &phi);
            bh_set_acc(&mine[i - lo], acc, phi, cost, step, 0.5 * BH_DT);
            bh_move(&mine[i - lo], BH_DT);
        }
    }
    OK(squall_barrier());
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[400];
    if (me == 0) {
        ok = 0;
        bh_body *fin = app_alloc((size_t)n, sizeof(bh_body), "gathered bodies");
        spmd_gather_blocks(fin, mine, qlo, p, me, sizeof(bh_body));
        double ke, pe, ipb;
        bh_summary(fin, n, &ke, &pe, &ipb, &check);
        if (o.verify) {
            long diff;
            double err;
            ok = bh_verify(init, fin, n, steps, theta, &diff, &err) && isfinite(check);
            snprintf(note, sizeof note,
                     "splitc global pointers (positions pushed, tree built at every node); N=%ld steps=%d "
                     "theta=%.2f KE=%.6f PE=%.6f interactions/body=%.0f differing_vs_serial=%ld rms_force_err=%.4f "
                     "tol=0.02",
                     n, steps, theta, ke, pe, ipb, diff, err);
        } else {
            snprintf(note, sizeof note, "splitc global pointers; N=%ld steps=%d theta=%.2f KE=%.6f PE=%.6f (not verified)",
                     n, steps, theta, ke, pe);
        }
        free(fin);
    }
    return spmd_finish("barnes", &o, me, t1 - t0, ok, check, note);
}
