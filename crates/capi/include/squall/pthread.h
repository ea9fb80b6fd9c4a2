/*
 * squall/pthread.h - run a POSIX threads program on Squall, changing only the include/link line.
 *
 * Use:  cc prog.c $(pkg-config --cflags --libs squall-pthread)
 * The squall-pthread pkg-config file adds `-include squall/pthread.h`, so the program's source
 * does not change at all; `#include <squall/pthread.h>` in the source works the same.
 * Run:  squall run -n 4 ./prog args...   (without the launcher the program is a one-node job)
 *
 * What it does
 *  - A constructor starts the node as a single system image (squall_init_ssi): under
 *    `squall run` rank 0 runs main; every other rank serves thread creation and memory until
 *    rank 0 exits (squall_finalize runs from atexit), then exits with status 0.
 *  - pthread_create / pthread_join: threads are spread evenly over the nodes (the k-th thread node r
 *    creates runs on node (r+k+1) mod N; squall_set_thread_placement). A create is a release and a join an acquire. The thread function must be in the program or a library
 *    every node loads. pthread_attr_setstacksize and the detach state are honoured (other
 *    attributes do not apply); pthread_detach makes a later join on that node EINVAL.
 *    pthread_self() in a thread equals the id pthread_create gave for it, on every node;
 *    pthread_exit(v) ends the thread with v for pthread_join (in main: the threads main created
 *    and did not join or detach are joined, then the process ends with status 0).
 *  - EVERY GLOBAL IS SHARED: the program's global and static variables (.data, .bss) are
 *    coherent shared memory with node 0 (where main runs) as the home of their pages, starting
 *    from the binary's initial values; no marking. `pkg-config --libs squall-pthread` adds the
 *    linker script fragment squall-pthread.ld, which puts them in two page-aligned sections,
 *    squall_data and squall_bss (NOBITS: a zero-initialised array takes no file space and no
 *    memory until touched). They must lie at the same address on every node, so the program
 *    re-executes itself once with address randomisation off (personality ADDR_NO_RANDOMIZE).
 *    STAYS PER NODE: the C library's variables (stdout, stderr, optarg, optind, environ, errno),
 *    thread-locals (__thread: per thread), data of shared libraries, and globals marked
 *    SQUALL_NODE_LOCAL. A pointer to per-node memory (a FILE* from fopen, memory from strdup)
 *    stored in a global is only valid on the node that stored it. SQUALL_GLOBAL is accepted and
 *    marks nothing more.
 *  - EVERY STACK IS SHARED: main (through -Wl,--wrap=main and __wrap_main below) and every
 *    thread run on a stack in shared memory homed on their node (8 MiB by default, a guard page
 *    below), so `pthread_create(&t, 0, fn, &args[i])` with args on main's stack works on every
 *    node. Squall's own calls switch back to the thread's private stack (about 9 ns).
 *  - pthread_mutex_*, pthread_rwlock_*, pthread_spin_*, pthread_cond_*, pthread_barrier_*,
 *    pthread_once, pthread_key_* / pthread_[gs]etspecific and sem_* (unnamed semaphores) work
 *    across nodes. Locks, conditions and barriers are Squall objects named by the OBJECT'S
 *    ADDRESS: PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_RWLOCK_INITIALIZER
 *    and PTHREAD_ONCE_INIT work. The object may live in Squall memory (malloc'd), in a global, or
 *    on a stack (stacks are shared). Some state is stored IN the object, so it must be
 *    initialised in shared memory before threads of other nodes use it: a barrier's count, a
 *    mutex's kind (where glibc keeps it, so PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP works), a
 *    condition's clock, a rwlock's readers/writer counts, a semaphore's value, a once's state.
 *    Mutex kinds: recursive mutexes nest (depth per thread); error-checking mutexes report
 *    relock (EDEADLK) and unlock when not held (EPERM); normal and default mutexes behave as
 *    error-checking ones (POSIX lets a normal relock deadlock: squall reports it instead of
 *    hanging); destroy while held: EBUSY. Errors are also printed on stderr. Read-write locks
 *    share among readers (writer preference; a reader may re-take its read lock); spinlocks
 *    are Squall locks. pthread_cond_timedwait (CLOCK_REALTIME, or CLOCK_MONOTONIC from
 *    pthread_condattr_setclock; pthread_cond_clockwait names it), pthread_rwlock_timed*lock
 *    and sem_timedwait wake up at the deadline through a per-node timer thread that
 *    broadcasts the condition (other waiters of it see a spurious wake-up);
 *    pthread_mutex_timedlock polls trylock until the deadline. pthread_once runs the
 *    routine once in the whole job. Keys are job-wide, values per thread, destructors run
 *    when a Squall thread ends. Not redirected (the C library's, unaware of Squall objects):
 *    sem_clockwait, pthread_rwlock_clock*lock, pthread_mutex_clocklock.
 *    pthread_detach is accepted (a no-op). Not supported (an error and a message on stderr):
 *    pthread_cancel (ENOTSUP), process-shared or robust attributes (ENOTSUP), sem_init with
 *    pshared != 0 and sem_open (ENOSYS).
 *  - malloc / calloc / realloc / free / aligned_alloc / posix_memalign come from the shared
 *    heap (memory from the C library, e.g. strdup, is private to the node and is still freed
 *    by the C library).
 */
#ifndef SQUALL_PTHREAD_H
#define SQUALL_PTHREAD_H

#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../squall.h"
#include "atomic.h"

#ifdef __cplusplus
static_assert(sizeof(pthread_t) == sizeof(uint64_t), "squall needs a 64-bit pthread_t");
#else
_Static_assert(sizeof(pthread_t) == sizeof(uint64_t), "squall needs a 64-bit pthread_t");
#endif

/* Every global variable of the program is shared under the pthreads layer: SQUALL_GLOBAL
 * (CableS' GLOBAL) is kept for programs written for it and marks nothing more. */
#define SQUALL_GLOBAL
/* A global that stays per node (each node has its own copy, e.g. a FILE* or a cache of
 * node-local state): `SQUALL_NODE_LOCAL static int hits;`. It lives in the section
 * squall_node_local, which the linker script fragment leaves out of the shared data (it takes
 * file space even when zero-initialised). */
#define SQUALL_NODE_LOCAL __attribute__((section("squall_node_local")))

/* A program that defines _GNU_SOURCE itself does so after this header (force-included by
 * pkg-config) already read <pthread.h> without it: give it glibc's static initializers of
 * the mutex kinds anyway (Squall reads the kind they store). */
#if !defined PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP && defined __PTHREAD_MUTEX_INITIALIZER
#define PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP \
    { { __PTHREAD_MUTEX_INITIALIZER(PTHREAD_MUTEX_RECURSIVE_NP) } }
#define PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP \
    { { __PTHREAD_MUTEX_INITIALIZER(PTHREAD_MUTEX_ERRORCHECK_NP) } }
#define PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP \
    { { __PTHREAD_MUTEX_INITIALIZER(PTHREAD_MUTEX_ADAPTIVE_NP) } }
#endif

/* Start the node before main (and before the program's own constructors, which may already
 * write globals): register the shared data sections (re-executing without address
 * randomisation if needed), then start the node, which adopts them on every node. */
#ifdef __cplusplus
extern "C" {
#endif
/* Bounds of this module's shared data sections, made by squall-pthread.ld (null when the
 * program was linked without it); hidden, so each module sees its own. */
extern char __start_squall_data[] __attribute__((weak, visibility("hidden")));
extern char __stop_squall_data[] __attribute__((weak, visibility("hidden")));
extern char __start_squall_bss[] __attribute__((weak, visibility("hidden")));
extern char __stop_squall_bss[] __attribute__((weak, visibility("hidden")));
/* `-Wl,--wrap=main` (pkg-config --libs squall-pthread) makes the C library call __wrap_main,
 * which runs the program's main (__real_main) on a shared stack. Weak: one definition per
 * program, and none needed by a program linked without the flag. */
extern int __real_main(int, char **, char **) __attribute__((weak));
__attribute__((weak)) int __wrap_main(int argc, char **argv, char **envp)
{
    return squall_pthread_main(argc, argv, envp, __real_main);
}
#ifdef __cplusplus
}
#endif
__attribute__((constructor(101), used)) static void squall_pthread_constructor_(void)
{
    squall_register_data(__start_squall_data, __stop_squall_data, __start_squall_bss,
                         __stop_squall_bss);
    squall_pthread_start();
}

#define pthread_create          squall_pthread_create
#define pthread_join            squall_pthread_join
#define pthread_exit            squall_pthread_exit
#define pthread_self            squall_pthread_self
#define pthread_detach          squall_pthread_detach
#define pthread_cancel          squall_pthread_cancel
#define pthread_mutex_init      squall_pthread_mutex_init
#define pthread_mutex_lock      squall_pthread_mutex_lock
#define pthread_mutex_trylock   squall_pthread_mutex_trylock
#define pthread_mutex_unlock    squall_pthread_mutex_unlock
#define pthread_mutex_destroy   squall_pthread_mutex_destroy
#define pthread_mutex_timedlock squall_pthread_mutex_timedlock
#define pthread_rwlock_init      squall_pthread_rwlock_init
#define pthread_rwlock_rdlock    squall_pthread_rwlock_rdlock
#define pthread_rwlock_wrlock    squall_pthread_rwlock_wrlock
#define pthread_rwlock_tryrdlock squall_pthread_rwlock_tryrdlock
#define pthread_rwlock_trywrlock squall_pthread_rwlock_trywrlock
#define pthread_rwlock_timedrdlock squall_pthread_rwlock_timedrdlock
#define pthread_rwlock_timedwrlock squall_pthread_rwlock_timedwrlock
#define pthread_rwlock_unlock    squall_pthread_rwlock_unlock
#define pthread_rwlock_destroy   squall_pthread_rwlock_destroy
/* pthread_spinlock_t is volatile: cast it away explicitly. */
#define pthread_spin_init(l, p)  squall_pthread_spin_init((void *)(l), (p))
#define pthread_spin_lock(l)     squall_pthread_spin_lock((void *)(l))
#define pthread_spin_trylock(l)  squall_pthread_spin_trylock((void *)(l))
#define pthread_spin_unlock(l)   squall_pthread_spin_unlock((void *)(l))
#define pthread_spin_destroy(l)  squall_pthread_spin_destroy((void *)(l))
#define pthread_once            squall_pthread_once
#define pthread_key_create      squall_pthread_key_create
#define pthread_key_delete      squall_pthread_key_delete
#define pthread_getspecific     squall_pthread_getspecific
#define pthread_setspecific     squall_pthread_setspecific
#define pthread_cond_init       squall_pthread_cond_init
#define pthread_cond_wait       squall_pthread_cond_wait
#define pthread_cond_timedwait  squall_pthread_cond_timedwait
#define pthread_cond_clockwait  squall_pthread_cond_clockwait
#define pthread_cond_signal     squall_pthread_cond_signal
#define pthread_cond_broadcast  squall_pthread_cond_broadcast
#define pthread_cond_destroy    squall_pthread_cond_destroy
#define pthread_barrier_init    squall_pthread_barrier_init
#define pthread_barrier_wait    squall_pthread_barrier_wait
#define pthread_barrier_destroy squall_pthread_barrier_destroy
#define sem_init                squall_sem_init
#define sem_wait                squall_sem_wait
#define sem_trywait             squall_sem_trywait
#define sem_timedwait           squall_sem_timedwait
#define sem_post                squall_sem_post
#define sem_getvalue            squall_sem_getvalue
#define sem_destroy             squall_sem_destroy
/* Named semaphores are refused (SEM_FAILED, errno ENOSYS, a message): see squall_sem_open. */
#define sem_open(name, ...)     ((sem_t *)squall_sem_open(name))

#ifdef __cplusplus
/* <cstdlib> is already in: make std::malloc etc. name the redirected functions too. */
#include <cstdlib>
namespace std {
using ::squall_pt_aligned_alloc;
using ::squall_pt_calloc;
using ::squall_pt_free;
using ::squall_pt_malloc;
using ::squall_pt_realloc;
}
#endif
#define malloc  squall_pt_malloc
#define calloc  squall_pt_calloc
#define realloc squall_pt_realloc
#define free    squall_pt_free
#define aligned_alloc  squall_pt_aligned_alloc
#define posix_memalign squall_pt_posix_memalign

#endif /* SQUALL_PTHREAD_H */
