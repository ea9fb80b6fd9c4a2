/*
 * fft_crl - fft (six-step 1-D complex FFT, fft.c) written against CRL regions (crl.h), the CRL
 * version of seed 002 section 3.2, whose only communication is the remapping between phases.
 *
 * Owns: the patch regions of the three matrices and the transposes through them. Must not
 * touch: the row FFT, the input and the check (fft_kernel.h, shared with fft.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/fft_crl -s tiny`; N a power of two no
 * larger than n1). Each matrix (the input x viewed as n2 x n1, T = n1 x n2, U = n2 x n1) is
 * dealt to the nodes in blocks of rows as in fft.c, and node p's row block is cut into P
 * patches, patch (p, s) holding p's rows and the s-th block of columns, one region each, homed
 * on p. A transpose reads exactly the patches it needs: node p's destination rows are the
 * source's column block p, i.e. patch (q, p) of every node q (one read operation each, a
 * whole remote region per miss). A node works on its rows in a private buffer (row FFTs,
 * twiddles) and writes them back into its own patches (one write operation each, which
 * invalidates the copies the readers cached in the previous repetition). Steps: T = x^T,
 * FFT rows, twiddle; barrier; U = T^T, FFT rows; barrier; X = U^T into T's patches; barrier.
 *
 * Check: node 0 reads the output patches and compares X with a sequential radix-2 FFT of the
 * same input and a direct DFT at 4 points (fft_verify, fft.c's tolerances).
 */
#include "app.h"
#include "fft_kernel.h"
#include <crl.h>
#include "spmd.h" /* after crl.h: its CRL helpers */

/* loc (cs x rsrc, row-major) = rows of src^T owned by `me`: patch (q, me) of every node q of
 * the source (rsrc x csrc, patches rq x cs). */
static void gather_transpose(cplx *loc, const rid_t *src, long rsrc, long csrc, int np, int me)
{
    long rq = rsrc / np, cs = csrc / np;
    for (int q = 0; q < np; q++) {
        const cplx *patch = rgn_map(src[q * np + me]);
        rgn_start_read((void *)patch);
        for (long i = 0; i < rq; i++)
            for (long j = 0; j < cs; j++)
                loc[j * rsrc + q * rq + i] = patch[i * cs + j];
        rgn_end_read((void *)patch);
        rgn_unmap((void *)patch);
    }
}

/* Write loc (my rq x c rows of an r x c matrix) into my patches (me, s). */
static void scatter_rows(const cplx *loc, const rid_t *dst, long r, long c, int np, int me)
{
    long rq = r / np, cs = c / np;
    for (int s = 0; s < np; s++) {
        cplx *patch = rgn_map(dst[me * np + s]);
        rgn_start_write(patch);
        for (long i = 0; i < rq; i++)
            memcpy(patch + i * cs, loc + i * c + s * cs, (size_t)cs * sizeof(cplx));
        rgn_end_write(patch);
        rgn_unmap(patch);
    }
}

int main(int argc, char **argv)
{
    app_opts o;
    long m, reps;
    fft_parse(argc, argv, &o, "fft_crl", "1-D complex FFT, six-step, over CRL regions (SPMD)", &m, &reps);
    int me, np;
    crl_spmd_start(&o, &me, &np);
    long n = 1L << m, n1 = 1L << (m / 2), n2 = 1L << (m - m / 2);
    if ((np & (np - 1)) != 0 || np > n1) {
        if (me == 0)
            fprintf(stderr, "fft_crl: the node count %d must be a power of two no larger than n1 = %ld\n", np, n1);
        return 2;
    }
    /* ids[k][q * np + s]: patch (q, s) of matrix k: 0 = x (n2 x n1), 1 = T/X (n1 x n2), 2 = U (n2 x n1) */
    long rows[3] = {n2, n1, n2}, cols[3] = {n1, n2, n1};
    rid_t *ids[3];
    for (int k = 0; k < 3; k++) {
        ids[k] = app_alloc((size_t)(np * np), sizeof(rid_t), "patch ids");
        for (int s = 0; s < np; s++)
            ids[k][me * np + s] = rgn_create((unsigned)((rows[k] / np) * (cols[k] / np) * (long)sizeof(cplx)));
    }
    rid_t *pack = app_alloc((size_t)(3 * np), sizeof(rid_t), "id broadcast");
    for (int q = 0; q < np; q++) {
        if (q == me) {
            for (int k = 0; k < 3; k++)
                memcpy(pack + k * np, ids[k] + q * np, (size_t)np * sizeof(rid_t));
            rgn_bcast_send((int)(3 * np * (int)sizeof(rid_t)), pack);
        } else {
            rgn_bcast_recv((int)(3 * np * (int)sizeof(rid_t)), pack);
            for (int k = 0; k < 3; k++)
                memcpy(ids[k] + q * np, pack + k * np, (size_t)np * sizeof(rid_t));
        }
        rgn_barrier(); /* a broadcast is received by arrival, not by sender: one at a time */
    }
    free(pack);

    cplx *w = app_alloc_uninit((size_t)n, sizeof(cplx), "roots of unity");
    cplx *x = app_alloc_uninit((size_t)n, sizeof(cplx), "input");
    fft_roots(w, n);
    fft_input(x, n);
    /* my rows of x viewed as n2 x n1: x[j2][j1] = x[j1 + n1 * j2] (row-major already) */
    scatter_rows(x + (size_t)(me * (n2 / np) * n1), ids[0], n2, n1, np, me);
    long ra = n1 / np, rb = n2 / np; /* my rows of T (and X), of U */
    cplx *loc = app_alloc_uninit((size_t)(n / np), sizeof(cplx), "my rows");
    rgn_barrier();
    double t0 = spmd_clock(me);
    for (long rep = 0; rep < reps; rep++) {
        /* 1-3: my rows j1 of T = x^T; FFT of length n2; twiddle */
        gather_transpose(loc, ids[0], n2, n1, np, me);
        for (long i = 0; i < ra; i++) {
            long j1 = me * ra + i;
            cplx *row = loc + i * n2;
            fft_row(row, n2, w, n);
            for (long k2 = 1; k2 < n2; k2++)
                row[k2] = cmul(row[k2], w[j1 * k2]);
        }
        scatter_rows(loc, ids[1], n1, n2, np, me);
        rgn_barrier();
        /* 4-5: my rows k2 of U = T^T; FFT of length n1 */
        gather_transpose(loc, ids[1], n1, n2, np, me);
        for (long i = 0; i < rb; i++)
            fft_row(loc + i * n1, n1, w, n);
        scatter_rows(loc, ids[2], n2, n1, np, me);
        rgn_barrier();
        /* 6: my rows k1 of X = U^T, into T's patches */
        gather_transpose(loc, ids[2], n2, n1, np, me);
        scatter_rows(loc, ids[1], n1, n2, np, me);
        rgn_barrier();
    }
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[260];
    if (me == 0) {
        cplx *X = app_alloc_uninit((size_t)n, sizeof(cplx), "gathered output");
        for (int q = 0; q < np; q++)
            for (int s = 0; s < np; s++) {
                const cplx *patch = rgn_map(ids[1][q * np + s]);
                rgn_start_read((void *)patch);
                for (long i = 0; i < ra; i++)
                    memcpy(X + (q * ra + i) * n2 + s * rb, patch + i * rb, (size_t)rb * sizeof(cplx));
                rgn_end_read((void *)patch);
                rgn_unmap((void *)patch);
            }
        for (long k = 0; k < n; k++)
            check += X[k].re + X[k].im;
        if (o.verify) {
            double relfull, worst;
            ok = fft_verify(x, X, w, n, &relfull, &worst);
            snprintf(note, sizeof note,
                     "crl regions; n 2^%ld (%ldx%ld) reps %ld; vs radix-2 reference max err/max mag %.3e (tol 1e-10); "
                     "direct DFT at 4 points %.3e (tol 1e-8)",
                     m, n1, n2, reps, relfull, worst);
        } else {
            snprintf(note, sizeof note, "crl regions; n 2^%ld (%ldx%ld) reps %ld; not verified", m, n1, n2, reps);
        }
        free(X);
    }
    rgn_barrier();
    if (me == 0)
        app_finish("fft", &o, t1 - t0, ok, check, note);
    return 0;
}
