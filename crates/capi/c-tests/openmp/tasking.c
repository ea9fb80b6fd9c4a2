/* Deferred tasks, doacross loops and reduction(task, ...) the way OpenMP users write them,
 * each checked against the same computation done sequentially. Usage: tasking GROUP, GROUP
 * one of tasks, depend, doacross, reductions (or all). Prints "ok GROUP ..." lines whose
 * values are the same under any correct OpenMP runtime (the harness compares them with
 * libgomp's). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int cond, const char *what)
{
    if (!cond) {
        printf("WRONG %s\n", what);
        failures++;
    }
}

static long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

static long fib(int n)
{
    long x, y;
    if (n < 2)
        return n;
    #pragma omp task shared(x) firstprivate(n) if(n > 8)
    x = fib(n - 1);
    #pragma omp task shared(y) firstprivate(n) final(n <= 6)
    y = fib(n - 2);
    #pragma omp taskwait
    return x + y;
}

static void quicksort(int *a, int lo, int hi)
{
    if (hi - lo < 2)
        return;
    int pivot = a[(lo + hi) / 2], i = lo, j = hi - 1;
    while (i <= j) {
        while (a[i] < pivot) i++;
        while (a[j] > pivot) j--;
        if (i <= j) {
            int t = a[i]; a[i] = a[j]; a[j] = t;
            i++; j--;
        }
    }
    #pragma omp task if(j + 1 - lo > 64)
    quicksort(a, lo, j + 1);
    #pragma omp task if(hi - i > 64)
    quicksort(a, i, hi);
    #pragma omp taskwait
}

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

#define QN 3000
int qa[QN], qb[QN];             /* plain globals */

static void group_tasks(void)
{
    long f = 0;
    #pragma omp parallel
    #pragma omp single
    f = fib(18);
    check(f == fib_seq(18), "tasks: fib with deferred tasks");

    unsigned s = 12345;
    for (int i = 0; i < QN; i++) {
        s = s * 1103515245u + 12345u;
        qa[i] = qb[i] = (int)(s >> 8) % 100000;
    }
    #pragma omp parallel
    #pragma omp single nowait
    quicksort(qa, 0, QN);
    qsort(qb, QN, sizeof(int), cmp_int);
    check(memcmp(qa, qb, sizeof qa) == 0, "tasks: quicksort");

    /* Every thread creates tasks; each task writes its own slot of a stack array and reads
     * its firstprivate copy (changed after creation); they end by the barrier. */
    long slots[64] = {0};
    int who = 0;
    #pragma omp parallel shared(slots)
    {
        int me = omp_get_thread_num();
        for (int k = 0; k < 8; k++) {
            long v = me * 100 + k;
            #pragma omp task firstprivate(v, k, me)
            slots[me * 8 + k] = v * 2 + (k == 7 ? 1 : 0);
            v = -1;
        }
        #pragma omp barrier
        #pragma omp single
        for (int i = 0; i < omp_get_num_threads() * 8; i++)
            who += slots[i] == (i / 8 * 100 + i % 8) * 2 + (i % 8 == 7);
    }
    check(who == omp_get_max_threads() * 8, "tasks: tasks of every thread end by the barrier");

    /* A taskgroup waits for descendants; a task's own children outlive it. */
    int leaves = 0;
    #pragma omp parallel
    #pragma omp single
    {
        #pragma omp taskgroup
        {
            for (int i = 0; i < 6; i++) {
                #pragma omp task
                {
                    for (int j = 0; j < 3; j++) {
                        #pragma omp task
                        {
                            #pragma omp atomic
                            leaves++;
                        }
                    }
                }
            }
        }
        check(leaves == 18, "tasks: taskgroup waits for descendants");
    }
    /* A deferred task's in_reduction, run by whichever thread takes it. */
    long red = 0, want = 0;
    for (int i = 0; i < 40; i++)
        want += i * i;
    #pragma omp parallel
    #pragma omp single
    #pragma omp taskgroup task_reduction(+:red)
    for (int i = 0; i < 40; i++) {
        #pragma omp task in_reduction(+:red) firstprivate(i)
        red += i * i;
    }
    check(red == want, "tasks: deferred in_reduction tasks");
    /* taskloops: unsigned with num_tasks, signed downwards with grainsize. */
    long tl[100] = {0}, tsum = 0, twant = 0;
    unsigned long long un = 100;
    #pragma omp parallel
    #pragma omp single
    {
        #pragma omp taskloop num_tasks(7) shared(tl)
        for (unsigned long long i = 0; i < un; i++)
            tl[i] = (long)(i * i);
        #pragma omp taskloop grainsize(9) reduction(+: tsum)
        for (long i = 99; i >= 0; i -= 3)
            tsum += tl[i] + 1;
    }
    for (long i = 99; i >= 0; i -= 3)
        twant += i * i + 1;
    check(tsum == twant, "tasks: taskloops");
    printf("ok taskloops sum=%ld\n", tsum);
    printf("ok tasks fib=%ld sorted=%d first=%d last=%d slots=%d leaves=%d red=%ld\n", f,
           memcmp(qa, qb, sizeof qa) == 0, qa[0], qa[QN - 1], who, leaves, red);
}

#define NB 8
#define BS 16
double blocks[NB][BS];

static void group_depend(void)
{
    /* A pipeline: stage s of block b (out) after stage s-1 of b (in) and, for s > 0, after
     * stage s of block b-1 (in): a producer-consumer chain ordered only by depend. */
    double want[NB][BS];
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < BS; i++)
            want[b][i] = blocks[b][i] = b + i;
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < NB; b++)
            for (int i = 0; i < BS; i++)
                want[b][i] = want[b][i] * 0.5 + (b ? want[b - 1][i] : s);
    #pragma omp parallel
    #pragma omp single
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < NB; b++) {
            if (b == 0) {
                #pragma omp task depend(inout: blocks[0]) firstprivate(s)
                for (int i = 0; i < BS; i++)
                    blocks[0][i] = blocks[0][i] * 0.5 + s;
            } else {
                #pragma omp task depend(in: blocks[b - 1]) depend(inout: blocks[b]) firstprivate(b)
                for (int i = 0; i < BS; i++)
                    blocks[b][i] = blocks[b][i] * 0.5 + blocks[b - 1][i];
            }
        }
    int same = 1;
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < BS; i++)
            same &= blocks[b][i] == want[b][i];
    check(same, "depend: pipeline of in/inout tasks");

    /* Producer, consumers (in: may run together), then mutexinoutset updates, then a reader;
     * taskwait depend waits for the last writer only. */
    long x = 0, sum = 0, got[4] = {0}, late = 0;
    #pragma omp parallel
    #pragma omp single
    {
        #pragma omp task depend(out: x) shared(x)
        x = 21;
        for (int c = 0; c < 4; c++) {
            #pragma omp task depend(in: x) shared(x, got) firstprivate(c)
            got[c] = x * (c + 1);
        }
        for (int c = 0; c < 4; c++) {
            #pragma omp task depend(mutexinoutset: x) shared(x) firstprivate(c)
            x += c;
        }
        #pragma omp task depend(in: x) depend(out: sum) shared(x, sum)
        sum = x * 2;
        #pragma omp taskwait depend(in: sum)
        late = sum;
        #pragma omp task depend(out: x) shared(x) if(0)
        x += 1000;
    }
    check(got[0] == 21 && got[3] == 84 && x == 1027 && sum == 54 && late == 54,
          "depend: producer, consumers, mutexinoutset, taskwait depend, if(0)");
    /* priority: a hint; every task still runs. */
    int ran = 0;
    #pragma omp parallel
    #pragma omp single
    for (int p = 0; p < 10; p++) {
        #pragma omp task priority(p) shared(ran)
        {
            #pragma omp atomic
            ran += p;
        }
    }
    check(ran == 45, "depend: prioritized tasks");
    printf("ok depend pipeline=%.3f x=%ld sum=%ld got=%ld,%ld,%ld,%ld ran=%d\n",
           blocks[NB - 1][BS - 1], x, sum, got[0], got[1], got[2], got[3], ran);
}

#define WN 24
#define WM 20
double wave[WN][WM], wseq[WN][WM];
unsigned long long uwave[WN][WM];
unsigned long long urows = WN, ucols = WM; /* run-time bounds: gcc picks the ull entries */

static void group_doacross(void)
{
    /* 2-D Gauss-Seidel-style sweeps: each point from its already-updated north and west
     * neighbours; ordered(2) with depend(sink:)/depend(source) gives the wavefront. */
    for (int i = 0; i < WN; i++)
        for (int j = 0; j < WM; j++)
            wave[i][j] = wseq[i][j] = (i * 7 + j * 3) % 11;
    for (int i = 1; i < WN; i++)
        for (int j = 1; j < WM; j++)
            wseq[i][j] = (wseq[i - 1][j] + wseq[i][j - 1] + wseq[i][j]) / 3.0;
    #pragma omp parallel for ordered(2) schedule(static, 1)
    for (int i = 1; i < WN; i++)
        for (int j = 1; j < WM; j++) {
            #pragma omp ordered depend(sink: i - 1, j) depend(sink: i, j - 1)
            wave[i][j] = (wave[i - 1][j] + wave[i][j - 1] + wave[i][j]) / 3.0;
            #pragma omp ordered depend(source)
        }
    int same = !memcmp(wave, wseq, sizeof wave);
    check(same, "doacross: static wavefront");
    /* The same sweep again, dynamic then guided, onto the result (sequential twin alike). */
    for (int i = 1; i < WN; i++)
        for (int j = 1; j < WM; j++)
            wseq[i][j] = (wseq[i - 1][j] + wseq[i][j - 1] + wseq[i][j]) / 3.0;
    #pragma omp parallel
    {
        #pragma omp for ordered(2) schedule(dynamic, 2)
        for (int i = 1; i < WN; i++)
            for (int j = 1; j < WM; j++) {
                #pragma omp ordered depend(sink: i - 1, j) depend(sink: i, j - 1)
                wave[i][j] = (wave[i - 1][j] + wave[i][j - 1] + wave[i][j]) / 3.0;
                #pragma omp ordered depend(source)
            }
    }
    for (int i = 1; i < WN; i++)
        for (int j = 1; j < WM; j++)
            wseq[i][j] = (wseq[i - 1][j] + wseq[i][j - 1] + wseq[i][j]) / 3.0;
    #pragma omp parallel for ordered(1) schedule(guided)
    for (int i = 1; i < WN; i++) {
        #pragma omp ordered depend(sink: i - 1)
        for (int j = 1; j < WM; j++)
            wave[i][j] = (wave[i - 1][j] + wave[i][j - 1] + wave[i][j]) / 3.0;
        #pragma omp ordered depend(source)
    }
    same &= !memcmp(wave, wseq, sizeof wave);
    check(same, "doacross: dynamic and guided wavefronts");
    /* Unsigned loop variables (the ull entry points), runtime schedule. */
    unsigned long long usum = 0, uwant = 0;
    for (unsigned long long i = 0; i < WN; i++)
        for (unsigned long long j = 0; j < WM; j++)
            uwave[i][j] = i * 3 + j;
    unsigned long long useq[WN][WM];
    memcpy(useq, uwave, sizeof useq);
    for (unsigned long long i = 1; i < WN; i++)
        for (unsigned long long j = 1; j < WM; j++)
            useq[i][j] = (useq[i - 1][j] + useq[i][j - 1] + i * j) % 1000003;
    uwant = 0;
    for (int i = 0; i < WN; i++)
        for (int j = 0; j < WM; j++)
            uwant += useq[i][j];
    #pragma omp parallel for ordered(2) schedule(runtime)
    for (unsigned long long i = 1; i < urows; i++)
        for (unsigned long long j = 1; j < ucols; j++) {
            #pragma omp ordered depend(sink: i - 1, j) depend(sink: i, j - 1)
            uwave[i][j] = (uwave[i - 1][j] + uwave[i][j - 1] + i * j) % 1000003;
            #pragma omp ordered depend(source)
        }
    for (int i = 0; i < WN; i++)
        for (int j = 0; j < WM; j++)
            usum += uwave[i][j];
    check(usum == uwant, "doacross: unsigned wavefront");
    printf("ok doacross corner=%.6f same=%d usum=%llu\n", wave[WN - 1][WM - 1], same, usum);
}

static void group_reductions(void)
{
    /* reduction(task, ...) on parallel, for and sections: the construct's threads and the
     * in_reduction tasks they create (run by any thread) all add into one variable. */
    long s = 0, t = 0, u = 0;
    int nth = 0;
    #pragma omp parallel reduction(task, +: s)
    {
        #pragma omp single
        {
            nth = omp_get_num_threads();
            for (int i = 0; i < 30; i++) {
                #pragma omp task in_reduction(+: s) firstprivate(i)
                s += i;
            }
        }
        s += 1000;
    }
    check(s == 435 + 1000L * nth, "reductions: parallel reduction(task)");
    double d = 1;
    #pragma omp parallel
    {
        #pragma omp for reduction(task, +: t) reduction(task, *: d) schedule(dynamic, 3)
        for (int i = 0; i < 40; i++) {
            #pragma omp task in_reduction(+: t) in_reduction(*: d) firstprivate(i)
            {
                t += (long)i * i;
                if (i % 10 == 0)
                    d *= 2;
            }
            t += 1;
        }
        #pragma omp sections reduction(task, +: u)
        {
            #pragma omp section
            {
                #pragma omp task in_reduction(+: u)
                u += 5;
            }
            #pragma omp section
            {
                #pragma omp task in_reduction(+: u)
                u += 7;
                u += 100;
            }
        }
    }
    long want = 40;
    for (int i = 0; i < 40; i++)
        want += (long)i * i;
    check(t == want && d == 16.0, "reductions: for reduction(task)");
    check(u == 112, "reductions: sections reduction(task)");
    printf("ok reductions s=%ld t=%ld d=%g u=%ld\n", s, t, d, u);
}

int main(int argc, char **argv)
{
    const char *g = argc > 1 ? argv[1] : "all";
    int all = !strcmp(g, "all");
    if (all || !strcmp(g, "tasks")) group_tasks();
    if (all || !strcmp(g, "depend")) group_depend();
    if (all || !strcmp(g, "doacross")) group_doacross();
    if (all || !strcmp(g, "reductions")) group_reductions();
    if (failures) {
        printf("%d checks failed\n", failures);
        return 1;
    }
    return 0;
}
