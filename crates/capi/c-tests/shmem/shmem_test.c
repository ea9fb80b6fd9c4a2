/* An OpenSHMEM program as SHMEM users write them: global and shmem_malloc'd symmetric arrays,
 * puts to the neighbour, barrier_all, gets, non-blocking puts and gets completed by quiet,
 * atomics from every PE on one counter, wait_until, broadcast, sum/max reductions, a lock.
 * Every answer is computed here sequentially and compared; prints "ok shmem ..." on PE 0.
 * Usage: shmem_test [all|stray]  (stray: put to an address that is not symmetric: refused) */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1000
#define BIG (1 << 20)

static long pSync[SHMEM_REDUCE_SYNC_SIZE];
static long pSync2[SHMEM_BCAST_SYNC_SIZE];
static long pWrk[N / 2 + SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static int ring[N];             /* a global: symmetric in OpenSHMEM */
static long counter;
static long lock;
static long flag;
static long shared_total;

static int failures;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("WRONG on PE %d: ", shmem_my_pe());                                     \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) pSync[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BCAST_SYNC_SIZE; i++) pSync2[i] = SHMEM_SYNC_VALUE;

    if (strcmp(what, "stray") == 0) {
        int local_only = 5; /* on the stack: not symmetric */
        shmem_barrier_all();
        if (me == 0) shmem_int_p(&local_only, 7, right);
        shmem_barrier_all();
        printf("WRONG: a put to a stack address was not refused\n");
        shmem_finalize();
        return 1;
    }

    /* 1. ring put into a global array, then barrier. */
    int src[N];
    for (int i = 0; i < N; i++) src[i] = me * 100000 + i;
    shmem_int_put(ring, src, N, right);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) CHECK(ring[i] == left * 100000 + i, "ring[%d]=%d", i, ring[i]);

    /* 2. get from the right neighbour's heap array (1 MiB, bulk). */
    double *heap = shmem_malloc(BIG * sizeof(double) / 8);
    size_t hn = BIG / 8;
    CHECK(heap != NULL, "shmem_malloc");
    for (size_t i = 0; i < hn; i++) heap[i] = me + i * 0.5;
    shmem_barrier_all();
    double *got = malloc(hn * sizeof(double));
    shmem_double_get(got, heap, hn, right);
    for (size_t i = 0; i < hn; i++) CHECK(got[i] == right + i * 0.5, "got[%zu]=%g", i, got[i]);
    CHECK(shmem_double_g(&heap[7], left) == left + 3.5, "g from left");

    /* 3. non-blocking puts and gets completed by quiet. */
    long *slots = shmem_calloc(npes, sizeof(long));
    shmem_barrier_all();
    for (int p = 0; p < npes; p++) {
        long v = 1000L * me + p;
        shmem_long_put_nbi(&slots[me], &v, 1, p);
    }
    shmem_quiet();
    shmem_barrier_all();
    for (int p = 0; p < npes; p++) CHECK(slots[p] == 1000L * p + me, "slots[%d]=%ld", p, slots[p]);
    long *back = malloc(npes * sizeof(long));
    for (int p = 0; p < npes; p++) shmem_long_get_nbi(&back[p], &slots[me], 1, p);
    shmem_quiet();
    for (int p = 0; p < npes; p++) CHECK(back[p] == 1000L * me + p, "back[%d]=%ld", p, back[p]);
    shmem_barrier_all();

    /* 4. atomics on one counter at PE 0 from every PE. */
    const int ADDS = 50;
    long mine = 0;
    for (int i = 0; i < ADDS; i++) mine += shmem_long_atomic_fetch_add(&counter, i + 1, 0) >= 0;
    shmem_long_atomic_inc(&counter, 0);
    shmem_barrier_all();
    long expect = (long)npes * (ADDS * (ADDS + 1) / 2 + 1);
    CHECK(shmem_long_atomic_fetch(&counter, 0) == expect, "counter %ld != %ld",
          shmem_long_atomic_fetch(&counter, 0), expect);
    CHECK(mine == ADDS, "fetch_add results");
    shmem_barrier_all(); /* everyone read the counter before anyone swaps it */
    long old = shmem_long_atomic_compare_swap(&counter, expect, -1, 0);
    shmem_barrier_all();
    /* exactly one PE saw `expect` and swapped it in */
    long won = old == expect;
    static long wins;
    shmem_long_atomic_add(&wins, won, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(wins == 1 && counter == -1, "compare_swap: wins %ld counter %ld", wins, counter);
    int swapped = shmem_int_atomic_swap(&ring[0], -5, right);
    CHECK(swapped == me * 100000, "swap returned %d", swapped);
    shmem_barrier_all();

    /* 5. point-to-point: PE 0 sets a flag at every other PE, which waits for it. */
    if (me == 0)
        for (int p = 1; p < npes; p++) shmem_long_atomic_set(&flag, 42, p);
    else
        shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 42);
    shmem_barrier_all();

    /* 6. broadcast from PE 1 (of the whole job) of 64-bit elements. */
    static long bsrc[N], bdst[N];
    for (int i = 0; i < N; i++) { bsrc[i] = me == 1 ? 7L * i : -1; bdst[i] = -2; }
    shmem_barrier_all();
    shmem_broadcast64(bdst, bsrc, N, 1, 0, 0, npes, pSync2);
    for (int i = 0; i < N; i++)
        CHECK(bdst[i] == (me == 1 ? -2 : 7L * i), "bdst[%d]=%ld", i, bdst[i]);
    shmem_barrier_all();

    /* 7. reductions: sum and max of ints and doubles; an in-place sum. */
    static int isrc[N], idst[N];
    static double dsrc[N], ddst[N];
    for (int i = 0; i < N; i++) { isrc[i] = (me + 1) * i; dsrc[i] = (me % 3) * 0.25 + i; }
    shmem_barrier_all();
    shmem_int_sum_to_all(idst, isrc, N, 0, 0, npes, (int *)pWrk, pSync);
    shmem_barrier_all();
    shmem_double_max_to_all(ddst, dsrc, N, 0, 0, npes, (double *)pWrk, pSync);
    for (int i = 0; i < N; i++) {
        int s = 0;
        double m = -1e300;
        for (int p = 0; p < npes; p++) {
            s += (p + 1) * i;
            double v = (p % 3) * 0.25 + i;
            if (v > m) m = v;
        }
        CHECK(idst[i] == s, "sum[%d]=%d want %d", i, idst[i], s);
        CHECK(ddst[i] == m, "max[%d]=%g want %g", i, ddst[i], m);
    }
    shmem_barrier_all();
    shmem_int_sum_to_all(isrc, isrc, N, 0, 0, npes, (int *)pWrk, pSync);
    for (int i = 0; i < N; i++) CHECK(isrc[i] == idst[i], "in-place sum[%d]", i);
    /* a reduction over the even PEs only (an active set with stride 2) */
    static long one = 1, evens;
    shmem_barrier_all();
    if (me % 2 == 0) shmem_long_sum_to_all(&evens, &one, 1, 0, 1, (npes + 1) / 2, pWrk, pSync2);
    if (me % 2 == 0) CHECK(evens == (npes + 1) / 2, "evens %ld", evens);
    shmem_barrier_all();

    /* 8. a lock around a read-modify-write of a value at PE 0. */
    for (int i = 0; i < 10; i++) {
        shmem_set_lock(&lock);
        long t = shmem_long_g(&shared_total, 0);
        shmem_long_p(&shared_total, t + 1, 0);
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(shared_total == 10L * npes, "locked total %ld", shared_total);

    shmem_free(slots);
    shmem_free(heap);
    free(got);
    free(back);
    shmem_barrier_all();
    if (me == 0 && failures == 0) printf("ok shmem %d PEs\n", npes);
    int bad = failures;
    shmem_finalize();
    return bad != 0;
}
