/*
 * fence.C - the Splash-3 fence macros order plain writes across nodes. Main (node 0) and a
 * thread it creates (on another node) hand a block of plain data back and forth: the owner
 * rewrites every word, issues a release fence and then publishes its turn through a flag
 * word; the other side waits for the flag, issues an acquire fence and must then read every
 * word the owner wrote, although it read (and cached) the old values the round before. The
 * flag is a Squall atomic (squall_atomic_load/swap), which is correct across nodes; the
 * fences are what make the plain data follow it.
 *
 *   fence ROUNDS WORDS      prints "fence: ok rounds=.. words=.. node=.." or the first stale word.
 */
MAIN_ENV

#include <string.h>

struct arg {
	long *data;
	uint64_t *flag;
	long rounds, words;
	long stale;
	int node;
};

static void wait_flag(uint64_t *flag, uint64_t want)
{
	uint64_t v = 0;
	for (;;) {
		if (squall_atomic_load(flag, &v) != SQUALL_OK) {
			fprintf(stderr, "fence: squall_atomic_load: %s\n", squall_last_error());
			exit(1);
		}
		if (v == want)
			return;
		usleep(50);
	}
}

static void set_flag(uint64_t *flag, uint64_t v)
{
	if (squall_atomic_swap(flag, v, NULL) != SQUALL_OK) {
		fprintf(stderr, "fence: squall_atomic_swap: %s\n", squall_last_error());
		exit(1);
	}
}

/* Turn 2r-1 is the thread's (it writes r), turn 2r is main's (it writes -r). */
static long check_and_write(struct arg *a, long expect, long write)
{
	long stale = 0;
	for (long i = 0; i < a->words; i++) {
		if (a->data[i] != expect && stale == 0)
			stale = i + 1;
		a->data[i] = write;
	}
	return stale;
}

static void *other(void *p)
{
	struct arg *a = p;
	a->node = squall_rank();
	for (long r = 1; r <= a->rounds; r++) {
		wait_flag(a->flag, (uint64_t)(2 * r - 2));
		ACQUIRE_FENCE();
		long s = check_and_write(a, r == 1 ? 0 : -(r - 1), r);
		if (s && !a->stale)
			a->stale = s;
		RELEASE_FENCE();
		set_flag(a->flag, (uint64_t)(2 * r - 1));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 20;
	long words = argc > 2 ? atol(argv[2]) : 4096;
	if (rounds < 1 || words < 1) {
		fprintf(stderr, "usage: fence ROUNDS WORDS\n");
		return 2;
	}
	struct arg *a = (struct arg *) G_MALLOC(sizeof(struct arg));
	a->data = (long *) G_MALLOC(words * sizeof(long));
	a->flag = (uint64_t *) G_MALLOC(PAGE_SIZE);
	if (!a || !a->data || !a->flag) {
		fprintf(stderr, "fence: out of memory\n");
		return 1;
	}
	memset(a->data, 0, words * sizeof(long));
	*a->flag = 0;
	a->rounds = rounds;
	a->words = words;
	a->stale = 0;
	a->node = -1;
	pthread_t t;
	if (pthread_create(&t, NULL, other, a) != 0) {
		fprintf(stderr, "fence: pthread_create failed\n");
		return 1;
	}
	long stale = 0;
	for (long r = 1; r <= rounds; r++) {
		wait_flag(a->flag, (uint64_t)(2 * r - 1));
		ACQUIRE_FENCE();
		long s = check_and_write(a, r, -r);
		if (s && !stale)
			stale = s;
		FULL_FENCE();
		set_flag(a->flag, (uint64_t)(2 * r));
	}
	pthread_join(t, NULL);
	if (stale || a->stale) {
		printf("fence: WRONG main read a stale word at %ld, the thread at %ld\n", stale - 1, a->stale - 1);
		return 1;
	}
	printf("fence: ok rounds=%ld words=%ld node=%d\n", rounds, words, a->node);
	return 0;
}
