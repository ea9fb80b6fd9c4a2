/*
 * apps/common/app.h - the harness shared by every Squall seed application.
 *
 * Owns: command-line parsing of the common flags (-t -s -h -v), the RESULT line, timing
 * (and the Squall statistics mark of the timed phase),
 * the thread team, barrier and lock wrappers, a deterministic PRNG and small checking
 * helpers. Must not touch: application algorithms or data (each app owns its own).
 *
 * Header-only (every function is `static inline`), so an app is one translation unit and
 * needs no extra object file. The same source builds three ways:
 *
 *   -DAPP_SEQ     sequential reference: no pthreads, threads forced to 1, the worker runs
 *                 inline on the main thread, barriers and locks are no-ops. mode=seq
 *   (default)     native POSIX threads. mode=native
 *   -DAPP_SQUALL  Squall: includes <squall/pthread.h>, whose pthreads layer spreads threads
 *                 evenly over the nodes (team thread t on node (t+1) mod N) and whose malloc/free come from the shared heap;
 *                 APP_GLOBAL expands to SQUALL_GLOBAL. mode=squall
 *
 * Rules for apps (so the same source runs on Squall): all shared data comes from malloc /
 * calloc (or globals marked APP_GLOBAL) allocated and initialised by main before the team
 * is created; barriers and locks live in that shared memory and are initialised with their
 * _init functions; a thread's private data lives on its own stack; no rand(), use app_rng.
 *
 * Common flags: -t T threads (default 1; forced to 1 in APP_SEQ), -s tiny|small|medium|large
 * (default small), -v 0|1 verify (default 1; -v 0 skips the reference recomputation, the
 * run then reports verified=0 and exits 0), -h help. Every other flag is the app's own and
 * is read with app_flag().
 *
 * Result line (exactly one per run, parsed by the harness):
 *   RESULT app=<name> mode=<seq|native|squall> threads=<T> size=<size> time_s=<s>
 *          verified=<0|1> check=<value> note="<text>"
 * app_result() prints it and returns; app_finish() prints it and exits (0 if verified, or
 * if verification was switched off; 1 otherwise).
 */
#ifndef SQUALL_APP_H
#define SQUALL_APP_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(APP_SQUALL)
#include <squall/pthread.h>
#define APP_GLOBAL SQUALL_GLOBAL
#define APP_MODE "squall"
#elif defined(APP_SEQ)
#define APP_GLOBAL
#define APP_MODE "seq"
#elif defined(APP_STYLE)
/* SPMD builds of apps/<app>/<app>_<style>.c (CRL regions, Split-C global pointers): one
 * process per node, no team; mode=<style> (apps/README.md, "Styles"). */
#include <pthread.h>
#include <squall.h>
#define APP_GLOBAL
#define APP_MODE APP_STYLE
#else
#include <pthread.h>
#define APP_GLOBAL
#define APP_MODE "native"
#endif

#if defined(APP_SQUALL) && defined(APP_SEQ)
#error "APP_SQUALL and APP_SEQ are exclusive"
#endif

/* ------------------------------------------------------------------ options */

typedef struct {
    int threads;      /* -t, >= 1 */
    const char *size; /* -s: tiny|small|medium|large, or "custom" once an app-specific size flag is given */
    int verify;       /* -v, 1 = check the answer (default) */
} app_opts;

/* Prints the app's usage text plus the common flags to stdout. */
static inline void app_usage_(const char *usage)
{
    printf("%s\n", usage ? usage : "");
    printf("common flags:\n"
           "  -t T      threads (default 1; always 1 in the sequential build)\n"
           "  -s SIZE   tiny|small|medium|large (default small)\n"
           "  -v 0|1    verify the result (default 1)\n"
           "  -h        this help\n");
}

static inline void app_die(const char *fmt, const char *arg)
{
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

/* Parses -t -s -v -h. Unknown flags are left to the app (read them with app_flag). */
static inline void app_parse_common(int argc, char **argv, app_opts *o, const char *usage)
{
    o->threads = 1;
    o->size = "small";
    o->verify = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            app_usage_(usage);
            exit(0);
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "-s") == 0 || strcmp(a, "-v") == 0) {
            if (i + 1 >= argc)
                app_die("flag %s needs a value", a);
            const char *v = argv[++i];
            if (a[1] == 't') {
                char *end = NULL;
                long t = strtol(v, &end, 10);
                if (end == v || *end != '\0' || t < 1 || t > 4096)
                    app_die("bad thread count '%s' (want 1..4096)", v);
                o->threads = (int)t;
            } else if (a[1] == 's') {
                if (strcmp(v, "tiny") != 0 && strcmp(v, "small") != 0 && strcmp(v, "medium") != 0 &&
                    strcmp(v, "large") != 0)
                    app_die("bad size '%s' (want tiny|small|medium|large)", v);
                o->size = v;
            } else {
                o->verify = (strcmp(v, "0") != 0);
            }
        }
    }
#ifdef APP_SEQ
    o->threads = 1;
#endif
}

/* Value following flag `name` (e.g. "-n"), or dflt if the flag is absent. */
static inline const char *app_flag(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            if (i + 1 >= argc)
                app_die("flag %s needs a value", name);
            return argv[i + 1];
        }
    }
    return dflt;
}

/* 1 if the bare flag `name` (no value, e.g. "--padded") is present. */
static inline int app_flag_present(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

/* Integer value of flag `name`; dflt if absent. Exits with a message on a malformed value or
 * one outside [lo, hi]. If the flag is present, o->size becomes "custom". */
static inline long app_flag_long(int argc, char **argv, app_opts *o, const char *name, long dflt, long lo,
                                 long hi)
{
    const char *v = app_flag(argc, argv, name, NULL);
    if (v == NULL)
        return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "bad value '%s' for %s (want %ld..%ld)\n", v, name, lo, hi);
        exit(2);
    }
    if (o)
        o->size = "custom";
    return x;
}

/* Floating value of flag `name`; same rules as app_flag_long. */
static inline double app_flag_double(int argc, char **argv, app_opts *o, const char *name, double dflt,
                                     double lo, double hi)
{
    const char *v = app_flag(argc, argv, name, NULL);
    if (v == NULL)
        return dflt;
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= lo && x <= hi)) {
        fprintf(stderr, "bad value '%s' for %s (want %g..%g)\n", v, name, lo, hi);
        exit(2);
    }
    if (o)
        o->size = "custom";
    return x;
}

/* Index of o->size: tiny 0, small 1, medium 2, large 3 (custom counts as small). Apps pick
 * their default problem size with it: `static const long N[4] = {...}; n = N[app_size_index(o)];` */
static inline int app_size_index(const app_opts *o)
{
    if (strcmp(o->size, "tiny") == 0)
        return 0;
    if (strcmp(o->size, "medium") == 0)
        return 2;
    if (strcmp(o->size, "large") == 0)
        return 3;
    return 1;
}

/* ------------------------------------------------------------------ time, memory */

/* Monotonic seconds. */
static inline double app_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parallel-phase time of n threads that noted app_now() in start[i] when they left the start
 * barrier and in end[i] when they left the end barrier: from the first start to the last end
 * (thread 0 alone may be descheduled while the others already work). */
static inline double app_phase_time(const double *start, const double *end, int n)
{
    double lo = start[0], hi = end[0];
    for (int i = 1; i < n; i++) {
        lo = start[i] < lo ? start[i] : lo;
        hi = end[i] > hi ? end[i] : hi;
    }
    return hi - lo;
}

/* Statistics mark: call from ONE thread (e.g. thread 0) right after the barrier that starts the
 * timed phase and again right after the one that ends it; `squall run --stats` (and
 * SQUALL_STATS_FILE) then shows the timed phase beside the whole run (squall_stats_mark). A
 * no-op in the seq and native builds. */
static inline void app_stats_mark(void)
{
#if defined(APP_SQUALL) || defined(APP_STYLE)
    if (squall_stats_mark() != SQUALL_OK)
        fprintf(stderr, "app_stats_mark failed: %s\n", squall_last_error());
#endif
}

/* calloc that exits with a message naming what could not be had (zeroed memory). On Squall
 * this comes from the shared heap, so call it from main before the team starts. */
static inline void *app_alloc(size_t count, size_t size, const char *what)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory allocating %zu x %zu bytes for %s\n", count, size, what);
        exit(2);
    }
    return p;
}

/* malloc that exits with a message naming what could not be had; the memory is NOT zeroed.
 * For arrays the team initialises itself, each thread writing its own part before the timed
 * phase (the SPLASH / TreadMarks practice of parallel initialisation): on Squall a page's home
 * is the node that touches it first, and app_alloc (calloc) zeroes through the shared view on
 * main's node, which would make main's node the first toucher of every page. Blocks of a page
 * or more are page-aligned (see app_block_range_aligned). Allocate in main before the team
 * starts, like app_alloc; free() releases it. */
static inline void *app_alloc_uninit(size_t count, size_t size, const char *what)
{
    if (size && count > SIZE_MAX / size) {
        fprintf(stderr, "allocation of %zu x %zu bytes for %s overflows\n", count, size, what);
        exit(2);
    }
    size_t bytes = count * size;
    void *p = NULL;
    if (bytes >= 4096) { /* page-aligned, so a page-aligned partition gives whole pages */
        if (posix_memalign(&p, 4096, bytes) != 0)
            p = NULL;
    } else {
        p = malloc(bytes > 0 ? bytes : 1);
    }
    if (p == NULL) {
        fprintf(stderr, "out of memory allocating %zu x %zu bytes for %s\n", count, size, what);
        exit(2);
    }
    return p;
}

/* ------------------------------------------------------------------ result */

/* Prints the RESULT line. The note must not contain a double quote (they are replaced). */
static inline void app_result(const char *app, const app_opts *o, double time_s, int verified, double check,
                              const char *note)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", note ? note : "");
    for (char *c = buf; *c; c++)
        if (*c == '"' || *c == '\n')
            *c = '\'';
    printf("RESULT app=%s mode=%s threads=%d size=%s time_s=%.6f verified=%d check=%.17g note=\"%s\"\n", app,
           APP_MODE, o->threads, o->size, time_s, verified ? 1 : 0, check, buf);
    fflush(stdout);
}

/* app_result, then exit: 0 if verified (or verification was switched off with -v 0), else 1. */
static inline void app_finish(const char *app, const app_opts *o, double time_s, int verified, double check,
                              const char *note)
{
    app_result(app, o, time_s, verified, check, note);
    exit((verified || !o->verify) ? 0 : 1);
}

/* Relative difference |a-b| / max(|a|,|b|,tiny); 0 when both are 0. */
static inline double app_rel_diff(double a, double b)
{
    double d = fabs(a - b);
    double m = fmax(fabs(a), fabs(b));
    if (m < 1e-300)
        return d;
    return d / m;
}

/* ------------------------------------------------------------------ threads */

typedef struct app_team app_team; /* opaque; the team lives inside app_run_team */

/* Runs fn on nthreads threads: creates ALL nthreads threads (main only waits, so every worker
 * may be placed on any node) and joins them. args[i] is thread i's argument; if args is NULL
 * thread i gets (void *)(intptr_t)i. In APP_SEQ, nthreads must be 1 and fn runs inline. */
static inline void app_run_team(int nthreads, void *(*fn)(void *), void **args)
{
    if (nthreads < 1) {
        fprintf(stderr, "app_run_team: bad thread count %d\n", nthreads);
        exit(2);
    }
#ifdef APP_SEQ
    if (nthreads != 1) {
        fprintf(stderr, "app_run_team: sequential build runs 1 thread, asked for %d\n", nthreads);
        exit(2);
    }
    (void)fn(args ? args[0] : (void *)(intptr_t)0);
#else
    pthread_t *tids = malloc(sizeof(pthread_t) * (size_t)nthreads);
    if (tids == NULL) {
        fprintf(stderr, "app_run_team: out of memory for %d thread ids\n", nthreads);
        exit(2);
    }
    for (int i = 0; i < nthreads; i++) {
        void *arg = args ? args[i] : (void *)(intptr_t)i;
        int rc = pthread_create(&tids[i], NULL, fn, arg);
        if (rc != 0) {
            fprintf(stderr, "app_run_team: pthread_create for thread %d failed: %s\n", i, strerror(rc));
            exit(2);
        }
    }
    for (int i = 0; i < nthreads; i++) {
        int rc = pthread_join(tids[i], NULL);
        if (rc != 0) {
            fprintf(stderr, "app_run_team: pthread_join for thread %d failed: %s\n", i, strerror(rc));
            exit(2);
        }
    }
    free(tids);
#endif
}

/* Runs `worker` on `nthreads` threads (app_run_team), thread t getting a pointer to a `type`
 * whose fields are set to g = `shared` and tid = t (every app's per-thread argument). */
#define APP_RUN_TEAM_OF(type, shared, worker, nthreads)                                        \
    do {                                                                                       \
        int n_ = (nthreads);                                                                   \
        type *args_ = app_alloc((size_t)n_, sizeof *args_, "thread args");                    \
        void **targs_ = app_alloc((size_t)n_, sizeof(void *), "thread arg pointers");         \
        for (int t_ = 0; t_ < n_; t_++) {                                                      \
            args_[t_].g = (shared);                                                            \
            args_[t_].tid = t_;                                                                \
            targs_[t_] = &args_[t_];                                                           \
        }                                                                                      \
        app_run_team(n_, (worker), targs_);                                                    \
    } while (0)

/* Thread id passed as the argument when app_run_team got args == NULL. */
static inline int app_tid(void *arg)
{
    return (int)(intptr_t)arg;
}

/* ------------------------------------------------------------------ barrier, lock, condition */

/* NOTE: the lock TYPE is `app_lock_t` (also reachable as `struct app_lock`), not `app_lock`:
 * C puts typedef names and function names in one namespace, so a typedef `app_lock` would
 * clash with the function app_lock(). See apps/common/CHANGES. */

#ifdef APP_SEQ
typedef struct {
    int n;
} app_barrier;
typedef struct app_lock {
    int held;
} app_lock_t;
static inline void app_barrier_init(app_barrier *b, int n)
{
    b->n = n;
}
static inline void app_barrier_wait(app_barrier *b)
{
    (void)b;
}
static inline void app_lock_init(app_lock_t *l)
{
    l->held = 0;
}
static inline void app_lock(app_lock_t *l)
{
    (void)l;
}
static inline void app_unlock(app_lock_t *l)
{
    (void)l;
}
/* One thread never waits on a condition: the sequential build has nothing to wait for. */
typedef struct {
    int unused;
} app_cond_t;
static inline void app_cond_init(app_cond_t *c)
{
    c->unused = 0;
}
static inline void app_cond_wait(app_cond_t *c, app_lock_t *l)
{
    (void)c;
    (void)l;
    fprintf(stderr, "app_cond_wait: the sequential build has no other thread to wait for\n");
    exit(2);
}
static inline void app_cond_signal(app_cond_t *c)
{
    (void)c;
}
static inline void app_cond_broadcast(app_cond_t *c)
{
    (void)c;
}
#else
typedef struct {
    pthread_barrier_t b;
} app_barrier;
typedef struct app_lock {
    pthread_mutex_t m;
} app_lock_t;
static inline void app_barrier_init(app_barrier *b, int n)
{
    int rc = pthread_barrier_init(&b->b, NULL, (unsigned)n);
    if (rc != 0) {
        fprintf(stderr, "app_barrier_init(%d) failed: %s\n", n, strerror(rc));
        exit(2);
    }
}
static inline void app_barrier_wait(app_barrier *b)
{
    int rc = pthread_barrier_wait(&b->b);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
        fprintf(stderr, "app_barrier_wait failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_lock_init(app_lock_t *l)
{
    int rc = pthread_mutex_init(&l->m, NULL);
    if (rc != 0) {
        fprintf(stderr, "app_lock_init failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_lock(app_lock_t *l)
{
    int rc = pthread_mutex_lock(&l->m);
    if (rc != 0) {
        fprintf(stderr, "app_lock failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_unlock(app_lock_t *l)
{
    int rc = pthread_mutex_unlock(&l->m);
    if (rc != 0) {
        fprintf(stderr, "app_unlock failed: %s\n", strerror(rc));
        exit(2);
    }
}
/* A condition variable used with an app_lock_t (pthread_cond_*). */
typedef struct {
    pthread_cond_t c;
} app_cond_t;
static inline void app_cond_init(app_cond_t *c)
{
    int rc = pthread_cond_init(&c->c, NULL);
    if (rc != 0) {
        fprintf(stderr, "app_cond_init failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_cond_wait(app_cond_t *c, app_lock_t *l)
{
    int rc = pthread_cond_wait(&c->c, &l->m);
    if (rc != 0) {
        fprintf(stderr, "app_cond_wait failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_cond_signal(app_cond_t *c)
{
    int rc = pthread_cond_signal(&c->c);
    if (rc != 0) {
        fprintf(stderr, "app_cond_signal failed: %s\n", strerror(rc));
        exit(2);
    }
}
static inline void app_cond_broadcast(app_cond_t *c)
{
    int rc = pthread_cond_broadcast(&c->c);
    if (rc != 0) {
        fprintf(stderr, "app_cond_broadcast failed: %s\n", strerror(rc));
        exit(2);
    }
}
#endif

/* ------------------------------------------------------------------ PRNG (xorshift64*) */

typedef struct {
    unsigned long long s;
} app_rng;

/* Seeds the generator; any seed (including 0) gives a valid non-zero state (splitmix64 mix). */
static inline void app_rng_seed(app_rng *r, unsigned long long seed)
{
    unsigned long long z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
    r->s = z ? z : 0x2545F4914F6CDD1DULL;
}

static inline unsigned long long app_rng_next(app_rng *r)
{
    unsigned long long x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [0,1). */
static inline double app_rng_double(app_rng *r)
{
    return (double)(app_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) (n > 0). */
static inline unsigned long long app_rng_below(app_rng *r, unsigned long long n)
{
    return n ? app_rng_next(r) % n : 0;
}

/* ------------------------------------------------------------------ work split */

/* Block partition of [0, n) among nthreads: thread tid gets [*lo, *hi). */
static inline void app_block_range(long n, int nthreads, int tid, long *lo, long *hi)
{
    long q = n / nthreads, r = n % nthreads;
    *lo = tid * q + (tid < r ? tid : r);
    *hi = *lo + q + (tid < r ? 1 : 0);
}

/* Block partition of [0, n) among nthreads in whole chunks of `align` elements (the last
 * thread also takes the remainder): thread tid gets [*lo, *hi). With align = one page of
 * elements and a page-aligned array, no page holds elements of two threads. */
static inline void app_block_range_aligned(long n, int nthreads, int tid, long align, long *lo, long *hi)
{
    if (align < 1)
        align = 1;
    long chunks = n / align, clo, chi;
    app_block_range(chunks, nthreads, tid, &clo, &chi);
    *lo = clo * align;
    *hi = tid == nthreads - 1 ? n : chi * align;
}

#endif /* SQUALL_APP_H */
