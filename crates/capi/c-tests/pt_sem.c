/*
 * pt_sem.c - POSIX unnamed semaphores across nodes: a bounded buffer. Of P threads (argv[1],
 * default 4; even), half produce the numbers 1..M each and half consume M items each, through
 * a ring of SLOTS entries guarded by two counting semaphores (free slots, full slots) and a
 * binary semaphore for the indices. The consumers' sum is checked against the sum computed
 * here. Also: sem_trywait on an empty semaphore (EAGAIN), sem_timedwait timing out
 * (ETIMEDOUT) and succeeding, sem_getvalue. Prints "ok sem".
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SLOTS 4
#define M 200

struct shared {
    sem_t free_slots, full_slots, mutex, done;
    long ring[SLOTS];
    int head, tail;
    long consumed;            /* under mutex */
    int bad;
};

struct arg {
    struct shared *s;
    int producer;
};

static void *worker(void *p)
{
    struct arg *a = p;
    struct shared *s = a->s;
    if (a->producer) {
        for (long v = 1; v <= M; v++) {
            sem_wait(&s->free_slots);
            sem_wait(&s->mutex);
            s->ring[s->tail] = v;
            s->tail = (s->tail + 1) % SLOTS;
            sem_post(&s->mutex);
            sem_post(&s->full_slots);
        }
    } else {
        long sum = 0;
        for (int i = 0; i < M; i++) {
            sem_wait(&s->full_slots);
            sem_wait(&s->mutex);
            sum += s->ring[s->head];
            s->head = (s->head + 1) % SLOTS;
            sem_post(&s->mutex);
            sem_post(&s->free_slots);
        }
        sem_wait(&s->mutex);
        s->consumed += sum;
        sem_post(&s->mutex);
    }
    sem_post(&s->done);
    return NULL;
}

static struct timespec in_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    if (p < 2 || p % 2) p = 4;
    struct shared *s = calloc(1, sizeof *s);
    sem_init(&s->free_slots, 0, SLOTS);
    sem_init(&s->full_slots, 0, 0);
    sem_init(&s->mutex, 0, 1);
    sem_init(&s->done, 0, 0);

    if (sem_trywait(&s->full_slots) != -1 || errno != EAGAIN) {
        fprintf(stderr, "pt_sem: trywait on an empty semaphore did not fail with EAGAIN\n");
        s->bad = 1;
    }
    struct timespec until = in_ms(100);
    double t0 = now();
    if (sem_timedwait(&s->full_slots, &until) != -1 || errno != ETIMEDOUT) {
        fprintf(stderr, "pt_sem: timedwait on an empty semaphore did not time out\n");
        s->bad = 1;
    }
    if (now() < until.tv_sec + until.tv_nsec * 1e-9) {
        fprintf(stderr, "pt_sem: timedwait returned %.3f s early\n",
                until.tv_sec + until.tv_nsec * 1e-9 - now());
        s->bad = 1;
    }
    printf("sem_timedwait timed out after %.1f ms (deadline 100 ms)\n", (now() - t0) * 1e3);

    struct arg *args = malloc(sizeof *args * p);
    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++) {
        args[i].s = s;
        args[i].producer = i % 2 == 0;
        pthread_create(&t[i], NULL, worker, &args[i]);
    }
    /* the workers' ends, with a generous deadline */
    for (int i = 0; i < p; i++) {
        struct timespec d = in_ms(60000);
        if (sem_timedwait(&s->done, &d) != 0) {
            fprintf(stderr, "pt_sem: worker end %d: timedwait failed (errno %d)\n", i, errno);
            return 1;
        }
    }
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);

    long want = (long)(p / 2) * M * (M + 1) / 2;
    int free_v = -1, full_v = -1;
    sem_getvalue(&s->free_slots, &free_v);
    sem_getvalue(&s->full_slots, &full_v);
    if (s->consumed != want || free_v != SLOTS || full_v != 0 || s->bad) {
        fprintf(stderr, "pt_sem: consumed %ld (expected %ld), free %d full %d\n", s->consumed,
                want, free_v, full_v);
        return 1;
    }
    if (sem_destroy(&s->free_slots) != 0) return 1;
    printf("consumed sum %ld (expected %ld)\n", s->consumed, want);
    printf("ok sem\n");
    return 0;
}
