/*
 * pt_keys.c - thread-specific data with threads on every node. main creates a key with a
 * destructor; each of P threads (argv[1], default 4) stores its own record under it, reads it
 * back through pthread_getspecific from nested calls, and leaves it set when it returns: the
 * destructor must run once per thread, on the thread's node, before join returns (it adds the
 * record's id to a shared sum, checked against the sum computed here). A key a thread creates
 * is usable by main; a deleted key is refused. Prints "ok keys".
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 100

struct shared;

struct record {
    long id;
    long uses;
    struct shared *s;
};

struct shared {
    pthread_key_t key;        /* created by main */
    pthread_key_t thread_key; /* created by the second thread (on node 1) */
    pthread_mutex_t m;
    long destructed;          /* sum of ids seen by the destructor */
    int destructor_calls;
    int bad;
};

static void destroy(void *v)
{
    struct record *r = v;
    struct shared *s = r->s;
    pthread_mutex_lock(&s->m);
    s->destructed += r->id;
    s->destructor_calls++;
    if (r->uses != ROUNDS) s->bad = 1;
    pthread_mutex_unlock(&s->m);
    free(r);
}

static long use(struct shared *s, long id)
{
    struct record *r = pthread_getspecific(s->key);
    if (r == NULL || r->id != id) {
        fprintf(stderr, "pt_keys: thread %ld got record %ld\n", id, r ? r->id : -1);
        s->bad = 1;
        return 0;
    }
    r->uses++;
    return r->id;
}

struct arg {
    struct shared *s;
    long id;
};

static void *worker(void *p)
{
    struct arg *a = p;
    struct shared *s = a->s;
    if (pthread_getspecific(s->key) != NULL) s->bad = 1; /* a new thread starts with NULL */
    struct record *r = malloc(sizeof *r);
    r->id = a->id;
    r->uses = 0;
    r->s = s;
    if (pthread_setspecific(s->key, r) != 0) s->bad = 1;
    long sum = 0;
    for (int i = 0; i < ROUNDS; i++) sum += use(s, a->id);
    if (sum != ROUNDS * a->id) s->bad = 1;
    if (a->id == 2) {
        /* a key made on this thread's node, used by main later */
        if (pthread_key_create(&s->thread_key, NULL) != 0) s->bad = 1;
    }
    return NULL;  /* the value stays set: the destructor runs now */
}

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4;
    struct shared *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->m, NULL);
    if (pthread_key_create(&s->key, destroy) != 0) return 1;
    struct arg *args = malloc(sizeof *args * p);
    pthread_t *t = malloc(sizeof *t * p);
    for (int i = 0; i < p; i++) {
        args[i].s = s;
        args[i].id = i + 1;
        pthread_create(&t[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < p; i++) pthread_join(t[i], NULL);

    long want = (long)p * (p + 1) / 2;
    int rc = pthread_setspecific(s->thread_key, s);
    if (rc != 0 || pthread_getspecific(s->thread_key) != s) {
        fprintf(stderr, "pt_keys: the key the second thread created does not work in main (%d)\n", rc);
        s->bad = 1;
    }
    if (pthread_getspecific(s->key) != NULL) s->bad = 1; /* main never set it */
    pthread_key_t k;
    pthread_key_create(&k, NULL);
    pthread_key_delete(k);
    rc = pthread_setspecific(k, s);
    if (rc != EINVAL) {
        fprintf(stderr, "pt_keys: setspecific on a deleted key returned %d\n", rc);
        s->bad = 1;
    }
    if (s->destructor_calls != p || s->destructed != want || s->bad) {
        fprintf(stderr, "pt_keys: destructor calls %d sum %ld (expected %d %ld), bad %d\n",
                s->destructor_calls, s->destructed, p, want, s->bad);
        return 1;
    }
    printf("destructors: %d calls, id sum %ld (expected %ld)\n", s->destructor_calls,
           s->destructed, want);
    printf("ok keys\n");
    return 0;
}
