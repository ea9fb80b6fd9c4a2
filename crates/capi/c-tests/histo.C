/*
 * histo.C - a histogram of numbers read from stdin, SPLASH-2 style: main reads the values
 * into shared memory, each thread counts its share into private counts it allocates in
 * shared memory, then adds them into the shared bins under one lock per bin (a lock array in
 * the global structure, taken through the element accessor as well as directly). A
 * work counter handed out under a lock spreads chunks of values over the threads.
 *
 * input (stdin): "N B" then N non-negative integers      usage: histo -p P
 * prints "histo: ok n=.. bins=.. sum=.. check=.." when bins, sum and maximum equal a
 * sequential count.
 */
MAIN_ENV

#include <string.h>

#define MAX_BINS 256
#define CHUNK 1024

struct GlobalMemory {
	LOCKDEC(idlock)
	LOCKDEC(nextlock)
	ALOCKDEC(binlock, MAX_BINS)
	LOCKDEC(sumlock)
	long id;
	long next;
	long bins[MAX_BINS];
	long sum;
	long max;
	long *values;
};

struct GlobalMemory *Global;
long P;
long N;
long B;

void SlaveStart(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)

	long *mine = (long *) G_MALLOC(B * sizeof(long));
	if (mine == NULL) {
		fprintf(stderr, "histo: thread %ld: out of shared memory\n", MyNum);
		exit(1);
	}
	memset(mine, 0, B * sizeof(long));
	long sum = 0, max = 0;
	for (;;) {
		long start;
		LOCK(Global->nextlock)
		start = Global->next;
		Global->next += CHUNK;
		UNLOCK(Global->nextlock)
		if (start >= N)
			break;
		long end = start + CHUNK < N ? start + CHUNK : N;
		for (long i = start; i < end; i++) {
			long v = Global->values[i];
			mine[v % B]++;
			sum += v;
			if (v > max) max = v;
		}
	}
	for (long b = 0; b < B; b++) {
		if (mine[b] == 0)
			continue;
		if (b % 2 == 0) {
			ALOCK(Global->binlock, b)
			Global->bins[b] += mine[b];
			AULOCK(Global->binlock, b)
		} else {
			LOCK(AGETL(Global->binlock, b))
			Global->bins[b] += mine[b];
			UNLOCK(AGETL(Global->binlock, b))
		}
	}
	LOCK(Global->sumlock)
	Global->sum += sum;
	if (max > Global->max)
		Global->max = max;
	UNLOCK(Global->sumlock)
	G_FREE(mine)
}

int main(int argc, char **argv)
{
	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 1 || P > MAX_THREADS) {
		fprintf(stderr, "usage: histo -p P < input\n");
		exit(2);
	}
	if (scanf("%ld %ld", &N, &B) != 2 || N < 1 || B < 1 || B > MAX_BINS) {
		fprintf(stderr, "histo: input must start with \"N B\" (B <= %d)\n", MAX_BINS);
		exit(2);
	}
	MAIN_INITENV
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	if (Global == NULL) {
		fprintf(stderr, "histo: out of memory\n");
		exit(1);
	}
	memset(Global, 0, sizeof(struct GlobalMemory));
	Global->values = (long *) G_MALLOC(N * sizeof(long));
	if (Global->values == NULL) {
		fprintf(stderr, "histo: out of memory for %ld values\n", N);
		exit(1);
	}
	LOCKINIT(Global->idlock)
	LOCKINIT(Global->nextlock)
	LOCKINIT(Global->sumlock)
	ALOCKINIT(Global->binlock, MAX_BINS)
	long want[MAX_BINS] = {0}, want_sum = 0, want_max = 0;
	for (long i = 0; i < N; i++) {
		long v;
		if (scanf("%ld", &v) != 1 || v < 0) {
			fprintf(stderr, "histo: value %ld is missing or negative\n", i);
			exit(2);
		}
		Global->values[i] = v;
		want[v % B]++;
		want_sum += v;
		if (v > want_max) want_max = v;
	}

	SPLASH3_ROI_BEGIN();
	CREATE(SlaveStart, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();

	unsigned long check = 0;
	for (long b = 0; b < B; b++) {
		if (Global->bins[b] != want[b]) {
			printf("histo: WRONG bin %ld: %ld, expected %ld\n", b, Global->bins[b], want[b]);
			exit(1);
		}
		check = check * 1000003 + (unsigned long)want[b];
	}
	if (Global->sum != want_sum || Global->max != want_max) {
		printf("histo: WRONG sum %ld max %ld, expected %ld %ld\n", Global->sum, Global->max, want_sum, want_max);
		exit(1);
	}
	printf("histo: ok n=%ld bins=%ld sum=%ld max=%ld check=%lu\n", N, B, want_sum, want_max, check);
	MAIN_END
}
