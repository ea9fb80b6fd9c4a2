/*
 * taskq.C - a task queue, SPLASH-2 style: a list of tasks in shared memory guarded by a
 * mutex with a condition variable for idle workers (both inside the global structure).
 * A task counts and sums the primes of a range; a big range is split in two new tasks that
 * the worker allocates in shared memory and queues. Tasks come from stdin; the global
 * structure pointer, the thread count and the grain size are plain globals set by main.
 *
 * input (stdin): "T GRAIN" then T lines "LO HI"     usage: taskq -p P
 * prints "taskq: ok tasks=.. primes=.. sum=.." when the totals equal a sequential count.
 */
MAIN_ENV

#include <string.h>

struct task {
	long lo, hi;
	struct task *next;
};

struct GlobalMemory {
	LOCKDEC(qlock)
	CONDVARDEC(nonempty)
	LOCKDEC(sumlock)
	LOCKDEC(idlock)
	struct task *head;
	long pending;   /* queued or running */
	long done;
	long id;
	long primes;
	long sum;
	long tasks_run;
	long per_thread[MAX_THREADS];
};

struct GlobalMemory *Global;
long P;
long Grain;

static int is_prime(long n)
{
	if (n < 2) return 0;
	for (long d = 2; d * d <= n; d++)
		if (n % d == 0) return 0;
	return 1;
}

static void push(struct task *t)
{
	t->next = Global->head;
	Global->head = t;
	Global->pending++;
	CONDVARSIGNAL(Global->nonempty)
}

void Worker(void)
{
	long MyNum;

	LOCK(Global->idlock)
	MyNum = Global->id++;
	UNLOCK(Global->idlock)

	LOCK(Global->qlock)
	for (;;) {
		while (Global->head == NULL && !Global->done)
			CONDVARWAIT(Global->nonempty, Global->qlock)
		if (Global->head == NULL)
			break;
		struct task *t = Global->head;
		Global->head = t->next;
		UNLOCK(Global->qlock)

		long lo = t->lo, hi = t->hi;
		G_FREE(t)
		if (hi - lo > Grain) {
			long mid = lo + (hi - lo) / 2;
			struct task *a = (struct task *) G_MALLOC(sizeof(struct task));
			struct task *b = (struct task *) G_MALLOC(sizeof(struct task));
			if (a == NULL || b == NULL) {
				fprintf(stderr, "taskq: out of shared memory\n");
				exit(1);
			}
			a->lo = lo; a->hi = mid;
			b->lo = mid; b->hi = hi;
			LOCK(Global->qlock)
			push(a);
			push(b);
		} else {
			long n = 0, s = 0;
			for (long k = lo; k < hi; k++)
				if (is_prime(k)) { n++; s += k; }
			LOCK(Global->sumlock)
			Global->primes += n;
			Global->sum += s;
			Global->tasks_run++;
			Global->per_thread[MyNum]++;
			UNLOCK(Global->sumlock)
			LOCK(Global->qlock)
		}
		/* this task is finished (its halves, if any, are queued) */
		if (--Global->pending == 0) {
			Global->done = 1;
			CONDVARBCAST(Global->nonempty)
		}
	}
	UNLOCK(Global->qlock)
}

int main(int argc, char **argv)
{
	long T;

	P = 0;
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "-p") == 0)
			P = atol(argv[i + 1]);
	if (P < 1 || P > MAX_THREADS) {
		fprintf(stderr, "usage: taskq -p P < input\n");
		exit(2);
	}
	if (scanf("%ld %ld", &T, &Grain) != 2 || T < 1 || Grain < 1) {
		fprintf(stderr, "taskq: input must start with \"T GRAIN\"\n");
		exit(2);
	}
	MAIN_INITENV
	Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
	if (Global == NULL) {
		fprintf(stderr, "taskq: out of memory\n");
		exit(1);
	}
	memset(Global, 0, sizeof(struct GlobalMemory));
	LOCKINIT(Global->qlock)
	LOCKINIT(Global->sumlock)
	LOCKINIT(Global->idlock)
	CONDVARINIT(Global->nonempty)
	long want_n = 0, want_s = 0;
	for (long i = 0; i < T; i++) {
		struct task *t = (struct task *) G_MALLOC(sizeof(struct task));
		if (t == NULL || scanf("%ld %ld", &t->lo, &t->hi) != 2 || t->lo > t->hi) {
			fprintf(stderr, "taskq: bad or missing task %ld\n", i);
			exit(2);
		}
		for (long k = t->lo; k < t->hi; k++)
			if (is_prime(k)) { want_n++; want_s += k; }
		push(t);
	}

	SPLASH3_ROI_BEGIN();
	CREATE(Worker, P)
	WAIT_FOR_END(P - 1)
	SPLASH3_ROI_END();

	long counted = 0;
	for (long p = 0; p < P; p++)
		counted += Global->per_thread[p];
	if (Global->primes != want_n || Global->sum != want_s || counted != Global->tasks_run ||
	    Global->pending != 0 || Global->head != NULL) {
		printf("taskq: WRONG primes=%ld sum=%ld (expected %ld %ld), %ld/%ld tasks counted, pending %ld\n",
		       Global->primes, Global->sum, want_n, want_s, counted, Global->tasks_run, Global->pending);
		exit(1);
	}
	printf("taskq: ok tasks=%ld primes=%ld sum=%ld\n", T, want_n, want_s);
	MAIN_END
}
