// cxx_test.cpp - the C++ wrappers (squall.hpp) in a single-system-image program: only rank 0
// runs main; threads are created on every node with squall::thread.
//
// usage: cxx_test T   (T threads per node)
// Prints "ok cxx" and exits 0 on success.
#include <squall.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kIters = 100;
constexpr std::uint64_t kLock = 42;

struct Shared {
    std::uint64_t counter;    // under kLock
    std::uint64_t atomic;     // atomics only
    std::uint64_t ran_on[64]; // which node each thread ran on (+1)
    std::uint32_t nthreads;
};

struct Arg {
    Shared *s;
    std::uint32_t id;
};

void *work(void *p) {
    auto *a = static_cast<Arg *>(p);
    try {
        squall::barrier start(7, a->s->nthreads);
        start.wait();
        for (int i = 0; i < kIters; i++) {
            squall::lock_guard g(kLock);
            a->s->counter++;
        }
        for (int i = 0; i < kIters; i++) squall::fetch_add(&a->s->atomic, 2);
        a->s->ran_on[a->id] = static_cast<std::uint64_t>(squall_rank()) + 1;
    } catch (const squall::error &e) {
        std::fprintf(stderr, "cxx_test: thread %u: %s\n", a->id, e.what());
        std::exit(1);
    }
    return nullptr;
}

int run(int per_node) {
    squall::session node(squall::session::ssi); // ranks other than 0 serve and never get here
    const int size = node.size();
    const auto n = static_cast<std::uint32_t>(per_node * size);
    if (n > 64) throw squall::error(SQUALL_ERR_INVALID, "too many threads");
    auto shared = squall::make_unique<Shared>();
    shared->nthreads = n;
    auto args = squall::make_array<Arg>(n);
    std::vector<squall::thread> threads;
    for (std::uint32_t i = 0; i < n; i++) {
        args[i] = Arg{shared.get(), i};
        threads.emplace_back(work, &args[i], static_cast<int>(i % static_cast<std::uint32_t>(size)));
    }
    for (auto &t : threads) t.join();
    int bad = 0;
    {
        squall::lock_guard g(kLock);
        if (shared->counter != std::uint64_t{n} * kIters) {
            std::fprintf(stderr, "counter %llu, expected %llu\n", (unsigned long long)shared->counter,
                         (unsigned long long)n * kIters);
            bad = 1;
        }
    }
    if (squall::atomic_load(&shared->atomic) != std::uint64_t{n} * kIters * 2) {
        std::fprintf(stderr, "atomic counter %llu\n", (unsigned long long)squall::atomic_load(&shared->atomic));
        bad = 1;
    }
    for (std::uint32_t i = 0; i < n; i++) {
        if (shared->ran_on[i] != i % static_cast<std::uint32_t>(size) + 1) {
            std::fprintf(stderr, "thread %u ran on node %llu, not %u\n", i,
                         (unsigned long long)shared->ran_on[i] - 1, i % static_cast<std::uint32_t>(size));
            bad = 1;
        }
    }
    // A misuse surfaces as an exception with the error text.
    try {
        squall::lock l(9999);
        l.release();
        std::fprintf(stderr, "release of a lock not held did not throw\n");
        bad = 1;
    } catch (const squall::error &e) {
        if (e.code() != SQUALL_ERR_NOT_HELD) {
            std::fprintf(stderr, "unexpected error %d: %s\n", e.code(), e.what());
            bad = 1;
        }
    }
    if (!bad) std::printf("ok cxx (%u threads on %d nodes)\n", n, size);
    return bad;
}

} // namespace

int main(int argc, char **argv) {
    try {
        return run(argc > 1 ? std::atoi(argv[1]) : 2);
    } catch (const squall::error &e) {
        std::fprintf(stderr, "cxx_test: %s\n", e.what());
        return 1;
    }
}
