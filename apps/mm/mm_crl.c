/*
 * mm_crl - mm (blocked matrix multiply C = A * B) written against CRL regions (crl.h), the
 * CRL version of seed 002 section 3.2: one region per B x B block of A, B and C.
 *
 * Owns: the regions of the three matrices, their distribution and the gathering of C for the
 * check. Must not touch: the kernel and the entries (mm_kernel.h, shared with mm.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/mm_crl -s tiny`); the nodes form the same
 * pr x pc grid as mm.c's threads. Node (r, c) creates, homes and fills the A blocks of the
 * block rows it owns in mm.c (mm_arow_owner), the B blocks of its block columns and the C
 * blocks it computes; the nodes broadcast their region ids in turn. Timed phase: every C block
 * (I, J) of the node is summed in a private buffer from A(I, K) * B(K, J) over K, each block
 * read inside rgn_start_read / rgn_end_read (a remote block is fetched on the first read and
 * stays cached: A and B are never written again), then stored into its C region inside one
 * write operation. Per element the additions have mm.c's order, so `check` (sum of C) is
 * bit-identical to mm.c's.
 *
 * Check: node 0 reads every C block and runs mm.c's Freivalds test against A and B
 * regenerated sequentially (mm_freivalds, tolerance 1e-12).
 */
#include "app.h"
#include "mm_kernel.h"
#include <crl.h>
#include "spmd.h" /* after crl.h: its CRL helpers */

static int arow_owner(long I, int pr, int pc) { return (int)((I % pr) * pc + (I / pr) % pc); }
static int bcol_owner(long J, int pr, int pc) { return (int)(((J / pc) % pr) * pc + J % pc); }
static int c_owner(long I, long J, int pr, int pc) { return (int)((I % pr) * pc + J % pc); }

int main(int argc, char **argv)
{
    app_opts o;
    mm_opts mo = mm_parse(argc, argv, &o, "mm_crl", "blocked matrix multiply over CRL regions (SPMD: one process per node)");
    long n = mo.n, b = mo.b, reps = mo.reps;
    int me, p, pr, pc;
    crl_spmd_start(&o, &me, &p);
    mm_grid(p, &pr, &pc);
    long nb = n / b, bb = b * b, blocks = nb * nb;
    unsigned bytes = (unsigned)(bb * (long)sizeof(double));
    /* ids[m][I * nb + J]: region of block (I, J) of A (m 0), B (1), C (2) */
    rid_t *ids[3];
    for (int m = 0; m < 3; m++)
        ids[m] = app_alloc((size_t)blocks, sizeof(rid_t), "region ids");
    for (long I = 0; I < nb; I++)
        for (long J = 0; J < nb; J++) {
            long k = I * nb + J;
            int own[3] = {arow_owner(I, pr, pc), bcol_owner(J, pr, pc), c_owner(I, J, pr, pc)};
            for (int m = 0; m < 3; m++) {
                if (own[m] != me)
                    continue;
                ids[m][k] = rgn_create(bytes);
                if (m == 2)
                    continue; /* C starts zero-filled */
                double *x = rgn_map(ids[m][k]);
                rgn_start_write(x);
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        x[i * b + j] = mm_value(m, I * b + i, J * b + j, n);
                rgn_end_write(x);
                rgn_unmap(x);
            }
        }
    /* Node q broadcasts the ids it created, in block order; everyone unpacks the same order. */
    rid_t *pack = app_alloc((size_t)(3 * blocks), sizeof(rid_t), "id broadcast");
    for (int q = 0; q < p; q++) {
        long cnt = 0;
        for (long k = 0; k < blocks; k++) {
            long I = k / nb, J = k % nb;
            int own[3] = {arow_owner(I, pr, pc), bcol_owner(J, pr, pc), c_owner(I, J, pr, pc)};
            for (int m = 0; m < 3; m++)
                if (own[m] == q)
                    cnt++;
        }
        if (cnt == 0)
            continue;
        if (q == me) {
            long at = 0;
            for (long k = 0; k < blocks; k++) {
                long I = k / nb, J = k % nb;
                int own[3] = {arow_owner(I, pr, pc), bcol_owner(J, pr, pc), c_owner(I, J, pr, pc)};
                for (int m = 0; m < 3; m++)
                    if (own[m] == q)
                        pack[at++] = ids[m][k];
            }
            rgn_bcast_send((int)(cnt * (long)sizeof(rid_t)), pack);
        } else {
            rgn_bcast_recv((int)(cnt * (long)sizeof(rid_t)), pack);
            long at = 0;
            for (long k = 0; k < blocks; k++) {
                long I = k / nb, J = k % nb;
                int own[3] = {arow_owner(I, pr, pc), bcol_owner(J, pr, pc), c_owner(I, J, pr, pc)};
                for (int m = 0; m < 3; m++)
                    if (own[m] == q)
                        ids[m][k] = pack[at++];
            }
        }
        rgn_barrier(); /* a broadcast is received by arrival, not by sender: one at a time */
    }
    free(pack);

    double *acc = app_alloc_uninit((size_t)bb, sizeof(double), "C accumulator");
    int myr = me / pc, myc = me % pc;
    rgn_barrier();
    double t0 = spmd_clock(me);
    for (long rep = 0; rep < reps; rep++) {
        for (long I = myr; I < nb; I += pr)
            for (long J = myc; J < nb; J += pc) {
                memset(acc, 0, (size_t)bb * sizeof(double));
                for (long K = 0; K < nb; K++) {
                    double *x = rgn_map(ids[0][I * nb + K]);
                    double *y = rgn_map(ids[1][K * nb + J]);
                    rgn_start_read(x);
                    rgn_start_read(y);
                    mm_kernel(acc, x, y, b);
                    rgn_end_read(y);
                    rgn_end_read(x);
                    rgn_unmap(y);
                    rgn_unmap(x);
                }
                double *c = rgn_map(ids[2][I * nb + J]);
                rgn_start_write(c);
                memcpy(c, acc, (size_t)bb * sizeof(double));
                rgn_end_write(c);
                rgn_unmap(c);
            }
        rgn_barrier();
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[240];
    if (me == 0) {
        double *all = app_alloc_uninit((size_t)(n * n), sizeof(double), "gathered C");
        for (long I = 0; I < nb; I++)
            for (long J = 0; J < nb; J++) {
                double *c = rgn_map(ids[2][I * nb + J]);
                rgn_start_read(c);
                for (long i = 0; i < b; i++)
                    memcpy(all + (I * b + i) * n + J * b, c + i * b, (size_t)b * sizeof(double));
                rgn_end_read(c);
                rgn_unmap(c);
            }
        /* mm.c's order: block rows of blocks, row-major inside */
        for (long I = 0; I < nb; I++)
            for (long J = 0; J < nb; J++)
                for (long i = 0; i < b; i++)
                    for (long j = 0; j < b; j++)
                        check += all[(I * b + i) * n + J * b + j];
        if (o.verify) {
            double rel = mm_freivalds(all, n);
            ok = rel <= 1e-12;
            snprintf(note, sizeof note,
                     "crl regions; n %ld block %ld reps %ld grid %dx%d; Freivalds |Cx-A(Bx)|/|A(Bx)| = %.3e (tol 1e-12)",
                     n, b, reps, pr, pc, rel);
        } else {
            snprintf(note, sizeof note, "crl regions; n %ld block %ld reps %ld; not verified", n, b, reps);
        }
        free(all);
    }
    rgn_barrier();
    if (me == 0)
        app_finish("mm", &o, t1 - t0, ok, check, note);
    return 0;
}
