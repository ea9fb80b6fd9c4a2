/* ep: NAS-EP-style embarrassingly parallel Gaussian pairs: 2^m uniform pairs (default m =
 * 24) from a counter-based generator (splitmix64 of the pair's index, so a node starts at its
 * share without skipping ahead), accepted ones turned into Gaussian deviates by the polar
 * method and counted in ten square annuli, with the sums of the deviates. Each node writes
 * its counts and sums into its own page of a shared array; node 0 adds them in node order and
 * compares with the same computation done sequentially (counts equal, sums relative 1e-12). */
#include "dsm.h"
#include <math.h>

#define NQ 10
#define SLOT 512 /* doubles per node: one page each */

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t k) { return 2.0 * (double)(mix(k) >> 11) * 0x1.0p-53 - 1.0; }

/* Pairs lo..hi: out[0] = sum x, out[1] = sum y, out[2 + l] = pairs in annulus l. */
static void pairs(uint64_t lo, uint64_t hi, double *out) {
    double sx = 0.0, sy = 0.0, q[NQ] = {0};
    for (uint64_t k = lo; k < hi; k++) {
        double x = uniform(2 * k), y = uniform(2 * k + 1);
        double t = x * x + y * y;
        if (t > 1.0 || t == 0.0)
            continue;
        double f = sqrt(-2.0 * log(t) / t);
        double gx = x * f, gy = y * f;
        int l = (int)fmax(fabs(gx), fabs(gy));
        if (l < NQ) {
            q[l] += 1.0;
            sx += gx;
            sy += gy;
        }
    }
    out[0] = sx;
    out[1] = sy;
    for (int l = 0; l < NQ; l++)
        out[2 + l] = q[l];
}

int main(int argc, char **argv) {
    size_t m = 24, iters = 1;
    dsm_args(argc, argv, &m, &iters);
    if (m > 40) {
        fprintf(stderr, "ep: -n is the log2 of the pairs (at most 40)\n");
        return 2;
    }
    dsm_init();
    int me = dsm_rank(), nodes = dsm_nodes();
    uint64_t total = (uint64_t)1 << m;
    double *res = dsm_alloc((size_t)nodes * SLOT * sizeof(double));
    dsm_barrier();
    double t0 = dsm_now();
    pairs(dsm_share(total, me, nodes, 1), dsm_share(total, me + 1, nodes, 1),
          res + (size_t)me * SLOT);
    dsm_barrier();
    double s = dsm_now() - t0;
    int ok = 1;
    if (me == 0) {
        double got[2 + NQ] = {0}, want[2 + NQ] = {0}, one[2 + NQ];
        for (int k = 0; k < nodes; k++) {
            pairs(dsm_share(total, k, nodes, 1), dsm_share(total, k + 1, nodes, 1), one);
            for (int v = 0; v < 2 + NQ; v++) {
                got[v] += res[(size_t)k * SLOT + v];
                want[v] += one[v];
            }
        }
        double accepted = 0.0;
        for (int v = 0; v < 2 + NQ; v++) {
            int exact = v >= 2;
            if (exact ? got[v] != want[v]
                      : !(fabs(got[v] - want[v]) <= 1e-12 * fabs(want[v]) + 1e-9)) {
                fprintf(stderr, "ep: value %d: %.17g, sequential %.17g\n", v, got[v], want[v]);
                ok = 0;
            }
            if (exact)
                accepted += got[v];
        }
        /* pi/4 of the pairs fall in the unit disc: a sanity check of the generator. */
        if (total >= 4096 && fabs(accepted / (double)total - 0.785398) > 0.02) {
            fprintf(stderr, "ep: %.0f of %llu pairs accepted\n", accepted,
                    (unsigned long long)total);
            ok = 0;
        }
    }
    dsm_report("ep", m, iters, s, ok);
    dsm_barrier();
    dsm_finalize();
    return ok ? 0 : 1;
}
