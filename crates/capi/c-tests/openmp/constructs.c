/* Every OpenMP construct gcc lowers to the libgomp ABI, written the way OpenMP users write
 * them (plain globals, stack arrays, pragmas), each checked against the same computation done
 * sequentially. Usage: constructs GROUP [...], GROUP one of parallel, loops, sync, single,
 * tasks, api, nested, pthread (or all). Prints "ok GROUP ..." lines whose values are the same under any correct
 * OpenMP runtime with the same OMP_NUM_THREADS (the harness compares them with libgomp's). */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 2000
static int failures;
double grid[N];                 /* a plain global array */
long hits[64];
static int tp_value;
#pragma omp threadprivate(tp_value)

static void check(int cond, const char *what)
{
    if (!cond) {
        printf("WRONG %s\n", what);
        failures++;
    }
}

static void group_parallel(void)
{
    int ids[256] = {0};         /* on main's stack: shared with the team */
    int nthreads = 0, inpar = 0, level = 0;
    #pragma omp parallel
    {
        int me = omp_get_thread_num();
        ids[me] = me + 1;
        hits[me] = omp_get_team_size(1);
        #pragma omp master
        {
            nthreads = omp_get_num_threads();
            inpar = omp_in_parallel();
            level = omp_get_level();
        }
    }
    long sum = 0;
    for (int i = 0; i < nthreads; i++) {
        check(ids[i] == i + 1, "parallel: every thread ran with its own number");
        check(hits[i] == nthreads, "parallel: team size at level 1");
        sum += ids[i];
    }
    check(nthreads == omp_get_max_threads(), "parallel: team size is the nthreads ICV");
    check(inpar && level == 1 && !omp_in_parallel(), "parallel: in_parallel and level");
    int asked = 0;
    #pragma omp parallel num_threads(3)
    {
        #pragma omp single
        asked = omp_get_num_threads();
    }
    check(asked == 3, "parallel: num_threads(3)");
    /* A nested region is serialized (max active levels 1): a team of one at level 2. */
    int inner = 0, lvl2 = 0, anc = -1;
    #pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) {
            #pragma omp parallel num_threads(4)
            {
                inner = omp_get_num_threads();
                lvl2 = omp_get_level();
                anc = omp_get_ancestor_thread_num(1);
            }
        }
    }
    check(inner == 1 && lvl2 == 2 && anc == 1, "parallel: nested region serialized");
    /* threadprivate stays per thread. */
    int tp_ok = 1;
    #pragma omp parallel reduction(&&:tp_ok)
    {
        tp_value = 100 + omp_get_thread_num();
        #pragma omp barrier
        tp_ok = tp_ok && tp_value == 100 + omp_get_thread_num();
    }
    check(tp_ok, "parallel: threadprivate");
    /* if(0): one thread. */
    int one = 0;
    #pragma omp parallel if (0)
    one = omp_get_num_threads();
    check(one == 1, "parallel: if(0)");
    printf("ok parallel threads=%d sum=%ld\n", nthreads, sum);
}

static long sq(long i) { return (i * 7919) % 1009; }

static void group_loops(void)
{
    long want = 0;
    for (long i = 0; i < N; i++)
        want += sq(i);
    long s_static = 0, s_chunk = 0, s_dyn = 0, s_guided = 0, s_runtime = 0, s_auto = 0;
    #pragma omp parallel for reduction(+:s_static)
    for (long i = 0; i < N; i++) s_static += sq(i);
    #pragma omp parallel for schedule(static, 7) reduction(+:s_chunk)
    for (long i = 0; i < N; i++) s_chunk += sq(i);
    #pragma omp parallel for schedule(dynamic, 13) reduction(+:s_dyn)
    for (long i = 0; i < N; i++) s_dyn += sq(i);
    #pragma omp parallel for schedule(guided, 5) reduction(+:s_guided)
    for (long i = 0; i < N; i++) s_guided += sq(i);
    omp_set_schedule(omp_sched_dynamic, 3);
    #pragma omp parallel for schedule(runtime) reduction(+:s_runtime)
    for (long i = 0; i < N; i++) s_runtime += sq(i);
    #pragma omp parallel for schedule(auto) reduction(+:s_auto)
    for (long i = 0; i < N; i++) s_auto += sq(i);
    check(s_static == want && s_chunk == want && s_dyn == want, "loops: static/chunked/dynamic sums");
    check(s_guided == want && s_runtime == want && s_auto == want, "loops: guided/runtime/auto sums");

    /* Every iteration exactly once: count into a global array, decreasing loop with a stride. */
    memset(hits, 0, sizeof hits);
    static int seen[N];
    memset(seen, 0, sizeof seen);
    #pragma omp parallel for schedule(monotonic:dynamic, 4)
    for (int i = N - 1; i >= 0; i -= 3) seen[i]++;
    int once = 1;
    for (int i = N - 1; i >= 0; i--) once &= seen[i] == ((N - 1 - i) % 3 == 0);
    check(once, "loops: a decreasing strided loop runs each iteration once");

    /* unsigned long long iteration variable. */
    unsigned long long us = 0, uwant = 0;
    for (unsigned long long u = 10; u < 5000; u += 7) uwant += u;
    #pragma omp parallel for schedule(dynamic, 9) reduction(+:us)
    for (unsigned long long u = 10; u < 5000; u += 7) us += u;
    check(us == uwant, "loops: unsigned long long loop");

    /* ordered: iterations' ordered regions in order. */
    static int order[N];
    int pos = 0;
    #pragma omp parallel for ordered schedule(dynamic, 3)
    for (int i = 0; i < 300; i++) {
        long w = sq(i);
        (void)w;
        #pragma omp ordered
        order[pos++] = i;
    }
    int inorder = pos == 300;
    for (int i = 0; i < pos; i++) inorder &= order[i] == i;
    check(inorder, "loops: ordered (dynamic)");
    pos = 0;
    #pragma omp parallel for ordered schedule(static)
    for (int i = 0; i < 200; i++) {
        #pragma omp ordered
        order[pos++] = 2 * i;
    }
    inorder = pos == 200;
    for (int i = 0; i < pos; i++) inorder &= order[i] == 2 * i;
    check(inorder, "loops: ordered (static)");

    /* nowait loops then a barrier, in one region; a collapsed loop. */
    double a[500], b[500];
    #pragma omp parallel
    {
        #pragma omp for schedule(dynamic, 10) nowait
        for (int i = 0; i < 500; i++) a[i] = i * 0.5;
        #pragma omp for schedule(guided) nowait
        for (int i = 0; i < 500; i++) b[i] = i * 2.0;
        #pragma omp barrier
        #pragma omp for
        for (int i = 0; i < 500; i++) a[i] += b[499 - i];
    }
    int ab = 1;
    for (int i = 0; i < 500; i++) ab &= a[i] == i * 0.5 + (499 - i) * 2.0;
    check(ab, "loops: nowait loops then a barrier");
    long c2 = 0, c2want = 0;
    for (int i = 0; i < 40; i++) for (int j = 0; j < 30; j++) c2want += i * j;
    #pragma omp parallel for collapse(2) schedule(dynamic) reduction(+:c2)
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 30; j++) c2 += i * j;
    check(c2 == c2want, "loops: collapse(2)");

    /* reductions gcc lowers differently: max, product, float, long double, && . */
    long mx = -1; double prod = 1.0; float fsum = 0; long double ld = 0;
    #pragma omp parallel for reduction(max:mx) reduction(*:prod) reduction(+:fsum) reduction(+:ld)
    for (int i = 1; i <= 64; i++) {
        if (sq(i) > mx) mx = sq(i);
        prod *= (i % 2) ? 1.5 : (1.0 / 1.5);
        fsum += 0.25f;
        ld += (long double)i;
    }
    long mxwant = -1;
    for (int i = 1; i <= 64; i++) if (sq(i) > mxwant) mxwant = sq(i);
    check(mx == mxwant, "loops: reduction(max)");
    check(prod > 0.999999 && prod < 1.000001, "loops: reduction(*)");
    check(fsum == 16.0f && ld == 2080.0L, "loops: float and long double reductions");
    printf("ok loops sum=%ld ull=%llu collapse=%ld max=%ld\n", s_dyn, us, c2, mx);
}

static void group_sync(void)
{
    long counter = 0, named = 0, atom = 0, cap_max = 0;
    double fatom = 0;
    omp_lock_t lock;
    omp_nest_lock_t nest;
    omp_init_lock(&lock);
    omp_init_nest_lock(&nest);
    long locked = 0, nested = 0, tested = 0;
    int nt = 0;
    #pragma omp parallel
    {
        #pragma omp single
        nt = omp_get_num_threads();
        for (int k = 0; k < 50; k++) {
            #pragma omp critical
            counter++;
            #pragma omp critical(other)
            named += 2;
            #pragma omp atomic
            atom++;
            #pragma omp atomic update
            fatom += 0.5;
            long mine;
            #pragma omp atomic capture
            mine = hits[0]++;
            if (mine + 1 > cap_max) {
                #pragma omp critical(maxima)
                if (mine + 1 > cap_max) cap_max = mine + 1;
            }
            omp_set_lock(&lock);
            locked++;
            omp_unset_lock(&lock);
            omp_set_nest_lock(&nest);
            omp_set_nest_lock(&nest);
            nested++;
            omp_unset_nest_lock(&nest);
            omp_unset_nest_lock(&nest);
        }
        while (!omp_test_lock(&lock)) {}
        tested++;
        omp_unset_lock(&lock);
        #pragma omp flush
    }
    omp_destroy_lock(&lock);
    omp_destroy_nest_lock(&nest);
    long want = 50L * nt;
    check(counter == want && named == 2 * want, "sync: critical and named critical");
    check(atom == want && fatom == 0.5 * want, "sync: atomic update (integer and double)");
    check(hits[0] == want && cap_max == want, "sync: atomic capture gives distinct values");
    check(locked == want && nested == want && tested == nt, "sync: omp locks, nest locks, test_lock");
    /* atomic read/write with seq_cst: message passing. */
    int flag = 0; long payload = 0, got = -1;
    #pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 0) {
            payload = 4242;
            #pragma omp atomic write seq_cst
            flag = 1;
        } else {
            int f = 0;
            while (!f) {
                #pragma omp atomic read seq_cst
                f = flag;
            }
            got = payload;
        }
    }
    check(got == 4242, "sync: seq_cst atomic write/read carries the payload");
    printf("ok sync counter=%ld named=%ld atomic=%ld fatomic=%.1f locks=%ld\n", counter, named, atom, fatom, locked);
}

static void group_single(void)
{
    int singles = 0, masters = 0, secs[8] = {0};
    long bcast_sum = 0;
    int nt = 0;
    #pragma omp parallel reduction(+:bcast_sum)
    {
        for (int k = 0; k < 20; k++) {
            #pragma omp single
            singles++;
        }
        #pragma omp master
        { masters++; nt = omp_get_num_threads(); }
        int value;
        #pragma omp single copyprivate(value)
        value = 1234;
        bcast_sum += value;
        #pragma omp sections
        {
            #pragma omp section
            secs[0]++;
            #pragma omp section
            secs[1]++;
            #pragma omp section
            secs[2]++;
        }
        #pragma omp single nowait
        secs[3]++;
        #pragma omp barrier
    }
    check(singles == 20 && masters == 1, "single: once per construct; master once");
    check(bcast_sum == 1234L * nt, "single: copyprivate reaches every thread");
    check(secs[0] == 1 && secs[1] == 1 && secs[2] == 1 && secs[3] == 1, "single: sections once each");
    int psec[4] = {0};
    #pragma omp parallel sections
    {
        #pragma omp section
        psec[0] = 10;
        #pragma omp section
        psec[1] = 20;
        #pragma omp section
        psec[2] = 30;
        #pragma omp section
        psec[3] = 40;
    }
    check(psec[0] + psec[1] + psec[2] + psec[3] == 100, "single: parallel sections");
    printf("ok single singles=%d copy=%ld sections=%d\n", singles, bcast_sum / nt, psec[0] + psec[1] + psec[2] + psec[3]);
}

/* Active nested parallelism (max active levels 2): inner teams are started by threads of
 * the outer team, on whatever node those run. */
static void group_nested(void)
{
    omp_set_max_active_levels(2);
    int cell[4][4];
    memset(cell, 0, sizeof cell);
    long total = 0;
    #pragma omp parallel num_threads(2) reduction(+:total)
    {
        int outer = omp_get_thread_num();
        long inner_sum = 0;
        #pragma omp parallel num_threads(3) reduction(+:inner_sum)
        {
            int me = omp_get_thread_num();
            cell[outer][me] = 1 + omp_get_ancestor_thread_num(1) * 10 + omp_get_level() * 100 +
                              omp_get_active_level() * 1000 + omp_get_team_size(2) * 10000;
            #pragma omp for schedule(dynamic)
            for (int i = 0; i < 30; i++) inner_sum += i;
        }
        total += inner_sum;
    }
    omp_set_max_active_levels(1);
    int ok = total == 2 * 435;
    for (int o = 0; o < 2; o++)
        for (int t = 0; t < 3; t++) ok &= cell[o][t] == 1 + o * 10 + 200 + 2000 + 30000;
    check(ok, "nested: active nested teams");
    printf("ok nested total=%ld cell=%d\n", total, cell[1][2]);
}

/* A parallel region opened by a pthread (not main), twice, with the thread's own team. */
static void *pthread_opener(void *arg)
{
    long *out = arg;
    for (int r = 0; r < 2; r++) {
        long s = 0;
        #pragma omp parallel for schedule(dynamic, 7) reduction(+:s)
        for (long i = 0; i < 1000; i++) s += sq(i);
        out[r] = s;
    }
    return NULL;
}

static void group_pthread(void)
{
    long got[2] = {0, 0}, want = 0;
    for (long i = 0; i < 1000; i++) want += sq(i);
    pthread_t t;
    pthread_create(&t, NULL, pthread_opener, got);
    pthread_join(t, NULL);
    check(got[0] == want && got[1] == want, "pthread: regions opened by a pthread");
    printf("ok pthread sum=%ld\n", got[1]);
}

static long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

static long fib_task(int n)
{
    if (n < 12) return fib_seq(n);
    long x, y;
    #pragma omp task shared(x) firstprivate(n)
    x = fib_task(n - 1);
    #pragma omp task shared(y) firstprivate(n)
    y = fib_task(n - 2);
    #pragma omp taskwait
    return x + y;
}

static void group_tasks(int vla_n)
{
    long f = 0;
    #pragma omp parallel
    {
        #pragma omp single
        f = fib_task(22);
    }
    check(f == fib_seq(22), "tasks: recursive fib with taskwait");
    /* firstprivate copies (a variable-length array makes gcc emit a copy function). */
    long results[16] = {0};
    #pragma omp parallel
    {
        #pragma omp single
        {
            int vla[vla_n];
            for (int i = 0; i < vla_n; i++) vla[i] = i;
            for (int t = 0; t < 16; t++) {
                #pragma omp task firstprivate(vla, t) shared(results)
                {
                    long s = 0;
                    for (int i = 0; i < vla_n; i++) s += vla[i] * t;
                    results[t] = s;
                }
                vla[0] += 1000; /* the task's copy must not see this */
            }
            #pragma omp taskwait
        }
    }
    long base = (long)vla_n * (vla_n - 1) / 2;
    int vok = 1;
    for (int t = 0; t < 16; t++) vok &= results[t] == (base + 1000L * t) * t;
    check(vok, "tasks: firstprivate copies of a VLA taken at creation");
    /* taskgroup, depend, taskloop. */
    long a = 0, b = 0, tl = 0;
    #pragma omp parallel
    {
        #pragma omp single
        {
            #pragma omp taskgroup
            {
                #pragma omp task depend(out:a) shared(a)
                a = 5;
                #pragma omp task depend(in:a) depend(out:b) shared(a, b)
                b = a * 3;
            }
            #pragma omp taskloop grainsize(50) shared(tl)
            for (int i = 0; i < 1000; i++) {
                #pragma omp atomic
                tl += i;
            }
        }
    }
    check(a == 5 && b == 15, "tasks: taskgroup and depend");
    check(tl == 499500, "tasks: taskloop");
    int cancelled = 0;
    #pragma omp parallel reduction(+:cancelled)
    {
        #pragma omp cancellation point parallel
        cancelled += 0;
    }
    check(cancelled == 0, "tasks: cancellation point");
    /* task reductions: a taskgroup's task_reduction with in_reduction tasks, a taskloop's
     * reduction */
    long tr = 0, tlr = 0, want_tr = 0, want_tlr = 0;
    double tprod = 1.0;
    for (int i = 0; i < 200; i++) want_tr += i * 3 + 1;
    for (int i = 0; i < 1000; i++) want_tlr += (long)i * i % 7;
    #pragma omp parallel
    {
        #pragma omp single
        {
            #pragma omp taskgroup task_reduction(+:tr) task_reduction(*:tprod)
            {
                for (int i = 0; i < 200; i++) {
                    #pragma omp task in_reduction(+:tr) in_reduction(*:tprod) firstprivate(i)
                    {
                        tr += i * 3 + 1;
                        if (i % 50 == 0) tprod *= 2.0;
                    }
                }
            }
            #pragma omp taskloop reduction(+:tlr) grainsize(100)
            for (int i = 0; i < 1000; i++) tlr += (long)i * i % 7;
        }
    }
    check(tr == want_tr && tprod == 16.0 && tlr == want_tlr, "tasks: task reductions");
    printf("ok tasks fib=%ld vla=%ld taskloop=%ld\n", f, results[15], tl);
    printf("ok task reductions sum=%ld product=%g taskloop=%ld\n", tr, tprod, tlr);
}

static void group_api(void)
{
    double t0 = omp_get_wtime();
    check(omp_get_wtick() > 0 && omp_get_wtick() < 1, "api: wtick");
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    int two = 0;
    #pragma omp parallel
    {
        #pragma omp single
        two = omp_get_num_threads();
    }
    check(two == 2 && omp_get_max_threads() == 2, "api: omp_set_num_threads");
    omp_set_num_threads(saved);
    omp_sched_t kind; int chunk;
    omp_set_schedule(omp_sched_guided, 5);
    omp_get_schedule(&kind, &chunk);
    check(kind == omp_sched_guided && chunk == 5, "api: schedule ICV");
    omp_set_dynamic(1);
    check(omp_get_dynamic() == 1, "api: dynamic ICV");
    omp_set_dynamic(0);
    check(omp_get_num_procs() >= 1 && omp_get_thread_limit() >= 1, "api: procs and thread limit");
    check(omp_get_level() == 0 && omp_get_active_level() == 0 && omp_get_thread_num() == 0, "api: outside any region");
    /* Team members see the ICVs of the thread that opened the region. */
    int seen_max = 0;
    omp_set_num_threads(3);
    #pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) seen_max = omp_get_max_threads();
    }
    omp_set_num_threads(saved);
    check(seen_max == 3, "api: team inherits nthreads-var");
    check(omp_get_wtime() - t0 >= 0, "api: wtime");
    printf("ok api max=%d\n", saved);
}

int main(int argc, char **argv)
{
    const char *g = argc > 1 ? argv[1] : "all";
    int all = !strcmp(g, "all");
    if (all || !strcmp(g, "parallel")) group_parallel();
    if (all || !strcmp(g, "loops")) group_loops();
    if (all || !strcmp(g, "sync")) group_sync();
    if (all || !strcmp(g, "single")) group_single();
    if (all || !strcmp(g, "tasks")) group_tasks(argc > 2 ? atoi(argv[2]) : 40);
    if (all || !strcmp(g, "api")) group_api();
    if (all || !strcmp(g, "nested")) group_nested();
    if (all || !strcmp(g, "pthread")) group_pthread();
    return failures ? 1 : 0;
}
