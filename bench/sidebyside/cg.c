/* cg: a NAS-CG-style conjugate gradient solver, A x = b (b_i = 1 + (i mod 5)/4) for a sparse symmetric positive
 * definite n x n matrix (default n = 65536, 50 iterations) with 13 entries per row: the
 * diagonal and 12 off-diagonals at offsets +-1, +-3, +-61, +-997, +-4099 and +-(n/2 - 5)
 * (mod n), so every product gathers from the whole of p. The vectors x, r, p, q are shared
 * and blocked; each node keeps its rows of A in private memory. Per iteration: q = A p on
 * the node's rows, p.q; x, r updated, r.r; p updated; three barriers, the dot products
 * reduced through one page per node (summed in node order). Node 0 runs the same iterations
 * sequentially with the same partition of the sums and compares x (relative 1e-12). */
#include "dsm.h"
#include <math.h>

#define ND 13 /* entries per row */
#define SLOT 512 /* doubles per node in a reduction array: one page each */

static void offsets(size_t n, long off[ND - 1]) {
    const long base[6] = {1, 3, 61, 997, 4099, (long)n / 2 - 5};
    for (int k = 0; k < 6; k++) {
        off[2 * k] = base[k];
        off[2 * k + 1] = -base[k];
    }
}

static double pair_value(size_t i, size_t j) {
    size_t u = i < j ? i : j, v = i < j ? j : i;
    return -(double)(1 + (u * 31 + v * 17) % 7) / 8.0;
}

/* Rows lo..hi of A: ND entries each, the diagonal last. */
static void make_rows(size_t n, size_t lo, size_t hi, size_t *col, double *val) {
    long off[ND - 1];
    offsets(n, off);
    for (size_t i = lo; i < hi; i++) {
        size_t e = (i - lo) * ND;
        double sum = 0.0;
        for (int k = 0; k < ND - 1; k++) {
            long j = ((long)i + off[k]) % (long)n;
            if (j < 0)
                j += (long)n;
            col[e + k] = (size_t)j;
            val[e + k] = pair_value(i, (size_t)j);
            sum += fabs(val[e + k]);
        }
        col[e + ND - 1] = i;
        val[e + ND - 1] = sum + 1.0;
    }
}

/* q = A p on rows lo..hi; returns p.q over them. */
static double product(const size_t *col, const double *val, size_t lo, size_t hi,
                      const double *p, double *q) {
    double pq = 0.0;
    for (size_t i = lo; i < hi; i++) {
        const size_t *c = col + (i - lo) * ND;
        const double *v = val + (i - lo) * ND;
        double s = 0.0;
        for (int k = 0; k < ND; k++)
            s += v[k] * p[c[k]];
        q[i] = s;
        pq += p[i] * s;
    }
    return pq;
}

static double update_xr(double alpha, size_t lo, size_t hi, double *x, double *r,
                        const double *p, const double *q) {
    double rr = 0.0;
    for (size_t i = lo; i < hi; i++) {
        x[i] += alpha * p[i];
        r[i] -= alpha * q[i];
        rr += r[i] * r[i];
    }
    return rr;
}

static void update_p(double beta, size_t lo, size_t hi, const double *r, double *p) {
    for (size_t i = lo; i < hi; i++)
        p[i] = r[i] + beta * p[i];
}

static double rhs(size_t i) { return 1.0 + (double)(i % 5) / 4.0; }

/* a / b, 0 once converged (b = 0: the residual vanished). */
static double ratio(double a, double b) { return b != 0.0 ? a / b : 0.0; }

static double sum_slots(const double *red, int nodes) {
    double s = 0.0;
    for (int k = 0; k < nodes; k++)
        s += red[(size_t)k * SLOT];
    return s;
}

/* The same iterations on one node, the sums split as `nodes` nodes split them. */
static double *sequential(size_t n, size_t iters, int nodes) {
    size_t *col = malloc(n * ND * sizeof(size_t));
    double *val = malloc(n * ND * sizeof(double));
    double *x = calloc(n, sizeof(double)), *r = malloc(n * sizeof(double));
    double *p = malloc(n * sizeof(double)), *q = malloc(n * sizeof(double));
    double *part = malloc((size_t)nodes * sizeof(double));
    make_rows(n, 0, n, col, val);
    double rho = 0.0;
    for (int k = 0; k < nodes; k++) {
        double s = 0.0;
        for (size_t i = dsm_share(n, k, nodes, 1); i < dsm_share(n, k + 1, nodes, 1); i++)
            s += rhs(i) * rhs(i);
        rho += s;
    }
    for (size_t i = 0; i < n; i++)
        r[i] = p[i] = rhs(i);
    for (size_t it = 0; it < iters; it++) {
        for (int k = 0; k < nodes; k++) {
            size_t lo = dsm_share(n, k, nodes, 1), hi = dsm_share(n, k + 1, nodes, 1);
            part[k] = product(col + lo * ND, val + lo * ND, lo, hi, p, q);
        }
        double pq = 0.0;
        for (int k = 0; k < nodes; k++)
            pq += part[k];
        double alpha = ratio(rho, pq), rr = 0.0;
        for (int k = 0; k < nodes; k++)
            part[k] = update_xr(alpha, dsm_share(n, k, nodes, 1), dsm_share(n, k + 1, nodes, 1),
                                x, r, p, q);
        for (int k = 0; k < nodes; k++)
            rr += part[k];
        double beta = ratio(rr, rho);
        rho = rr;
        update_p(beta, 0, n, r, p);
    }
    free(col);
    free(val);
    free(r);
    free(p);
    free(q);
    free(part);
    return x;
}

int main(int argc, char **argv) {
    size_t n = 65536, iters = 50;
    dsm_args(argc, argv, &n, &iters);
    dsm_init();
    int me = dsm_rank(), nodes = dsm_nodes();
    double *x = dsm_alloc(n * sizeof(double)), *r = dsm_alloc(n * sizeof(double));
    double *p = dsm_alloc(n * sizeof(double)), *q = dsm_alloc(n * sizeof(double));
    double *red[2];
    red[0] = dsm_alloc((size_t)nodes * SLOT * sizeof(double));
    red[1] = dsm_alloc((size_t)nodes * SLOT * sizeof(double));
    size_t lo = dsm_share(n, me, nodes, 1), hi = dsm_share(n, me + 1, nodes, 1);
    size_t *col = malloc((hi - lo + 1) * ND * sizeof(size_t));
    double *val = malloc((hi - lo + 1) * ND * sizeof(double));
    make_rows(n, lo, hi, col, val);
    double mine = 0.0;
    for (size_t i = lo; i < hi; i++) {
        x[i] = 0.0;
        r[i] = p[i] = rhs(i);
        mine += rhs(i) * rhs(i);
    }
    red[1][(size_t)me * SLOT] = mine;
    dsm_barrier();
    double rho = sum_slots(red[1], nodes);
    dsm_barrier();
    double t0 = dsm_now();
    for (size_t it = 0; it < iters; it++) {
        red[0][(size_t)me * SLOT] = product(col, val, lo, hi, p, q);
        dsm_barrier();
        double alpha = ratio(rho, sum_slots(red[0], nodes));
        red[1][(size_t)me * SLOT] = update_xr(alpha, lo, hi, x, r, p, q);
        dsm_barrier();
        double rr = sum_slots(red[1], nodes);
        double beta = ratio(rr, rho);
        rho = rr;
        update_p(beta, lo, hi, r, p);
        dsm_barrier();
    }
    double s = dsm_now() - t0;
    int ok = 1;
    if (me == 0) {
        double *want = sequential(n, iters, nodes);
        for (size_t i = 0; i < n && ok; i++)
            if (!(fabs(x[i] - want[i]) <= 1e-12 * fabs(want[i]) + 1e-300)) {
                fprintf(stderr, "cg: x[%zu] = %.17g, sequential %.17g\n", i, x[i], want[i]);
                ok = 0;
            }
        if (ok && !(rho >= 0.0 && isfinite(rho)))
            ok = 0;
        free(want);
    }
    dsm_report("cg", n, iters, s, ok);
    dsm_barrier();
    dsm_finalize();
    return ok ? 0 : 1;
}
