/*
 * lu_crl - lu (blocked dense LU factorisation, lu_driver.h) written against CRL regions
 * (crl.h), the CRL version of seed 002 section 3.2: one region per B x B block.
 *
 * Owns: the block regions, their distribution and the gathering of the factors. Must not
 * touch: the block arithmetic (common/lu_kernels.h), the matrix (common/lu_value.h) and the
 * check (lu_spmd.h), all shared with lu.c and clu.c.
 *
 * SPMD: every node runs main (`squall run -n N bin/lu_crl -s tiny`). Block (I, J) (column-major,
 * contiguous) is a region created, homed and filled by its owner on lu.c's pr x pc grid (2-D
 * scatter); the nodes broadcast their ids in turn. Step K, as lu.c: the owner of (K, K)
 * factors it inside a write operation; barrier; the owners of the blocks below and right of
 * it divide them (a read operation on the diagonal block, one write operation per block);
 * barrier; the owners of the interior blocks subtract A_IK * A_KJ (read operations on the two
 * panel blocks, fetched once per node and step and then read from its cache); barrier.
 *
 * Check: node 0 reads every block and computes lu.c's residual against the matrix regenerated
 * sequentially (tolerance 1e-10); `check` (sum of the factors) is bit-identical to lu.c's.
 */
#include "lu_spmd.h"
#include <crl.h>
#include "spmd.h" /* after crl.h: its CRL helpers */

int main(int argc, char **argv)
{
    app_opts o;
    long n, b;
    lu_spmd_parse(argc, argv, &o, "lu_crl", "blocked LU factorisation over CRL regions (SPMD: one process per node)", &n, &b);
    int me, p, pr, pc;
    crl_spmd_start(&o, &me, &p);
    lu_spmd_grid(p, &pr, &pc);
    long nb = n / b, bb = b * b, blocks = nb * nb;
    rid_t *ids = app_alloc((size_t)blocks, sizeof(rid_t), "region ids");
    rid_t *pack = app_alloc((size_t)blocks, sizeof(rid_t), "id broadcast");
#define OWNER(k) lu_spmd_owner((k) % nb, (k) / nb, pr, pc) /* block k = I + J * nb */
    for (long k = 0; k < blocks; k++) {
        if (OWNER(k) != me)
            continue;
        long I = k % nb, J = k / nb;
        ids[k] = rgn_create((unsigned)(bb * (long)sizeof(double)));
        double *x = rgn_map(ids[k]);
        rgn_start_write(x);
        for (long j = 0; j < b; j++)
            for (long i = 0; i < b; i++)
                x[i + j * b] = lu_value(I * b + i, J * b + j, n);
        rgn_end_write(x);
        rgn_unmap(x);
    }
    for (int q = 0; q < p; q++) {
        long cnt = 0;
        for (long k = 0; k < blocks; k++)
            if (OWNER(k) == q)
                pack[cnt++] = ids[k];
        if (cnt == 0)
            continue;
        if (q == me)
            rgn_bcast_send((int)(cnt * (long)sizeof(rid_t)), pack);
        else
            rgn_bcast_recv((int)(cnt * (long)sizeof(rid_t)), pack);
        for (long k = 0, at = 0; k < blocks; k++)
            if (OWNER(k) == q)
                ids[k] = pack[at++];
        rgn_barrier(); /* a broadcast is received by arrival, not by sender: one at a time */
    }
    free(pack);
#define BLK(I, J) ids[(I) + (J) * nb]

    rgn_barrier();
    double t0 = spmd_clock(me);
    for (long K = 0; K < nb; K++) {
        double *d = rgn_map(BLK(K, K));
        if (lu_spmd_owner(K, K, pr, pc) == me) {
            rgn_start_write(d);
            lu_factor_diag(d, b, b);
            rgn_end_write(d);
        }
        rgn_barrier();
        int panel = 0;
        for (long I = K + 1; I < nb; I++)
            panel |= lu_spmd_owner(I, K, pr, pc) == me || lu_spmd_owner(K, I, pr, pc) == me;
        if (panel) {
            rgn_start_read(d);
            for (long I = K + 1; I < nb; I++)
                if (lu_spmd_owner(I, K, pr, pc) == me) {
                    double *x = rgn_map(BLK(I, K));
                    rgn_start_write(x);
                    lu_div_below(x, b, d, b, b);
                    rgn_end_write(x);
                    rgn_unmap(x);
                }
            for (long J = K + 1; J < nb; J++)
                if (lu_spmd_owner(K, J, pr, pc) == me) {
                    double *x = rgn_map(BLK(K, J));
                    rgn_start_write(x);
                    lu_div_right(x, b, d, b, b);
                    rgn_end_write(x);
                    rgn_unmap(x);
                }
            rgn_end_read(d);
        }
        rgn_unmap(d);
        rgn_barrier();
        for (long J = K + 1; J < nb; J++)
            for (long I = K + 1; I < nb; I++)
                if (lu_spmd_owner(I, J, pr, pc) == me) {
                    double *c = rgn_map(BLK(I, J)), *x = rgn_map(BLK(I, K)), *y = rgn_map(BLK(K, J));
                    rgn_start_write(c);
                    rgn_start_read(x);
                    rgn_start_read(y);
                    lu_mod_interior(c, b, x, b, y, b, b);
                    rgn_end_read(y);
                    rgn_end_read(x);
                    rgn_end_write(c);
                    rgn_unmap(y);
                    rgn_unmap(x);
                    rgn_unmap(c);
                }
        rgn_barrier();
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[240];
    if (me == 0) {
        double *f = app_alloc_uninit((size_t)(n * n), sizeof(double), "gathered factors");
        for (long J = 0; J < nb; J++)
            for (long I = 0; I < nb; I++) {
                double *x = rgn_map(BLK(I, J));
                rgn_start_read(x);
                for (long j = 0; j < b; j++)
                    memcpy(f + I * b + (J * b + j) * n, x + j * b, (size_t)b * sizeof(double));
                rgn_end_read(x);
                rgn_unmap(x);
            }
        double rel = lu_spmd_residual(f, n, &check);
        if (o.verify) {
            ok = rel <= 1e-10;
            snprintf(note, sizeof note, "crl regions; n %ld block %ld grid %dx%d; residual |LUx-Ax|/|Ax| = %.3e (tol 1e-10)",
                     n, b, pr, pc, rel);
        } else {
            snprintf(note, sizeof note, "crl regions; n %ld block %ld; not verified", n, b);
        }
        free(f);
    }
    rgn_barrier();
    if (me == 0)
        app_finish("lu", &o, t1 - t0, ok, check, note);
    return 0;
}
