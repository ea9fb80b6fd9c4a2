/*
 * radix - SPLASH-2 RADIX-style parallel radix sort of integer keys (seed 000 §3.2; issue 21 item 6).
 *
 * Owns: the key generator, the per-thread histograms, the prefix sums across threads, the
 * all-to-all permutation and the check against qsort of the same keys.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Written as a SPLASH-2 program is: plain globals for the shared state (the key arrays, the
 * rank array, one barrier), malloc'd arrays, each thread working on its own contiguous block
 * of keys. Per pass (one digit of RADIX_BITS bits, least significant first):
 *   1. histogram: thread t counts the digits of its block of key_from into its own row of the
 *      shared rank array (rank[t][d]);
 *   2. prefix sums across threads: thread t takes a block of digits and, for each, turns the
 *      column rank[0..P)[d] into exclusive prefix sums and writes the digit's total;
 *   3. permutation: every thread computes the start of each digit (prefix of the totals) plus
 *      its own offset in that digit, and writes each of its keys to key_to at its rank — an
 *      all-to-all scatter: every thread writes into every digit's region of the array;
 *   then the arrays swap. Three barriers per pass.
 *
 * Sharing pattern: the histogram rows are written by their thread and read by all (the prefix
 * phase writes across rows); the permutation writes each digit's region of key_to from every
 * thread (a page at a boundary between two threads' parts of a digit is written by both), and
 * the next pass reads key_to in blocks — so every key crosses the machine once per pass.
 *
 * Check: the same keys regenerated sequentially and sorted with qsort; the output must equal
 * them element by element (so it is sorted and a permutation of the input). check= is a
 * position-weighted checksum of the sorted keys.
 */
#include "app.h"

#define RADIX_BITS 10
#define RADIX (1 << RADIX_BITS)
#define KEY_BITS 30 /* keys in [0, 2^30): three passes of 10 bits */

static const char *radix_usage = "radix: SPLASH-2-style parallel radix sort\n"
                                 "  -n N   keys (tiny 65536, small 8M, medium 32M, large 64M)\n"
                                 "  -k K   key bits, 1..31 (default 30; passes = ceil(K / 10))";

/* Shared state: plain globals (every global is shared under Squall's pthreads layer). */
APP_GLOBAL static long nkeys;
APP_GLOBAL static int nthreads, key_bits, passes;
APP_GLOBAL static unsigned int *key_a, *key_b; /* the two key arrays, alternating per pass */
APP_GLOBAL static long *rank;                  /* nthreads rows of RADIX counts, one page per row */
APP_GLOBAL static long *digit_total;           /* RADIX totals of the current pass */
APP_GLOBAL static app_barrier bar;
APP_GLOBAL static double *t_start, *t_end; /* per thread: after the start and the end barrier */

/* Key i of the input: a hash of i, so any thread (and the check) regenerates it alone. */
static unsigned int radix_key(long i, int bits)
{
    unsigned long long z = (unsigned long long)i * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (unsigned int)(z >> (64 - bits));
}

static void *radix_worker(void *arg)
{
    int tid = app_tid(arg);
    long lo, hi;
    app_block_range_aligned(nkeys, nthreads, tid, 1024, &lo, &hi);

    /* Parallel initialisation: each thread writes its own block of both arrays (first touch)
     * and its own rank row. */
    for (long i = lo; i < hi; i++) {
        key_a[i] = radix_key(i, key_bits);
        key_b[i] = 0;
    }
    long *my_rank = &rank[(long)tid * RADIX];
    for (int d = 0; d < RADIX; d++)
        my_rank[d] = 0;
    int dlo, dhi;
    {
        long a, b;
        app_block_range(RADIX, nthreads, tid, &a, &b);
        dlo = (int)a;
        dhi = (int)b;
    }
    if (tid == 0)
        for (int d = 0; d < RADIX; d++)
            digit_total[d] = 0;

    app_barrier_wait(&bar);
    t_start[tid] = app_now();
    if (tid == 0)
        app_stats_mark();

    unsigned int *from = key_a, *to = key_b;
    long count[RADIX], pos[RADIX];
    for (int pass = 0; pass < passes; pass++) {
        int shift = pass * RADIX_BITS;
        /* 1. histogram of the own block */
        for (int d = 0; d < RADIX; d++)
            count[d] = 0;
        for (long i = lo; i < hi; i++)
            count[(from[i] >> shift) & (RADIX - 1)]++;
        for (int d = 0; d < RADIX; d++)
            my_rank[d] = count[d];
        app_barrier_wait(&bar);

        /* 2. prefix sums across threads for this thread's digits */
        for (int d = dlo; d < dhi; d++) {
            long s = 0;
            for (int t = 0; t < nthreads; t++) {
                long c = rank[(long)t * RADIX + d];
                rank[(long)t * RADIX + d] = s;
                s += c;
            }
            digit_total[d] = s;
        }
        app_barrier_wait(&bar);

        /* 3. permutation: digit start + this thread's offset within the digit */
        long base = 0;
        for (int d = 0; d < RADIX; d++) {
            pos[d] = base + my_rank[d];
            base += digit_total[d];
        }
        for (long i = lo; i < hi; i++) {
            unsigned int k = from[i];
            to[pos[(k >> shift) & (RADIX - 1)]++] = k;
        }
        app_barrier_wait(&bar);
        unsigned int *tmp = from;
        from = to;
        to = tmp;
    }
    t_end[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    return NULL;
}

static int cmp_uint(const void *a, const void *b)
{
    unsigned int x = *(const unsigned int *)a, y = *(const unsigned int *)b;
    return (x > y) - (x < y);
}

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, radix_usage);
    static const long N[4] = {65536, 8L << 20, 32L << 20, 64L << 20};
    nkeys = app_flag_long(argc, argv, &o, "-n", N[app_size_index(&o)], 1, 1L << 30);
    key_bits = (int)app_flag_long(argc, argv, &o, "-k", KEY_BITS, 1, 31);
    passes = (key_bits + RADIX_BITS - 1) / RADIX_BITS;
    nthreads = o.threads;

    key_a = app_alloc_uninit((size_t)nkeys, sizeof *key_a, "keys");
    key_b = app_alloc_uninit((size_t)nkeys, sizeof *key_b, "keys (second array)");
    rank = app_alloc_uninit((size_t)nthreads * RADIX, sizeof *rank, "rank rows");
    digit_total = app_alloc_uninit(RADIX, sizeof *digit_total, "digit totals");
    app_barrier_init(&bar, nthreads);
    t_start = app_alloc((size_t)nthreads, sizeof *t_start, "start stamps");
    t_end = app_alloc((size_t)nthreads, sizeof *t_end, "end stamps");

    app_run_team(nthreads, radix_worker, NULL);
    unsigned int *sorted = passes % 2 == 0 ? key_a : key_b;

    double check = 0;
    for (long i = 0; i < nkeys; i++)
        check += (double)sorted[i] * (double)((i % 1000) + 1);
    int ok = 0;
    char note[200];
    snprintf(note, sizeof note, "%ld keys of %d bits, %d passes of %d bits, not checked", nkeys, key_bits, passes,
             RADIX_BITS);
    if (o.verify) {
        unsigned int *ref = malloc((size_t)nkeys * sizeof *ref);
        if (ref == NULL) {
            fprintf(stderr, "radix: out of memory for the reference keys\n");
            exit(2);
        }
        for (long i = 0; i < nkeys; i++)
            ref[i] = radix_key(i, key_bits);
        qsort(ref, (size_t)nkeys, sizeof *ref, cmp_uint);
        long bad = -1;
        for (long i = 0; i < nkeys && bad < 0; i++)
            if (sorted[i] != ref[i])
                bad = i;
        ok = bad < 0;
        if (ok)
            snprintf(note, sizeof note, "%ld keys of %d bits, %d passes of %d bits; equal to qsort of the input",
                     nkeys, key_bits, passes, RADIX_BITS);
        else
            snprintf(note, sizeof note, "key %ld is %u, qsort of the input has %u there", bad, sorted[bad], ref[bad]);
        free(ref);
    }
    app_finish("radix", &o, app_phase_time(t_start, t_end, nthreads), ok, check, note);
}
