/*
 * big_memory.c - a large global range with pages in scattered states. Every node of an SPMD
 * job joins one collective allocation of GIB gibibytes (homes round-robin over the nodes),
 * writes its own word in PAGES pages scattered over the whole array (a pseudo-random choice
 * per node), meets the others at a barrier and checks every other node's words and that the
 * words nobody wrote read as zero. Then rank 0 asks for more than its arena has left and
 * must get NULL with a message saying how much was asked, how much is left and which setting
 * to change. Run it with SQUALL_HEAP_SIZE=1T (the suite does).
 *
 * usage: big_memory GIB PAGES      prints "ok big memory" on rank 0
 */
#include <squall.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORDS_PER_PAGE 512 /* 4 KiB pages of 8-byte words */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The i-th page node r writes, and the value of its word there. */
static uint64_t page_of(int r, uint64_t i, uint64_t pages) { return mix(((uint64_t)r << 40) + i) % pages; }
static uint64_t value_of(uint64_t page, int r) { return mix(page * 64 + (uint64_t)r) | 1; }

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: big_memory GIB PAGES\n");
        return 2;
    }
    uint64_t gib = strtoull(argv[1], NULL, 10), touches = strtoull(argv[2], NULL, 10);
    if (squall_init() != SQUALL_OK) {
        fprintf(stderr, "big_memory: squall_init: %s\n", squall_last_error());
        return 2;
    }
    int rank = squall_rank(), size = squall_size();
    size_t bytes = (size_t)gib << 30;
    uint64_t pages = bytes / (WORDS_PER_PAGE * 8);
    uint64_t *a = squall_alloc_collective(bytes, SQUALL_PLACE_ROUND_ROBIN, 0);
    if (a == NULL) {
        printf("WRONG: node %d: collective allocation of %llu GiB: %s\n", rank,
               (unsigned long long)gib, squall_last_error());
        return 1;
    }
    for (uint64_t i = 0; i < touches; i++) {
        uint64_t p = page_of(rank, i, pages);
        a[p * WORDS_PER_PAGE + (uint64_t)rank] = value_of(p, rank);
    }
    squall_barrier();
    uint64_t bad = 0;
    for (int r = 0; r < size; r++) {
        for (uint64_t i = 0; i < touches; i++) {
            uint64_t p = page_of(r, i, pages);
            if (a[p * WORDS_PER_PAGE + (uint64_t)r] != value_of(p, r))
                bad++;
            /* the last word of every page: nobody writes it */
            if (a[p * WORDS_PER_PAGE + WORDS_PER_PAGE - 1] != 0)
                bad++;
        }
    }
    if (bad) {
        printf("WRONG: node %d: %llu words differ in a %llu GiB array\n", rank,
               (unsigned long long)bad, (unsigned long long)gib);
        return 1;
    }
    squall_barrier();
    if (rank == 0) {
        /* More than the whole range: refused with what was asked, what is left, the fix. */
        void *p = squall_malloc(bytes * 8);
        const char *e = squall_last_error();
        if (p != NULL) {
            printf("WRONG: an allocation of %llu GiB succeeded\n", (unsigned long long)gib * 8);
            return 1;
        }
        if (strstr(e, "asked") == NULL || strstr(e, "left in its arena") == NULL ||
            strstr(e, "SQUALL_HEAP_SIZE") == NULL) {
            printf("WRONG: the refusal does not say what was asked, what is left and what to "
                   "change: %s\n",
                   e);
            return 1;
        }
        fprintf(stderr, "big_memory: refused as it should be: %s\n", e);
        printf("ok big memory: %llu GiB, %d nodes x %llu scattered pages checked\n",
               (unsigned long long)gib, size, (unsigned long long)touches);
    }
    squall_barrier();
    squall_finalize();
    return 0;
}
