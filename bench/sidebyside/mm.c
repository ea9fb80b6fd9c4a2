/* mm: C = A x B, n x n doubles (default n = 1024). A, B and C are shared and blocked by rows:
 * node r initialises and computes its share of rows, reading all of B (the other nodes' rows
 * of B are remote: read-only reuse once fetched). Node 0 checks every row of C against A and
 * B regenerated sequentially (Freivalds with an integer vector: the entries are small
 * integers, so every sum is exact and the check is exact). */
#include "dsm.h"

static double a_at(size_t i, size_t j) { return (double)((i * 7 + j * 3) % 11) - 5.0; }
static double b_at(size_t i, size_t j) { return (double)((i * 5 + j * 13) % 9) - 4.0; }

int main(int argc, char **argv) {
    size_t n = 1024, iters = 1;
    dsm_args(argc, argv, &n, &iters);
    dsm_init();
    int me = dsm_rank(), p = dsm_nodes();
    double *a = dsm_alloc(n * n * sizeof(double));
    double *b = dsm_alloc(n * n * sizeof(double));
    double *c = dsm_alloc(n * n * sizeof(double));
    size_t lo = dsm_share(n, me, p, 1), hi = dsm_share(n, me + 1, p, 1);
    for (size_t i = lo; i < hi; i++)
        for (size_t j = 0; j < n; j++) {
            a[i * n + j] = a_at(i, j);
            b[i * n + j] = b_at(i, j);
        }
    dsm_barrier();
    double t0 = dsm_now();
    for (size_t it = 0; it < iters; it++) {
        for (size_t i = lo; i < hi; i++) {
            double *ci = c + i * n;
            for (size_t j = 0; j < n; j++)
                ci[j] = 0.0;
            for (size_t k = 0; k < n; k++) {
                double aik = a[i * n + k];
                const double *bk = b + k * n;
                for (size_t j = 0; j < n; j++)
                    ci[j] += aik * bk[j];
            }
        }
        dsm_barrier();
    }
    double s = dsm_now() - t0;
    int ok = 1;
    if (me == 0) {
        /* Freivalds: C x == A (B x) for x_j = j % 7 - 3, every row. */
        double *bx = malloc(n * sizeof(double));
        for (size_t k = 0; k < n; k++) {
            bx[k] = 0.0;
            for (size_t j = 0; j < n; j++)
                bx[k] += b_at(k, j) * (double)((int)(j % 7) - 3);
        }
        for (size_t i = 0; i < n && ok; i++) {
            double want = 0.0, got = 0.0;
            for (size_t k = 0; k < n; k++)
                want += a_at(i, k) * bx[k];
            for (size_t j = 0; j < n; j++)
                got += c[i * n + j] * (double)((int)(j % 7) - 3);
            if (got != want) {
                fprintf(stderr, "mm: row %zu: C x = %.1f, A (B x) = %.1f\n", i, got, want);
                ok = 0;
            }
        }
        free(bx);
    }
    dsm_report("mm", n, iters, s, ok);
    dsm_barrier();
    dsm_finalize();
    return ok ? 0 : 1;
}
