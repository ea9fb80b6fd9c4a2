/*
 * fft_splitc - fft (six-step 1-D complex FFT, fft.c) written against Split-C global pointers
 * (squall.h: symmetric memory, bulk one-way stores, all_store_sync), the Split-C version of
 * seed 002 section 3.2: the transposes are pushed by their producers.
 *
 * Owns: the staging buffers and the push-based transposes. Must not touch: the row FFT, the
 * input and the check (fft_kernel.h, shared with fft.c).
 *
 * SPMD: every node runs main (`squall run -n N bin/fft_splitc -s tiny`; N a power of two no
 * larger than n1). Every matrix is dealt in blocks of rows as in fft.c and each node keeps its
 * rows in private memory. A transpose is a personalised all-to-all: node p packs, for every
 * node q, the part of its rows that becomes q's rows (p's rows x q's column block, transposed)
 * and sends it with ONE bulk one-way store (Split-C `bulk_store`) into q's staging buffer at
 * p's slot; `all_store_sync()` (a barrier that completes every store) ends the exchange and q
 * unpacks its rows. Two staging buffers alternate, so a transpose's stores never land in a
 * buffer its receiver is still unpacking (the all_store_sync between them orders that). Steps:
 * T = x^T, FFT rows, twiddle; U = T^T, FFT rows; X = U^T.
 *
 * Check: node 0 reads every node's output rows (blocking bulk reads) and compares X with a
 * sequential radix-2 FFT of the same input and a direct DFT at 4 points (fft_verify).
 */
#include "app.h"
#include "spmd.h"
#include "fft_kernel.h"

/* dst (my csrc/np rows of src^T, each rsrc long) from src (my rsrc/np rows of an rsrc x csrc
 * matrix) through the staging buffer `stage` (np slots of `slot` elements, symmetric). */
static void transpose_push(cplx *dst, const cplx *src, long rsrc, long csrc, int np, int me, cplx *stage,
                           long slot, cplx *pack)
{
    long rq = rsrc / np, cs = csrc / np;
    for (int k = 1; k <= np; k++) {
        int q = (me + k) % np; /* start with the next node, end with myself */
        cplx *out = q == me ? stage + (size_t)me * (size_t)slot : pack;
        for (long j = 0; j < cs; j++)
            for (long i = 0; i < rq; i++)
                out[j * rq + i] = src[i * csrc + q * cs + j];
        if (q != me) {
            SquallGptr to = {(uint32_t)q, stage + (size_t)me * (size_t)slot};
            OK(squall_gptr_store(to, pack, (size_t)(cs * rq) * sizeof(cplx)));
        }
    }
    OK(squall_all_store_sync());
    for (int p = 0; p < np; p++) {
        const cplx *in = stage + (size_t)p * (size_t)slot;
        for (long j = 0; j < cs; j++)
            memcpy(dst + j * rsrc + p * rq, in + j * rq, (size_t)rq * sizeof(cplx));
    }
}

int main(int argc, char **argv)
{
    app_opts o;
    long m, reps;
    fft_parse(argc, argv, &o, "fft_splitc", "1-D complex FFT, six-step, over Split-C global pointers (SPMD)", &m, &reps);
    int me, np;
    spmd_start(&o, &me, &np);
    long n = 1L << m, n1 = 1L << (m / 2), n2 = 1L << (m - m / 2);
    if ((np & (np - 1)) != 0 || np > n1) {
        if (me == 0)
            fprintf(stderr, "fft_splitc: the node count %d must be a power of two no larger than n1 = %ld\n", np, n1);
        squall_finalize();
        return 2;
    }
    long mine = n / np, slot = mine / np; /* elements of my rows; of one node's part of them */
    cplx *stage[2];
    for (int k = 0; k < 2; k++)
        stage[k] = spmd_alloc((size_t)mine * sizeof(cplx), "staging buffer");
    cplx *out = spmd_alloc((size_t)mine * sizeof(cplx), "output rows"); /* my rows of X, read by node 0 */
    cplx *w = app_alloc_uninit((size_t)n, sizeof(cplx), "roots of unity");
    cplx *x = app_alloc_uninit((size_t)n, sizeof(cplx), "input");
    cplx *a = app_alloc_uninit((size_t)mine, sizeof(cplx), "my rows");
    cplx *b = app_alloc_uninit((size_t)mine, sizeof(cplx), "my rows");
    cplx *pack = app_alloc_uninit((size_t)slot, sizeof(cplx), "pack buffer");
    fft_roots(w, n);
    fft_input(x, n);
    const cplx *myx = x + (size_t)me * (size_t)mine; /* my rows of x viewed as n2 x n1 */
    long ra = n1 / np, rb = n2 / np;
    int flip = 0;
    OK(squall_barrier());
    double t0 = spmd_clock(me);
    for (long rep = 0; rep < reps; rep++) {
        transpose_push(a, myx, n2, n1, np, me, stage[flip], slot, pack); /* 1: T rows */
        flip ^= 1;
        for (long i = 0; i < ra; i++) {
            long j1 = me * ra + i;
            cplx *row = a + i * n2;
            fft_row(row, n2, w, n); /* 2 */
            for (long k2 = 1; k2 < n2; k2++)
                row[k2] = cmul(row[k2], w[j1 * k2]); /* 3 */
        }
        transpose_push(b, a, n1, n2, np, me, stage[flip], slot, pack); /* 4: U rows */
        flip ^= 1;
        for (long i = 0; i < rb; i++)
            fft_row(b + i * n1, n1, w, n); /* 5 */
        transpose_push(out, b, n2, n1, np, me, stage[flip], slot, pack); /* 6: X rows */
        flip ^= 1;
    }
    OK(squall_barrier());
    double t1 = spmd_clock(me);

    int ok = 1;
    double check = 0.0;
    char note[260];
    if (me == 0) {
        cplx *X = app_alloc_uninit((size_t)n, sizeof(cplx), "gathered output");
        for (int q = 0; q < np; q++) {
            SquallGptr from = {(uint32_t)q, out};
            OK(squall_gptr_read(X + (size_t)q * (size_t)mine, from, (size_t)mine * sizeof(cplx)));
        }
        for (long k = 0; k < n; k++)
            check += X[k].re + X[k].im;
        if (o.verify) {
            double relfull, worst;
            ok = fft_verify(x, X, w, n, &relfull, &worst);
            snprintf(note, sizeof note,
                     "splitc global pointers; n 2^%ld (%ldx%ld) reps %ld; vs radix-2 reference max err/max mag %.3e "
                     "(tol 1e-10); direct DFT at 4 points %.3e (tol 1e-8)",
                     m, n1, n2, reps, relfull, worst);
        } else {
            snprintf(note, sizeof note, "splitc global pointers; n 2^%ld (%ldx%ld) reps %ld; not verified", m, n1, n2,
                     reps);
        }
        free(X);
    }
    return spmd_finish("fft", &o, me, t1 - t0, ok, check, note);
}
