// cxx_pthread.cpp - a C++ pthreads program built unchanged with the squall-pthread package
// (the -include'd header must work with C++ headers and std::malloc / std::free).
// Prints "ok cxx pthread" when every thread added its share under the mutex.
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Shared {
    pthread_mutex_t lock;
    long total;
};

struct Arg {
    Shared *shared;
    long value;
};

void *add(void *p) {
    auto *a = static_cast<Arg *>(p);
    for (int i = 0; i < 50; i++) {
        pthread_mutex_lock(&a->shared->lock);
        a->shared->total += a->value;
        pthread_mutex_unlock(&a->shared->lock);
    }
    return nullptr;
}

} // namespace

int main(int argc, char **argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 4;
    auto *shared = static_cast<Shared *>(std::calloc(1, sizeof(Shared)));
    auto *args = static_cast<Arg *>(std::malloc(sizeof(Arg) * static_cast<size_t>(n)));
    pthread_mutex_init(&shared->lock, nullptr);
    std::vector<pthread_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) {
        args[i] = Arg{shared, i + 1};
        if (pthread_create(&ids[static_cast<size_t>(i)], nullptr, add, &args[i]) != 0) return 1;
    }
    for (auto id : ids) pthread_join(id, nullptr);
    const long want = 50L * n * (n + 1) / 2;
    pthread_mutex_lock(&shared->lock);
    const long got = shared->total;
    pthread_mutex_unlock(&shared->lock);
    std::free(args);
    std::free(shared);
    if (got != want) {
        std::fprintf(stderr, "total %ld, expected %ld\n", got, want);
        return 1;
    }
    std::printf("ok cxx pthread\n");
    return 0;
}
