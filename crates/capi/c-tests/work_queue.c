/* An outsider's pthreads program: a work queue of malloc'd tasks, linked by two producer
 * threads and popped by consumer threads under one mutex with a condition variable; each
 * consumer frees its task, so the allocator hands the same memory out again at once. Task
 * fields are written outside the lock (before the task is linked), results go to plain global
 * arrays, tallies to a __thread counter. main checks every answer.
 * Usage: work_queue CONSUMERS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TASKS 4096
struct task {
    long lo, hi;
    int id;
    char label[32];
    struct task *next;
};
static struct task *head, *tail;
static int producers_done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER;
static long results[TASKS];
static char labels[TASKS][32];
static int seen[TASKS];
static __thread long my_tasks;
static long per_thread[64];

static int isprime(long n)
{
    if (n < 2)
        return 0;
    for (long d = 2; d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

static void *producer(void *arg)
{
    int first = *(int *)arg;
    for (int i = first; i < TASKS; i += 2) {
        struct task *t = malloc(sizeof *t);
        if (!t)
            abort();
        t->lo = (long)i * 100;
        t->hi = t->lo + 100;
        t->id = i;
        t->next = NULL;
        snprintf(t->label, sizeof t->label, "task-%04d", i);
        pthread_mutex_lock(&mu);
        if (tail)
            tail->next = t;
        else
            head = t;
        tail = t;
        pthread_cond_signal(&nonempty);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu);
    producers_done++;
    pthread_cond_broadcast(&nonempty);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *consumer(void *arg)
{
    int me = *(int *)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!head && producers_done < 2)
            pthread_cond_wait(&nonempty, &mu);
        struct task *t = head;
        if (t) {
            head = t->next;
            if (!head)
                tail = NULL;
            seen[t->id]++;
        }
        pthread_mutex_unlock(&mu);
        if (!t)
            break;
        long c = 0;
        for (long n = t->lo; n < t->hi; n++)
            c += isprime(n);
        results[t->id] = c;
        strcpy(labels[t->id], t->label);
        free(t);
        my_tasks++;
    }
    per_thread[me] = my_tasks;
    return NULL;
}

int main(int argc, char **argv)
{
    int nc = argc > 1 ? atoi(argv[1]) : 4;
    if (nc < 1 || nc > 64) {
        fprintf(stderr, "usage: %s CONSUMERS (1..64)\n", argv[0]);
        return 2;
    }
    pthread_t p[2], c[64];
    int pid[2] = {0, 1}, cid[64];
    for (int i = 0; i < nc; i++) {
        cid[i] = i;
        pthread_create(&c[i], NULL, consumer, &cid[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_create(&p[i], NULL, producer, &pid[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(p[i], NULL);
    for (int i = 0; i < nc; i++)
        pthread_join(c[i], NULL);
    long total = 0, want = 0, tasks = 0, bad = 0, twice = 0;
    for (int i = 0; i < TASKS; i++) {
        char w[32];
        snprintf(w, sizeof w, "task-%04d", i);
        total += results[i];
        bad += strcmp(w, labels[i]) != 0;
        twice += seen[i] != 1;
    }
    for (long n = 0; n < (long)TASKS * 100; n++)
        want += isprime(n);
    for (int i = 0; i < nc; i++)
        tasks += per_thread[i];
    printf("work queue: primes %ld of %ld, %ld tasks, %ld not taken once, %ld bad labels: %s\n",
           total, want, tasks, twice, bad,
           total == want && tasks == TASKS && twice == 0 && bad == 0 ? "ok" : "WRONG");
    return 0;
}
