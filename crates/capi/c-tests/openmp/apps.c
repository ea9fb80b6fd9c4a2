/* Eight OpenMP programs of the kinds users run, written as OpenMP users write them (plain
 * globals, stack variables, `#pragma omp parallel for reduction(...)`), each checked against
 * the same computation done sequentially in this program. Usage: apps NAME [scale], NAME one
 * of stencil, reduce, irregular, histo, tasksort, spmv, matmul, nbody. Prints "ok NAME ..."
 * (the same line under any correct OpenMP runtime) or "WRONG ..." and exits 1. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int scale = 1;
static int wrong;

static void verdict(int ok, const char *name)
{
    if (!ok) {
        printf("WRONG %s\n", name);
        wrong = 1;
    }
}

/* ----- 2-D Jacobi stencil ----- */
#define SN 192
double grid_a[SN][SN], grid_b[SN][SN], seq_a[SN][SN], seq_b[SN][SN];

static void stencil_init(double g[SN][SN])
{
    for (int i = 0; i < SN; i++)
        for (int j = 0; j < SN; j++)
            g[i][j] = (i == 0 || j == 0) ? 100.0 : (double)((i * 31 + j * 17) % 13);
}

static void stencil(void)
{
    int iters = 20 * scale;
    stencil_init(grid_a);
    memcpy(grid_b, grid_a, sizeof grid_a);
    stencil_init(seq_a);
    memcpy(seq_b, seq_a, sizeof seq_a);
    double t0 = omp_get_wtime();
    for (int it = 0; it < iters; it++) {
        #pragma omp parallel for
        for (int i = 1; i < SN - 1; i++)
            for (int j = 1; j < SN - 1; j++)
                grid_b[i][j] = 0.25 * (grid_a[i - 1][j] + grid_a[i + 1][j] + grid_a[i][j - 1] + grid_a[i][j + 1]);
        #pragma omp parallel for
        for (int i = 1; i < SN - 1; i++)
            for (int j = 1; j < SN - 1; j++)
                grid_a[i][j] = grid_b[i][j];
    }
    double t = omp_get_wtime() - t0;
    for (int it = 0; it < iters; it++) {
        for (int i = 1; i < SN - 1; i++)
            for (int j = 1; j < SN - 1; j++)
                seq_b[i][j] = 0.25 * (seq_a[i - 1][j] + seq_a[i + 1][j] + seq_a[i][j - 1] + seq_a[i][j + 1]);
        memcpy(seq_a, seq_b, sizeof seq_a);
        for (int i = 0; i < SN; i++) seq_a[i][0] = seq_b[i][0] = 100.0, seq_a[0][i] = seq_b[0][i] = 100.0;
    }
    double sum = 0;
    int same = 1;
    for (int i = 1; i < SN - 1; i++)
        for (int j = 1; j < SN - 1; j++) {
            sum += grid_a[i][j];
            same &= grid_a[i][j] == seq_a[i][j];
        }
    verdict(same, "stencil");
    printf("ok stencil %dx%d iters=%d checksum=%.6f\n", SN, SN, iters, sum);
    fprintf(stderr, "time stencil %.4f s\n", t);
}

/* ----- reduction-heavy kernel: dot product, norms, min/max ----- */
static void reduce(void)
{
    long n = 200000L * scale;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (long i = 0; i < n; i++) {
        x[i] = sin(0.001 * i);
        y[i] = cos(0.0007 * i);
    }
    double dot = 0, nx = 0, mx = -1e300, mn = 1e300;
    long positive = 0;
    double t0 = omp_get_wtime();
    #pragma omp parallel for reduction(+:dot, nx, positive) reduction(max:mx) reduction(min:mn)
    for (long i = 0; i < n; i++) {
        dot += x[i] * y[i];
        nx += x[i] * x[i];
        if (x[i] > mx) mx = x[i];
        if (y[i] < mn) mn = y[i];
        positive += x[i] * y[i] > 0;
    }
    double t = omp_get_wtime() - t0;
    double sdot = 0, snx = 0, smx = -1e300, smn = 1e300;
    long spos = 0;
    for (long i = 0; i < n; i++) {
        sdot += x[i] * y[i];
        snx += x[i] * x[i];
        if (x[i] > smx) smx = x[i];
        if (y[i] < smn) smn = y[i];
        spos += x[i] * y[i] > 0;
    }
    verdict(fabs(dot - sdot) <= 1e-9 * fabs(sdot) + 1e-9 && fabs(nx - snx) <= 1e-9 * snx, "reduce sums");
    verdict(mx == smx && mn == smn && positive == spos, "reduce min/max/count");
    printf("ok reduce n=%ld dot=%.6e norm=%.6e max=%.6f min=%.6f positive=%ld\n", n, sdot, sqrt(snx), smx, smn, spos);
    fprintf(stderr, "time reduce %.4f s\n", t);
    free(x);
    free(y);
}

/* ----- dynamic loop over irregular work (Collatz chain lengths) ----- */
static long collatz(long v)
{
    long steps = 0;
    while (v != 1) {
        v = (v & 1) ? 3 * v + 1 : v / 2;
        steps++;
    }
    return steps;
}

static void irregular(void)
{
    long n = 60000L * scale;
    long total = 0, longest = 0;
    double t0 = omp_get_wtime();
    #pragma omp parallel for schedule(dynamic, 256) reduction(+:total) reduction(max:longest)
    for (long i = 1; i <= n; i++) {
        long s = collatz(i);
        total += s;
        if (s > longest) longest = s;
    }
    double t = omp_get_wtime() - t0;
    long stotal = 0, slongest = 0;
    for (long i = 1; i <= n; i++) {
        long s = collatz(i);
        stotal += s;
        if (s > slongest) slongest = s;
    }
    verdict(total == stotal && longest == slongest, "irregular");
    printf("ok irregular n=%ld steps=%ld longest=%ld\n", n, stotal, slongest);
    fprintf(stderr, "time irregular %.4f s\n", t);
}

/* ----- histogram: private counts merged in a critical section ----- */
#define BINS 64
long histogram[BINS];

static void histo(void)
{
    long n = 300000L * scale;
    unsigned *data = malloc(n * sizeof *data);
    unsigned s = 12345;
    for (long i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        data[i] = (s >> 8) % 1000;
    }
    memset(histogram, 0, sizeof histogram);
    double t0 = omp_get_wtime();
    #pragma omp parallel
    {
        long mine[BINS] = {0};
        #pragma omp for
        for (long i = 0; i < n; i++)
            mine[data[i] * BINS / 1000]++;
        #pragma omp critical
        for (int b = 0; b < BINS; b++)
            histogram[b] += mine[b];
    }
    double t = omp_get_wtime() - t0;
    long seq[BINS] = {0};
    for (long i = 0; i < n; i++) seq[data[i] * BINS / 1000]++;
    int same = 1;
    long weighted = 0;
    for (int b = 0; b < BINS; b++) {
        same &= seq[b] == histogram[b];
        weighted += seq[b] * (b + 1);
    }
    verdict(same, "histo");
    printf("ok histo n=%ld bins=%d weighted=%ld first=%ld last=%ld\n", n, BINS, weighted, seq[0], seq[BINS - 1]);
    fprintf(stderr, "time histo %.4f s\n", t);
    free(data);
}

/* ----- task-parallel recursion: merge sort with tasks ----- */
static void merge(int *a, int *tmp, long lo, long mid, long hi)
{
    long i = lo, j = mid, k = lo;
    while (i < mid && j < hi) tmp[k++] = a[i] <= a[j] ? a[i++] : a[j++];
    while (i < mid) tmp[k++] = a[i++];
    while (j < hi) tmp[k++] = a[j++];
    memcpy(a + lo, tmp + lo, (hi - lo) * sizeof *a);
}

static void msort(int *a, int *tmp, long lo, long hi)
{
    if (hi - lo < 2) return;
    long mid = lo + (hi - lo) / 2;
    if (hi - lo > 2048) {
        #pragma omp task
        msort(a, tmp, lo, mid);
        #pragma omp task
        msort(a, tmp, mid, hi);
        #pragma omp taskwait
    } else {
        msort(a, tmp, lo, mid);
        msort(a, tmp, mid, hi);
    }
    merge(a, tmp, lo, mid, hi);
}

static void tasksort(void)
{
    long n = 100000L * scale;
    int *a = malloc(n * sizeof *a), *tmp = malloc(n * sizeof *a);
    unsigned s = 777;
    long sum = 0;
    for (long i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (int)(s >> 4);
        sum += a[i];
    }
    double t0 = omp_get_wtime();
    #pragma omp parallel
    {
        #pragma omp single
        msort(a, tmp, 0, n);
    }
    double t = omp_get_wtime() - t0;
    int sorted = 1;
    long after = 0;
    for (long i = 0; i < n; i++) {
        after += a[i];
        if (i) sorted &= a[i - 1] <= a[i];
    }
    verdict(sorted && after == sum, "tasksort");
    printf("ok tasksort n=%ld sum=%ld min=%d max=%d\n", n, sum, a[0], a[n - 1]);
    fprintf(stderr, "time tasksort %.4f s\n", t);
    free(a);
    free(tmp);
}

/* ----- sparse matrix-vector product (CSR) ----- */
static void spmv(void)
{
    int rows = 20000 * scale, per = 9, reps = 10;
    long nnz = (long)rows * per;
    int *rowptr = malloc((rows + 1) * sizeof *rowptr), *col = malloc(nnz * sizeof *col);
    double *val = malloc(nnz * sizeof *val), *x = malloc(rows * sizeof *x);
    double *y = malloc(rows * sizeof *y), *ys = malloc(rows * sizeof *ys);
    unsigned s = 99;
    for (int r = 0; r < rows; r++) {
        rowptr[r] = r * per;
        for (int k = 0; k < per; k++) {
            s = s * 1103515245u + 12345u;
            int c = r + (int)((s >> 10) % 201) - 100;
            col[r * per + k] = c < 0 ? -c : (c >= rows ? 2 * rows - c - 1 : c);
            val[r * per + k] = 1.0 / (1 + k + (s >> 20) % 7);
        }
        x[r] = 1.0 + (r % 10) * 0.1;
    }
    rowptr[rows] = rows * per;
    double t0 = omp_get_wtime();
    for (int rep = 0; rep < reps; rep++) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int k = rowptr[r]; k < rowptr[r + 1]; k++) acc += val[k] * x[col[k]];
            y[r] = acc;
        }
    }
    double t = omp_get_wtime() - t0;
    double sum = 0;
    int same = 1;
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int k = rowptr[r]; k < rowptr[r + 1]; k++) acc += val[k] * x[col[k]];
        ys[r] = acc;
        same &= ys[r] == y[r];
        sum += acc;
    }
    verdict(same, "spmv");
    printf("ok spmv rows=%d nnz=%ld checksum=%.6f\n", rows, nnz, sum);
    fprintf(stderr, "time spmv %.4f s\n", t);
    free(rowptr); free(col); free(val); free(x); free(y); free(ys);
}

/* ----- blocked matrix multiply ----- */
#define MN 160
#define MB 32
double ma[MN][MN], mb[MN][MN], mc[MN][MN];

static void matmul(void)
{
    for (int i = 0; i < MN; i++)
        for (int j = 0; j < MN; j++) {
            ma[i][j] = (double)((i + 2 * j) % 7) - 3;
            mb[i][j] = (double)((3 * i + j) % 5) - 2;
            mc[i][j] = 0;
        }
    double t0 = omp_get_wtime();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int bi = 0; bi < MN; bi += MB)
        for (int bj = 0; bj < MN; bj += MB)
            for (int bk = 0; bk < MN; bk += MB)
                for (int i = bi; i < bi + MB; i++)
                    for (int k = bk; k < bk + MB; k++) {
                        double aik = ma[i][k];
                        for (int j = bj; j < bj + MB; j++) mc[i][j] += aik * mb[k][j];
                    }
    double t = omp_get_wtime() - t0;
    int same = 1;
    double trace = 0, sum = 0;
    for (int i = 0; i < MN; i++)
        for (int j = 0; j < MN; j++) {
            double acc = 0;
            for (int k = 0; k < MN; k++) acc += ma[i][k] * mb[k][j];
            same &= acc == mc[i][j];
            sum += acc;
            if (i == j) trace += acc;
        }
    verdict(same, "matmul");
    printf("ok matmul n=%d block=%d trace=%.1f sum=%.1f\n", MN, MB, trace, sum);
    fprintf(stderr, "time matmul %.4f s\n", t);
}

/* ----- N-body step ----- */
#define NB 384
typedef struct { double x, y, z, vx, vy, vz, m; } body;
body bodies[NB], seqb[NB];

static void forces(body *b, double ax[], double ay[], double az[], int parallel)
{
    #pragma omp parallel for schedule(dynamic, 8) if (parallel)
    for (int i = 0; i < NB; i++) {
        double fx = 0, fy = 0, fz = 0;
        for (int j = 0; j < NB; j++) {
            if (j == i) continue;
            double dx = b[j].x - b[i].x, dy = b[j].y - b[i].y, dz = b[j].z - b[i].z;
            double d2 = dx * dx + dy * dy + dz * dz + 1e-3;
            double inv = b[j].m / (d2 * sqrt(d2));
            fx += dx * inv;
            fy += dy * inv;
            fz += dz * inv;
        }
        ax[i] = fx;
        ay[i] = fy;
        az[i] = fz;
    }
}

static void advance(body *b, const double ax[], const double ay[], const double az[], double dt, int parallel)
{
    #pragma omp parallel for if (parallel)
    for (int i = 0; i < NB; i++) {
        b[i].vx += dt * ax[i];
        b[i].vy += dt * ay[i];
        b[i].vz += dt * az[i];
        b[i].x += dt * b[i].vx;
        b[i].y += dt * b[i].vy;
        b[i].z += dt * b[i].vz;
    }
}

static void nbody(void)
{
    int steps = 3 * scale;
    for (int i = 0; i < NB; i++) {
        body v = {cos(i * 0.37) * (1 + i % 11), sin(i * 0.53) * (1 + i % 7), (i % 13) - 6.0, 0, 0, 0, 1.0 + (i % 3)};
        bodies[i] = seqb[i] = v;
    }
    double ax[NB], ay[NB], az[NB];
    double t0 = omp_get_wtime();
    for (int s = 0; s < steps; s++) {
        forces(bodies, ax, ay, az, 1);
        advance(bodies, ax, ay, az, 0.01, 1);
    }
    double t = omp_get_wtime() - t0;
    for (int s = 0; s < steps; s++) {
        forces(seqb, ax, ay, az, 0);
        advance(seqb, ax, ay, az, 0.01, 0);
    }
    int same = 1;
    double e = 0;
    for (int i = 0; i < NB; i++) {
        same &= bodies[i].x == seqb[i].x && bodies[i].vy == seqb[i].vy && bodies[i].z == seqb[i].z;
        e += 0.5 * seqb[i].m * (seqb[i].vx * seqb[i].vx + seqb[i].vy * seqb[i].vy + seqb[i].vz * seqb[i].vz);
    }
    verdict(same, "nbody");
    printf("ok nbody bodies=%d steps=%d kinetic=%.6e\n", NB, steps, e);
    fprintf(stderr, "time nbody %.4f s\n", t);
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "all";
    if (argc > 2) scale = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
    int all = !strcmp(name, "all");
    if (all || !strcmp(name, "stencil")) stencil();
    if (all || !strcmp(name, "reduce")) reduce();
    if (all || !strcmp(name, "irregular")) irregular();
    if (all || !strcmp(name, "histo")) histo();
    if (all || !strcmp(name, "tasksort")) tasksort();
    if (all || !strcmp(name, "spmv")) spmv();
    if (all || !strcmp(name, "matmul")) matmul();
    if (all || !strcmp(name, "nbody")) nbody();
    return wrong;
}
