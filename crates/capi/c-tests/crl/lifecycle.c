/* Regions created on every node: each node creates one region of its own size, fills it and
 * the nodes broadcast their ids in turn; every node reads every region (checking size, id
 * and bytes), flushes its copies home, and reads them again after the homes wrote new bytes;
 * then every node updates every region once under a write operation (a chain of hand-offs),
 * the homes check the sums, and delete their regions. Prints "ok crl lifecycle". */
#include <crl.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned size_of_node(int p) { return 500 + 211 * (unsigned)p; }

static int check(const unsigned char *b, unsigned size, int p, int round)
{
    unsigned i;
    for (i = 0; i < size; i++)
        if (b[i] != (unsigned char)(i + p * 3 + round))
            return 0;
    return 1;
}

static void fill(unsigned char *b, unsigned size, int p, int round)
{
    unsigned i;
    for (i = 0; i < size; i++)
        b[i] = (unsigned char)(i + p * 3 + round);
}

int main(void)
{
    rid_t *ids, mine;
    unsigned char *b;
    int p, round, bad = 0;
    unsigned i;

    crl_init();
    ids = calloc(crl_num_nodes, sizeof(rid_t));
    if (!ids)
        return 1;
    mine = rgn_create(size_of_node(crl_self_addr));
    b = rgn_map(mine);
    rgn_start_write(b);
    fill(b, rgn_size(b), crl_self_addr, 0);
    rgn_end_write(b);
    rgn_unmap(b);
    for (p = 0; p < crl_num_nodes; p++) {
        if (p == crl_self_addr) {
            ids[p] = mine;
            rgn_bcast_send(sizeof(rid_t), &ids[p]);
        } else {
            rgn_bcast_recv(sizeof(rid_t), &ids[p]);
        }
        rgn_barrier();
    }
    for (round = 0; round < 2; round++) {
        for (p = 0; p < crl_num_nodes; p++) {
            b = rgn_map(ids[p]);
            if (rgn_rid(b) != ids[p] || rgn_size(b) != size_of_node(p)) {
                printf("WRONG: node %d: region of node %d: id %u size %u\n", crl_self_addr, p,
                       rgn_rid(b), rgn_size(b));
                return 1;
            }
            rgn_start_read(b);
            if (!check(b, rgn_size(b), p, round)) {
                printf("WRONG: node %d round %d: bytes of node %d's region\n", crl_self_addr,
                       round, p);
                bad = 1;
            }
            rgn_end_read(b);
            rgn_flush(b);
            rgn_unmap(b);
        }
        rgn_barrier();
        b = rgn_map(mine);
        rgn_start_write(b);
        fill(b, rgn_size(b), crl_self_addr, round + 1);
        rgn_end_write(b);
        rgn_unmap(b);
        rgn_barrier();
    }
    /* Every node adds its number + 1 to the first byte of every region. */
    for (p = 0; p < crl_num_nodes; p++) {
        b = rgn_map(ids[(p + crl_self_addr) % crl_num_nodes]);
        rgn_start_write(b);
        b[0] = (unsigned char)(b[0] + crl_self_addr + 1);
        rgn_end_write(b);
        rgn_unmap(b);
    }
    rgn_barrier();
    b = rgn_map(mine);
    rgn_start_read(b);
    /* Byte 0 was filled with p*3 + 2 in the last round. */
    if (b[0] != (unsigned char)(crl_self_addr * 3 + 2 + crl_num_nodes * (crl_num_nodes + 1) / 2)) {
        printf("WRONG: node %d: first byte %u\n", crl_self_addr, b[0]);
        bad = 1;
    }
    for (i = 1; i < rgn_size(b); i++)
        if (b[i] != (unsigned char)(i + crl_self_addr * 3 + 2))
            bad = 1;
    rgn_end_read(b);
    rgn_unmap(b);
    rgn_barrier();
    rgn_delete(mine);
    rgn_barrier();
    if (crl_self_addr == 0 && !bad)
        printf("ok crl lifecycle %d nodes\n", crl_num_nodes);
    return bad;
}
