/*
 * shmem.h - OpenSHMEM 1.4 C API on Squall (hand-written; the entry points are in
 * crates/capi/src/shmem.rs, the typed forms below are generated from them).
 *
 *   cc prog.c $(pkg-config --cflags --libs squall-shmem)
 *   squall run -n 4 ./a.out
 *
 * Each PE is one Squall node. Symmetric memory: shmem_malloc/shmem_align/shmem_calloc (every PE
 * calls them in the same order with the same size; the block has the same address on every
 * PE and each PE has its own copy, in an arena outside Squall's coherent range; size it with
 * SHMEM_SYMMETRIC_SIZE, default 1G) and the program's global and static variables
 * (squall-shmem.pc links with -no-pie so they are at the same address on every PE).
 * An address that is neither is refused at the target with an error naming the PE and the
 * address, and the job ends (OpenSHMEM calls return void).
 *
 * Completion: shmem_put* returns when the source may be reused; shmem_quiet (and
 * shmem_barrier_all, shmem_barrier, the locks) wait until every put, _nbi get and atomic of
 * this PE completed at its target. Puts to one PE are applied in order (shmem_fence is free).
 * Collectives use the 1.4 active-set forms (PE_start, logPE_stride, PE_size, pSync); pSync
 * must hold SHMEM_SYNC_VALUE on every PE before first use; pWrk is not used. Not provided:
 * contexts, teams (1.5), collect/fcollect/alltoall, long double reductions, complex types.
 */
#ifndef SHMEM_H
#define SHMEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 4
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "Squall OpenSHMEM"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 4
#define SHMEM_BCAST_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_BARRIER_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_COLLECT_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALL_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---- library setup, exit and query ---- */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

/* ---- symmetric memory ---- */
void *shmem_malloc(size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_calloc(size_t count, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);

/* ---- remote memory access ---- */
void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);

/* ---- ordering, synchronization, collectives, locks ---- */
void shmem_fence(void);
void shmem_quiet(void);
void shmem_barrier_all(void);
void shmem_sync_all(void);
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root,
                       int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root,
                       int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* ---- the internal entry points the typed forms below are made of ---- */
#define SQUALL_SHMEM_FETCH 0
#define SQUALL_SHMEM_SET 1
#define SQUALL_SHMEM_ADD 2
#define SQUALL_SHMEM_SWAP 3
#define SQUALL_SHMEM_CSWAP 4
#define SQUALL_SHMEM_AND 5
#define SQUALL_SHMEM_OR 6
#define SQUALL_SHMEM_XOR 7
uint64_t squall_shmem_atomic_fetch(void *dest, size_t width, int op, uint64_t value,
                                   uint64_t cond, int pe);
void squall_shmem_atomic(void *dest, size_t width, int op, uint64_t value, int pe);
uint64_t squall_shmem_wait_until(void *ivar, size_t width, int cmp, uint64_t value);
int squall_shmem_test(void *ivar, size_t width, int cmp, uint64_t value);

#define SQUALL_SHMEM_T_SHORT 1
#define SQUALL_SHMEM_T_INT 2
#define SQUALL_SHMEM_T_LONG 3
#define SQUALL_SHMEM_T_LONGLONG 4
#define SQUALL_SHMEM_T_FLOAT 5
#define SQUALL_SHMEM_T_DOUBLE 6
#define SQUALL_SHMEM_OP_SUM 0
#define SQUALL_SHMEM_OP_PROD 1
#define SQUALL_SHMEM_OP_MAX 2
#define SQUALL_SHMEM_OP_MIN 3
#define SQUALL_SHMEM_OP_AND 4
#define SQUALL_SHMEM_OP_OR 5
#define SQUALL_SHMEM_OP_XOR 6
void squall_shmem_reduce(void *dest, const void *source, int nreduce, int type, int op,
                         int PE_start, int logPE_stride, int PE_size, long *pSync);

/* A value's bytes, zero-extended to 64 bits (x86-64: little-endian). */
static inline uint64_t squall_shmem_bits_(const void *v, size_t n) {
    uint64_t b = 0;
    memcpy(&b, v, n);
    return b;
}

/* ---- typed RMA: shmem_TYPE_put/get/p/g/iput/iget and _nbi ---- */
#define SQUALL_SHMEM_RMA(N, T)                                                              \
    static inline void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe) {  \
        shmem_putmem(dest, source, nelems * sizeof(T), pe);                                \
    }                                                                                      \
    static inline void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe) {  \
        shmem_getmem(dest, source, nelems * sizeof(T), pe);                                \
    }                                                                                      \
    static inline void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems,        \
                                           int pe) {                                       \
        shmem_putmem_nbi(dest, source, nelems * sizeof(T), pe);                            \
    }                                                                                      \
    static inline void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems,        \
                                           int pe) {                                       \
        shmem_getmem_nbi(dest, source, nelems * sizeof(T), pe);                            \
    }                                                                                      \
    static inline void shmem_##N##_p(T *dest, T value, int pe) {                           \
        shmem_putmem(dest, &value, sizeof(T), pe);                                         \
    }                                                                                      \
    static inline T shmem_##N##_g(const T *source, int pe) {                               \
        T v;                                                                               \
        shmem_getmem(&v, source, sizeof(T), pe);                                           \
        return v;                                                                          \
    }                                                                                      \
    static inline void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst,          \
                                        ptrdiff_t sst, size_t nelems, int pe) {            \
        for (size_t i = 0; i < nelems; i++)                                                \
            shmem_putmem(dest + (ptrdiff_t)i * dst, source + (ptrdiff_t)i * sst,           \
                         sizeof(T), pe);                                                   \
    }                                                                                      \
    static inline void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst,          \
                                        ptrdiff_t sst, size_t nelems, int pe) {            \
        for (size_t i = 0; i < nelems; i++)                                                \
            shmem_getmem_nbi(dest + (ptrdiff_t)i * dst, source + (ptrdiff_t)i * sst,       \
                             sizeof(T), pe);                                               \
        shmem_quiet();                                                                     \
    }

SQUALL_SHMEM_RMA(float, float)
SQUALL_SHMEM_RMA(double, double)
SQUALL_SHMEM_RMA(longdouble, long double)
SQUALL_SHMEM_RMA(char, char)
SQUALL_SHMEM_RMA(schar, signed char)
SQUALL_SHMEM_RMA(short, short)
SQUALL_SHMEM_RMA(int, int)
SQUALL_SHMEM_RMA(long, long)
SQUALL_SHMEM_RMA(longlong, long long)
SQUALL_SHMEM_RMA(uchar, unsigned char)
SQUALL_SHMEM_RMA(ushort, unsigned short)
SQUALL_SHMEM_RMA(uint, unsigned int)
SQUALL_SHMEM_RMA(ulong, unsigned long)
SQUALL_SHMEM_RMA(ulonglong, unsigned long long)
SQUALL_SHMEM_RMA(int8, int8_t)
SQUALL_SHMEM_RMA(int16, int16_t)
SQUALL_SHMEM_RMA(int32, int32_t)
SQUALL_SHMEM_RMA(int64, int64_t)
SQUALL_SHMEM_RMA(uint8, uint8_t)
SQUALL_SHMEM_RMA(uint16, uint16_t)
SQUALL_SHMEM_RMA(uint32, uint32_t)
SQUALL_SHMEM_RMA(uint64, uint64_t)
SQUALL_SHMEM_RMA(size, size_t)
SQUALL_SHMEM_RMA(ptrdiff, ptrdiff_t)

/* ---- sized RMA: shmem_putSIZE/getSIZE (bits per element) ---- */
#define SQUALL_SHMEM_SIZED(BITS)                                                            \
    static inline void shmem_put##BITS(void *dest, const void *source, size_t nelems,      \
                                       int pe) {                                           \
        shmem_putmem(dest, source, nelems * (BITS / 8), pe);                               \
    }                                                                                      \
    static inline void shmem_get##BITS(void *dest, const void *source, size_t nelems,      \
                                       int pe) {                                           \
        shmem_getmem(dest, source, nelems * (BITS / 8), pe);                               \
    }                                                                                      \
    static inline void shmem_put##BITS##_nbi(void *dest, const void *source,               \
                                             size_t nelems, int pe) {                      \
        shmem_putmem_nbi(dest, source, nelems * (BITS / 8), pe);                           \
    }                                                                                      \
    static inline void shmem_get##BITS##_nbi(void *dest, const void *source,               \
                                             size_t nelems, int pe) {                      \
        shmem_getmem_nbi(dest, source, nelems * (BITS / 8), pe);                           \
    }
SQUALL_SHMEM_SIZED(8)
SQUALL_SHMEM_SIZED(16)
SQUALL_SHMEM_SIZED(32)
SQUALL_SHMEM_SIZED(64)
SQUALL_SHMEM_SIZED(128)

/* ---- atomics: fetch, set, swap for every AMO type; the rest for the integer types ---- */
#define SQUALL_SHMEM_AMO_EXT(N, T)                                                          \
    static inline T shmem_##N##_atomic_fetch(const T *source, int pe) {                    \
        uint64_t r = squall_shmem_atomic_fetch((void *)source, sizeof(T), SQUALL_SHMEM_FETCH, \
                                               0, 0, pe);                                  \
        T v;                                                                               \
        memcpy(&v, &r, sizeof(T));                                                         \
        return v;                                                                          \
    }                                                                                      \
    static inline void shmem_##N##_atomic_set(T *dest, T value, int pe) {                 \
        squall_shmem_atomic(dest, sizeof(T), SQUALL_SHMEM_SET,                             \
                            squall_shmem_bits_(&value, sizeof(T)), pe);                    \
    }                                                                                      \
    static inline T shmem_##N##_atomic_swap(T *dest, T value, int pe) {                    \
        uint64_t r = squall_shmem_atomic_fetch(dest, sizeof(T), SQUALL_SHMEM_SWAP,         \
                                               squall_shmem_bits_(&value, sizeof(T)), 0,   \
                                               pe);                                        \
        T v;                                                                               \
        memcpy(&v, &r, sizeof(T));                                                         \
        return v;                                                                          \
    }                                                                                      \
    static inline T shmem_##N##_fetch(const T *source, int pe) {                           \
        return shmem_##N##_atomic_fetch(source, pe);                                       \
    }                                                                                      \
    static inline void shmem_##N##_set(T *dest, T value, int pe) {                         \
        shmem_##N##_atomic_set(dest, value, pe);                                           \
    }                                                                                      \
    static inline T shmem_##N##_swap(T *dest, T value, int pe) {                           \
        return shmem_##N##_atomic_swap(dest, value, pe);                                   \
    }

#define SQUALL_SHMEM_FETCH_OP_(N, T, NAME, OP)                                              \
    static inline T shmem_##N##_atomic_fetch_##NAME(T *dest, T value, int pe) {            \
        uint64_t r = squall_shmem_atomic_fetch(dest, sizeof(T), OP,                        \
                                               squall_shmem_bits_(&value, sizeof(T)), 0,   \
                                               pe);                                        \
        T v;                                                                               \
        memcpy(&v, &r, sizeof(T));                                                         \
        return v;                                                                          \
    }                                                                                      \
    static inline void shmem_##N##_atomic_##NAME(T *dest, T value, int pe) {               \
        squall_shmem_atomic(dest, sizeof(T), OP, squall_shmem_bits_(&value, sizeof(T)),    \
                            pe);                                                           \
    }

#define SQUALL_SHMEM_AMO_STD(N, T)                                                          \
    SQUALL_SHMEM_AMO_EXT(N, T)                                                             \
    SQUALL_SHMEM_FETCH_OP_(N, T, add, SQUALL_SHMEM_ADD)                                    \
    SQUALL_SHMEM_FETCH_OP_(N, T, and, SQUALL_SHMEM_AND)                                    \
    SQUALL_SHMEM_FETCH_OP_(N, T, or, SQUALL_SHMEM_OR)                                      \
    SQUALL_SHMEM_FETCH_OP_(N, T, xor, SQUALL_SHMEM_XOR)                                    \
    static inline T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe) {    \
        uint64_t r = squall_shmem_atomic_fetch(dest, sizeof(T), SQUALL_SHMEM_CSWAP,        \
                                               squall_shmem_bits_(&value, sizeof(T)),      \
                                               squall_shmem_bits_(&cond, sizeof(T)), pe);  \
        T v;                                                                               \
        memcpy(&v, &r, sizeof(T));                                                         \
        return v;                                                                          \
    }                                                                                      \
    static inline T shmem_##N##_atomic_fetch_inc(T *dest, int pe) {                        \
        return shmem_##N##_atomic_fetch_add(dest, (T)1, pe);                               \
    }                                                                                      \
    static inline void shmem_##N##_atomic_inc(T *dest, int pe) {                          \
        shmem_##N##_atomic_add(dest, (T)1, pe);                                            \
    }                                                                                      \
    /* the names before OpenSHMEM 1.4 */                                                    \
    static inline T shmem_##N##_cswap(T *dest, T cond, T value, int pe) {                  \
        return shmem_##N##_atomic_compare_swap(dest, cond, value, pe);                     \
    }                                                                                      \
    static inline T shmem_##N##_fadd(T *dest, T value, int pe) {                           \
        return shmem_##N##_atomic_fetch_add(dest, value, pe);                              \
    }                                                                                      \
    static inline T shmem_##N##_finc(T *dest, int pe) {                                    \
        return shmem_##N##_atomic_fetch_inc(dest, pe);                                     \
    }                                                                                      \
    static inline void shmem_##N##_add(T *dest, T value, int pe) {                         \
        shmem_##N##_atomic_add(dest, value, pe);                                           \
    }                                                                                      \
    static inline void shmem_##N##_inc(T *dest, int pe) { shmem_##N##_atomic_inc(dest, pe); }

SQUALL_SHMEM_AMO_EXT(float, float)
SQUALL_SHMEM_AMO_EXT(double, double)
SQUALL_SHMEM_AMO_STD(int, int)
SQUALL_SHMEM_AMO_STD(long, long)
SQUALL_SHMEM_AMO_STD(longlong, long long)
SQUALL_SHMEM_AMO_STD(uint, unsigned int)
SQUALL_SHMEM_AMO_STD(ulong, unsigned long)
SQUALL_SHMEM_AMO_STD(ulonglong, unsigned long long)
SQUALL_SHMEM_AMO_STD(int32, int32_t)
SQUALL_SHMEM_AMO_STD(int64, int64_t)
SQUALL_SHMEM_AMO_STD(uint32, uint32_t)
SQUALL_SHMEM_AMO_STD(uint64, uint64_t)
SQUALL_SHMEM_AMO_STD(size, size_t)
SQUALL_SHMEM_AMO_STD(ptrdiff, ptrdiff_t)

/* ---- point-to-point synchronization (4- and 8-byte types; compared as signed) ---- */
#define SQUALL_SHMEM_WAIT(N, T)                                                             \
    static inline void shmem_##N##_wait_until(T *ivar, int cmp, T value) {                 \
        squall_shmem_wait_until(ivar, sizeof(T), cmp, squall_shmem_bits_(&value, sizeof(T))); \
    }                                                                                      \
    static inline int shmem_##N##_test(T *ivar, int cmp, T value) {                        \
        return squall_shmem_test(ivar, sizeof(T), cmp, squall_shmem_bits_(&value, sizeof(T))); \
    }                                                                                      \
    static inline void shmem_##N##_wait(T *ivar, T value) {                                \
        shmem_##N##_wait_until(ivar, SHMEM_CMP_NE, value);                                 \
    }
SQUALL_SHMEM_WAIT(int, int)
SQUALL_SHMEM_WAIT(long, long)
SQUALL_SHMEM_WAIT(longlong, long long)
SQUALL_SHMEM_WAIT(uint, unsigned int)
SQUALL_SHMEM_WAIT(ulong, unsigned long)
SQUALL_SHMEM_WAIT(ulonglong, unsigned long long)
SQUALL_SHMEM_WAIT(int32, int32_t)
SQUALL_SHMEM_WAIT(int64, int64_t)
SQUALL_SHMEM_WAIT(uint32, uint32_t)
SQUALL_SHMEM_WAIT(uint64, uint64_t)
SQUALL_SHMEM_WAIT(size, size_t)
SQUALL_SHMEM_WAIT(ptrdiff, ptrdiff_t)
static inline void shmem_wait_until(long *ivar, int cmp, long value) {
    shmem_long_wait_until(ivar, cmp, value);
}
static inline void shmem_wait(long *ivar, long value) { shmem_long_wait(ivar, value); }

/* ---- reductions: shmem_TYPE_OP_to_all ---- */
#define SQUALL_SHMEM_REDUCE(N, T, TY, OPN, OP)                                              \
    static inline void shmem_##N##_##OPN##_to_all(T *dest, const T *source, int nreduce,  \
                                                  int PE_start, int logPE_stride,         \
                                                  int PE_size, T *pWrk, long *pSync) {    \
        (void)pWrk;                                                                        \
        squall_shmem_reduce(dest, source, nreduce, TY, OP, PE_start, logPE_stride,         \
                            PE_size, pSync);                                               \
    }
#define SQUALL_SHMEM_REDUCE_ARITH(N, T, TY)                                                 \
    SQUALL_SHMEM_REDUCE(N, T, TY, sum, SQUALL_SHMEM_OP_SUM)                                \
    SQUALL_SHMEM_REDUCE(N, T, TY, prod, SQUALL_SHMEM_OP_PROD)                              \
    SQUALL_SHMEM_REDUCE(N, T, TY, max, SQUALL_SHMEM_OP_MAX)                                \
    SQUALL_SHMEM_REDUCE(N, T, TY, min, SQUALL_SHMEM_OP_MIN)
#define SQUALL_SHMEM_REDUCE_INT(N, T, TY)                                                   \
    SQUALL_SHMEM_REDUCE_ARITH(N, T, TY)                                                    \
    SQUALL_SHMEM_REDUCE(N, T, TY, and, SQUALL_SHMEM_OP_AND)                                \
    SQUALL_SHMEM_REDUCE(N, T, TY, or, SQUALL_SHMEM_OP_OR)                                  \
    SQUALL_SHMEM_REDUCE(N, T, TY, xor, SQUALL_SHMEM_OP_XOR)
SQUALL_SHMEM_REDUCE_INT(short, short, SQUALL_SHMEM_T_SHORT)
SQUALL_SHMEM_REDUCE_INT(int, int, SQUALL_SHMEM_T_INT)
SQUALL_SHMEM_REDUCE_INT(long, long, SQUALL_SHMEM_T_LONG)
SQUALL_SHMEM_REDUCE_INT(longlong, long long, SQUALL_SHMEM_T_LONGLONG)
SQUALL_SHMEM_REDUCE_ARITH(float, float, SQUALL_SHMEM_T_FLOAT)
SQUALL_SHMEM_REDUCE_ARITH(double, double, SQUALL_SHMEM_T_DOUBLE)

/* ---- names from before OpenSHMEM 1.2 ---- */
static inline void start_pes(int npes) { (void)npes; shmem_init(); }
static inline int _my_pe(void) { return shmem_my_pe(); }
static inline int _num_pes(void) { return shmem_n_pes(); }
static inline int my_pe(void) { return shmem_my_pe(); }
static inline int num_pes(void) { return shmem_n_pes(); }
static inline void *shmalloc(size_t size) { return shmem_malloc(size); }
static inline void *shmemalign(size_t alignment, size_t size) { return shmem_align(alignment, size); }
static inline void *shrealloc(void *ptr, size_t size) { return shmem_realloc(ptr, size); }
static inline void shfree(void *ptr) { shmem_free(ptr); }

/* ---- C11 type-generic forms of the common calls ---- */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
#define SQUALL_SHMEM_GENERIC_(X, op)                                                        \
    _Generic(*(X), int: shmem_int_##op, long: shmem_long_##op,                             \
             long long: shmem_longlong_##op, unsigned int: shmem_uint_##op,                \
             unsigned long: shmem_ulong_##op, unsigned long long: shmem_ulonglong_##op,    \
             float: shmem_float_##op, double: shmem_double_##op)
#define SQUALL_SHMEM_GENERIC_INT_(X, op)                                                    \
    _Generic(*(X), int: shmem_int_##op, long: shmem_long_##op,                             \
             long long: shmem_longlong_##op, unsigned int: shmem_uint_##op,                \
             unsigned long: shmem_ulong_##op, unsigned long long: shmem_ulonglong_##op)
#define shmem_put(dest, source, nelems, pe) SQUALL_SHMEM_GENERIC_(dest, put)(dest, source, nelems, pe)
#define shmem_get(dest, source, nelems, pe) SQUALL_SHMEM_GENERIC_(dest, get)(dest, source, nelems, pe)
#define shmem_put_nbi(dest, source, nelems, pe) SQUALL_SHMEM_GENERIC_(dest, put_nbi)(dest, source, nelems, pe)
#define shmem_get_nbi(dest, source, nelems, pe) SQUALL_SHMEM_GENERIC_(dest, get_nbi)(dest, source, nelems, pe)
#define shmem_p(dest, value, pe) SQUALL_SHMEM_GENERIC_(dest, p)(dest, value, pe)
#define shmem_g(source, pe) SQUALL_SHMEM_GENERIC_(source, g)(source, pe)
#define shmem_atomic_fetch(source, pe) SQUALL_SHMEM_GENERIC_(source, atomic_fetch)(source, pe)
#define shmem_atomic_set(dest, value, pe) SQUALL_SHMEM_GENERIC_(dest, atomic_set)(dest, value, pe)
#define shmem_atomic_swap(dest, value, pe) SQUALL_SHMEM_GENERIC_(dest, atomic_swap)(dest, value, pe)
#define shmem_atomic_add(dest, value, pe) SQUALL_SHMEM_GENERIC_INT_(dest, atomic_add)(dest, value, pe)
#define shmem_atomic_fetch_add(dest, value, pe) SQUALL_SHMEM_GENERIC_INT_(dest, atomic_fetch_add)(dest, value, pe)
#define shmem_atomic_inc(dest, pe) SQUALL_SHMEM_GENERIC_INT_(dest, atomic_inc)(dest, pe)
#define shmem_atomic_fetch_inc(dest, pe) SQUALL_SHMEM_GENERIC_INT_(dest, atomic_fetch_inc)(dest, pe)
#define shmem_atomic_compare_swap(dest, cond, value, pe) SQUALL_SHMEM_GENERIC_INT_(dest, atomic_compare_swap)(dest, cond, value, pe)
#endif

#ifdef __cplusplus
}
#endif

#endif /* SHMEM_H */
