// C++ with `int main()` (no arguments) on the pthreads layer: main runs on a shared stack
// (through -Wl,--wrap=main), its local array of argument objects is passed by address to
// threads on every node, which write their results back through a reference; a static class
// member and a namespace-scope object (both globals) are shared too. Checked against the same
// computation done sequentially here.
#include <pthread.h>
#include <cstdio>

namespace {

constexpr int kThreads = 8;

struct Work {
    long first = 0;
    long count = 0;
    long result = 0;
    pthread_t id{};
    bool self_ok = false;
};

struct Table {
    static long scale;       // a static member: a global
    long offset = 7;         // a namespace-scope object: a global with a constructor
    long value(long k) const { return (k * scale + offset) % 10007; }
};
long Table::scale = 31;
Table table;

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
bool go = false;

long compute(const Work &w)
{
    long s = 0;
    for (long k = w.first; k < w.first + w.count; k++)
        s += table.value(k);
    return s;
}

void *run(void *p)
{
    Work &w = *static_cast<Work *>(p);
    for (;;) {
        pthread_mutex_lock(&lock);
        bool ready = go;
        pthread_mutex_unlock(&lock);
        if (ready)
            break;
    }
    w.result = compute(w);
    w.self_ok = pthread_equal(pthread_self(), w.id) != 0;
    return &w;
}

} // namespace

int main()
{
    table.offset = 11;  // set by main before the threads start
    Table::scale = 37;
    Work work[kThreads];
    pthread_t t[kThreads];
    for (int i = 0; i < kThreads; i++) {
        work[i].first = 500L * i;
        work[i].count = 400 + 13L * i;
        if (pthread_create(&t[i], nullptr, run, &work[i]) != 0)
            return 1;
        work[i].id = t[i];
    }
    pthread_mutex_lock(&lock);
    go = true;
    pthread_mutex_unlock(&lock);
    bool ok = true;
    for (int i = 0; i < kThreads; i++) {
        void *ret = nullptr;
        pthread_join(t[i], &ret);
        Work want = work[i];
        long expect = compute(want);
        if (ret != &work[i] || work[i].result != expect || !work[i].self_ok) {
            std::fprintf(stderr, "thread %d: result %ld (want %ld), ret %p (want %p), self %d\n",
                         i, work[i].result, expect, ret, static_cast<void *>(&work[i]),
                         work[i].self_ok);
            ok = false;
        }
    }
    if (!ok)
        return 1;
    std::printf("ok c++ stack args %d threads\n", kThreads);
    return 0;
}
