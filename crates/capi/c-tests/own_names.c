/* A pthreads program with functions of its own named like the C library's socket calls
 * (a message-passing helper: send, recv, poll; a tiny graph: connect, socket; shutdown;
 * its own thread numbering: gettid),
 * with signatures of its own and no <sys/socket.h>. Squall's network layer must go on
 * calling the C library's functions, and the program its own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define MSGS 200

static double mailbox[THREADS];
static int posted[THREADS];
static int edges[THREADS][THREADS];
static int stopped;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t b;

void send(int to, double v) {
    pthread_mutex_lock(&m);
    mailbox[to] += v;
    posted[to]++;
    pthread_mutex_unlock(&m);
}

double recv(int me) {
    pthread_mutex_lock(&m);
    double v = mailbox[me];
    pthread_mutex_unlock(&m);
    return v;
}

int poll(int me) {
    pthread_mutex_lock(&m);
    int p = posted[me];
    pthread_mutex_unlock(&m);
    return p;
}

int connect(int a, int c) {
    pthread_mutex_lock(&m);
    int n = ++edges[a][c];
    pthread_mutex_unlock(&m);
    return n;
}

int socket(int a) {
    int n = 0;
    for (int c = 0; c < THREADS; c++) n += edges[a][c];
    return n;
}

int gettid(void) { return 7; }

void shutdown(void) {
    pthread_mutex_lock(&m);
    stopped++;
    pthread_mutex_unlock(&m);
}

static void *work(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < MSGS; i++) {
        send((me + 1) % THREADS, 0.5);
        connect(me, (me + i) % THREADS);
    }
    pthread_barrier_wait(&b);
    if (poll(me) != MSGS || recv(me) != 0.5 * MSGS || socket(me) != MSGS) {
        printf("thread %d: poll %d recv %f socket %d\n", me, poll(me), recv(me), socket(me));
        exit(1);
    }
    shutdown();
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&b, NULL, THREADS);
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    double sum = 0;
    for (int i = 0; i < THREADS; i++) sum += recv(i);
    printf("own names ok: sum=%.1f stopped=%d\n", sum, stopped);
    return stopped == THREADS && gettid() == 7 ? 0 : 1;
}
