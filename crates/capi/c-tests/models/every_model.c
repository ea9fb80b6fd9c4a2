/* One SPMD program using every sharing model of Squall at once (issue 23 item 5), checking
 * each ordering rule docs/memory-model.md states for them ("Every model in one program"):
 *   pages    page-based shared memory from the shared heap (squall_alloc_collective, hlrc)
 *   regions  CRL regions (crl.h)
 *   objects  DSM/IP shared objects, engines OU and MSI (squall_object_*)
 *   one-sided  OpenSHMEM puts/gets/atomics (shmem.h) and Split-C stores (squall.h) on
 *            symmetric memory (shmem_malloc)
 * synchronized by Squall locks and barriers (squall_*, rgn_barrier, shmem_barrier_all,
 * shmem_set_lock). Every expected value is computed here from the node count and the round.
 *   1 barrier:  writes of every model complete before the barrier (page writes, ended region
 *               writes, returned object writes, puts not yet quieted) are seen after it by
 *               every node; every kind of barrier carries all of them.
 *   2 lock:     a critical section that increments one counter in every model (puts
 *               completed by shmem_quiet before squall_unlock) sees all counters equal at
 *               every acquisition; shmem_set_lock/clear_lock quiet by themselves.
 *   3 chains:   a complete operation of one model (ended region write, quieted put, returned
 *               object write) is seen by a node that observed a later flag written through
 *               another model (an OU or MSI object, a region, a remote atomic after a put to
 *               the same PE), with no lock or barrier between.
 *   4 stores:   one-way stores are completed by squall_all_store_sync, which also orders
 *               completed region and object writes and completes puts.
 * Usage: every_model [ROUNDS]. Node 0 prints "ok every model N nodes ROUNDS rounds". */
#include <crl.h>
#include <shmem.h>
#include <squall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, np, failures;

#define WRONG(...)                                                                         \
    do {                                                                                   \
        printf("WRONG on node %d: ", me);                                                  \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
        failures++;                                                                        \
    } while (0)
#define EXPECT(got, want, ...)                                                             \
    do {                                                                                   \
        long g_ = (long)(got), w_ = (long)(want);                                          \
        if (g_ != w_) {                                                                    \
            WRONG(__VA_ARGS__);                                                            \
            printf("    got %ld, expected %ld\n", g_, w_);                                 \
        }                                                                                  \
    } while (0)
#define OK(call)                                                                           \
    do {                                                                                   \
        long long r_ = (long long)(call);                                                  \
        if (r_ < 0) {                                                                      \
            printf("WRONG: %s: %s\n", #call, squall_last_error());                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* The symmetric block (shmem_malloc): the same address on every node, each its own copy. */
struct sym {
    long slot[64];   /* rule 1: slot q written by node q's put */
    long counter;    /* rule 2: on the last node, incremented under squall_lock */
    long counter2;   /* rule 2: on node 0, incremented under shmem_set_lock */
    long data, data2, flag; /* rule 3 */
    long stored[64]; /* rule 4 */
    long lock;       /* shmem_set_lock's lock word */
};

/* The page-based block (squall_alloc_collective). */
struct pages {
    long slot[64];
    long counter, counter2;
};

static long value(int round, int node) { return 1000L * round + node + 1; }

static long object_read(uint32_t id, uint64_t i)
{
    int64_t v;
    OK(squall_object_read_long(id, i, &v));
    return (long)v;
}

static long region_read(void *r)
{
    rgn_start_read(r);
    long v = *(long *)r;
    rgn_end_read(r);
    return v;
}

static void region_write(void *r, long v)
{
    rgn_start_write(r);
    *(long *)r = v;
    rgn_end_write(r);
}

/* Every kind of Squall barrier, in turn. */
static void some_barrier(int k)
{
    switch (k % 3) {
    case 0:
        OK(squall_barrier());
        break;
    case 1:
        rgn_barrier();
        break;
    default:
        shmem_barrier_all();
        break;
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 6;
    crl_init();
    shmem_init();
    me = squall_rank();
    np = squall_size();
    if (np > 64) {
        printf("WRONG: at most 64 nodes\n");
        return 1;
    }
    int last = np - 1;
    struct pages *pg = squall_alloc_collective(sizeof(struct pages), SQUALL_PLACE_DEFAULT, 0);
    struct sym *sy = shmem_malloc(sizeof(struct sym));
    if (!pg || !sy) {
        printf("WRONG: allocation failed: %s\n", squall_last_error());
        return 1;
    }
    memset(sy, 0, sizeof *sy);
    if (me == 0)
        memset(pg, 0, sizeof *pg);
    /* Regions: one per node (rule 1), and a counter, a data and a flag region of node 0. */
    rid_t mine = rgn_create(sizeof(long)), shared[3] = {0, 0, 0};
    rid_t *all = calloc((size_t)np, sizeof(rid_t));
    if (me == 0) {
        for (int k = 0; k < 3; k++)
            shared[k] = rgn_create(sizeof(long));
    }
    for (int q = 0; q < np; q++) {
        rid_t ids[4] = {mine, shared[0], shared[1], shared[2]};
        if (q == me)
            rgn_bcast_send(sizeof ids, ids);
        else
            rgn_bcast_recv(sizeof ids, ids);
        all[q] = ids[0];
        if (q == 0)
            memcpy(shared, ids + 1, sizeof shared);
        rgn_barrier(); /* a broadcast is received by arrival, not by sender: one at a time */
    }
    void **rg = calloc((size_t)np, sizeof(void *));
    for (int q = 0; q < np; q++)
        rg[q] = rgn_map(all[q]);
    void *rcount = rgn_map(shared[0]), *rdata = rgn_map(shared[1]), *rflag = rgn_map(shared[2]);
    /* Objects: OU and MSI, np slots plus a counter, a datum and a flag each. */
    int64_t ou = squall_object_create(SQUALL_ELEM_LONG, 0, (uint64_t)np + 3, 1, SQUALL_ENGINE_OU);
    int64_t msi = squall_object_create(SQUALL_ELEM_LONG, 0, (uint64_t)np + 3, 1, SQUALL_ENGINE_MSI);
    OK(ou);
    OK(msi);
    uint32_t obj[2] = {(uint32_t)ou, (uint32_t)msi};
    const uint64_t CNT = (uint64_t)np, DATA = (uint64_t)np + 1, FLAG = (uint64_t)np + 2;
    OK(squall_barrier());

    /* 1. One barrier orders the completed writes of every model (and completes puts). */
    for (int r = 1; r <= rounds; r++) {
        long v = value(r, me);
        pg->slot[me] = v;
        region_write(rg[me], v);
        for (int k = 0; k < 2; k++)
            OK(squall_object_write_long(obj[k], (uint64_t)me, v));
        for (int q = 0; q < np; q++)
            if (q != me)
                shmem_long_put_nbi(&sy->slot[me], &v, 1, q); /* no quiet: the barrier completes it */
        some_barrier(r);
        for (int q = 0; q < np; q++) {
            long w = value(r, q);
            EXPECT(pg->slot[q], w, "rule 1 round %d: page slot %d after barrier kind %d", r, q, r % 3);
            EXPECT(region_read(rg[q]), w, "rule 1 round %d: region of node %d", r, q);
            EXPECT(object_read(obj[0], (uint64_t)q), w, "rule 1 round %d: OU element %d", r, q);
            EXPECT(object_read(obj[1], (uint64_t)q), w, "rule 1 round %d: MSI element %d", r, q);
            if (q != me)
                EXPECT(sy->slot[q], w, "rule 1 round %d: put from node %d (barrier kind %d)", r, q, r % 3);
        }
        some_barrier(r + 1); /* everyone read before the next round writes */
    }

    /* 2. A lock orders every model's counter; puts must be quieted before the unlock. */
    for (int i = 0; i < rounds; i++) {
        OK(squall_lock(7));
        long p = pg->counter;
        long rv = region_read(rcount);
        long o = object_read(obj[0], CNT), m = object_read(obj[1], CNT);
        long s = shmem_long_g(&sy->counter, last);
        if (p != rv || p != o || p != m || p != s)
            WRONG("rule 2: counters differ under the lock: pages %ld region %ld OU %ld MSI %ld put %ld", p, rv, o,
                  m, s);
        pg->counter = p + 1;
        region_write(rcount, rv + 1);
        OK(squall_object_write_long(obj[0], CNT, o + 1));
        OK(squall_object_write_long(obj[1], CNT, m + 1));
        shmem_long_p(&sy->counter, s + 1, last);
        shmem_quiet(); /* the put is applied before the unlock */
        OK(squall_unlock(7));
        /* shmem_set_lock / shmem_clear_lock: a Squall lock that quiets by itself; it also
         * carries page writes like any Squall lock. */
        shmem_set_lock(&sy->lock);
        long s2 = shmem_long_g(&sy->counter2, 0), p2 = pg->counter2;
        if (s2 != p2)
            WRONG("rule 2: shmem_set_lock counters differ: put %ld pages %ld", s2, p2);
        shmem_long_p(&sy->counter2, s2 + 1, 0);
        pg->counter2 = p2 + 1;
        shmem_clear_lock(&sy->lock);
    }
    OK(squall_barrier());
    {
        long want = (long)rounds * np;
        EXPECT(pg->counter, want, "rule 2: page counter");
        EXPECT(region_read(rcount), want, "rule 2: region counter");
        EXPECT(object_read(obj[0], CNT), want, "rule 2: OU counter");
        EXPECT(object_read(obj[1], CNT), want, "rule 2: MSI counter");
        EXPECT(shmem_long_g(&sy->counter, last), want, "rule 2: put counter");
        EXPECT(shmem_long_g(&sy->counter2, 0), want, "rule 2: shmem_set_lock put counter");
        EXPECT(pg->counter2, want, "rule 2: shmem_set_lock page counter");
    }
    OK(squall_barrier());

    /* 3. Completion chains: no lock or barrier between the flag and the data. */
    for (int r = 1; r <= rounds; r++) {
        int w = r % np, t = (w + 1) % np; /* the writer; the target of its puts */
        long v = value(r, w);
        int kind = r % 3; /* the flag's model: OU object, MSI object, region */
        if (me == w) {
            region_write(rdata, v);                  /* ended region write */
            shmem_long_p(&sy->data, v, t);           /* put ... */
            shmem_quiet();                           /* ... completed */
            if (kind == 2)
                OK(squall_object_write_long(obj[0], DATA, v)); /* returned OU write */
            if (kind < 2)
                OK(squall_object_write_long(obj[kind], FLAG, r));
            else
                region_write(rflag, r);
        } else {
            long f;
            do
                f = kind < 2 ? object_read(obj[kind], FLAG) : region_read(rflag);
            while (f != r);
            const char *via = kind == 0 ? "an OU flag" : kind == 1 ? "an MSI flag" : "a region flag";
            EXPECT(region_read(rdata), v, "rule 3 round %d: region data after %s", r, via);
            EXPECT(me == t ? sy->data : shmem_long_g(&sy->data, t), v, "rule 3 round %d: quieted put after %s", r,
                   via);
            if (kind == 2)
                EXPECT(object_read(obj[0], DATA), v, "rule 3 round %d: OU data after a region flag", r);
        }
        /* A put then an atomic flag to the same PE arrive in issue order (no quiet). */
        if (me == w) {
            long v2 = v + 7;
            shmem_long_put(&sy->data2, &v2, 1, t);
            shmem_long_atomic_set(&sy->flag, r, t);
        } else if (me == t) {
            shmem_long_wait_until(&sy->flag, SHMEM_CMP_EQ, r);
            EXPECT(sy->data2, v + 7, "rule 3 round %d: put before an atomic flag to the same PE", r);
        }
        some_barrier(r);
    }

    /* 4. One-way stores are complete after squall_all_store_sync, which also orders the
     * completed region and object writes and the (not quieted) puts before it. */
    for (int r = 1; r <= rounds; r++) {
        long v = value(r + rounds, me);
        region_write(rg[me], v);
        OK(squall_object_write_long(obj[r % 2], (uint64_t)me, v));
        for (int q = 0; q < np; q++)
            if (q != me) {
                SquallGptr to = {(uint32_t)q, &sy->stored[me]};
                OK(squall_gptr_store(to, &v, sizeof v));
                shmem_long_put_nbi(&sy->slot[me], &v, 1, q);
            }
        OK(squall_all_store_sync());
        for (int q = 0; q < np; q++) {
            long w = value(r + rounds, q);
            EXPECT(region_read(rg[q]), w, "rule 4 round %d: region of node %d after all_store_sync", r, q);
            EXPECT(object_read(obj[r % 2], (uint64_t)q), w, "rule 4 round %d: object element %d", r, q);
            if (q != me) {
                EXPECT(sy->stored[q], w, "rule 4 round %d: store from node %d", r, q);
                EXPECT(sy->slot[q], w, "rule 4 round %d: put from node %d", r, q);
            }
        }
        OK(squall_barrier());
    }

    double bad = rgn_reduce_dadd((double)failures);
    for (int q = 0; q < np; q++)
        rgn_unmap(rg[q]);
    rgn_unmap(rcount);
    rgn_unmap(rdata);
    rgn_unmap(rflag);
    if (me == 0 && bad == 0.0)
        printf("ok every model %d nodes %d rounds\n", np, rounds);
    fflush(stdout);
    shmem_finalize();
    return bad == 0.0 ? 0 : 1;
}
