/*
 * Plain globals, as SPLASH-2 programs keep them: a pointer to a global structure, the problem
 * size and the thread count in ordinary global variables set by main after reading argv
 * (getopt), an initialised table, a large zero-initialised array and a static counter; the
 * workers (round-robin over the nodes) read and write them all. Per node / per thread state of
 * the C library must keep working on every node: getopt/optarg, stdout, errno, and a __thread
 * variable. Everything is checked against the same computation done sequentially here.
 * No Squall marking or call: built only with `pkg-config --cflags --libs squall-pthread`.
 * Usage: plain_globals -p THREADS -n SIZE
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZERO_CELLS (1L << 21) /* 16 MiB of zero-initialised longs */
#define STRIDE 509

struct global {
    pthread_mutex_t lock;
    pthread_barrier_t bar;
    long *data;
    long sums[64];
    int bad[64];
};

struct global *Global;               /* set by main */
long N;                              /* problem size, from argv */
int P = 1;                           /* threads, from argv */
long table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
long zeros[ZERO_CELLS];              /* bss */
static long counter;                 /* static, updated under the lock */
static int next_id;
__thread long mine = -1;             /* per thread */

static long f(long k) { return (k * 2654435761L) % 1009 + table[k % 16]; }

static int worker_checks(int id)
{
    int bad = 0;
    /* errno is per thread */
    errno = 0;
    char *end;
    long v = strtol("99999999999999999999999", &end, 10);
    if (errno != ERANGE || v == 0)
        bad |= 1;
    /* stdout is this node's */
    if (fprintf(stdout, "%s", "") < 0 || fflush(stdout) != 0)
        bad |= 2;
    /* getopt/optarg/optind are this node's (serialised: getopt is not thread-safe) */
    char a0[] = "w", a1[] = "-x", a2[16];
    snprintf(a2, sizeof a2, "%d", id);
    char *av[] = {a0, a1, a2, NULL};
    pthread_mutex_lock(&Global->lock);
    optind = 1;
    int c = getopt(3, av, "x:");
    if (c != 'x' || optarg == NULL || atoi(optarg) != id)
        bad |= 4;
    pthread_mutex_unlock(&Global->lock);
    return bad;
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&Global->lock);
    int id = next_id++;
    pthread_mutex_unlock(&Global->lock);
    mine = id;
    int bad = worker_checks(id);
    long lo = N * id / P, hi = N * (id + 1) / P, s = 0;
    for (long k = lo; k < hi; k++) {
        Global->data[k] = f(k);
        s += Global->data[k];
        zeros[(k * STRIDE) % ZERO_CELLS] += k + 1;
    }
    Global->sums[id] = s;
    pthread_mutex_lock(&Global->lock);
    counter += hi - lo;
    pthread_mutex_unlock(&Global->lock);
    pthread_barrier_wait(&Global->bar);
    /* After the barrier, every worker reads a neighbour's part. */
    int nb = (id + 1) % P;
    long nlo = N * nb / P, nhi = N * (nb + 1) / P, ns = 0;
    for (long k = nlo; k < nhi; k++)
        ns += Global->data[k];
    if (ns != Global->sums[nb])
        bad |= 8;
    if (mine != id)
        bad |= 16;
    Global->bad[id] = bad;
    return NULL;
}

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "p:n:")) != -1) {
        switch (c) {
        case 'p': P = atoi(optarg); break;
        case 'n': N = atol(optarg); break;
        default:
            fprintf(stderr, "usage: plain_globals -p THREADS -n SIZE\n");
            return 2;
        }
    }
    if (P < 1 || P > 64 || N < P || N * STRIDE / STRIDE != N) {
        fprintf(stderr, "usage: plain_globals -p THREADS(1..64) -n SIZE\n");
        return 2;
    }
    Global = malloc(sizeof *Global);
    memset(Global, 0, sizeof *Global);
    pthread_mutex_init(&Global->lock, NULL);
    pthread_barrier_init(&Global->bar, NULL, P);
    Global->data = malloc(N * sizeof(long));
    pthread_t t[64];
    for (int i = 0; i < P; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < P; i++)
        pthread_join(t[i], NULL);

    /* The same computation, sequentially. */
    static long want_zeros[ZERO_CELLS];
    long want_total = 0, got_total = 0;
    int bad = 0;
    for (long k = 0; k < N; k++) {
        if (Global->data[k] != f(k)) {
            fprintf(stderr, "data[%ld] = %ld, want %ld\n", k, Global->data[k], f(k));
            return 1;
        }
        want_total += f(k);
        want_zeros[(k * STRIDE) % ZERO_CELLS] += k + 1;
    }
    for (int i = 0; i < P; i++) {
        got_total += Global->sums[i];
        if (Global->bad[i]) {
            fprintf(stderr, "worker %d: per-node state check failed (bits %#x: 1 errno, 2 stdout, "
                            "4 getopt, 8 neighbour's data, 16 __thread)\n", i, Global->bad[i]);
            bad = 1;
        }
    }
    for (long k = 0; k < ZERO_CELLS; k++)
        if (zeros[k] != want_zeros[k]) {
            fprintf(stderr, "zeros[%ld] = %ld, want %ld\n", k, zeros[k], want_zeros[k]);
            return 1;
        }
    if (got_total != want_total || counter != N || next_id != P) {
        fprintf(stderr, "total %ld (want %ld), counter %ld (want %ld), ids %d (want %d)\n",
                got_total, want_total, counter, N, next_id, P);
        bad = 1;
    }
    if (mine != -1) {
        fprintf(stderr, "main's __thread variable is %ld\n", mine);
        bad = 1;
    }
    if (bad)
        return 1;
    printf("ok plain globals p=%d n=%ld total=%ld\n", P, N, got_total);
    exit(0); /* the C library's exit on main's stack, not a return to it */
}

/* Runs after main called exit() and the node finalized (destructors run after Squall's
 * finalize), on main's stack: the shared globals must still be readable and writable, with
 * their final values, and the stack must still grow (into pages never touched before). */
static long deep(int depth)
{
    volatile char pad[16384];
    pad[0] = (char)depth;
    pad[sizeof pad - 1] = (char)depth;
    return depth == 0 ? pad[0] : deep(depth - 1) + pad[sizeof pad - 1];
}

__attribute__((destructor)) static void after_exit(void)
{
    if (Global != NULL && counter == N) {
        counter = -1;
        if (counter != -1 || deep(64) != 64 * 65 / 2)
            _exit(3);
    }
}
