/* A shared counter in a CRL region: node 0 creates it and broadcasts its id, every node adds
 * ITERS under write operations, then every node reads the total. Checks the total, and the
 * reductions (sum, min, max of the per-node counts). Prints "ok crl counter TOTAL". */
#include <crl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    rid_t rid;
    long *counter;
    int i;
    double sum, lo, hi;
    long want;

    crl_init();
    if (crl_self_addr == 0) {
        rid = rgn_create(sizeof(long));
        rgn_bcast_send(sizeof(rid), &rid);
    } else {
        rgn_bcast_recv(sizeof(rid), &rid);
    }
    counter = (long *)rgn_map(rid);
    if (rgn_size(counter) != sizeof(long) || rgn_rid(counter) != rid) {
        printf("WRONG: size %u rid %u\n", rgn_size(counter), rgn_rid(counter));
        return 1;
    }
    rgn_barrier();
    for (i = 0; i < iters; i++) {
        rgn_start_write(counter);
        *counter += 1;
        rgn_end_write(counter);
    }
    rgn_barrier();

    want = (long)iters * crl_num_nodes;
    rgn_start_read(counter);
    if (*counter != want) {
        printf("WRONG: node %d counter %ld, expected %ld\n", crl_self_addr, *counter, want);
        return 1;
    }
    rgn_end_read(counter);

    sum = rgn_reduce_dadd((double)iters * (crl_self_addr + 1));
    lo = rgn_reduce_dmin((double)crl_self_addr);
    hi = rgn_reduce_dmax((double)crl_self_addr);
    if (sum != (double)iters * crl_num_nodes * (crl_num_nodes + 1) / 2 || lo != 0.0 ||
        hi != (double)(crl_num_nodes - 1)) {
        printf("WRONG: reductions %g %g %g\n", sum, lo, hi);
        return 1;
    }
    rgn_unmap(counter);
    rgn_barrier();
    if (crl_self_addr == 0)
        printf("ok crl counter %ld\n", want);
    return 0;
}
