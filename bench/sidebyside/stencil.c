/* stencil: 2-D Jacobi, n x n doubles (default n = 1024, 100 sweeps), two shared grids
 * blocked by rows: node r sweeps its share of rows, reading one boundary row of each
 * neighbour per sweep (written by that neighbour the sweep before). Node 0 runs the same
 * sweeps sequentially and compares every cell (the same arithmetic in the same order: equal
 * bit for bit). */
#include "dsm.h"

static double init_at(size_t n, size_t i, size_t j) {
    if (i == 0 || j == 0 || i == n - 1 || j == n - 1)
        return (double)((i + 2 * j) % 17); /* fixed boundary */
    return 0.0;
}

static void sweep(const double *src, double *dst, size_t n, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        if (i == 0 || i == n - 1)
            continue;
        for (size_t j = 1; j + 1 < n; j++)
            dst[i * n + j] = 0.25 * (src[(i - 1) * n + j] + src[(i + 1) * n + j] +
                                     src[i * n + j - 1] + src[i * n + j + 1]);
    }
}

int main(int argc, char **argv) {
    size_t n = 1024, iters = 100;
    dsm_args(argc, argv, &n, &iters);
    dsm_init();
    int me = dsm_rank(), p = dsm_nodes();
    double *g[2];
    g[0] = dsm_alloc(n * n * sizeof(double));
    g[1] = dsm_alloc(n * n * sizeof(double));
    size_t lo = dsm_share(n, me, p, 1), hi = dsm_share(n, me + 1, p, 1);
    for (size_t i = lo; i < hi; i++)
        for (size_t j = 0; j < n; j++)
            g[0][i * n + j] = g[1][i * n + j] = init_at(n, i, j);
    dsm_barrier();
    double t0 = dsm_now();
    for (size_t it = 0; it < iters; it++) {
        sweep(g[it % 2], g[(it + 1) % 2], n, lo, hi);
        dsm_barrier();
    }
    double s = dsm_now() - t0;
    int ok = 1;
    if (me == 0) {
        double *r[2];
        r[0] = malloc(n * n * sizeof(double));
        r[1] = malloc(n * n * sizeof(double));
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                r[0][i * n + j] = r[1][i * n + j] = init_at(n, i, j);
        for (size_t it = 0; it < iters; it++)
            sweep(r[it % 2], r[(it + 1) % 2], n, 0, n);
        const double *want = r[iters % 2], *got = g[iters % 2];
        for (size_t k = 0; k < n * n && ok; k++)
            if (want[k] != got[k]) {
                fprintf(stderr, "stencil: cell (%zu, %zu): %g, sequential %g\n", k / n, k % n,
                        got[k], want[k]);
                ok = 0;
            }
        free(r[0]);
        free(r[1]);
    }
    dsm_report("stencil", n, iters, s, ok);
    dsm_barrier();
    dsm_finalize();
    return ok ? 0 : 1;
}
