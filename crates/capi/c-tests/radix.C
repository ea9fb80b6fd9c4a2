/*
 * radix.C - radix sort of 32-bit keys with a parallel prefix sum, written the way SPLASH-2
 * programs are: the global structure pointer and the sizes are plain globals set by main,
 * the input comes from stdin, P threads start with the two-argument create macro, each
 * thread allocates its own bucket counts in shared memory, and the phases are separated by
 * barriers. Region-of-interest marks bound the sort.
 *
 * input (stdin): "N SEED"          usage: radix -p P
 * prints "radix: ok n=N sum=..." when the result equals a sequential sort (qsort) of the
 * same keys, element by element.
 */
MAIN_ENV

#include <string.h>

#define DIGIT_BITS 8
#define BUCKETS (1 << DIGIT_BITS)
#define PASSES (32 / DIGIT_BITS)
#define MAX_P 64

struct GlobalMemory {
	LOCKDEC(idlock)
	BARDEC(bar)
	long id;
	unsigned *keys[2];
	long *counts[MAX_P];
	long total[BUCKETS];
	long offsets[MAX_P][BUCKETS];
};

struct GlobalMemory *Global;
long P;
long N;

void SlaveStart(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)

	long *mine = (long *) G_MALLOC(BUCKETS * sizeof(long));
	if (mine == NULL) {
		fprintf(stderr, "radix: thread %ld: out of shared memory\n", MyNum);
		exit(1);
	}
	Global->counts[MyNum] = mine;
	long first = MyNum * N / P;
	long last = (MyNum + 1) * N / P;
	long b0 = MyNum * BUCKETS / P;
	long b1 = (MyNum + 1) * BUCKETS / P;

	for (int pass = 0; pass < PASSES; pass++) {
		unsigned *from = Global->keys[pass & 1];
		unsigned *to = Global->keys[(pass + 1) & 1];
		int sh = pass * DIGIT_BITS;
		memset(mine, 0, BUCKETS * sizeof(long));
		for (long i = first; i < last; i++)
			mine[(from[i] >> sh) & (BUCKETS - 1)]++;
		BARRIER(Global->bar, P)
		/* column sums of this thread's slice of buckets */
		for (long b = b0; b < b1; b++) {
			long t = 0;
			for (long p = 0; p < P; p++)
				t += Global->counts[p][b];
			Global->total[b] = t;
		}
		BARRIER(Global->bar, P)
		/* prefix: where thread p's keys of bucket b go */
		long run = 0;
		for (long b = 0; b < b0; b++)
			run += Global->total[b];
		for (long b = b0; b < b1; b++) {
			for (long p = 0; p < P; p++) {
				Global->offsets[p][b] = run;
				run += Global->counts[p][b];
			}
		}
		BARRIER(Global->bar, P)
		long *at = Global->offsets[MyNum];
		for (long i = first; i < last; i++)
			to[at[(from[i] >> sh) & (BUCKETS - 1)]++] = from[i];
		BARRIER(Global->bar, P)
	}
}

static int cmp(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	unsigned long seed;

	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 1 || P > MAX_P) {
		fprintf(stderr, "usage: radix -p P (1..%d) < input\n", MAX_P);
		exit(2);
	}
	if (scanf("%ld %lu", &N, &seed) != 2 || N < 1) {
		fprintf(stderr, "radix: input must be \"N SEED\"\n");
		exit(2);
	}
	MAIN_INITENV
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	Global->keys[0] = (unsigned *) G_MALLOC(N * sizeof(unsigned));
	Global->keys[1] = (unsigned *) G_MALLOC(N * sizeof(unsigned));
	unsigned *expect = (unsigned *) malloc(N * sizeof(unsigned));
	if (Global == NULL || Global->keys[0] == NULL || Global->keys[1] == NULL || expect == NULL) {
		fprintf(stderr, "radix: out of memory\n");
		exit(1);
	}
	Global->id = 0;
	LOCKINIT(Global->idlock)
	BARINIT(Global->bar, P)
	unsigned long x = seed;
	for (long i = 0; i < N; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		Global->keys[0][i] = expect[i] = (unsigned)(x >> 32);
	}

	SPLASH3_ROI_BEGIN();
	CREATE(SlaveStart, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();

	qsort(expect, N, sizeof(unsigned), cmp);
	unsigned long sum = 0;
	for (long i = 0; i < N; i++) {
		if (Global->keys[0][i] != expect[i]) {
			printf("radix: WRONG at %ld: %u, expected %u\n", i, Global->keys[0][i], expect[i]);
			exit(1);
		}
		sum = sum * 31 + Global->keys[0][i];
	}
	printf("radix: ok n=%ld sum=%lu\n", N, sum);
	MAIN_END
}
