/*
 * placement.c - where pthread_create puts threads (issue 20 item 6). A plain pthreads program
 * (built with squall-pthread): main creates P-1 threads and does the P-th share of the work
 * itself, as SPLASH's CREATE(fn, P) does; every thread records the node it runs on.
 *
 *   placement P               the default (even): thread j of (main, t0, t1, ..) on node j mod N,
 *                             so every node runs P/N (+-1) threads
 *   placement P MODE env      SQUALL_THREAD_PLACEMENT=MODE is set by the test; the program checks
 *                             squall_thread_placement() says so and the threads follow MODE
 *   placement P MODE api      the program chooses MODE with squall_set_thread_placement
 *
 * MODE is even, round-robin or local. Prints "placement MODE P=.. N=..: c0 c1 .. ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    int node; /* where thread k ran (-1: not yet) */
    char pad[60];
};

struct arg {
    struct slot *slots;
    int k;
};

static void *worker(void *p)
{
    struct arg *a = p;
    a->slots[a->k].node = squall_rank();
    return NULL;
}

static int mode_of(const char *name)
{
    if (strcmp(name, "even") == 0) return SQUALL_THREADS_EVEN;
    if (strcmp(name, "round-robin") == 0) return SQUALL_THREADS_ROUND_ROBIN;
    if (strcmp(name, "local") == 0) return SQUALL_THREADS_LOCAL;
    fprintf(stderr, "placement: unknown mode %s\n", name);
    exit(2);
}

/* The node the documented rule gives the k-th thread node 0 creates. */
static int expected_node(int mode, int k, int n)
{
    switch (mode) {
    case SQUALL_THREADS_EVEN: return (k + 1) % n;
    case SQUALL_THREADS_ROUND_ROBIN: return k % n;
    default: return 0;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: placement P [even|round-robin|local env|api]\n");
        return 2;
    }
    int p = atoi(argv[1]);
    int n = squall_size();
    const char *name = argc >= 4 ? argv[2] : "even";
    int mode = mode_of(name);
    if (p < 1 || p > 256 || n < 1) {
        fprintf(stderr, "placement: bad P %d or size %d\n", p, n);
        return 2;
    }
    if (argc >= 4 && strcmp(argv[3], "api") == 0) {
        if (squall_set_thread_placement(mode) != SQUALL_OK) {
            fprintf(stderr, "placement: squall_set_thread_placement: %s\n", squall_last_error());
            return 1;
        }
        if (squall_set_thread_placement(42) != SQUALL_ERR_INVALID) {
            fprintf(stderr, "placement: an unknown placement was accepted\n");
            return 1;
        }
    }
    if (squall_thread_placement() != mode) {
        fprintf(stderr, "placement: squall_thread_placement() is %d, expected %d (%s)\n",
                squall_thread_placement(), mode, name);
        return 1;
    }
    struct slot *slots = malloc(sizeof(struct slot) * (size_t)p);
    struct arg *args = malloc(sizeof(struct arg) * (size_t)p);
    pthread_t *tids = malloc(sizeof(pthread_t) * (size_t)p);
    if (!slots || !args || !tids) {
        fprintf(stderr, "placement: out of memory\n");
        return 1;
    }
    for (int k = 0; k < p; k++) {
        slots[k].node = -1;
        args[k].slots = slots;
        args[k].k = k;
    }
    /* slot 0 is main's; created thread k (0-based) fills slot k+1 */
    for (int k = 1; k < p; k++) {
        if (pthread_create(&tids[k], NULL, worker, &args[k]) != 0) {
            fprintf(stderr, "placement: pthread_create: %s\n", squall_last_error());
            return 1;
        }
    }
    worker(&args[0]);
    for (int k = 1; k < p; k++)
        pthread_join(tids[k], NULL);

    int count[256] = {0};
    int bad = 0;
    for (int k = 0; k < p; k++) {
        int want = k == 0 ? 0 : expected_node(mode, k - 1, n);
        if (slots[k].node != want) {
            fprintf(stderr, "placement: thread %d ran on node %d, the %s rule says %d\n", k,
                    slots[k].node, name, want);
            bad = 1;
        }
        if (slots[k].node >= 0 && slots[k].node < 256) count[slots[k].node]++;
    }
    if (mode == SQUALL_THREADS_EVEN) {
        /* the guarantee itself: P/N (+-1) per node, node 0's share counting main */
        for (int j = 0; j < n; j++) {
            int want = p / n + (j < p % n);
            if (count[j] != want) {
                fprintf(stderr, "placement: node %d ran %d threads, expected %d\n", j, count[j], want);
                bad = 1;
            }
        }
    }
    printf("placement %s P=%d N=%d:", name, p, n);
    for (int j = 0; j < n; j++)
        printf(" %d", count[j]);
    printf(" %s\n", bad ? "WRONG" : "ok");
    free(slots);
    free(args);
    free(tids);
    return bad;
}
