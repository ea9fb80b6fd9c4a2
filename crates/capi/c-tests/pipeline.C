/*
 * pipeline.C - a producer/consumer pipeline, SPLASH-2 style: P threads are P stages; item i
 * passes stage s when stage s-1 has set item i's pause flag (flags declared in the global
 * structure, one per stage and item). The first stage produces items from the seed read from
 * stdin, the middle stages transform them in place, the last stage folds them into a
 * checksum under a lock and publishes it behind a release fence.
 *
 * input (stdin): "M SEED"      usage: pipeline -p P   (P >= 2)
 * prints "pipeline: ok items=.. stages=.. check=.." when the checksum equals a sequential run.
 */
MAIN_ENV

#include <string.h>

#define MAX_ITEMS 512
#define MAX_STAGES 8

struct GlobalMemory {
	LOCKDEC(idlock)
	LOCKDEC(sumlock)
	PAUSEDEC(ready[MAX_STAGES][MAX_ITEMS])
	long id;
	unsigned long items[MAX_ITEMS];
	unsigned long check;
	long folded;
};

struct GlobalMemory *Global;
long P;
long M;
unsigned long Seed;

static unsigned long stage_fn(long s, unsigned long v)
{
	for (int r = 0; r < 1000; r++)
		v = (v ^ (v >> 29)) * 0xbf58476d1ce4e5b9UL + (unsigned long)s;
	return v;
}

void Stage(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)

	for (long i = 0; i < M; i++) {
		if (MyNum == 0) {
			Global->items[i] = stage_fn(0, Seed + (unsigned long)i);
		} else {
			WAITPAUSE(Global->ready[MyNum - 1][i])
			Global->items[i] = stage_fn(MyNum, Global->items[i]);
		}
		if (MyNum == P - 1) {
			LOCK(Global->sumlock)
			Global->check = Global->check * 31 + Global->items[i];
			Global->folded++;
			UNLOCK(Global->sumlock)
		} else {
			SETPAUSE(Global->ready[MyNum][i])
		}
	}
	if (MyNum == P - 1)
		RELEASE_FENCE();
}

int main(int argc, char **argv)
{
	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 2 || P > MAX_STAGES) {
		fprintf(stderr, "usage: pipeline -p P (2..%d) < input\n", MAX_STAGES);
		exit(2);
	}
	if (scanf("%ld %lu", &M, &Seed) != 2 || M < 1 || M > MAX_ITEMS) {
		fprintf(stderr, "pipeline: input must be \"M SEED\" with M <= %d\n", MAX_ITEMS);
		exit(2);
	}
	MAIN_INITENV
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	if (Global == NULL) {
		fprintf(stderr, "pipeline: out of memory\n");
		exit(1);
	}
	Global->id = 0;
	Global->check = 0;
	Global->folded = 0;
	LOCKINIT(Global->idlock)
	LOCKINIT(Global->sumlock)
	for (long s = 0; s < P; s++)
		for (long i = 0; i < M; i++)
			PAUSEINIT(Global->ready[s][i])

	SPLASH3_ROI_BEGIN();
	CREATE(Stage, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();
	ACQUIRE_FENCE();

	unsigned long want = 0;
	for (long i = 0; i < M; i++) {
		unsigned long v = Seed + (unsigned long)i;
		for (long s = 0; s < P; s++)
			v = stage_fn(s, v);
		want = want * 31 + v;
	}
	if (Global->check != want || Global->folded != M) {
		printf("pipeline: WRONG check %lu after %ld items, expected %lu\n", Global->check, Global->folded, want);
		exit(1);
	}
	printf("pipeline: ok items=%ld stages=%ld check=%lu\n", M, P, want);
	MAIN_END
}
