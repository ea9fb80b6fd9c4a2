/*
 * SQUALL_GLOBAL variables are coherent shared memory with node 0 as home.
 * main (node 0) initialises globals (a counter, an array, a struct with a mutex, a message),
 * creates threads (round-robin over the nodes), and AFTER the creates opens a "gate" global
 * under the mutex; the threads wait for the gate, read what main wrote, update the counter
 * under the mutex and write their slots of the array. After the joins main checks every update
 * exactly. Usage: globals THREADS
 */
#include <squall/pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS 1000 /* spans two pages: slots of one page are written from several nodes */
#define ITERS 50

struct state {
    pthread_mutex_t lock;
    long counter;
    long weighted;
    int gate;
};

SQUALL_GLOBAL long base_value = 1000; /* initial value from the binary, never written */
SQUALL_GLOBAL int nthreads;
SQUALL_GLOBAL char message[64];
SQUALL_GLOBAL long slots[NSLOTS];
SQUALL_GLOBAL int ran_on[64];
SQUALL_GLOBAL struct state st = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
SQUALL_GLOBAL long *self_pointer; /* points at another SQUALL_GLOBAL variable */
SQUALL_NODE_LOCAL int node_mark;  /* per node: main's write is seen on node 0 only */

static int fail(const char *what, long got, long want)
{
    fprintf(stderr, "globals: node %d: %s: got %ld, want %ld\n", squall_rank(), what, got, want);
    exit(1);
}

static void *worker(void *arg)
{
    long id = (long)arg;
    /* Written by main after this thread was created: wait for it under the lock. */
    for (;;) {
        pthread_mutex_lock(&st.lock);
        int open = st.gate;
        pthread_mutex_unlock(&st.lock);
        if (open)
            break;
    }
    if (strcmp(message, "set by main") != 0) {
        fprintf(stderr, "globals: node %d: message is \"%s\"\n", squall_rank(), message);
        exit(1);
    }
    if (self_pointer != &base_value)
        fail("pointer to a global", (long)self_pointer, (long)&base_value);
    if (base_value != 1000)
        fail("initial value", base_value, 1000);
    ran_on[id] = squall_rank();
    if ((squall_rank() == 0) != (node_mark == 77))
        fail("per-node global (SQUALL_NODE_LOCAL)", node_mark, squall_rank() == 0 ? 77 : 0);
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&st.lock);
        st.counter++;
        st.weighted += id + 1;
        pthread_mutex_unlock(&st.lock);
    }
    for (long s = id; s < NSLOTS; s += nthreads)
        slots[s] = base_value + s * 3 + id;
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > 64) {
        fprintf(stderr, "usage: globals THREADS (1..64)\n");
        return 2;
    }
    nthreads = n;
    node_mark = 77;
    strcpy(message, "set by main");
    self_pointer = &base_value;
    for (long s = 0; s < NSLOTS; s++)
        slots[s] = -1;
    for (int i = 0; i < n; i++)
        ran_on[i] = -1;
    pthread_t t[64];
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            fail("pthread_create", i, 0);
    pthread_mutex_lock(&st.lock);
    st.gate = 1;
    pthread_mutex_unlock(&st.lock);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);

    if (st.counter != (long)n * ITERS)
        fail("counter", st.counter, (long)n * ITERS);
    long w = 0;
    for (int i = 0; i < n; i++)
        w += (long)(i + 1) * ITERS;
    if (st.weighted != w)
        fail("weighted sum", st.weighted, w);
    for (long s = 0; s < NSLOTS; s++)
        if (slots[s] != base_value + s * 3 + s % n)
            fail("slot", slots[s], base_value + s * 3 + s % n);
    int remote = 0;
    for (int i = 0; i < n; i++) {
        if (ran_on[i] < 0)
            fail("thread ran", ran_on[i], 0);
        remote += ran_on[i] != 0;
    }
    if (squall_size() > 1 && remote == 0)
        fail("threads on other nodes", remote, 1);
    printf("ok globals: %d threads, %d on other nodes, counter %ld\n", n, remote, st.counter);
    return 0;
}
