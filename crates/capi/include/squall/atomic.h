/*
 * squall/atomic.h - atomics that are correct across nodes (included by squall/pthread.h).
 *
 * A CPU atomic instruction is atomic only on the copy of a page it runs on; under Squall's
 * default protocol (hlrc, multiple writers) every node writes its own copy, so a plain
 * `lock xadd` loses updates across nodes. This header turns the atomic operations a C or C++
 * program names into calls that execute them at the home node of the object's page, one at a
 * time per location, with their C11 memory order carried across nodes:
 *
 *  - GCC's `__atomic_*` builtins: load(_n), store(_n), exchange(_n), compare_exchange(_n),
 *    fetch_OP / OP_fetch for add, sub, and, or, xor, nand; test_and_set, clear, thread_fence;
 *  - GCC's `__sync_*` builtins (full barriers: sequentially consistent), lock_test_and_set
 *    (acquire), lock_release (release), synchronize;
 *  - C11 <stdatomic.h> generic functions (atomic_load/store/exchange/compare_exchange_*,
 *    atomic_fetch_*, atomic_flag_*, atomic_thread_fence, their _explicit forms): GCC's
 *    <stdatomic.h> writes them with the `__atomic_*` builtins, so they are covered as long as
 *    this header comes first (the squall-pthread pkg-config line `-include`s it);
 *  - C++ std::atomic (libstdc++ writes it with the same builtins in its headers): covered when
 *    <atomic> is included after this header (again: the pkg-config line does that).
 *
 * Objects of 1, 2, 4 or 8 bytes, naturally aligned. An object outside Squall memory (a
 * thread's private data, the C library's) gets the native builtin (through the library: one
 * function call). In Squall memory: a release order (release, acq_rel, seq_cst) first makes
 * the node's writes visible and leaves the node's synchronization info at the object's page; an
 * acquire order (acquire, consume, acq_rel, seq_cst) gets the infos other nodes left there,
 * so their writes before their releasing operations are visible after it. A plain read of the
 * object after any atomic on it sees the value the atomic left (or a later one). Relaxed
 * operations are atomic but order nothing.
 * Fences: a release fence gives the thread's later relaxed writes release meaning, an acquire
 * fence acquires through the locations the thread read with relaxed operations before it.
 * docs/memory-model.md states the whole model.
 *
 * Refused (the program ends with a message naming the operation and the address): an atomic
 * operation in Squall memory on an object of another size or misaligned. NOT covered, because
 * the compiler emits them as instructions without naming anything a header can redirect: the
 * operator forms on `_Atomic` objects (`x++`, `x += v`, `x = v`, reading `x`), inline assembly,
 * and atomics in code compiled without this header. Under hlrc those lose updates across
 * nodes; use the function forms (atomic_fetch_add(&x, 1), atomic_load(&x), ...). Pages of the
 * `sc` protocol (SQUALL_PROTOCOL=sc allocations) keep one writable copy, so CPU atomics on them
 * are atomic across nodes.
 */
#ifndef SQUALL_ATOMIC_H
#define SQUALL_ATOMIC_H

#include <stdint.h>
#include "../squall.h"

#ifdef __cplusplus
#include <type_traits>
/* The object type behind pointer p, without cv-qualifiers. */
#define SQUALL_AT_T_(p) typename std::remove_cv<typename std::remove_reference<decltype(*(p))>::type>::type
#define SQUALL_AT_AUTO_ auto
#define SQUALL_AT_BOOL_ bool
#else
/* An rvalue drops qualifiers, _Atomic included (GCC's <stdatomic.h> does the same). */
#define SQUALL_AT_T_(p) __typeof__((void)0, *(p))
#define SQUALL_AT_AUTO_ __auto_type
#define SQUALL_AT_BOOL_ _Bool
#endif

/* The operation codes of squall_atomic_op (crates/capi/src/atomic.rs). */
#define SQUALL_ATOMIC_ADD 0
#define SQUALL_ATOMIC_SUB 1
#define SQUALL_ATOMIC_AND 2
#define SQUALL_ATOMIC_OR 3
#define SQUALL_ATOMIC_XOR 4
#define SQUALL_ATOMIC_NAND 5
#define SQUALL_ATOMIC_XCHG 6
#define SQUALL_ATOMIC_CAS 7
#define SQUALL_ATOMIC_LOAD 8
#define SQUALL_ATOMIC_STORE 9

/* Bits of the value x of type T (little-endian, zero-extended), and back. */
#define SQUALL_AT_BITS_(T, x)                                                              \
    __extension__({                                                                        \
        T squall_at_x_ = (x);                                                              \
        uint64_t squall_at_b_ = 0;                                                         \
        __builtin_memcpy(&squall_at_b_, &squall_at_x_, sizeof(T) < 8 ? sizeof(T) : 8);     \
        squall_at_b_;                                                                      \
    })
#define SQUALL_AT_FROM_(T, b)                                                              \
    __extension__({                                                                        \
        uint64_t squall_at_c_ = (b);                                                       \
        T squall_at_y_;                                                                    \
        __builtin_memset((void *)&squall_at_y_, 0, sizeof(T));                             \
        __builtin_memcpy((void *)&squall_at_y_, &squall_at_c_, sizeof(T) < 8 ? sizeof(T) : 8); \
        squall_at_y_;                                                                      \
    })
/* The old value's bits of operation op on the object at bound pointer p. */
#define SQUALL_AT_CALL_(p, op, vbits, ebits, mo, what)                                     \
    squall_atomic_op((void *)(p), (uint32_t)sizeof(*(p)), (op), (vbits), (ebits), (int)(mo), (what))
/* The value of `old OP v` for the _fetch forms (in 64 bits; the call masks to the width). */
#define SQUALL_AT_APPLY_(op, o, v)                                                         \
    ((op) == SQUALL_ATOMIC_ADD   ? (o) + (v)                                               \
     : (op) == SQUALL_ATOMIC_SUB ? (o) - (v)                                               \
     : (op) == SQUALL_ATOMIC_AND ? ((o) & (v))                                             \
     : (op) == SQUALL_ATOMIC_OR  ? ((o) | (v))                                             \
     : (op) == SQUALL_ATOMIC_XOR ? ((o) ^ (v))                                             \
                                 : ~((o) & (v)))

/* fetch_OP: the old value. */
#define SQUALL_AT_FETCH_(p, v, mo, op, what)                                               \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        SQUALL_AT_FROM_(squall_at_t_,                                                      \
                        SQUALL_AT_CALL_(squall_at_p_, op, (uint64_t)(v), 0, mo, what));    \
    })
/* OP_fetch: the new value. */
#define SQUALL_AT_OPFETCH_(p, v, mo, op, what)                                             \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        uint64_t squall_at_v_ = (uint64_t)(v);                                             \
        uint64_t squall_at_o_ = SQUALL_AT_CALL_(squall_at_p_, op, squall_at_v_, 0, mo, what); \
        SQUALL_AT_FROM_(squall_at_t_, SQUALL_AT_APPLY_(op, squall_at_o_, squall_at_v_));   \
    })

#define __atomic_load_n(p, mo)                                                             \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        SQUALL_AT_FROM_(squall_at_t_, SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_LOAD, 0, \
                                                      0, mo, "atomic load"));              \
    })
#define __atomic_load(p, ret, mo)                                                          \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        *(ret) = SQUALL_AT_FROM_(squall_at_t_,                                             \
                                 SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_LOAD, 0, 0,  \
                                                 mo, "atomic load"));                      \
        (void)0;                                                                           \
    })
#define __atomic_store_n(p, v, mo)                                                         \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        (void)SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_STORE,                           \
                              SQUALL_AT_BITS_(squall_at_t_, (v)), 0, mo, "atomic store");  \
    })
#define __atomic_store(p, vp, mo)                                                          \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        (void)SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_STORE,                           \
                              SQUALL_AT_BITS_(squall_at_t_, *(vp)), 0, mo, "atomic store"); \
    })
#define __atomic_exchange_n(p, v, mo)                                                      \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        SQUALL_AT_FROM_(squall_at_t_,                                                      \
                        SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_XCHG,                  \
                                        SQUALL_AT_BITS_(squall_at_t_, (v)), 0, mo,         \
                                        "atomic exchange"));                               \
    })
#define __atomic_exchange(p, vp, ret, mo)                                                  \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        *(ret) = SQUALL_AT_FROM_(squall_at_t_,                                             \
                                 SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_XCHG,         \
                                                 SQUALL_AT_BITS_(squall_at_t_, *(vp)), 0,  \
                                                 mo, "atomic exchange"));                  \
        (void)0;                                                                           \
    })
/* Compare-exchange (weak ones never fail spuriously); the failure order is not weaker than
 * the success order's acquire part, so the success order is used for both. */
#define SQUALL_AT_CAS_(p, ep, dbits, smo, what)                                            \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_p_ = (p);                                                \
        typedef SQUALL_AT_T_(squall_at_p_) squall_at_t_;                                   \
        SQUALL_AT_AUTO_ squall_at_e_ = (ep);                                               \
        uint64_t squall_at_eb_ = SQUALL_AT_BITS_(squall_at_t_, *squall_at_e_);             \
        uint64_t squall_at_o_ =                                                            \
            SQUALL_AT_CALL_(squall_at_p_, SQUALL_ATOMIC_CAS, (dbits), squall_at_eb_, smo, what); \
        SQUALL_AT_BOOL_ squall_at_ok_ = squall_at_o_ == squall_at_eb_;                     \
        if (!squall_at_ok_)                                                                \
            *squall_at_e_ = SQUALL_AT_FROM_(squall_at_t_, squall_at_o_);                   \
        squall_at_ok_;                                                                     \
    })
#define __atomic_compare_exchange_n(p, ep, d, weak, smo, fmo)                              \
    ((void)(weak), (void)(fmo),                                                            \
     SQUALL_AT_CAS_(p, ep, SQUALL_AT_BITS_(SQUALL_AT_T_(p), (d)), smo,                     \
                    "atomic compare-exchange"))
#define __atomic_compare_exchange(p, ep, dp, weak, smo, fmo)                               \
    ((void)(weak), (void)(fmo),                                                            \
     SQUALL_AT_CAS_(p, ep, SQUALL_AT_BITS_(SQUALL_AT_T_(p), *(dp)), smo,                   \
                    "atomic compare-exchange"))

#define __atomic_fetch_add(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_ADD, "atomic fetch_add")
#define __atomic_fetch_sub(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_SUB, "atomic fetch_sub")
#define __atomic_fetch_and(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_AND, "atomic fetch_and")
#define __atomic_fetch_or(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_OR, "atomic fetch_or")
#define __atomic_fetch_xor(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_XOR, "atomic fetch_xor")
#define __atomic_fetch_nand(p, v, mo) SQUALL_AT_FETCH_(p, v, mo, SQUALL_ATOMIC_NAND, "atomic fetch_nand")
#define __atomic_add_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_ADD, "atomic add_fetch")
#define __atomic_sub_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_SUB, "atomic sub_fetch")
#define __atomic_and_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_AND, "atomic and_fetch")
#define __atomic_or_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_OR, "atomic or_fetch")
#define __atomic_xor_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_XOR, "atomic xor_fetch")
#define __atomic_nand_fetch(p, v, mo) SQUALL_AT_OPFETCH_(p, v, mo, SQUALL_ATOMIC_NAND, "atomic nand_fetch")
/* test_and_set / clear work on the object's first byte (atomic_flag, bool, char). */
#define __atomic_test_and_set(p, mo)                                                       \
    (squall_atomic_op((void *)(p), 1, SQUALL_ATOMIC_XCHG, 1, 0, (int)(mo),                 \
                      "atomic test_and_set") != 0)
#define __atomic_clear(p, mo)                                                              \
    ((void)squall_atomic_op((void *)(p), 1, SQUALL_ATOMIC_STORE, 0, 0, (int)(mo), "atomic clear"))
#define __atomic_thread_fence(mo) squall_atomic_fence((int)(mo))

/* The legacy __sync builtins: full barriers (sequentially consistent). */
#define __sync_fetch_and_add(p, v) __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST)
#define __sync_fetch_and_sub(p, v) __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST)
#define __sync_fetch_and_or(p, v) __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST)
#define __sync_fetch_and_and(p, v) __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST)
#define __sync_fetch_and_xor(p, v) __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST)
#define __sync_fetch_and_nand(p, v) __atomic_fetch_nand(p, v, __ATOMIC_SEQ_CST)
#define __sync_add_and_fetch(p, v) __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_sub_and_fetch(p, v) __atomic_sub_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_or_and_fetch(p, v) __atomic_or_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_and_and_fetch(p, v) __atomic_and_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_xor_and_fetch(p, v) __atomic_xor_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_nand_and_fetch(p, v) __atomic_nand_fetch(p, v, __ATOMIC_SEQ_CST)
#define __sync_val_compare_and_swap(p, o, n)                                               \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_q_ = (p);                                                \
        SQUALL_AT_T_(squall_at_q_) squall_at_old_ = (o);                                   \
        (void)SQUALL_AT_CAS_(squall_at_q_, &squall_at_old_,                                \
                             SQUALL_AT_BITS_(SQUALL_AT_T_(squall_at_q_), (n)),             \
                             __ATOMIC_SEQ_CST, "__sync_val_compare_and_swap");             \
        squall_at_old_;                                                                    \
    })
#define __sync_bool_compare_and_swap(p, o, n)                                              \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_q_ = (p);                                                \
        SQUALL_AT_T_(squall_at_q_) squall_at_old_ = (o);                                   \
        SQUALL_AT_CAS_(squall_at_q_, &squall_at_old_,                                      \
                       SQUALL_AT_BITS_(SQUALL_AT_T_(squall_at_q_), (n)), __ATOMIC_SEQ_CST, \
                       "__sync_bool_compare_and_swap");                                    \
    })
#define __sync_lock_test_and_set(p, v) __atomic_exchange_n(p, v, __ATOMIC_ACQUIRE)
#define __sync_lock_release(p)                                                             \
    __extension__({                                                                        \
        SQUALL_AT_AUTO_ squall_at_q_ = (p);                                                \
        (void)SQUALL_AT_CALL_(squall_at_q_, SQUALL_ATOMIC_STORE, 0, 0, __ATOMIC_RELEASE,   \
                              "__sync_lock_release");                                      \
    })
#define __sync_synchronize() squall_atomic_fence(__ATOMIC_SEQ_CST)

#endif /* SQUALL_ATOMIC_H */
