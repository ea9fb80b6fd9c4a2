/*
 * lu_splitc - lu (blocked dense LU factorisation, lu_driver.h) written against Split-C global
 * pointers (squall.h: symmetric memory, split-phase bulk gets, sync), the Split-C version of
 * seed 002 section 3.2.
 *
 * Owns: the per-node block storage, the panel fetches and the gathering of the factors. Must
 * not touch: the block arithmetic (common/lu_kernels.h), the matrix (common/lu_value.h) and
 * the check (lu_spmd.h), all shared with lu.c and clu.c.
 *
 * SPMD: every node runs main (`squall run -n N bin/lu_splitc -s tiny`). Each node keeps the
 * blocks it owns on lu.c's pr x pc grid (2-D scatter) in its symmetric memory, block (I, J)
 * at local slot (I / pr, J / pc), and fills them itself. Step K: the owner of (K, K) factors
 * it; barrier; a node owning blocks below or right of it fetches the diagonal block with one
 * bulk get and divides its blocks; barrier; a node owning interior blocks fetches the panel
 * blocks A_IK of its block rows and A_KJ of its block columns with split-phase bulk gets (all
 * in flight at once, one sync), then updates its blocks locally; barrier. No caching across
 * steps: every panel block a node needs is transferred once per step.
 *
 * Check: node 0 reads every block (blocking bulk reads) and computes lu.c's residual against
 * the matrix regenerated sequentially (tolerance 1e-10); `check` is bit-identical to lu.c's.
 */
#include "lu_spmd.h"
#include "spmd.h"

static long nb, bb, lcols;
static int pr, pc;
static double *store; /* symmetric: this node's blocks */

/* Global pointer of block (I, J) (in its owner's store). */
static SquallGptr blk(long I, long J)
{
    SquallGptr g = {(uint32_t)lu_spmd_owner(I, J, pr, pc), store + ((I / pr) * lcols + J / pc) * bb};
    return g;
}

int main(int argc, char **argv)
{
    app_opts o;
    long n, b;
    lu_spmd_parse(argc, argv, &o, "lu_splitc", "blocked LU factorisation over Split-C global pointers (SPMD)", &n, &b);
    int me, p;
    spmd_start(&o, &me, &p);
    lu_spmd_grid(p, &pr, &pc);
    nb = n / b;
    bb = b * b;
    long lrows = (nb + pr - 1) / pr;
    lcols = (nb + pc - 1) / pc;
    size_t bsz = (size_t)bb * sizeof(double);
    store = spmd_alloc((size_t)(lrows * lcols) * bsz, "blocks");
    double *dbuf = app_alloc_uninit((size_t)bb, sizeof(double), "diagonal block");
    double *colbuf = app_alloc_uninit((size_t)(lrows * bb), sizeof(double), "column panel");
    double *rowbuf = app_alloc_uninit((size_t)(lcols * bb), sizeof(double), "row panel");
    int myr = me / pc, myc = me % pc;
    for (long J = 0; J < nb; J++)
        for (long I = 0; I < nb; I++) {
            SquallGptr g = blk(I, J);
            if ((int)g.node != me)
                continue;
            double *x = g.addr;
            for (long j = 0; j < b; j++)
                for (long i = 0; i < b; i++)
                    x[i + j * b] = lu_value(I * b + i, J * b + j, n);
        }
    OK(squall_barrier());
    double t0 = spmd_clock(me);
    for (long K = 0; K < nb; K++) {
        SquallGptr gd = blk(K, K);
        if ((int)gd.node == me)
            lu_factor_diag(gd.addr, b, b);
        OK(squall_barrier());
        int panel = 0;
        for (long I = K + 1; I < nb; I++)
            panel |= lu_spmd_owner(I, K, pr, pc) == me || lu_spmd_owner(K, I, pr, pc) == me;
        if (panel) {
            const double *d = gd.addr;
            if ((int)gd.node != me) {
                OK(squall_gptr_read(dbuf, gd, bsz));
                d = dbuf;
            }
            for (long I = K + 1; I < nb; I++)
                if (lu_spmd_owner(I, K, pr, pc) == me)
                    lu_div_below(blk(I, K).addr, b, d, b, b);
            for (long J = K + 1; J < nb; J++)
                if (lu_spmd_owner(K, J, pr, pc) == me)
                    lu_div_right(blk(K, J).addr, b, d, b, b);
        }
        OK(squall_barrier());
        /* the panels of my interior blocks: A_IK for my block rows, A_KJ for my columns */
        const double **ai = malloc(sizeof(double *) * (size_t)nb), **aj = malloc(sizeof(double *) * (size_t)nb);
        if (!ai || !aj) {
            fprintf(stderr, "lu_splitc: out of memory\n");
            return 1;
        }
        int any = 0;
        for (long I = K + 1; I < nb; I++) {
            if (I % pr != myr)
                continue;
            SquallGptr g = blk(I, K);
            if ((int)g.node == me)
                ai[I] = g.addr;
            else {
                double *to = colbuf + (I / pr) * bb;
                OK(squall_gptr_get(to, g, bsz));
                ai[I] = to;
            }
            any = 1;
        }
        for (long J = K + 1; J < nb; J++) {
            if (J % pc != myc)
                continue;
            SquallGptr g = blk(K, J);
            if ((int)g.node == me)
                aj[J] = g.addr;
            else {
                double *to = rowbuf + (J / pc) * bb;
                OK(squall_gptr_get(to, g, bsz));
                aj[J] = to;
            }
        }
        if (any)
            OK(squall_gptr_sync());
        for (long J = K + 1; J < nb; J++)
            for (long I = K + 1; I < nb; I++)
                if (lu_spmd_owner(I, J, pr, pc) == me)
                    lu_mod_interior(blk(I, J).addr, b, ai[I], b, aj[J], b, b);
        free(ai);
        free(aj);
        OK(squall_barrier());
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[240];
    if (me == 0) {
        double *f = app_alloc_uninit((size_t)(n * n), sizeof(double), "gathered factors");
        for (long J = 0; J < nb; J++)
            for (long I = 0; I < nb; I++) {
                SquallGptr g = blk(I, J);
                const double *x = g.addr;
                if ((int)g.node != me) {
                    OK(squall_gptr_read(dbuf, g, bsz));
                    x = dbuf;
                }
                for (long j = 0; j < b; j++)
                    memcpy(f + I * b + (J * b + j) * n, x + j * b, (size_t)b * sizeof(double));
            }
        double rel = lu_spmd_residual(f, n, &check);
        if (o.verify) {
            ok = rel <= 1e-10;
            snprintf(note, sizeof note,
                     "splitc global pointers; n %ld block %ld grid %dx%d; residual |LUx-Ax|/|Ax| = %.3e (tol 1e-10)", n,
                     b, pr, pc, rel);
        } else {
            snprintf(note, sizeof note, "splitc global pointers; n %ld block %ld; not verified", n, b);
        }
        free(f);
    }
    return spmd_finish("lu", &o, me, t1 - t0, ok, check, note);
}
