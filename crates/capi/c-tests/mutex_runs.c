/*
 * mutex_runs.c - a plain POSIX threads program (no Squall in the source): T threads bin N
 * pseudo-random values into B buckets, each bucket guarded by its own mutex in malloc'd
 * memory. A thread mostly bins into its own block of buckets (long runs of re-acquires of
 * the same few mutexes, as a tree build takes the locks of its subtree), and every 8th value
 * into any bucket (so mutexes move between threads and nodes). A static mutex guards the
 * grand total. main checks the buckets against a sequential pass over the same values, then
 * times an uncontended lock/unlock pair of a mutex only it uses.
 *
 * Built natively with -pthread, or for Squall with only the compile/link line changed:
 *   cc mutex_runs.c $(pkg-config --cflags --libs squall-pthread)
 * usage: mutex_runs N T    prints "bins N T: CHECKSUM" and "lock+unlock: X ns"
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define B 64

struct bucket {
    pthread_mutex_t lock;
    long count;
    uint64_t sum;
    char pad[64];
};

struct shared {
    struct bucket b[B];
    long n;
    int t;
    long total; /* guarded by total_lock */
};

static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t value(long i)
{
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + 12345;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The bucket value i of thread `me` (of t) goes to. */
static int bucket_of(long i, int me, int t)
{
    uint64_t v = value(i);
    int per = B / t > 0 ? B / t : 1;
    if (i % 8 == 0) return (int)(v % B);
    return (me * per + (int)(v % (uint64_t)per)) % B;
}

struct arg {
    struct shared *s;
    int me;
};

static void *worker(void *p)
{
    struct arg *a = p;
    struct shared *s = a->s;
    long lo = s->n * a->me / s->t, hi = s->n * (a->me + 1) / s->t;
    long mine = 0;
    for (long i = lo; i < hi; i++) {
        struct bucket *b = &s->b[bucket_of(i, a->me, s->t)];
        pthread_mutex_lock(&b->lock);
        b->count++;
        b->sum += value(i) >> 8;
        pthread_mutex_unlock(&b->lock);
        mine++;
    }
    pthread_mutex_lock(&total_lock);
    s->total += mine;
    pthread_mutex_unlock(&total_lock);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int t = argc > 2 ? atoi(argv[2]) : 4;
    if (t < 1 || t > 64 || n < 1) return 2;
    struct shared *s = calloc(1, sizeof *s);
    struct arg *args = malloc(sizeof *args * (size_t)t);
    pthread_t *ids = malloc(sizeof *ids * (size_t)t);
    if (!s || !args || !ids) return 2;
    for (int k = 0; k < B; k++) pthread_mutex_init(&s->b[k].lock, NULL);
    s->n = n;
    s->t = t;
    for (int i = 0; i < t; i++) {
        args[i].s = s;
        args[i].me = i;
        if (pthread_create(&ids[i], NULL, worker, &args[i]) != 0) return 3;
    }
    for (int i = 0; i < t; i++) pthread_join(ids[i], NULL);

    /* The same binning, sequentially. */
    long count[B] = {0};
    uint64_t sum[B] = {0};
    for (int me = 0; me < t; me++) {
        long lo = n * me / t, hi = n * (me + 1) / t;
        for (long i = lo; i < hi; i++) {
            int k = bucket_of(i, me, t);
            count[k]++;
            sum[k] += value(i) >> 8;
        }
    }
    uint64_t check = 0;
    int bad = 0;
    pthread_mutex_lock(&total_lock);
    long total = s->total;
    pthread_mutex_unlock(&total_lock);
    for (int k = 0; k < B; k++) {
        pthread_mutex_lock(&s->b[k].lock);
        if (s->b[k].count != count[k] || s->b[k].sum != sum[k]) {
            fprintf(stderr, "bucket %d: %ld values, sum %llu; expected %ld, %llu\n", k,
                    s->b[k].count, (unsigned long long)s->b[k].sum, count[k],
                    (unsigned long long)sum[k]);
            bad = 1;
        }
        check = check * 31 + s->b[k].sum + (uint64_t)s->b[k].count;
        pthread_mutex_unlock(&s->b[k].lock);
    }
    if (bad || total != n) {
        fprintf(stderr, "mutex_runs: wrong bins (total %ld of %ld)\n", total, n);
        return 1;
    }
    printf("bins %ld %d: %llu\n", n, t, (unsigned long long)check);

    /* An uncontended pair on a mutex only main uses (after a first, untimed pair). */
    pthread_mutex_t *mine = malloc(sizeof *mine);
    if (!mine) return 2;
    pthread_mutex_init(mine, NULL);
    pthread_mutex_lock(mine);
    pthread_mutex_unlock(mine);
    long reps = 1000000;
    double t0 = now();
    for (long i = 0; i < reps; i++) {
        pthread_mutex_lock(mine);
        pthread_mutex_unlock(mine);
    }
    printf("lock+unlock: %.1f ns\n", (now() - t0) * 1e9 / reps);
    pthread_mutex_destroy(mine);
    free(mine);
    return 0;
}
