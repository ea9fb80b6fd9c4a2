/* A pthreads program that handles signals the way server code does: main blocks every signal
 * before it starts its workers (they inherit the mask), and it installs its own SIGBUS
 * handler to survive reading an mmap'd file past its end (as databases do), recovering with
 * siglongjmp. The workers sum a plain global array that threads on every node wrote. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define N (1 << 18)
#define T 4
static long data[N];
static long sums[T];
static sigjmp_buf recover;
static volatile sig_atomic_t caught;

static void on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)si; (void)ctx;
    caught++;
    siglongjmp(recover, 1);
}

static void *fill(void *arg) {
    long t = (long)arg;
    for (long i = t; i < N; i += T) data[i] = i % 1000;
    return NULL;
}

static void *sum(void *arg) {
    long t = (long)arg;
    long s = 0;
    for (long i = (t + 1) % T; i < N; i += T) s += data[i];
    sums[t] = s;
    return NULL;
}

/* Reads one byte of a mapping of an empty file: SIGBUS, which the program's handler takes. */
static int read_past_end(void) {
    char path[] = "/tmp/sigbus_own_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    unlink(path);
    volatile char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    int got = 0;
    if (sigsetjmp(recover, 1) == 0) {
        got = p[0];
        munmap((void *)p, 4096);
        return -2 - got;  /* no SIGBUS: wrong */
    }
    munmap((void *)p, 4096);
    return 0;
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) { perror("sigaction"); return 1; }
    sigset_t all;
    sigfillset(&all);
    if (pthread_sigmask(SIG_BLOCK, &all, NULL) != 0) { printf("pthread_sigmask failed\n"); return 1; }
    pthread_t th[T];
    for (long t = 0; t < T; t++) pthread_create(&th[t], NULL, fill, (void *)t);
    for (long t = 0; t < T; t++) pthread_join(th[t], NULL);
    for (long t = 0; t < T; t++) pthread_create(&th[t], NULL, sum, (void *)t);
    for (long t = 0; t < T; t++) pthread_join(th[t], NULL);
    long total = 0;
    for (int t = 0; t < T; t++) total += sums[t];
    /* SIGBUS from a file mapping is the program's own: unblock it, then take one. */
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
    int r = read_past_end();
    struct sigaction now;
    sigaction(SIGBUS, NULL, &now);
    int same = now.sa_sigaction == on_bus;
    printf("sigbus own: total=%ld caught=%d handler=%s past-end=%d\n", total, (int)caught,
           same ? "kept" : "lost", r);
    return total == 130879296L && caught == 1 && same && r == 0 ? 0 : 1;
}
