// squall.hpp - C++ wrappers over the C API in squall.h (header-only, C++17).
//
// Errors become squall::error exceptions (code() is the SQUALL_ERR_* value, what() the text of
// squall_last_error()), except in destructors, which never throw.
//
//   squall::session s;                        // squall_init() ... squall_finalize() (SPMD)
//   squall::session s(squall::session::ssi);  // single system image: only rank 0 continues
//   { squall::lock_guard g(7); ... }          // global lock 7 held in this scope
//   auto a = squall::make_array<double>(n);   // shared, zeroed; squall_free on destruction
//   squall::thread t(fn, arg, node);          // fn(arg) on `node` (or round-robin); joined by
//   void *r = t.join();                       //   join() or, at the latest, the destructor
#ifndef SQUALL_HPP
#define SQUALL_HPP

#include "squall.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace squall {

/// A failed Squall call.
class error : public std::runtime_error {
public:
    error(int code, const char *call)
        : std::runtime_error(std::string(call) + ": " + squall_last_error()), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

/// Throw squall::error for a negative status; return non-negative ones.
inline int check(int rc, const char *call) {
    if (rc < 0) throw error(rc, call);
    return rc;
}

/// The node for the lifetime of this object: squall_init (or squall_init_ssi) ... squall_finalize.
class session {
public:
    enum mode { spmd, ssi };
    explicit session(mode m = spmd) {
        check(m == ssi ? squall_init_ssi() : squall_init(), m == ssi ? "squall_init_ssi" : "squall_init");
    }
    ~session() { squall_finalize(); }
    session(const session &) = delete;
    session &operator=(const session &) = delete;
    int rank() const { return check(squall_rank(), "squall_rank"); }
    int size() const { return check(squall_size(), "squall_size"); }
};

/// A global lock named by a number.
class lock {
public:
    explicit lock(std::uint64_t id) noexcept : id_(id) {}
    void acquire() { check(squall_lock(id_), "squall_lock"); }
    bool try_acquire() { return check(squall_trylock(id_), "squall_trylock") == SQUALL_OK; }
    void release() { check(squall_unlock(id_), "squall_unlock"); }
    std::uint64_t id() const noexcept { return id_; }

private:
    std::uint64_t id_;
};

/// Holds a global lock for a scope.
class lock_guard {
public:
    explicit lock_guard(std::uint64_t id) : id_(id) { check(squall_lock(id_), "squall_lock"); }
    ~lock_guard() { squall_unlock(id_); }
    lock_guard(const lock_guard &) = delete;
    lock_guard &operator=(const lock_guard &) = delete;

private:
    std::uint64_t id_;
};

/// A condition variable bound to a lock id at each wait.
class condition {
public:
    explicit condition(std::uint64_t id) noexcept : id_(id) {}
    void wait(std::uint64_t lock_id) { check(squall_cond_wait(id_, lock_id), "squall_cond_wait"); }
    template <class Pred> void wait(std::uint64_t lock_id, Pred pred) {
        while (!pred()) wait(lock_id);
    }
    void signal() { check(squall_cond_signal(id_), "squall_cond_signal"); }
    void broadcast() { check(squall_cond_broadcast(id_), "squall_cond_broadcast"); }

private:
    std::uint64_t id_;
};

/// A barrier for `total` threads of the job; wait() is true in one thread per episode.
class barrier {
public:
    barrier(std::uint64_t id, std::uint32_t total) noexcept : id_(id), total_(total) {}
    bool wait() { return check(squall_barrier_n(id_, total_), "squall_barrier_n") == SQUALL_SERIAL; }

private:
    std::uint64_t id_;
    std::uint32_t total_;
};

/// Atomic operations on a shared 64-bit word.
inline std::uint64_t fetch_add(std::uint64_t *addr, std::uint64_t v) {
    std::uint64_t old = 0;
    check(squall_atomic_fetch_add(addr, v, &old), "squall_atomic_fetch_add");
    return old;
}
inline std::uint64_t atomic_load(std::uint64_t *addr) {
    std::uint64_t v = 0;
    check(squall_atomic_load(addr, &v), "squall_atomic_load");
    return v;
}
inline bool compare_swap(std::uint64_t *addr, std::uint64_t expected, std::uint64_t desired) {
    std::uint64_t old = 0;
    check(squall_atomic_compare_swap(addr, expected, desired, &old), "squall_atomic_compare_swap");
    return old == expected;
}

/// Deleter for Squall memory (destroys nothing: use it for trivially destructible types).
struct deleter {
    void operator()(void *p) const noexcept { squall_free(p); }
};

template <class T> using unique_ptr = std::unique_ptr<T, deleter>;

/// A zeroed shared array of n trivially constructible Ts, freed with squall_free.
template <class T> unique_ptr<T[]> make_array(std::size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "squall arrays hold trivially copyable types");
    void *p = squall_calloc(n, sizeof(T));
    if (p == nullptr) throw error(SQUALL_ERR_NO_MEMORY, "squall_calloc");
    return unique_ptr<T[]>(static_cast<T *>(p));
}

/// A shared object of type T constructed in Squall memory (owned by a unique_ptr that runs
/// ~T and then squall_free).
template <class T> struct object_deleter {
    void operator()(T *p) const noexcept {
        p->~T();
        squall_free(p);
    }
};
template <class T, class... Args> std::unique_ptr<T, object_deleter<T>> make_unique(Args &&...args) {
    void *p = squall_malloc(sizeof(T));
    if (p == nullptr) throw error(SQUALL_ERR_NO_MEMORY, "squall_malloc");
    try {
        return std::unique_ptr<T, object_deleter<T>>(new (p) T(std::forward<Args>(args)...));
    } catch (...) {
        squall_free(p);
        throw;
    }
}

/// A shared array with shared ownership (reference count local to this node).
template <class T> std::shared_ptr<T> make_shared_array(std::size_t n) {
    return std::shared_ptr<T>(make_array<T>(n).release(), deleter());
}

/// A thread running fn(arg) on a node (SQUALL_ANY_NODE: the thread placement, even by default). Joined by join() or by
/// the destructor.
class thread {
public:
    thread(void *(*fn)(void *), void *arg, int node = SQUALL_ANY_NODE) {
        check(squall_thread_create(node, fn, arg, &tid_), "squall_thread_create");
        joinable_ = true;
    }
    thread(thread &&o) noexcept : tid_(o.tid_), joinable_(o.joinable_) { o.joinable_ = false; }
    thread &operator=(thread &&o) noexcept {
        if (this != &o) {
            if (joinable_) squall_thread_join(tid_, nullptr);
            tid_ = o.tid_;
            joinable_ = o.joinable_;
            o.joinable_ = false;
        }
        return *this;
    }
    thread(const thread &) = delete;
    thread &operator=(const thread &) = delete;
    ~thread() {
        if (joinable_) squall_thread_join(tid_, nullptr);
    }
    void *join() {
        if (!joinable_) throw error(SQUALL_ERR_UNKNOWN_THREAD, "squall::thread::join (already joined)");
        joinable_ = false;
        void *r = nullptr;
        check(squall_thread_join(tid_, &r), "squall_thread_join");
        return r;
    }
    std::uint64_t id() const noexcept { return tid_; }
    bool joinable() const noexcept { return joinable_; }

private:
    std::uint64_t tid_ = 0;
    bool joinable_ = false;
};

} // namespace squall

#endif // SQUALL_HPP
