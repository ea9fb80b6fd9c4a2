/*
 * policy.c - allocation policies through the C API (SPMD): allocations under different
 * protocols in one program, synchronized by the same locks and barriers.
 *
 *   1. three arrays, one under hlrc (invalidation), one under hlrc with updates, one under
 *      sc: each round every node fills its block of all three, a barrier, every node checks
 *      everything; then every node adds to a counter in each array under one lock;
 *   2. an sc array of three quarters of a node's share of the global range (more than half
 *      of it): every node writes one word in every 64th page of its stripe, a barrier,
 *      every node checks them; then a flag handoff in its last page with plain loads and
 *      stores, no lock (correct under sc);
 *   3. producer/consumer in two arrays, one under updates and one under invalidation: every
 *      value must be the round's, pushes must have updated copies on this node, and no more
 *      than the update array's pages account for;
 *   4. coherence units: rank 0 allocates (squall_malloc_with) an array in units of 8 pages
 *      and one in one-page units; every node writes its own word of every page of both (false
 *      sharing), a barrier, every node checks; a counter in each under one lock; then rank 0
 *      writes every page and the others read them all: an array in units of 8 pages costs
 *      at most one fetch per 8 pages.
 *
 * usage: policy [ROUNDS]. Rank 0 prints "ok policy"; "WRONG: ..." on a wrong value.
 */
#include <squall.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096
#define WORDS (3 * PAGE / 8) /* per node, in each array of part 1 */
#define INCS 20
#define UPD_PAGES 2 /* per node, part 3 */
#define INV_PAGES 6

static int rank_, nodes_, bad_;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("WRONG: node %d: ", rank_);                                             \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            bad_ = 1;                                                                      \
        }                                                                                  \
    } while (0)

static void *collective(size_t bytes, const squall_policy *p)
{
    void *a = squall_alloc_collective_with(bytes, p);
    if (a == NULL) {
        fprintf(stderr, "policy: node %d: allocation: %s\n", rank_, squall_last_error());
        exit(2);
    }
    return a;
}

static void barrier(void)
{
    if (squall_barrier() != SQUALL_OK) {
        fprintf(stderr, "policy: node %d: barrier: %s\n", rank_, squall_last_error());
        exit(2);
    }
}

static uint64_t value1(int round, int k, size_t i)
{
    return (uint64_t)(round + 1) * 1000000u + (uint64_t)k * 100000u + i;
}

static void mixed(int rounds)
{
    squall_policy hl = {0}, up, sc = {0};
    hl.protocol = SQUALL_PROTOCOL_HLRC;
    hl.updates = SQUALL_UPDATES_OFF;
    hl.placement = SQUALL_PLACE_ROUND_ROBIN;
    hl.placement_arg = 1;
    up = hl;
    up.updates = SQUALL_UPDATES_ON;
    sc.protocol = SQUALL_PROTOCOL_SC;
    const squall_policy *pol[3] = {&hl, &up, &sc};
    uint64_t *arr[3];
    size_t all = (size_t)nodes_ * WORDS;
    for (int k = 0; k < 3; k++)
        arr[k] = collective((all + 1) * sizeof(uint64_t), pol[k]);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 3; k++)
            for (size_t i = (size_t)rank_ * WORDS; i < (size_t)(rank_ + 1) * WORDS; i++)
                arr[k][i] = value1(r, k, i);
        barrier();
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < all; i += 37)
                CHECK(arr[k][i] == value1(r, k, i), "round %d array %d word %zu: %llu", r, k, i,
                      (unsigned long long)arr[k][i]);
        barrier();
    }
    for (int i = 0; i < INCS; i++) {
        squall_lock(5);
        for (int k = 0; k < 3; k++)
            arr[k][all] += (uint64_t)k + 1;
        squall_unlock(5);
    }
    barrier();
    for (int k = 0; k < 3; k++) {
        uint64_t want = (uint64_t)nodes_ * INCS * (k + 1);
        CHECK(arr[k][all] == want, "counter %d is %llu, expected %llu", k,
              (unsigned long long)arr[k][all], (unsigned long long)want);
    }
}

static void big_sc(void)
{
    size_t base, size;
    if (squall_range(&base, &size) != SQUALL_OK) {
        fprintf(stderr, "policy: squall_range: %s\n", squall_last_error());
        exit(2);
    }
    size_t bytes = size / (size_t)nodes_ / 4 * 3;
    squall_policy sc = {0};
    sc.protocol = SQUALL_PROTOCOL_SC;
    char *a = collective(bytes, &sc);
    size_t pages = bytes / PAGE, j = 0;
    for (size_t p = 0; p < pages; p += 64, j++)
        if (j % (size_t)nodes_ == (size_t)rank_)
            *(volatile uint64_t *)(a + p * PAGE + 8) = p * 3 + 1;
    barrier();
    for (size_t p = 0; p < pages; p += 64 * 7)
        CHECK(*(volatile uint64_t *)(a + p * PAGE + 8) == p * 3 + 1, "big page %zu of %zu", p,
              pages);
    barrier();
    volatile uint64_t *flag = (volatile uint64_t *)(a + (pages - 1) * PAGE);
    if (rank_ == 0) {
        flag[1] = 4242;
        flag[0] = 1;
    } else {
        long spins = 0;
        while (flag[0] == 0 && ++spins < 2000000000L)
            ;
        CHECK(flag[0] == 1 && flag[1] == 4242, "flag %llu data %llu",
              (unsigned long long)flag[0], (unsigned long long)flag[1]);
    }
    barrier();
}

/* A protocol counter of this node's statistics (`name` quoted, as in the JSON). */
static uint64_t protocol_count(const char *name)
{
    char *js = squall_stats_json();
    uint64_t v = 0;
    const char *at = js ? strstr(js, name) : NULL;
    if (at && (at = strchr(at, ':')) != NULL)
        v = strtoull(at + 1, NULL, 10);
    squall_string_free(js);
    return v;
}

static void updates(int rounds)
{
    squall_policy up = {0}, inv = {0};
    up.protocol = inv.protocol = SQUALL_PROTOCOL_HLRC;
    up.updates = SQUALL_UPDATES_ON;
    inv.updates = SQUALL_UPDATES_OFF;
    up.placement = inv.placement = SQUALL_PLACE_BLOCKED;
    size_t words = PAGE / 8;
    uint64_t *a[2];
    int per[2] = {UPD_PAGES, INV_PAGES};
    a[0] = collective((size_t)nodes_ * UPD_PAGES * PAGE, &up);
    a[1] = collective((size_t)nodes_ * INV_PAGES * PAGE, &inv);
    uint64_t before = protocol_count("\"pushes_taken\"");
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++)
            for (int p = rank_ * per[k]; p < (rank_ + 1) * per[k]; p++)
                for (size_t w = 0; w < words; w += words / 2 - 1)
                    a[k][p * words + w] = (uint64_t)r * 10000 + (uint64_t)k * 1000 + p;
        barrier();
        for (int k = 0; k < 2; k++)
            for (int p = 0; p < nodes_ * per[k]; p++)
                for (size_t w = 0; w < words; w += words / 2 - 1)
                    CHECK(a[k][p * words + w] == (uint64_t)r * 10000 + (uint64_t)k * 1000 + p,
                          "round %d array %d page %d word %zu", r, k, p, w);
        barrier();
    }
    uint64_t taken = protocol_count("\"pushes_taken\"") - before;
    uint64_t most = (uint64_t)rounds * (nodes_ - 1) * UPD_PAGES;
    CHECK(taken > 0, "no push updated a copy");
    CHECK(taken <= most, "%llu pushes taken, the update array accounts for at most %llu",
          (unsigned long long)taken, (unsigned long long)most);
}

#define UNIT_PAGES 16 /* pages of each array of part 4 */

static uint64_t value4(int round, int k, size_t p, size_t w)
{
    return (uint64_t)(round + 1) * 1000000u + (uint64_t)k * 100000u + p * 100u + w;
}

static void units(int rounds)
{
    squall_policy u8 = {0}, u1 = {0};
    u8.protocol = u1.protocol = SQUALL_PROTOCOL_HLRC;
    u8.updates = u1.updates = SQUALL_UPDATES_OFF;
    u8.placement = u1.placement = SQUALL_PLACE_NODE; /* rank 0 is the home of every page */
    u8.placement_arg = u1.placement_arg = 0;
    u8.unit_pages = 8;
    u1.unit_pages = 1;
    const squall_policy *pol[2] = {&u1, &u8};
    uint64_t unit[2] = {1, 8};
    size_t words = PAGE / 8;
    uint64_t *a[2];
    for (int k = 0; k < 2; k++) {
        uint64_t addr = 0;
        if (rank_ == 0) {
            a[k] = squall_malloc_with((UNIT_PAGES * words + 1) * sizeof(uint64_t), pol[k]);
            if (a[k] == NULL) {
                fprintf(stderr, "policy: unit %llu: %s\n", (unsigned long long)unit[k],
                        squall_last_error());
                exit(2);
            }
            addr = (uint64_t)(uintptr_t)a[k];
        }
        if (squall_broadcast_u64(&addr) != SQUALL_OK) {
            fprintf(stderr, "policy: broadcast: %s\n", squall_last_error());
            exit(2);
        }
        a[k] = (uint64_t *)(uintptr_t)addr;
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++)
            for (size_t p = 0; p < UNIT_PAGES; p++)
                a[k][p * words + (size_t)rank_] = value4(r, k, p, (size_t)rank_);
        barrier();
        for (int k = 0; k < 2; k++)
            for (size_t p = 0; p < UNIT_PAGES; p++)
                for (size_t w = 0; w < (size_t)nodes_; w++)
                    CHECK(a[k][p * words + w] == value4(r, k, p, w),
                          "round %d unit %llu page %zu word %zu: %llu", r,
                          (unsigned long long)unit[k], p, w,
                          (unsigned long long)a[k][p * words + w]);
        barrier();
    }
    size_t last = UNIT_PAGES * words;
    for (int i = 0; i < INCS; i++) {
        squall_lock(6);
        for (int k = 0; k < 2; k++)
            a[k][last] += (uint64_t)k + 1;
        squall_unlock(6);
    }
    barrier();
    for (int k = 0; k < 2; k++) {
        uint64_t want = (uint64_t)nodes_ * INCS * (k + 1);
        CHECK(a[k][last] == want, "unit %llu counter is %llu, expected %llu",
              (unsigned long long)unit[k], (unsigned long long)a[k][last],
              (unsigned long long)want);
    }
    if (rank_ == 0)
        for (int k = 0; k < 2; k++)
            for (size_t p = 0; p < UNIT_PAGES; p++)
                a[k][p * words + words - 1] = value4(rounds, k, p, words - 1);
    barrier();
    for (int k = 0; k < 2; k++) {
        uint64_t before = protocol_count("\"page_fetches\"");
        for (size_t p = 0; p < UNIT_PAGES; p++)
            CHECK(a[k][p * words + words - 1] == value4(rounds, k, p, words - 1),
                  "unit %llu page %zu: %llu", (unsigned long long)unit[k], p,
                  (unsigned long long)a[k][p * words + words - 1]);
        uint64_t fetches = protocol_count("\"page_fetches\"") - before;
        CHECK(fetches <= UNIT_PAGES / unit[k],
              "%llu fetches to read %d pages in units of %llu", (unsigned long long)fetches,
              UNIT_PAGES, (unsigned long long)unit[k]);
        if (rank_ != 0 && unit[k] > 1)
            CHECK(fetches > 0, "reading rank 0's writes in units of %llu fetched nothing",
                  (unsigned long long)unit[k]);
    }
    barrier();
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 4;
    if (squall_init() != SQUALL_OK) {
        fprintf(stderr, "policy: squall_init: %s\n", squall_last_error());
        return 2;
    }
    rank_ = squall_rank();
    nodes_ = squall_size();
    /* A policy that cannot be honoured is refused with an error, not ignored. */
    squall_policy wrong = {0};
    wrong.protocol = SQUALL_PROTOCOL_SC;
    wrong.updates = SQUALL_UPDATES_ON;
    CHECK(squall_malloc_with(64, &wrong) == NULL, "sc with updates was accepted");
    wrong.updates = SQUALL_UPDATES_OFF;
    wrong.unit_pages = 4;
    CHECK(squall_malloc_with(64, &wrong) == NULL, "sc in units of 4 pages was accepted");
    wrong.protocol = SQUALL_PROTOCOL_HLRC;
    wrong.unit_pages = 3;
    CHECK(squall_malloc_with(64, &wrong) == NULL, "a unit of 3 pages was accepted");
    mixed(rounds);
    big_sc();
    updates(rounds + 6);
    units(rounds);
    barrier();
    if (rank_ == 0 && !bad_)
        printf("ok policy\n");
    squall_finalize();
    return bad_;
}
