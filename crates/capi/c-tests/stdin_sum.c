/*
 * stdin_sum.c - a plain pthreads program that reads its whole input from stdin (under
 * `squall run` rank 0 runs main and gets the job's stdin), then lets threads on every node
 * checksum slices of it. The buffer and the thread arguments are malloc'd (shared heap).
 *
 *   stdin_sum THREADS < input     prints "stdin: ok bytes=.. sum=.." when the threads' total
 *                                 equals main's own sum.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    const unsigned char *data;
    size_t from, to;
    uint64_t sum;
};

static uint64_t checksum(const unsigned char *d, size_t from, size_t to)
{
    uint64_t s = 0;
    for (size_t i = from; i < to; i++)
        s += (uint64_t)d[i] * (i % 251 + 1);
    return s;
}

static void *work(void *p)
{
    struct job *j = p;
    j->sum = checksum(j->data, j->from, j->to);
    return NULL;
}

int main(int argc, char **argv)
{
    int t = argc > 1 ? atoi(argv[1]) : 4;
    if (t < 1 || t > 64) {
        fprintf(stderr, "usage: stdin_sum THREADS < input\n");
        return 2;
    }
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    if (!buf || ferror(stdin)) {
        fprintf(stderr, "stdin_sum: cannot read stdin\n");
        return 1;
    }
    struct job *jobs = malloc(sizeof(struct job) * (size_t)t);
    pthread_t *tids = malloc(sizeof(pthread_t) * (size_t)t);
    if (!jobs || !tids) return 1;
    for (int i = 0; i < t; i++) {
        jobs[i].data = buf;
        jobs[i].from = n * (size_t)i / (size_t)t;
        jobs[i].to = n * (size_t)(i + 1) / (size_t)t;
        jobs[i].sum = 0;
        if (pthread_create(&tids[i], NULL, work, &jobs[i]) != 0) {
            fprintf(stderr, "stdin_sum: pthread_create failed\n");
            return 1;
        }
    }
    uint64_t total = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(tids[i], NULL);
        total += jobs[i].sum;
    }
    uint64_t want = checksum(buf, 0, n);
    if (total != want) {
        printf("stdin: WRONG sum %llu, expected %llu over %zu bytes\n", (unsigned long long)total,
               (unsigned long long)want, n);
        return 1;
    }
    printf("stdin: ok bytes=%zu sum=%llu\n", n, (unsigned long long)want);
    free(jobs);
    free(tids);
    free(buf);
    return 0;
}
