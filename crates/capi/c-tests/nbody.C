/*
 * nbody.C - time steps of a softened n-body system, SPLASH-2 style: bodies in shared memory
 * with one lock per body (a lock array in the global structure). Each thread computes the
 * forces of its share of the pairs into force sums it allocates in shared memory, then adds
 * them into the bodies under each body's lock; a barrier separates the force phase from the
 * move phase. Forces are added as fixed-point integers, so the result does not depend on the
 * order the threads add in and equals a sequential run bit for bit.
 *
 * input (stdin): "N STEPS SEED"      usage: nbody -p P
 * prints "nbody: ok n=.. steps=.. check=.." when every position equals the sequential run.
 */
MAIN_ENV

#include <math.h>
#include <string.h>

#define MAX_BODIES 1024
#define SCALE 1e12
#define DT 1e-3

struct body {
	double x[3], v[3], m;
	long f[3];
};

struct GlobalMemory {
	LOCKDEC(idlock)
	ALOCKDEC(bodylock, MAX_BODIES)
	BARDEC(bar)
	long id;
	struct body *bodies;
};

struct GlobalMemory *Global;
long P;
long N;
long Steps;

/* The force on a from b, as fixed-point integers (the same expression in both runs). */
static void pair_force(const struct body *a, const struct body *b, long out[3])
{
	double d[3], r2 = 1e-2;
	for (int k = 0; k < 3; k++) {
		d[k] = b->x[k] - a->x[k];
		r2 += d[k] * d[k];
	}
	double s = a->m * b->m / (r2 * sqrt(r2));
	for (int k = 0; k < 3; k++)
		out[k] = llround(s * d[k] * SCALE);
}

static void move(struct body *b)
{
	for (int k = 0; k < 3; k++) {
		b->v[k] += (double)b->f[k] / SCALE / b->m * DT;
		b->x[k] += b->v[k] * DT;
		b->f[k] = 0;
	}
}

void SlaveStart(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)

	long (*acc)[3] = (long (*)[3]) G_MALLOC(N * sizeof(long[3]));
	if (acc == NULL) {
		fprintf(stderr, "nbody: thread %ld: out of shared memory\n", MyNum);
		exit(1);
	}
	struct body *bs = Global->bodies;
	for (long step = 0; step < Steps; step++) {
		memset(acc, 0, N * sizeof(long[3]));
		for (long i = MyNum; i < N; i += P) {
			for (long j = i + 1; j < N; j++) {
				long f[3];
				pair_force(&bs[i], &bs[j], f);
				for (int k = 0; k < 3; k++) {
					acc[i][k] += f[k];
					acc[j][k] -= f[k];
				}
			}
		}
		for (long i = 0; i < N; i++) {
			if (acc[i][0] == 0 && acc[i][1] == 0 && acc[i][2] == 0)
				continue;
			ALOCK(Global->bodylock, i)
			for (int k = 0; k < 3; k++)
				bs[i].f[k] += acc[i][k];
			AULOCK(Global->bodylock, i)
		}
		BARRIER(Global->bar, P)
		for (long i = MyNum * N / P; i < (MyNum + 1) * N / P; i++)
			move(&bs[i]);
		BARRIER(Global->bar, P)
	}
	G_FREE(acc)
}

int main(int argc, char **argv)
{
	unsigned long seed;

	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 1 || P > MAX_THREADS) {
		fprintf(stderr, "usage: nbody -p P < input\n");
		exit(2);
	}
	if (scanf("%ld %ld %lu", &N, &Steps, &seed) != 3 || N < 2 || N > MAX_BODIES || Steps < 1) {
		fprintf(stderr, "nbody: input must be \"N STEPS SEED\" with 2 <= N <= %d\n", MAX_BODIES);
		exit(2);
	}
	MAIN_INITENV
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	if (Global == NULL) {
		fprintf(stderr, "nbody: out of memory\n");
		exit(1);
	}
	Global->id = 0;
	Global->bodies = (struct body *) G_MALLOC(N * sizeof(struct body));
	struct body *seq = (struct body *) malloc(N * sizeof(struct body));
	if (Global->bodies == NULL || seq == NULL) {
		fprintf(stderr, "nbody: out of memory for %ld bodies\n", N);
		exit(1);
	}
	LOCKINIT(Global->idlock)
	ALOCKINIT(Global->bodylock, MAX_BODIES)
	BARINIT(Global->bar, P)
	unsigned long x = seed;
	for (long i = 0; i < N; i++) {
		for (int k = 0; k < 3; k++) {
			x = x * 6364136223846793005UL + 1442695040888963407UL;
			seq[i].x[k] = (double)(x >> 11) / 9007199254740992.0;
			seq[i].v[k] = 0;
			seq[i].f[k] = 0;
		}
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		seq[i].m = 0.5 + (double)(x >> 11) / 9007199254740992.0;
		Global->bodies[i] = seq[i];
	}

	SPLASH3_ROI_BEGIN();
	CREATE(SlaveStart, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();

	for (long step = 0; step < Steps; step++) {
		for (long i = 0; i < N; i++) {
			for (long j = i + 1; j < N; j++) {
				long f[3];
				pair_force(&seq[i], &seq[j], f);
				for (int k = 0; k < 3; k++) {
					seq[i].f[k] += f[k];
					seq[j].f[k] -= f[k];
				}
			}
		}
		for (long i = 0; i < N; i++)
			move(&seq[i]);
	}
	double check = 0;
	for (long i = 0; i < N; i++) {
		for (int k = 0; k < 3; k++) {
			if (Global->bodies[i].x[k] != seq[i].x[k]) {
				printf("nbody: WRONG body %ld x[%d] = %.17g, expected %.17g\n", i, k, Global->bodies[i].x[k],
				       seq[i].x[k]);
				exit(1);
			}
			check += seq[i].x[k] * (double)(i + 1);
		}
	}
	printf("nbody: ok n=%ld steps=%ld check=%.15f\n", N, Steps, check);
	MAIN_END
}
