// cxx_atomic.cpp - C++ std::atomic shared by std::thread-free pthreads code, as a program
// written for one machine does: P threads increment a std::atomic<long> (fetch_add, ++, +=,
// a compare_exchange loop), a std::atomic<int> countdown, and take a spinlock made of a
// std::atomic_flag around a plain counter. Built natively with -pthread, or for Squall with
// only the build line changed: c++ cxx_atomic.cpp $(pkg-config --cflags --libs squall-pthread)
// usage: cxx_atomic P N    prints "ok cxx atomic TOTAL"
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <pthread.h>

struct Shared {
    std::atomic<long> count{0};
    std::atomic<int> down{0};
    std::atomic<unsigned long long> cas{0};
    std::atomic<bool> seen{false};
    std::atomic_flag lock = ATOMIC_FLAG_INIT;
    long plain = 0;
    std::atomic<long *> cursor{nullptr};
    long n = 0;
};

static void *work(void *p)
{
    Shared *s = static_cast<Shared *>(p);
    for (long i = 0; i < s->n; i++) {
        s->count.fetch_add(1);
        ++s->count;
        s->count += 2;
        s->down.fetch_sub(1, std::memory_order_relaxed);
        unsigned long long old = s->cas.load(std::memory_order_relaxed);
        while (!s->cas.compare_exchange_weak(old, old + 3, std::memory_order_acq_rel,
                                             std::memory_order_relaxed)) {
        }
        while (s->lock.test_and_set(std::memory_order_acquire)) {
        }
        s->plain++;
        s->lock.clear(std::memory_order_release);
        s->cursor.fetch_add(1);
    }
    s->seen.store(true);
    return nullptr;
}

int main(int argc, char **argv)
{
    int P = argc > 1 ? std::atoi(argv[1]) : 4;
    long N = argc > 2 ? std::atol(argv[2]) : 100;
    void *mem = std::malloc(sizeof(Shared));
    pthread_t *t = static_cast<pthread_t *>(std::malloc(sizeof(pthread_t) * P));
    if (!mem || !t) return 1;
    Shared *s = new (mem) Shared;
    s->n = N;
    long *slots = static_cast<long *>(std::calloc(P * N + 1, sizeof(long)));
    if (!slots) return 1;
    s->cursor.store(slots);
    for (int i = 0; i < P; i++) pthread_create(&t[i], nullptr, work, s);
    for (int i = 0; i < P; i++) pthread_join(t[i], nullptr);
    long total = P * N;
    int bad = 0;
    if (s->count.load() != 4 * total) bad++, std::printf("WRONG count %ld\n", s->count.load());
    if (s->down.load() != -total) bad++, std::printf("WRONG down %d\n", s->down.load());
    if (s->cas.load() != 3ull * total) bad++, std::printf("WRONG cas %llu\n", s->cas.load());
    if (s->plain != total) bad++, std::printf("WRONG locked plain counter %ld\n", s->plain);
    if (s->cursor.load() != slots + total)
        bad++, std::printf("WRONG pointer fetch_add\n");
    if (!s->seen.load()) bad++, std::printf("WRONG bool\n");
    if (!bad) std::printf("ok cxx atomic %ld\n", total);
    return bad != 0;
}
