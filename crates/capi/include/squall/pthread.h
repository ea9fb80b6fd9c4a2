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
 *  - pthread_create / pthread_join: threads are placed round-robin over the nodes. A create is
 *    a release and a join an acquire. The thread function must be in the program or a library
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
 *  - pthread_mutex_*, pthread_rwlock_*, pthread_spin_*, pthread_cond_*, pthread_barrier_* become
 *    Squall locks, conditions and barriers named by the OBJECT'S ADDRESS:
 *    PTHREAD_MUTEX_INITIALIZER and PTHREAD_COND_INITIALIZER work and nothing is stored in them.
 *    The object may live in Squall memory (malloc'd), in a global, or on a stack. A barrier
 *    stores its count in the pthread_barrier_t. Mutexes are error-checking (relock: EDEADLK,
 *    unlock when not held: EPERM, destroy while held: EBUSY); errors are also printed on
 *    stderr. Read-write locks and spinlocks are exclusive Squall locks too (readers do not
 *    overlap; a second read lock by the same thread is EDEADLK). Not supported: recursive
 *    mutexes, pthread_cond_timedwait and pthread_cancel (ENOTSUP), thread-specific data across
 *    nodes.
 *  - malloc / calloc / realloc / free / aligned_alloc / posix_memalign come from the shared
 *    heap (memory from the C library, e.g. strdup, is private to the node and is still freed
 *    by the C library).
 */
#ifndef SQUALL_PTHREAD_H
#define SQUALL_PTHREAD_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../squall.h"

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
#define pthread_rwlock_init      squall_pthread_rwlock_init
#define pthread_rwlock_rdlock    squall_pthread_rwlock_lock
#define pthread_rwlock_wrlock    squall_pthread_rwlock_lock
#define pthread_rwlock_tryrdlock squall_pthread_rwlock_trylock
#define pthread_rwlock_trywrlock squall_pthread_rwlock_trylock
#define pthread_rwlock_unlock    squall_pthread_rwlock_unlock
#define pthread_rwlock_destroy   squall_pthread_rwlock_destroy
/* pthread_spinlock_t is volatile: cast it away explicitly. */
#define pthread_spin_init(l, p)  squall_pthread_spin_init((void *)(l), (p))
#define pthread_spin_lock(l)     squall_pthread_mutex_lock((void *)(l))
#define pthread_spin_trylock(l)  squall_pthread_mutex_trylock((void *)(l))
#define pthread_spin_unlock(l)   squall_pthread_mutex_unlock((void *)(l))
#define pthread_spin_destroy(l)  squall_pthread_mutex_destroy((void *)(l))
#define pthread_cond_init       squall_pthread_cond_init
#define pthread_cond_wait       squall_pthread_cond_wait
#define pthread_cond_timedwait  squall_pthread_cond_timedwait
#define pthread_cond_signal     squall_pthread_cond_signal
#define pthread_cond_broadcast  squall_pthread_cond_broadcast
#define pthread_cond_destroy    squall_pthread_cond_destroy
#define pthread_barrier_init    squall_pthread_barrier_init
#define pthread_barrier_wait    squall_pthread_barrier_wait
#define pthread_barrier_destroy squall_pthread_barrier_destroy

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
