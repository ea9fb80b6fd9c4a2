/*
 * big_memory.c - allocations larger than one node's share of a large global range, with pages
 * in scattered states. Every node of an SPMD job:
 *  - joins one collective allocation A of GIB gibibytes, more than the range divided by the
 *    number of nodes (homes round-robin over the nodes);
 *  - the last rank alone allocates B (an ordinary squall_malloc_placed, blocked homes) of
 *    GIB/6 gibibytes and stores its address in A for the others;
 *  - joins a collective allocation C of 8 GiB under the other protocol than the job's
 *    default (sc under hlrc and the other way round), first-touch homes;
 * then writes its own word in PAGES pages of each, scattered over the whole allocation (a
 * pseudo-random choice per node), meets the others at a barrier and checks every other node's
 * words and that the words nobody wrote read as zero. Then rank 0 and the last rank each ask
 * for more than the range has left and must get NULL with a message saying how much was
 * asked, how much is left and which setting to change; B and C are freed by other nodes than
 * their allocators, A by rank 0. Run it with SQUALL_HEAP_SIZE=1T (the suite does).
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

/* The i-th page node r writes in array k, and the value of its word there. */
static uint64_t page_of(int k, int r, uint64_t i, uint64_t pages)
{
    return mix(((uint64_t)k << 56) + ((uint64_t)r << 40) + i) % pages;
}
static uint64_t value_of(int k, uint64_t page, int r) { return mix(page * 64 + (uint64_t)r + ((uint64_t)k << 60)) | 1; }

/* Write this node's words in array k (skipping page 0, which carries B's address). */
static void write_mine(int k, uint64_t *a, uint64_t pages, int rank, uint64_t touches)
{
    for (uint64_t i = 0; i < touches; i++) {
        uint64_t p = page_of(k, rank, i, pages);
        if (p != 0)
            a[p * WORDS_PER_PAGE + (uint64_t)rank] = value_of(k, p, rank);
    }
}

/* Words of every node in array k that differ from what they should be. */
static uint64_t check_all(int k, const uint64_t *a, uint64_t pages, int size, uint64_t touches)
{
    uint64_t bad = 0;
    for (int r = 0; r < size; r++) {
        for (uint64_t i = 0; i < touches; i++) {
            uint64_t p = page_of(k, r, i, pages);
            if (p == 0)
                continue;
            if (a[p * WORDS_PER_PAGE + (uint64_t)r] != value_of(k, p, r))
                bad++;
            /* the last word of every page: nobody writes it */
            if (a[p * WORDS_PER_PAGE + WORDS_PER_PAGE - 1] != 0)
                bad++;
        }
    }
    return bad;
}

/* Ask for `bytes` (more than is left): must be refused with the amounts and the fix. */
static int refused(int rank, size_t bytes)
{
    void *p = squall_malloc(bytes);
    const char *e = squall_last_error();
    if (p != NULL) {
        printf("WRONG: node %d: an allocation of %llu GiB succeeded\n", rank,
               (unsigned long long)(bytes >> 30));
        return 0;
    }
    if (strstr(e, "asked") == NULL || strstr(e, "left in the global part") == NULL ||
        strstr(e, "SQUALL_HEAP_SIZE") == NULL) {
        printf("WRONG: node %d: the refusal does not say what was asked, what is left and what "
               "to change: %s\n",
               rank, e);
        return 0;
    }
    fprintf(stderr, "big_memory: node %d refused as it should be: %s\n", rank, e);
    return 1;
}

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
    int rank = squall_rank(), size = squall_size(), last = size - 1;
    const char *proto = getenv("SQUALL_PROTOCOL");
    int other = proto != NULL && strcmp(proto, "sc") == 0 ? SQUALL_PROTOCOL_HLRC : SQUALL_PROTOCOL_SC;

    size_t bytes_a = (size_t)gib << 30, bytes_b = (size_t)(gib / 6) << 30, bytes_c = (size_t)8 << 30;
    uint64_t pages_a = bytes_a / (WORDS_PER_PAGE * 8), pages_b = bytes_b / (WORDS_PER_PAGE * 8),
             pages_c = bytes_c / (WORDS_PER_PAGE * 8);
    uint64_t *a = squall_alloc_collective(bytes_a, SQUALL_PLACE_ROUND_ROBIN, 0);
    if (a == NULL) {
        printf("WRONG: node %d: collective allocation of %llu GiB: %s\n", rank,
               (unsigned long long)gib, squall_last_error());
        return 1;
    }
    if (rank == last) {
        uint64_t *b = squall_malloc_placed(bytes_b, SQUALL_PLACE_BLOCKED, 0);
        if (b == NULL) {
            printf("WRONG: node %d: allocation of %llu GiB: %s\n", rank,
                   (unsigned long long)(bytes_b >> 30), squall_last_error());
            return 1;
        }
        a[0] = (uint64_t)(uintptr_t)b;
    }
    squall_policy pc = {0};
    pc.protocol = other;
    pc.placement = SQUALL_PLACE_FIRST_TOUCH;
    uint64_t *c = squall_alloc_collective_with(bytes_c, &pc);
    if (c == NULL) {
        printf("WRONG: node %d: collective allocation of 8 GiB: %s\n", rank, squall_last_error());
        return 1;
    }
    squall_barrier();
    uint64_t *b = (uint64_t *)(uintptr_t)a[0];
    write_mine(0, a, pages_a, rank, touches);
    write_mine(1, b, pages_b, rank, touches);
    write_mine(2, c, pages_c, rank, touches);
    squall_barrier();
    uint64_t bad = check_all(0, a, pages_a, size, touches) + check_all(1, b, pages_b, size, touches) +
                   check_all(2, c, pages_c, size, touches);
    if (bad) {
        printf("WRONG: node %d: %llu words differ in arrays of %llu, %llu and 8 GiB\n", rank,
               (unsigned long long)bad, (unsigned long long)gib,
               (unsigned long long)(bytes_b >> 30));
        return 1;
    }
    squall_barrier();
    /* More than the whole range: refused with what was asked, what is left, the fix (asked of
     * node 0 by node 0 itself and by another node). */
    if ((rank == 0 || rank == last) && !refused(rank, bytes_a * 2))
        return 1;
    squall_barrier();
    /* B and C freed by other nodes than their allocators. */
    if (rank == 0 && squall_free(b) != SQUALL_OK) {
        printf("WRONG: node 0: free of node %d's allocation: %s\n", last, squall_last_error());
        return 1;
    }
    if (rank == last && squall_free(c) != SQUALL_OK) {
        printf("WRONG: node %d: free of node 0's allocation: %s\n", rank, squall_last_error());
        return 1;
    }
    squall_barrier();
    if (rank == 0) {
        if (squall_free(a) != SQUALL_OK) {
            printf("WRONG: node 0: free of the collective allocation: %s\n", squall_last_error());
            return 1;
        }
        if (squall_free(b) == SQUALL_OK) {
            printf("WRONG: a second free of the same allocation succeeded\n");
            return 1;
        }
        printf("ok big memory: %llu + %llu + 8 GiB, %d nodes x %llu scattered pages checked\n",
               (unsigned long long)gib, (unsigned long long)(bytes_b >> 30), size,
               (unsigned long long)touches);
    }
    squall_barrier();
    squall_finalize();
    return 0;
}
