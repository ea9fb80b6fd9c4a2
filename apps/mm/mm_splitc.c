/*
 * mm_splitc - mm (blocked matrix multiply C = A * B) written against Split-C global pointers
 * (squall.h: spread arrays, split-phase bulk get/put, sync), the Split-C version of seed 002
 * section 3.2 ("needed blocks are fetched pairwise, just before they are used").
 *
 * Owns: the spread arrays of the three matrices, the prefetch pipeline and the gathering of C
 * for the check. Must not touch: the kernel and the entries (mm_kernel.h, shared with mm.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/mm_splitc -s tiny`). A, B and C are spread
 * arrays of B x B blocks (one spread block per matrix block, block (I, J) of A and C at index
 * I * nb + J, of B at J * nb + I, so a node's block row / column sits together), dealt
 * cyclically over the nodes; each node fills the A and B blocks it holds through local
 * pointers. The nodes form mm.c's pr x pc grid; for every C block it computes, a node issues
 * the split-phase bulk gets of A(I, K+1) and B(K+1, J) before multiplying A(I, K) * B(K, J)
 * (double buffering, one sync per step; a block held locally is used in place), then puts the
 * finished block to the node holding it (split-phase, completed by the barrier that ends the
 * repetition). There is no caching: every use of a remote block is a transfer, the
 * difference from the CRL and page versions the seed measures. `check` is bit-identical to
 * mm.c's.
 *
 * Check: node 0 reads every C block (blocking bulk reads) and runs mm.c's Freivalds test
 * against A and B regenerated sequentially (mm_freivalds, tolerance 1e-12).
 */
#include "app.h"
#include "spmd.h"
#include "mm_kernel.h"

int main(int argc, char **argv)
{
    app_opts o;
    mm_opts mo = mm_parse(argc, argv, &o, "mm_splitc", "blocked matrix multiply over Split-C global pointers (SPMD)");
    long n = mo.n, b = mo.b, reps = mo.reps;
    int me, p, pr, pc;
    spmd_start(&o, &me, &p);
    mm_grid(p, &pr, &pc);
    long nb = n / b, bb = b * b;
    size_t bsz = (size_t)bb * sizeof(double);
    SquallSpread m[3]; /* A, B, C */
    for (int k = 0; k < 3; k++)
        OK(squall_spread_alloc((size_t)(n * n), sizeof(double), (size_t)bb, &m[k]));
    /* global pointer to block (I, J) of matrix k (B stored by block columns) */
#define BLK(k, I, J) squall_spread_ptr(&m[k], (size_t)((k) == 1 ? (J) * nb + (I) : (I) * nb + (J)) * (size_t)bb)
    for (long I = 0; I < nb; I++)
        for (long J = 0; J < nb; J++)
            for (int k = 0; k < 2; k++) {
                SquallGptr g = BLK(k, I, J);
                if ((int)g.node != me)
                    continue;
                double *x = g.addr;
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        x[i * b + j] = mm_value(k, I * b + i, J * b + j, n);
            }
    double *buf = app_alloc_uninit((size_t)(4 * bb), sizeof(double), "prefetch buffers");
    double *acc = app_alloc_uninit((size_t)bb, sizeof(double), "C accumulator");
    int myr = me / pc, myc = me % pc;
    OK(squall_barrier());
    double t0 = spmd_clock(me);
    for (long rep = 0; rep < reps; rep++) {
        for (long I = myr; I < nb; I += pr)
            for (long J = myc; J < nb; J += pc) {
                const double *cur[2], *next[2] = {NULL, NULL};
                /* fetch (or point at) the blocks of step K into slot s */
#define FETCH(K, s, out)                                                                       \
    do {                                                                                       \
        SquallGptr ga = BLK(0, I, (K)), gb = BLK(1, (K), J);                                   \
        double *da = buf + (size_t)(2 * (s)) * (size_t)bb, *db = da + bb;                      \
        if ((int)ga.node == me)                                                                \
            (out)[0] = ga.addr;                                                                \
        else {                                                                                 \
            OK(squall_gptr_get(da, ga, bsz));                                                  \
            (out)[0] = da;                                                                     \
        }                                                                                      \
        if ((int)gb.node == me)                                                                \
            (out)[1] = gb.addr;                                                                \
        else {                                                                                 \
            OK(squall_gptr_get(db, gb, bsz));                                                  \
            (out)[1] = db;                                                                     \
        }                                                                                      \
    } while (0)
                FETCH(0, 0, cur);
                OK(squall_gptr_sync());
                memset(acc, 0, bsz);
                for (long K = 0; K < nb; K++) {
                    if (K + 1 < nb)
                        FETCH(K + 1, (K + 1) & 1, next);
                    mm_kernel(acc, cur[0], cur[1], b);
                    OK(squall_gptr_sync());
                    cur[0] = next[0];
                    cur[1] = next[1];
                }
                SquallGptr gc = BLK(2, I, J);
                if ((int)gc.node == me)
                    memcpy(gc.addr, acc, bsz);
                else
                    OK(squall_gptr_put(gc, acc, bsz)); /* acc may be reused at once */
            }
        OK(squall_barrier());
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[240];
    if (me == 0) {
        double *all = app_alloc_uninit((size_t)(n * n), sizeof(double), "gathered C");
        for (long I = 0; I < nb; I++)
            for (long J = 0; J < nb; J++) {
                OK(squall_gptr_read(acc, BLK(2, I, J), bsz));
                for (long i = 0; i < b; i++)
                    memcpy(all + (I * b + i) * n + J * b, acc + i * b, (size_t)b * sizeof(double));
            }
        for (long I = 0; I < nb; I++)
            for (long J = 0; J < nb; J++)
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        check += all[(I * b + i) * n + J * b + j];
        if (o.verify) {
            double rel = mm_freivalds(all, n);
            ok = rel <= 1e-12;
            snprintf(note, sizeof note,
                     "splitc global pointers; n %ld block %ld reps %ld grid %dx%d; Freivalds |Cx-A(Bx)|/|A(Bx)| = %.3e "
                     "(tol 1e-12)",
                     n, b, reps, pr, pc, rel);
        } else {
            snprintf(note, sizeof note, "splitc global pointers; n %ld block %ld reps %ld; not verified", n, b, reps);
        }
        free(all);
    }
    return spmd_finish("mm", &o, me, t1 - t0, ok, check, note);
}
