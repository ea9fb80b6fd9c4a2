/*
 * jacobi.C - Jacobi relaxation of a square grid, SPLASH-2 style: two grids in shared memory,
 * a band of rows per thread, a barrier after every sweep, and a convergence test through a
 * lock-protected maximum in the global structure (every thread then reads the same value,
 * so all stop at the same sweep). Sizes come from stdin into plain globals.
 *
 * input (stdin): "N MAXITERS TOL"      usage: jacobi -p P
 * prints "jacobi: ok n=.. iters=.. sum=.." when the grid equals a sequential run bit for bit
 * and the sweep counts agree.
 */
MAIN_ENV

#include <math.h>
#include <string.h>

struct GlobalMemory {
	LOCKDEC(idlock)
	LOCKDEC(difflock)
	BARDEC(bar)
	long id;
	double diff[2];
	long iters;
	double *grid[2];
};

struct GlobalMemory *Global;
long P;
long N;
long MaxIters;
double Tol;

#define AT(g, i, j) ((g)[(i) * (N + 2) + (j)])

static double sweep(double *from, double *to, long r0, long r1)
{
	double m = 0;
	for (long i = r0; i < r1; i++) {
		for (long j = 1; j <= N; j++) {
			double v = 0.25 * (AT(from, i - 1, j) + AT(from, i + 1, j) + AT(from, i, j - 1) + AT(from, i, j + 1));
			double d = fabs(v - AT(from, i, j));
			if (d > m) m = d;
			AT(to, i, j) = v;
		}
	}
	return m;
}

static void boundary(double *g)
{
	for (long k = 0; k < N + 2; k++) {
		AT(g, 0, k) = 1.0 + (double)k / (N + 1);
		AT(g, N + 1, k) = 0.5;
		AT(g, k, 0) = 2.0 - (double)k / (N + 1);
		AT(g, k, N + 1) = 0.0;
	}
}

void SlaveStart(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)
	long r0 = 1 + MyNum * N / P;
	long r1 = 1 + (MyNum + 1) * N / P;

	long it;
	for (it = 0; it < MaxIters; it++) {
		double m = sweep(Global->grid[it & 1], Global->grid[(it + 1) & 1], r0, r1);
		LOCK(Global->difflock)
		if (m > Global->diff[it & 1])
			Global->diff[it & 1] = m;
		UNLOCK(Global->difflock)
		BARRIER(Global->bar, P)
		double d = Global->diff[it & 1];
		if (MyNum == 0)
			Global->diff[(it + 1) & 1] = 0; /* nobody touches it before the next barrier */
		BARRIER(Global->bar, P)
		if (d < Tol) {
			it++;
			break;
		}
	}
	if (MyNum == 0)
		Global->iters = it;
}

int main(int argc, char **argv)
{
	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 1 || P > MAX_THREADS) {
		fprintf(stderr, "usage: jacobi -p P < input\n");
		exit(2);
	}
	if (scanf("%ld %ld %lf", &N, &MaxIters, &Tol) != 3 || N < P || MaxIters < 1) {
		fprintf(stderr, "jacobi: input must be \"N MAXITERS TOL\" with N >= P\n");
		exit(2);
	}
	MAIN_INITENV
	size_t bytes = (size_t)(N + 2) * (N + 2) * sizeof(double);
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	Global->grid[0] = (double *) G_MALLOC(bytes);
	Global->grid[1] = (double *) G_MALLOC(bytes);
	double *seq[2] = {malloc(bytes), malloc(bytes)};
	if (!Global || !Global->grid[0] || !Global->grid[1] || !seq[0] || !seq[1]) {
		fprintf(stderr, "jacobi: out of memory\n");
		exit(1);
	}
	Global->id = 0;
	Global->diff[0] = Global->diff[1] = 0;
	LOCKINIT(Global->idlock)
	LOCKINIT(Global->difflock)
	BARINIT(Global->bar, P)
	for (int g = 0; g < 2; g++) {
		memset(Global->grid[g], 0, bytes);
		boundary(Global->grid[g]);
		memset(seq[g], 0, bytes);
		boundary(seq[g]);
	}

	SPLASH3_ROI_BEGIN();
	CREATE(SlaveStart, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();

	long it;
	for (it = 0; it < MaxIters; it++) {
		double d = sweep(seq[it & 1], seq[(it + 1) & 1], 1, N + 1);
		if (d < Tol) {
			it++;
			break;
		}
	}
	double *got = Global->grid[Global->iters & 1], *want = seq[it & 1];
	double sum = 0;
	for (long i = 0; i < (N + 2) * (N + 2); i++) {
		if (got[i] != want[i] || it != Global->iters) {
			printf("jacobi: WRONG at %ld: %.17g, expected %.17g (sweeps %ld, expected %ld)\n", i, got[i],
			       want[i], Global->iters, it);
			exit(1);
		}
		sum += want[i];
	}
	printf("jacobi: ok n=%ld iters=%ld sum=%.12f\n", N, it, sum);
	MAIN_END
}
