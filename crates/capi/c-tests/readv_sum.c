/* Reads stdin into two plain global arrays with readv(2) and recv-like paths, then sums
 * them with threads on every node. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#define HALF (1 << 20)
static unsigned char a[HALF], b[HALF];
static unsigned long sums[4];

static void *clear(void *arg) {
    long t = (long)arg;
    for (long i = t * (HALF / 4); i < (t + 1) * (HALF / 4); i++) a[i] = b[i] = (unsigned char)t;
    return NULL;
}

static void *sum(void *arg) {
    long t = (long)arg;
    unsigned long s = 0;
    for (long i = t; i < HALF; i += 4) s += a[i] * 3u + b[i];
    sums[t] = s;
    return NULL;
}

int main(void) {
    pthread_t th[4];
    /* Every thread writes its quarter first (threads run on every node): main's node then
     * holds few of these pages writable when the kernel writes stdin into them. */
    for (long t = 0; t < 4; t++) pthread_create(&th[t], NULL, clear, (void *)t);
    for (long t = 0; t < 4; t++) pthread_join(th[t], NULL);
    size_t got = 0;
    while (got < 2 * HALF) {
        struct iovec v[2];
        int n = 0;
        if (got < HALF) { v[n].iov_base = a + got; v[n].iov_len = HALF - got; n++; }
        size_t bo = got > HALF ? got - HALF : 0;
        v[n].iov_base = b + bo; v[n].iov_len = HALF - bo; n++;
        ssize_t r = readv(0, v, n);
        if (r < 0) { perror("readv"); return 1; }
        if (r == 0) break;
        got += (size_t)r;
    }
    for (long t = 0; t < 4; t++) pthread_create(&th[t], NULL, sum, (void *)t);
    unsigned long total = 0;
    for (long t = 0; t < 4; t++) { pthread_join(th[t], NULL); total += sums[t]; }
    printf("readv sum: %zu bytes, sum=%lu\n", got, total);
    return 0;
}
