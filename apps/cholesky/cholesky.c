/*
 * cholesky - blocked Cholesky factorisation driven by a task queue with condition variables
 * (SPLASH-2 CHOLESKY's pattern, seed 000 §3.2; issue 21 item 6).
 *
 * Owns: the SPD matrix generator, the block kernels, the task graph (dependency counts, the
 * shared task queue, its lock and condition variable), and the check against a sequential
 * factorisation.
 * Must not touch: apps/common (the harness) or other apps.
 *
 * Written as outsiders write a task-parallel code with pthreads: plain globals for the
 * matrix, the queue and the dependency counters; one mutex around the queue and the counters;
 * a condition variable the idle threads block on while the queue is empty; a mutex per block
 * for the updates that accumulate into it. The matrix is lower-triangular in B x B blocks
 * (block (i,j), i >= j, contiguous). Tasks:
 *   POTRF(k)      factor the diagonal block (k,k)            once its k updates are done
 *   TRSM(i,k)     (i,k) := (i,k) L(k,k)^-T                   once POTRF(k) and its k updates are done
 *   UPDATE(i,j,k) (i,j) -= (i,k) (j,k)^T, i >= j > k         once TRSM(i,k) and TRSM(j,k) are done
 * A thread that finishes a task takes the queue lock, counts the task done, and enqueues every
 * task it made ready (the dependent tasks), signalling the condition; the last task's
 * completion broadcasts so the blocked threads leave. An update computes its product into a
 * private buffer and subtracts it under the destination block's lock (updates of one block
 * from different k may run at once).
 *
 * Sharing pattern: a central queue and its counters under one lock (two acquires per task),
 * threads blocking on and woken through a condition variable, blocks produced by one task and
 * read by the tasks it enables on any node (producer-consumer), and destination blocks
 * accumulated under per-block locks (migratory).
 *
 * Check: the same matrix regenerated and factored sequentially with the same kernels in
 * natural order; every element of L must agree within 1e-10 relative to the largest |L| (only
 * the order of the updates into a block differs). check= is the sum of L's diagonal.
 */
#include "app.h"

static const char *chol_usage = "cholesky: blocked Cholesky with a task queue and condition variables\n"
                                "  -n N   matrix order (tiny 256, small 1536, medium 2304, large 3072)\n"
                                "  -b B   block size (default 64; tiny 32); N is rounded up to a multiple";

enum { T_POTRF, T_TRSM, T_UPDATE };

typedef struct {
    int kind, i, j, k;
} task;

/* Shared state: plain globals. */
APP_GLOBAL static int n, bs, nb, nthreads;
APP_GLOBAL static double *blocks;      /* nb(nb+1)/2 blocks of bs*bs doubles */
APP_GLOBAL static app_lock_t *blk_lock; /* one per block: updates accumulate under it */
APP_GLOBAL static app_lock_t qlock;     /* guards everything below */
APP_GLOBAL static app_cond_t qcond;     /* signalled when a task is enqueued or all are done */
APP_GLOBAL static task *queue;          /* every task is enqueued exactly once */
APP_GLOBAL static long qhead, qtail, total_tasks, done_tasks;
APP_GLOBAL static int *ndeps;     /* per block: unfinished tasks before its POTRF/TRSM may run */
APP_GLOBAL static char *trsm_done; /* per block (i,k), i > k */
APP_GLOBAL static long *waits;     /* per thread: times it blocked on the condition */
APP_GLOBAL static app_barrier bar;
APP_GLOBAL static double *t_start, *t_end; /* per thread: after the start and the end barrier */

static long bidx(int i, int j)
{
    return (long)i * (i + 1) / 2 + j;
}

static double *blk(double *base, int i, int j)
{
    return base + bidx(i, j) * (long)bs * bs;
}

/* Element (r, c) of the symmetric input matrix, r, c in [0, n): a hash of the pair off the
 * diagonal, n plus a hash on it (diagonally dominant, hence positive definite). */
static double chol_elem(int r, int c)
{
    unsigned long long a = (unsigned long long)(r > c ? r : c), b = (unsigned long long)(r > c ? c : r);
    unsigned long long z = (a << 32 | b) * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    return r == c ? (double)n + u : u - 0.5;
}

static void fill_block(double *base, int i, int j)
{
    double *a = blk(base, i, j);
    for (int r = 0; r < bs; r++)
        for (int c = 0; c < bs; c++)
            a[r * bs + c] = chol_elem(i * bs + r, j * bs + c);
}

/* In-place lower Cholesky of a diagonal block (row-major); the upper part is left alone. */
static int k_potrf(double *a)
{
    for (int c = 0; c < bs; c++) {
        double d = a[c * bs + c];
        for (int m = 0; m < c; m++)
            d -= a[c * bs + m] * a[c * bs + m];
        if (!(d > 0))
            return -1;
        d = sqrt(d);
        a[c * bs + c] = d;
        for (int r = c + 1; r < bs; r++) {
            double s = a[r * bs + c];
            for (int m = 0; m < c; m++)
                s -= a[r * bs + m] * a[c * bs + m];
            a[r * bs + c] = s / d;
        }
    }
    return 0;
}

/* x := x L^-T for an off-diagonal block x and the factored diagonal block l. */
static void k_trsm(const double *l, double *x)
{
    for (int r = 0; r < bs; r++) {
        double *xr = &x[r * bs];
        for (int c = 0; c < bs; c++) {
            double s = xr[c];
            for (int m = 0; m < c; m++)
                s -= xr[m] * l[c * bs + m];
            xr[c] = s / l[c * bs + c];
        }
    }
}

/* out := a b^T (both bs x bs, row-major). */
static void k_product(const double *a, const double *b, double *out)
{
    for (int r = 0; r < bs; r++)
        for (int c = 0; c < bs; c++) {
            double s = 0;
            for (int m = 0; m < bs; m++)
                s += a[r * bs + m] * b[c * bs + m];
            out[r * bs + c] = s;
        }
}

static void k_subtract(double *dst, const double *p)
{
    for (long e = 0; e < (long)bs * bs; e++)
        dst[e] -= p[e];
}

/* Called with qlock held: one more task before block (i,j)'s own step has finished. */
static int block_step_ready(int i, int j)
{
    if (--ndeps[bidx(i, j)] != 0)
        return 0;
    task t = {i == j ? T_POTRF : T_TRSM, i, j, j};
    queue[qtail++] = t;
    return 1;
}

static int enqueue_update(int i, int j, int k)
{
    task t = {T_UPDATE, i, j, k};
    queue[qtail++] = t;
    return 1;
}

/* Called with qlock held after task t finished: enqueues what it made ready; returns how many. */
static int complete(const task *t)
{
    int added = 0;
    if (t->kind == T_POTRF) {
        for (int i = t->k + 1; i < nb; i++)
            added += block_step_ready(i, t->k);
    } else if (t->kind == T_TRSM) {
        int i = t->i, k = t->k;
        trsm_done[bidx(i, k)] = 1;
        for (int j = k + 1; j <= i; j++)
            if (j == i || trsm_done[bidx(j, k)])
                added += enqueue_update(i, j, k);
        for (int i2 = i + 1; i2 < nb; i2++)
            if (trsm_done[bidx(i2, k)])
                added += enqueue_update(i2, i, k);
    } else {
        added += block_step_ready(t->i, t->j);
    }
    return added;
}

static void run_task(const task *t, double *tmp)
{
    if (t->kind == T_POTRF) {
        if (k_potrf(blk(blocks, t->k, t->k)) != 0) {
            fprintf(stderr, "cholesky: block %d is not positive definite\n", t->k);
            exit(2);
        }
    } else if (t->kind == T_TRSM) {
        k_trsm(blk(blocks, t->k, t->k), blk(blocks, t->i, t->k));
    } else {
        k_product(blk(blocks, t->i, t->k), blk(blocks, t->j, t->k), tmp);
        app_lock(&blk_lock[bidx(t->i, t->j)]);
        k_subtract(blk(blocks, t->i, t->j), tmp);
        app_unlock(&blk_lock[bidx(t->i, t->j)]);
    }
}

static void *chol_worker(void *arg)
{
    int tid = app_tid(arg);
    double *tmp = malloc((size_t)bs * bs * sizeof *tmp); /* private product buffer */
    if (tmp == NULL) {
        fprintf(stderr, "cholesky: out of memory for a product buffer\n");
        exit(2);
    }
    /* Parallel initialisation: block rows cyclically over the threads (first touch). */
    for (int i = tid; i < nb; i += nthreads)
        for (int j = 0; j <= i; j++)
            fill_block(blocks, i, j);
    app_barrier_wait(&bar);
    t_start[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    long my_waits = 0;
    for (;;) {
        app_lock(&qlock);
        while (qhead == qtail && done_tasks < total_tasks) {
            my_waits++;
            app_cond_wait(&qcond, &qlock);
        }
        if (qhead == qtail) {
            app_unlock(&qlock);
            break;
        }
        task t = queue[qhead++];
        app_unlock(&qlock);

        run_task(&t, tmp);

        app_lock(&qlock);
        int added = complete(&t);
        done_tasks++;
        if (done_tasks == total_tasks || added > 1)
            app_cond_broadcast(&qcond);
        else if (added == 1)
            app_cond_signal(&qcond);
        app_unlock(&qlock);
    }
    waits[tid] = my_waits;
    free(tmp);
    app_barrier_wait(&bar);
    t_end[tid] = app_now();
    if (tid == 0)
        app_stats_mark();
    return NULL;
}

/* The sequential reference: the same kernels in natural (right-looking) order. */
static int factor_sequential(double *base, double *tmp)
{
    double *save = blocks;
    blocks = base;
    for (int k = 0; k < nb; k++) {
        if (k_potrf(blk(base, k, k)) != 0) {
            blocks = save;
            return -1;
        }
        for (int i = k + 1; i < nb; i++)
            k_trsm(blk(base, k, k), blk(base, i, k));
        for (int i = k + 1; i < nb; i++)
            for (int j = k + 1; j <= i; j++) {
                k_product(blk(base, i, k), blk(base, j, k), tmp);
                k_subtract(blk(base, i, j), tmp);
            }
    }
    blocks = save;
    return 0;
}

/* Parallel-phase time: from the first thread leaving the start barrier to the last one leaving
 * the end barrier (thread 0 alone may be descheduled while the others already work). */
int main(int argc, char **argv)
{
    app_opts o;
    app_parse_common(argc, argv, &o, chol_usage);
    static const long N[4] = {256, 1536, 2304, 3072};
    int si = app_size_index(&o);
    bs = (int)app_flag_long(argc, argv, &o, "-b", si == 0 ? 32 : 64, 1, 1024);
    n = (int)app_flag_long(argc, argv, &o, "-n", N[si], 1, 1 << 16);
    nb = (n + bs - 1) / bs;
    n = nb * bs;
    nthreads = o.threads;

    long nblocks = (long)nb * (nb + 1) / 2;
    total_tasks = nb + (long)nb * (nb - 1) / 2;
    for (int k = 0; k < nb; k++) {
        long m = nb - 1 - k;
        total_tasks += m * (m + 1) / 2;
    }
    blocks = app_alloc_uninit((size_t)nblocks * bs * bs, sizeof *blocks, "matrix blocks");
    blk_lock = app_alloc((size_t)nblocks, sizeof *blk_lock, "block locks");
    for (long b = 0; b < nblocks; b++)
        app_lock_init(&blk_lock[b]);
    queue = app_alloc((size_t)total_tasks, sizeof *queue, "task queue");
    ndeps = app_alloc((size_t)nblocks, sizeof *ndeps, "dependency counts");
    trsm_done = app_alloc((size_t)nblocks, 1, "trsm flags");
    waits = app_alloc((size_t)nthreads, sizeof *waits, "waits per thread");
    for (int i = 0; i < nb; i++)
        for (int j = 0; j <= i; j++)
            ndeps[bidx(i, j)] = j + (i > j ? 1 : 0);
    app_lock_init(&qlock);
    app_cond_init(&qcond);
    qhead = qtail = done_tasks = 0;
    task first = {T_POTRF, 0, 0, 0};
    queue[qtail++] = first;
    app_barrier_init(&bar, nthreads);
    t_start = app_alloc((size_t)nthreads, sizeof *t_start, "start stamps");
    t_end = app_alloc((size_t)nthreads, sizeof *t_end, "end stamps");

    app_run_team(nthreads, chol_worker, NULL);

    double check = 0;
    for (int i = 0; i < nb; i++) {
        double *d = blk(blocks, i, i);
        for (int r = 0; r < bs; r++)
            check += d[r * bs + r];
    }
    long total_waits = 0;
    for (int t = 0; t < nthreads; t++)
        total_waits += waits[t];
    int ok = 0;
    char note[240];
    snprintf(note, sizeof note, "n %d, blocks of %d, %ld tasks, %ld waits on the condition, not checked", n, bs,
             total_tasks, total_waits);
    if (o.verify) {
        double *ref = malloc((size_t)nblocks * bs * bs * sizeof *ref);
        double *tmp = malloc((size_t)bs * bs * sizeof *tmp);
        if (ref == NULL || tmp == NULL) {
            fprintf(stderr, "cholesky: out of memory for the reference\n");
            exit(2);
        }
        for (int i = 0; i < nb; i++)
            for (int j = 0; j <= i; j++)
                fill_block(ref, i, j);
        if (factor_sequential(ref, tmp) != 0) {
            fprintf(stderr, "cholesky: the reference matrix is not positive definite\n");
            exit(2);
        }
        double worst = 0, biggest = 0;
        for (int i = 0; i < nb; i++)
            for (int j = 0; j <= i; j++) {
                const double *a = blk(blocks, i, j), *b = blk(ref, i, j);
                for (int r = 0; r < bs; r++)
                    for (int c = 0; c < (i == j ? r + 1 : bs); c++) {
                        worst = fmax(worst, fabs(a[r * bs + c] - b[r * bs + c]));
                        biggest = fmax(biggest, fabs(b[r * bs + c]));
                    }
            }
        double rel = worst / (biggest > 0 ? biggest : 1);
        ok = done_tasks == total_tasks && rel <= 1e-10;
        snprintf(note, sizeof note,
                 "n %d, blocks of %d, %ld tasks (%ld done), %ld waits on the condition; max |L - sequential| / max |L| %.3g",
                 n, bs, total_tasks, done_tasks, total_waits, rel);
        free(tmp);
        free(ref);
    }
    app_finish("cholesky", &o, app_phase_time(t_start, t_end, nthreads), ok, check, note);
}
