/*
 * water_splitc - water (Water-nsquared style molecular dynamics, water.c) written against
 * Split-C global pointers (squall.h: symmetric memory, split-phase bulk gets, bulk one-way
 * stores, all_store_sync), the Split-C version of seed 002 section 3.2.
 *
 * Owns: the distribution of the molecules over the nodes' symmetric memory, the split-phase
 * fetch of the molecules a node reads, the push of force contributions to their owners, and
 * the gathering for the check. Must not touch: the physics, the initial state and the serial
 * reference (water_kernel.h, shared with water.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/water_splitc -s tiny`). Node q keeps the
 * chunk of molecules water.c's thread q owns in a symmetric array (`mine`, chunk slots). Each
 * step, as water.c:
 *   predict + intra-molecular forces of own molecules (local); barrier
 *   inter-molecular forces: the node issues one split-phase bulk get per owner for the
 *     molecules it needs ([lo, hi + n/2), contiguous runs of each owner's chunk), one sync,
 *     computes its pairs into a private buffer; then it PUSHES each other node's part of the
 *     buffer (that node's chunk, 9 doubles per molecule) with one bulk one-way store into its
 *     slot of the owner's inbox, and its potential energy into every node's energy slot;
 *     all_store_sync; each node adds the contributions to its molecules in node order (no
 *     locks: the owner does every write to its molecules)
 *   correct own molecules (local); kinetic energies pushed the same way; all_store_sync.
 *
 * Check: node 0 reads every node's molecules (blocking bulk reads) and compares with the
 * serial reference from the same initial state (water.c's test: positions within 1e-9 of the
 * box length, every step's energies within relative 1e-9).
 */
#include "app.h"
#include "spmd.h"

#include "water_kernel.h"

int main(int argc, char **argv)
{
    app_opts o;
    long n;
    int steps;
    wt_parse(argc, argv, &o, "water_splitc", "Water-nsquared style molecular dynamics over Split-C global pointers (SPMD)", &n, &steps);
    int me, p;
    spmd_start(&o, &me, &p);
    const double dt = 0.004;

    wt_mol *init = app_alloc((size_t)n, sizeof(wt_mol), "initial molecules");
    double box = wt_init(init, n), cutoff2 = 0.25 * box * box;
    wt_initial_forces(init, n, box, cutoff2);
    long chunk;
    long *qlo = spmd_blocks(n, p, &chunk);
    long lo = qlo[me], hi = qlo[me + 1];
    /* symmetric: my molecules; an inbox slot of 9 doubles per molecule of mine from every
     * node; every node's energy of the current phase */
    wt_mol *mine = spmd_alloc((size_t)chunk * sizeof(wt_mol), "molecules");
    double *inbox = spmd_alloc((size_t)p * (size_t)chunk * 9 * sizeof(double), "force inbox");
    double *eslot = spmd_alloc((size_t)p * sizeof(double), "energy slots");
    for (long i = lo; i < hi; i++)
        mine[i - lo] = init[i];

    const long half = n / 2;
    long touched = (hi - lo) + half;
    if (touched > n)
        touched = n;
    wt_mol *snap = app_alloc_uninit((size_t)n, sizeof(wt_mol), "molecule snapshot");
    double (*pf)[WT_SITES][3] = app_alloc_uninit((size_t)n, sizeof *pf, "private forces");
    double *epot = app_alloc((size_t)steps, sizeof(double), "potential energies");
    double *ekin = app_alloc((size_t)steps, sizeof(double), "kinetic energies");

    OK(squall_barrier());
    double t0 = spmd_clock(me);
    for (int step = 0; step < steps; step++) {
        double upot = 0.0;
        for (long i = lo; i < hi; i++) {
            wt_predict(&mine[i - lo], dt, box);
            upot += wt_intra(&mine[i - lo], mine[i - lo].force);
        }
        OK(squall_barrier());

        /* fetch the molecules I read: runs of consecutive molecules, one get per owner run */
        for (long o2 = 0; o2 < touched;) {
            long j = (lo + o2) % n;
            int q = 0;
            while (j >= qlo[q + 1])
                q++;
            long run = qlo[q + 1] - j;
            if (run > touched - o2)
                run = touched - o2;
            if (q == me) {
                memcpy(&snap[j], &mine[j - lo], (size_t)run * sizeof(wt_mol));
            } else {
                SquallGptr from = {(uint32_t)q, &mine[j - qlo[q]]};
                OK(squall_gptr_get(&snap[j], from, (size_t)run * sizeof(wt_mol)));
            }
            o2 += run;
        }
        memset(pf, 0, (size_t)n * sizeof *pf);
        OK(squall_gptr_sync());
        for (long i = lo; i < hi; i++) {
            long cnt = (n % 2 == 0 && i >= half) ? half - 1 : half; /* each pair once */
            for (long o2 = 1; o2 <= cnt; o2++) {
                long j = (i + o2) % n;
                upot += wt_pair(&snap[i], &snap[j], box, cutoff2, pf[i], pf[j]);
            }
        }
        /* push every other node its chunk's contributions, and my energy to everyone */
        for (int k = 1; k < p; k++) {
            int q = (me + k) % p;
            long cnt = qlo[q + 1] - qlo[q];
            if (cnt > 0) {
                SquallGptr to = {(uint32_t)q, inbox + (size_t)me * (size_t)chunk * 9};
                OK(squall_gptr_store(to, pf[qlo[q]], (size_t)cnt * 9 * sizeof(double)));
            }
            SquallGptr e = {(uint32_t)q, &eslot[me]};
            OK(squall_gptr_store(e, &upot, sizeof upot));
        }
        memcpy(inbox + (size_t)me * (size_t)chunk * 9, pf[lo], (size_t)(hi - lo) * 9 * sizeof(double));
        eslot[me] = upot;
        OK(squall_all_store_sync());
        double e = 0.0;
        for (int q = 0; q < p; q++) {
            const double *in = inbox + (size_t)q * (size_t)chunk * 9;
            for (long i = lo; i < hi; i++)
                for (int s = 0; s < WT_SITES; s++)
                    for (int k = 0; k < 3; k++)
                        mine[i - lo].force[s][k] += in[(i - lo) * 9 + s * 3 + k];
            e += eslot[q];
        }
        epot[step] = e;
        OK(squall_barrier()); /* every node read its energy slots before they are reused */

        double ke = 0.0;
        for (long i = lo; i < hi; i++)
            ke += wt_correct(&mine[i - lo], dt);
        for (int k = 1; k < p; k++) {
            SquallGptr to = {(uint32_t)((me + k) % p), &eslot[me]};
            OK(squall_gptr_store(to, &ke, sizeof ke));
        }
        eslot[me] = ke;
        OK(squall_all_store_sync());
        e = 0.0;
        for (int q = 0; q < p; q++)
            e += eslot[q];
        ekin[step] = e;
        OK(squall_barrier());
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double etot = epot[steps - 1] + ekin[steps - 1];
    char note[320];
    if (me == 0) {
        ok = 0;
        wt_mol *fin = app_alloc((size_t)n, sizeof(wt_mol), "gathered molecules");
        spmd_gather_blocks(fin, mine, qlo, p, me, sizeof(wt_mol));
        if (o.verify) {
            double rtot, maxd, de;
            ok = wt_verify(init, fin, n, steps, box, cutoff2, dt, epot, ekin, etot, &rtot, &maxd, &de);
            snprintf(note, sizeof note,
                     "splitc global pointers; N=%ld steps=%d E=%.6f Eref=%.6f max_pos_diff/box=%.3g "
                     "max_energy_rel_diff=%.3g tol=1e-9",
                     n, steps, etot, rtot, maxd, de);
        } else {
            snprintf(note, sizeof note, "splitc global pointers; N=%ld steps=%d E=%.6f (not verified)", n, steps,
                     etot);
        }
        free(fin);
    }
    return spmd_finish("water", &o, me, t1 - t0, ok, etot, note);
}
