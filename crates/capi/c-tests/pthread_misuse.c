/*
 * pthread_misuse.c - misuse through the pthreads layer is a clear error code (and a message on
 * stderr), never a hang or a crash. Prints "ok pthread misuse".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

static int bad;

static void expect(int got, int want, const char *what)
{
    if (got != want) {
        fprintf(stderr, "%s returned %d, expected %d\n", what, got, want);
        bad = 1;
    }
}

static void *noop(void *p) { return p; }

int main(void)
{
    pthread_mutex_t *m = malloc(sizeof *m);
    pthread_cond_t *c = malloc(sizeof *c);
    pthread_barrier_t *b = malloc(sizeof *b);
    pthread_mutex_init(m, NULL);
    pthread_cond_init(c, NULL);
    expect(pthread_mutex_unlock(m), EPERM, "unlock of a mutex not held");
    expect(pthread_mutex_lock(m), 0, "lock");
    expect(pthread_mutex_lock(m), EDEADLK, "relock");
    expect(pthread_mutex_destroy(m), EBUSY, "destroy of a held mutex");
    expect(pthread_mutex_unlock(m), 0, "unlock");
    expect(pthread_mutex_destroy(m), 0, "destroy");
    expect(pthread_join((pthread_t)0xdead0000beefUL, NULL), ESRCH, "join of an unknown thread");
    expect(pthread_barrier_wait(b), EINVAL, "wait on an uninitialised barrier");
    expect(pthread_barrier_init(b, NULL, 0), EINVAL, "barrier of 0 threads");
    pthread_t t;
    expect(pthread_create(&t, NULL, noop, m), 0, "create");
    void *r = NULL;
    expect(pthread_join(t, &r), 0, "join");
    if (r != m) bad = 1;
    expect(pthread_join(t, NULL), ESRCH, "second join");
    expect(pthread_cancel(t), ENOTSUP, "cancel");
    expect(pthread_create(&t, NULL, noop, NULL), 0, "create (to detach)");
    expect(pthread_detach(t), 0, "detach");
    pthread_rwlock_t *rw = malloc(sizeof *rw);
    pthread_spinlock_t *sp = malloc(sizeof *sp);
    expect(pthread_rwlock_init(rw, NULL), 0, "rwlock init");
    expect(pthread_rwlock_rdlock(rw), 0, "rdlock");
    expect(pthread_rwlock_unlock(rw), 0, "rwlock unlock");
    expect(pthread_rwlock_wrlock(rw), 0, "wrlock");
    expect(pthread_rwlock_destroy(rw), EBUSY, "destroy of a held rwlock");
    expect(pthread_rwlock_unlock(rw), 0, "rwlock unlock");
    expect(pthread_rwlock_unlock(rw), EPERM, "rwlock unlock when not held");
    expect(pthread_spin_init(sp, PTHREAD_PROCESS_PRIVATE), 0, "spin init");
    expect(pthread_spin_lock(sp), 0, "spin lock");
    expect(pthread_spin_unlock(sp), 0, "spin unlock");
    expect(pthread_spin_destroy(sp), 0, "spin destroy");
    expect(pthread_rwlock_rdlock(rw), 0, "rdlock");
    expect(pthread_rwlock_wrlock(rw), EDEADLK, "wrlock while holding a read lock");
    expect(pthread_rwlock_unlock(rw), 0, "rwlock unlock");
    free((void *)sp);
    free(rw);
    /* refused with a message: process-shared objects, named semaphores */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    expect(pthread_mutex_init(m, &ma), ENOTSUP, "process-shared mutex");
    pthread_mutexattr_destroy(&ma);
    sem_t *sem = malloc(sizeof *sem);
    expect(sem_wait(sem) == -1 ? errno : 0, EINVAL, "wait on an uninitialised semaphore");
    expect(sem_init(sem, 1, 0) == -1 ? errno : 0, ENOSYS, "process-shared semaphore");
    expect(sem_init(sem, 0, 1), 0, "sem_init");
    expect(sem_trywait(sem), 0, "sem_trywait");
    expect(sem_trywait(sem) == -1 ? errno : 0, EAGAIN, "sem_trywait on 0");
    expect(sem_destroy(sem), 0, "sem_destroy");
    free(sem);
    sem_t *named = sem_open("/squall-misuse", O_CREAT, 0600, 1);
    expect(named == SEM_FAILED ? errno : 0, ENOSYS, "sem_open");
    void *al = NULL;
    expect(posix_memalign(&al, 3, 64), EINVAL, "posix_memalign with alignment 3");
    expect(posix_memalign(&al, 256, 1000), 0, "posix_memalign");
    if (((unsigned long)al & 255) != 0) {
        fprintf(stderr, "posix_memalign gave %p\n", al);
        bad = 1;
    }
    void *pg = aligned_alloc(4096, 8192);
    if (pg == NULL || ((unsigned long)pg & 4095) != 0) {
        fprintf(stderr, "aligned_alloc gave %p\n", pg);
        bad = 1;
    }
    /* both come from the shared heap: a thread on another node can use them */
    free(al);
    free(pg);
    free(b);
    free(c);
    free(m);
    if (!bad) printf("ok pthread misuse\n");
    return bad;
}
