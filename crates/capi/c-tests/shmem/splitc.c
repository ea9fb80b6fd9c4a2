/* Split-C style over squall.h: a spread array dealt block-cyclically, split-phase gets and
 * puts completed by squall_gptr_sync(), one-way stores completed by squall_store_sync(bytes)
 * and squall_all_store_sync(), blocking read/write, bulk transfers and remote atomics.
 * Every answer is computed sequentially here; node 0 prints "ok splitc N nodes". */
#include <squall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 3000
#define BLOCK 7
#define K 512

static long counter;   /* a global: a target when the program is linked -no-pie */
static int failures;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("WRONG on node %d: ", me);                                              \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)
#define OK(call)                                                                           \
    do {                                                                                   \
        if ((call) < 0) {                                                                  \
            printf("WRONG: %s: %s\n", #call, squall_last_error());                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static double f(size_t i) { return i * 1.5 + 2; }
static double g(size_t i) { return -(double)i; }

int main(void) {
    OK(squall_init());
    int globals = squall_gptr_start();
    OK(globals);
    int me = (int)squall_rank(), n = (int)squall_size();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    if (!globals) printf("WRONG: globals are not symmetric (link with -no-pie)\n");

    /* 1. a spread array; every node fills the elements it owns through local pointers. */
    SquallSpread a;
    OK(squall_spread_alloc(N, sizeof(double), BLOCK, &a));
    size_t owned = 0;
    for (size_t i = 0; i < N; i++) {
        SquallGptr p = squall_spread_ptr(&a, i);
        CHECK(p.node == (i / BLOCK) % (size_t)n, "owner of %zu is %u", i, p.node);
        if ((int)p.node == me) {
            *(double *)p.addr = f(i);
            owned++;
        }
    }
    OK(squall_barrier());

    /* 2. split-phase gets of every element (thousands outstanding), one sync. */
    double *all = malloc(N * sizeof(double));
    for (size_t i = 0; i < N; i++) OK(squall_gptr_get(&all[i], squall_spread_ptr(&a, i), sizeof(double)));
    OK(squall_gptr_sync());
    for (size_t i = 0; i < N; i++) CHECK(all[i] == f(i), "get %zu = %g", i, all[i]);

    /* 3. split-phase puts: node me writes g(i) into every i = me (mod n), wherever it lives. */
    OK(squall_barrier());
    for (size_t i = me; i < N; i += n) {
        double v = g(i);
        OK(squall_gptr_put(squall_spread_ptr(&a, i), &v, sizeof v));
    }
    OK(squall_gptr_sync());
    OK(squall_barrier());
    for (size_t i = 0; i < N; i++) {
        SquallGptr p = squall_spread_ptr(&a, i);
        if ((int)p.node == me) CHECK(*(double *)p.addr == g(i), "put %zu = %g", i, *(double *)p.addr);
    }

    /* 4. one-way stores counted by the receiver: every node stores K longs into its right
     * neighbour's buffer, one element at a time; the neighbour waits for K * 8 bytes. */
    long *buf = squall_all_alloc(2 * K * sizeof(long));
    for (int i = 0; i < 2 * K; i++) buf[i] = -1;
    OK(squall_barrier());
    for (int i = 0; i < K; i++) {
        long v = 1000L * me + i;
        SquallGptr p = {(uint32_t)right, &buf[i]};
        OK(squall_gptr_store(p, &v, sizeof v));
    }
    OK(squall_store_sync(K * sizeof(long)));
    for (int i = 0; i < K; i++) CHECK(buf[i] == 1000L * left + i, "store %d = %ld", i, buf[i]);
    /* store_sync counts bytes from anyone: nobody starts the next stores before all counted */
    OK(squall_barrier());

    /* 5. a bulk store to the left neighbour completed by all_store_sync (a barrier too). */
    long *blk = malloc(K * sizeof(long));
    for (int i = 0; i < K; i++) blk[i] = 7L * me + i;
    SquallGptr to_left = {(uint32_t)left, &buf[K]};
    OK(squall_gptr_store(to_left, blk, K * sizeof(long)));
    OK(squall_all_store_sync());
    for (int i = 0; i < K; i++) CHECK(buf[K + i] == 7L * right + i, "bulk store %d = %ld", i, buf[K + i]);

    /* 6. blocking bulk write and read of the right neighbour's spread-array part. */
    SquallGptr first_right = {(uint32_t)right, a.base};
    double w[BLOCK], r[BLOCK];
    for (int i = 0; i < BLOCK; i++) w[i] = me + i / 10.0;
    OK(squall_barrier());
    OK(squall_gptr_write(first_right, w, sizeof w));
    OK(squall_gptr_read(r, first_right, sizeof r));
    for (int i = 0; i < BLOCK; i++) CHECK(r[i] == w[i], "read back %d", i);
    OK(squall_barrier());

    /* 7. remote atomics on a global at node 0. */
    SquallGptr c = {0, &counter};
    uint64_t old;
    for (int i = 0; i < 100; i++) OK(squall_gptr_atomic(c, sizeof(long), SQUALL_GPTR_ADD, 2, 0, &old));
    OK(squall_barrier());
    OK(squall_gptr_atomic(c, sizeof(long), SQUALL_GPTR_FETCH, 0, 0, &old));
    CHECK(old == 200ULL * n, "counter %llu", (unsigned long long)old);
    OK(squall_barrier());
    OK(squall_gptr_atomic(c, sizeof(long), SQUALL_GPTR_COMPARE_SWAP, 5, 200ULL * n, &old));
    OK(squall_barrier());
    OK(squall_gptr_atomic(c, sizeof(long), SQUALL_GPTR_FETCH, 0, 0, &old));
    CHECK(old == 5, "compare_swap left %llu", (unsigned long long)old);

    OK(squall_barrier());
    OK(squall_all_free(buf));
    OK(squall_spread_free(&a));
    free(all);
    free(blk);
    if (me == 0 && failures == 0) printf("ok splitc %d nodes (%zu elements here)\n", n, owned);
    int bad = failures;
    OK(squall_finalize());
    return bad != 0;
}
