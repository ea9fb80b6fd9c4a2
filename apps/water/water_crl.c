/*
 * water_crl - water (Water-nsquared style molecular dynamics, water.c) written against CRL
 * regions (crl.h), the CRL version of seed 002 section 3.2: one region per molecule.
 *
 * Owns: the molecule regions, their distribution, the per-step snapshot of the molecules a
 * node reads, and the gathering for the check. Must not touch: the physics, the initial state
 * and the serial reference (water_kernel.h, shared with water.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/water_crl -s tiny`). Node q owns the
 * contiguous chunk of molecules water.c's thread q owns: it creates (homes) and fills their
 * regions, and the nodes broadcast their region ids in turn. Each step, as water.c:
 *   predict + intra-molecular forces of own molecules, each inside a write operation; barrier
 *   inter-molecular forces: the node copies the molecules it needs ([lo, hi + n/2)) out of
 *     their regions inside read operations (a remote molecule misses once per step: its owner
 *     wrote it), computes its pairs into a private buffer, then adds each touched molecule's
 *     contribution inside a WRITE OPERATION on that molecule's region — the per-molecule lock
 *     of water.c, with the region's data travelling with it; potential energy summed with
 *     rgn_reduce_dadd; barrier
 *   correct own molecules inside write operations; kinetic energy summed with rgn_reduce_dadd.
 *
 * Check: node 0 reads every molecule and compares with the serial reference from the same
 * initial state (water.c's test: positions within 1e-9 of the box length, every step's
 * energies within relative 1e-9).
 */
#include "app.h"

#include "water_kernel.h"
#include <crl.h>
#include "spmd.h" /* after crl.h: its CRL helpers */

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    wt_parse(argc, argv, &o, "water_crl", "Water-nsquared style molecular dynamics over CRL regions (SPMD)", &n, &steps);
    int me, p;
    crl_spmd_start(&o, &me, &p);
    const double dt = 0.004;

    /* Every node builds the same initial state (deterministic); node q keeps its chunk. */
    wt_mol *init = app_alloc((size_t)n, sizeof(wt_mol), "initial molecules");
    double box = wt_init(init, n), cutoff2 = 0.25 * box * box;
    wt_initial_forces(init, n, box, cutoff2);
    long lo, hi;
    app_block_range(n, p, me, &lo, &hi);

    rid_t *ids = app_alloc((size_t)n, sizeof(rid_t), "region ids");
    crl_block_regions(ids, init, n, sizeof(wt_mol), p, me);
    /* Map every region once: a mapping stays valid for the whole run. */
    wt_mol **mol = app_alloc((size_t)n, sizeof(wt_mol *), "mapped molecules");
    for (long i = 0; i < n; i++)
        mol[i] = rgn_map(ids[i]);

    const long half = n / 2;
    long touched = (hi - lo) + half;
    if (touched > n)
        touched = n;
    wt_mol *snap = app_alloc_uninit((size_t)n, sizeof(wt_mol), "molecule snapshot");
    double (*pf)[WT_SITES][3] = app_alloc_uninit((size_t)n, sizeof *pf, "private forces");
    double *epot = app_alloc((size_t)steps, sizeof(double), "potential energies");
    double *ekin = app_alloc((size_t)steps, sizeof(double), "kinetic energies");

    rgn_barrier();
    double t0 = spmd_clock(me);
    for (int step = 0; step < steps; step++) {
        double upot = 0.0;
        for (long i = lo; i < hi; i++) {
            rgn_start_write(mol[i]);
            wt_predict(mol[i], dt, box);
            upot += wt_intra(mol[i], mol[i]->force);
            rgn_end_write(mol[i]);
        }
        rgn_barrier();

        /* the molecules this node reads, copied out of their regions */
        for (long o2 = 0; o2 < touched; o2++) {
            long j = (lo + o2) % n;
            rgn_start_read(mol[j]);
            snap[j] = *mol[j];
            rgn_end_read(mol[j]);
            memset(pf[j], 0, sizeof pf[j]);
        }
        for (long i = lo; i < hi; i++) {
            long cnt = (n % 2 == 0 && i >= half) ? half - 1 : half; /* each pair once */
            for (long o2 = 1; o2 <= cnt; o2++) {
                long j = (i + o2) % n;
                upot += wt_pair(&snap[i], &snap[j], box, cutoff2, pf[i], pf[j]);
            }
        }
        if (hi > lo) {
            for (long o2 = 0; o2 < touched; o2++) {
                long j = (lo + o2) % n;
                rgn_start_write(mol[j]);
                for (int s = 0; s < WT_SITES; s++)
                    for (int k = 0; k < 3; k++)
                        mol[j]->force[s][k] += pf[j][s][k];
                rgn_end_write(mol[j]);
            }
        }
        epot[step] = rgn_reduce_dadd(upot);
        rgn_barrier();

        double ke = 0.0;
        for (long i = lo; i < hi; i++) {
            rgn_start_write(mol[i]);
            ke += wt_correct(mol[i], dt);
            rgn_end_write(mol[i]);
        }
        ekin[step] = rgn_reduce_dadd(ke);
        rgn_barrier();
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double etot = epot[steps - 1] + ekin[steps - 1];
    char note[320];
    if (me == 0) {
        ok = 0;
        wt_mol *fin = app_alloc((size_t)n, sizeof(wt_mol), "gathered molecules");
        for (long i = 0; i < n; i++) {
            rgn_start_read(mol[i]);
            fin[i] = *mol[i];
            rgn_end_read(mol[i]);
        }
        if (o.verify) {
            double rtot, maxd, de;
            ok = wt_verify(init, fin, n, steps, box, cutoff2, dt, epot, ekin, etot, &rtot, &maxd, &de);
            snprintf(note, sizeof note,
                     "crl regions (one per molecule); N=%ld steps=%d E=%.6f Eref=%.6f max_pos_diff/box=%.3g "
                     "max_energy_rel_diff=%.3g tol=1e-9",
                     n, steps, etot, rtot, maxd, de);
        } else {
            snprintf(note, sizeof note, "crl regions; N=%ld steps=%d E=%.6f (not verified)", n, steps, etot);
        }
        free(fin);
    }
    rgn_barrier();
    if (me == 0)
        app_finish("water", &o, t1 - t0, ok, etot, note);
    return 0;
}
