/*
 * sor.C - red-black SOR in SPLASH-2 macro style (PARMACS): expanded with c.m4.squall and
 * run as a single system image. Exercises the environment, allocation, lock, lock-array,
 * barrier, pause, get-sub, create/wait, clock and pid macros (m4 expands every macro name,
 * even in comments, so they are not spelled out here).
 *
 * usage: sor -p P [-n N] [-i ITERS]     prints "sor: ok ..." when the parallel result equals
 * a sequential recomputation bit for bit.
 */
MAIN_ENV

#include <string.h>

#define NBINS 8

struct GlobalMemory {
	BARDEC(start)
	LOCKDEC(idlock)
	LOCKDEC(sumlock)
	ALOCKDEC(binlock, NBINS)
	PAUSEDEC(go)
	GSDEC(rows)
	long id;
	long pids_seen;
	long bins[NBINS];
	long rows_done;
	double sum;
	double *grid;
};

GLOBAL struct GlobalMemory *Global;
GLOBAL long P;
GLOBAL long N;
GLOBAL long Iters;

static double cell(double *g, long i, long j) { return g[i * (N + 2) + j]; }

static void relax(double *g, long i, long colour)
{
	for (long j = 1 + ((i + colour) & 1); j <= N; j += 2)
		g[i * (N + 2) + j] = 0.25 * (cell(g, i - 1, j) + cell(g, i + 1, j) + cell(g, i, j - 1) + cell(g, i, j + 1));
}

void SlaveStart(void)
{
	long MyNum, pid;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)
	GET_PID(pid)
	LOCK(Global->idlock)
	Global->pids_seen += pid;
	UNLOCK(Global->idlock)
	WAITPAUSE(Global->go)

	long first = 1 + MyNum * N / P;
	long last = (MyNum + 1) * N / P;
	for (long it = 0; it < Iters; it++) {
		for (long colour = 0; colour < 2; colour++) {
			for (long i = first; i <= last; i++) relax(Global->grid, i, colour);
			BARRIER(Global->start, P)
		}
	}
	/* dynamic row sums with GETSUB and per-bin locks */
	double local = 0;
	for (;;) {
		long r;
		GETSUB(Global->rows, r, N - 1, P)
		if (r < 0) break;
		double s = 0;
		for (long j = 1; j <= N; j++) s += cell(Global->grid, r + 1, j);
		local += s;
		ALOCK(Global->binlock, r % NBINS)
		Global->bins[r % NBINS]++;
		AULOCK(Global->binlock, r % NBINS)
	}
	LOCK(Global->sumlock)
	Global->sum += local;
	UNLOCK(Global->sumlock)
	BARRIER(Global->start, P)
}

int main(int argc, char **argv)
{
	unsigned long t0, t1;
	P = 2;
	N = 64;
	Iters = 10;
	for (int a = 1; a + 1 < argc; a += 2) {
		if (strcmp(argv[a], "-p") == 0) P = atol(argv[a + 1]);
		else if (strcmp(argv[a], "-n") == 0) N = atol(argv[a + 1]);
		else if (strcmp(argv[a], "-i") == 0) Iters = atol(argv[a + 1]);
	}
	MAIN_INITENV(, 1 << 26)
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
	memset(Global, 0, sizeof *Global);
	BARINIT(Global->start, P)
	LOCKINIT(Global->idlock)
	LOCKINIT(Global->sumlock)
	ALOCKINIT(Global->binlock, NBINS)
	PAUSEINIT(Global->go)
	GSINIT(Global->rows)
	long cells = (N + 2) * (N + 2);
	Global->grid = (double *) G_MALLOC(cells * sizeof(double))
	double *ref = (double *) G_MALLOC(cells * sizeof(double))
	for (long i = 0; i < N + 2; i++)
		for (long j = 0; j < N + 2; j++) {
			double v = (i == 0 || j == 0) ? 1.0 : (i == N + 1 ? 2.0 : 0.0);
			Global->grid[i * (N + 2) + j] = v;
			ref[i * (N + 2) + j] = v;
		}

	CLOCK(t0)
	for (long p = 1; p < P; p++) CREATE(SlaveStart)
	SETPAUSE(Global->go)
	SlaveStart();
	WAIT_FOR_END(P - 1)
	CLOCK(t1)
	CLEARPAUSE(Global->go)

	/* sequential reference: same colour order, so the result must be identical */
	for (long it = 0; it < Iters; it++)
		for (long colour = 0; colour < 2; colour++)
			for (long i = 1; i <= N; i++) relax(ref, i, colour);
	double want = 0;
	long bad = 0;
	for (long i = 1; i <= N; i++)
		for (long j = 1; j <= N; j++) {
			want += ref[i * (N + 2) + j];
			if (ref[i * (N + 2) + j] != Global->grid[i * (N + 2) + j]) bad++;
		}
	long binned = 0;
	for (int b = 0; b < NBINS; b++) binned += Global->bins[b];
	if (bad || binned != N || Global->id != P || Global->pids_seen != P * (P - 1) / 2 ||
	    (Global->sum - want) > 1e-9 || (want - Global->sum) > 1e-9) {
		printf("sor: FAILED: %ld cells differ, %ld rows binned, %ld threads, pid sum %ld, sum %.12g vs %.12g\n",
		       bad, binned, Global->id, Global->pids_seen, Global->sum, want);
		exit(1);
	}
	printf("sor: ok P=%ld N=%ld iters=%ld sum=%.6f time=%lu us\n", P, N, Iters, want, t1 - t0);
	G_FREE(ref)
	G_FREE(Global->grid)
	G_FREE(Global)
	MAIN_END
}
