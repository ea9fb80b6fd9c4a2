/* Blocked matrix multiply over CRL regions, written the way CRL's examples are: C = A * B for
 * N x N doubles in blocks of B x B, one region per block. Block (i, j) of every matrix is
 * created by node (i * NB + j) mod P, which fills its A and B blocks; the nodes broadcast
 * their ids in turn. Node p computes the C blocks it created, reading A and B blocks from
 * wherever they are cached. Node 0 then reads every C block and checks it against the
 * product computed sequentially; the per-node checksums are summed with rgn_reduce_dadd.
 * Prints "ok crl mm N B". */
#include <crl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double a_at(int r, int c) { return (double)((r * 7 + c * 3) % 11) - 5.0; }
static double b_at(int r, int c) { return (double)((r * 5 + c * 2) % 13) * 0.5; }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 96;
    int bs = argc > 2 ? atoi(argv[2]) : 16;
    int nb, p, i, j, k, r, c, kk, blocks, wrong = 0;
    rid_t *ra, *rc, *rb;
    double *blk, *x, *y, sum, local = 0.0, total, want_total = 0.0;

    crl_init();
    if (n % bs != 0) {
        if (crl_self_addr == 0)
            printf("WRONG: N must be a multiple of B\n");
        return 1;
    }
    nb = n / bs;
    blocks = nb * nb;
    ra = calloc(blocks, sizeof(rid_t));
    rb = calloc(blocks, sizeof(rid_t));
    rc = calloc(blocks, sizeof(rid_t));
    if (!ra || !rb || !rc)
        return 1;

    /* Every node creates and fills its blocks, then the nodes broadcast their ids in turn. */
    for (k = 0; k < blocks; k++) {
        if (k % crl_num_nodes != crl_self_addr)
            continue;
        i = k / nb;
        j = k % nb;
        ra[k] = rgn_create(bs * bs * sizeof(double));
        rb[k] = rgn_create(bs * bs * sizeof(double));
        rc[k] = rgn_create(bs * bs * sizeof(double));
        x = rgn_map(ra[k]);
        y = rgn_map(rb[k]);
        rgn_start_write(x);
        rgn_start_write(y);
        for (r = 0; r < bs; r++)
            for (c = 0; c < bs; c++) {
                x[r * bs + c] = a_at(i * bs + r, j * bs + c);
                y[r * bs + c] = b_at(i * bs + r, j * bs + c);
            }
        rgn_end_write(y);
        rgn_end_write(x);
        rgn_unmap(y);
        rgn_unmap(x);
    }
    for (p = 0; p < crl_num_nodes; p++) {
        for (k = p; k < blocks; k += crl_num_nodes) {
            rid_t ids[3] = {ra[k], rb[k], rc[k]};
            if (p == crl_self_addr) {
                rgn_bcast_send(sizeof ids, ids);
            } else {
                rgn_bcast_recv(sizeof ids, ids);
                ra[k] = ids[0];
                rb[k] = ids[1];
                rc[k] = ids[2];
            }
        }
        rgn_barrier();
    }

    /* Compute my C blocks. */
    for (k = crl_self_addr; k < blocks; k += crl_num_nodes) {
        double *cb = rgn_map(rc[k]);
        i = k / nb;
        j = k % nb;
        rgn_start_write(cb);
        for (r = 0; r < bs * bs; r++)
            cb[r] = 0.0;
        for (kk = 0; kk < nb; kk++) {
            x = rgn_map(ra[i * nb + kk]);
            y = rgn_map(rb[kk * nb + j]);
            rgn_start_read(x);
            rgn_start_read(y);
            for (r = 0; r < bs; r++)
                for (c = 0; c < bs; c++) {
                    sum = 0.0;
                    for (p = 0; p < bs; p++)
                        sum += x[r * bs + p] * y[p * bs + c];
                    cb[r * bs + c] += sum;
                }
            rgn_end_read(y);
            rgn_end_read(x);
            rgn_unmap(y);
            rgn_unmap(x);
        }
        for (r = 0; r < bs * bs; r++)
            local += cb[r];
        rgn_end_write(cb);
        rgn_unmap(cb);
    }
    rgn_barrier();
    total = rgn_reduce_dadd(local);

    if (crl_self_addr == 0) {
        blk = malloc(sizeof(double) * n);
        for (r = 0; r < n && !wrong; r++) {
            /* Row r of the sequential product. */
            for (c = 0; c < n; c++) {
                sum = 0.0;
                for (kk = 0; kk < n; kk++)
                    sum += a_at(r, kk) * b_at(kk, c);
                blk[c] = sum;
                want_total += sum;
            }
            for (j = 0; j < nb && !wrong; j++) {
                double *cb = rgn_map(rc[(r / bs) * nb + j]);
                rgn_start_read(cb);
                for (c = 0; c < bs; c++)
                    if (fabs(cb[(r % bs) * bs + c] - blk[j * bs + c]) > 1e-9) {
                        printf("WRONG: C[%d][%d] = %g, expected %g\n", r, j * bs + c,
                               cb[(r % bs) * bs + c], blk[j * bs + c]);
                        wrong = 1;
                        break;
                    }
                rgn_end_read(cb);
                rgn_unmap(cb);
            }
        }
        if (!wrong && fabs(total - want_total) > 1e-6 * fabs(want_total)) {
            printf("WRONG: checksum %g, expected %g\n", total, want_total);
            wrong = 1;
        }
        free(blk);
    }
    rgn_barrier();
    if (crl_self_addr == 0 && !wrong)
        printf("ok crl mm %d %d\n", n, bs);
    return wrong;
}
