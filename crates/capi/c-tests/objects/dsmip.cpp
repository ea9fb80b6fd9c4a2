// The seed's C++ API (squall/dsmip.hpp): SharedInt, SharedIntArray, SharedDoubleArray,
// SharedRecordArray, Read()/Write(), DSM_Lock, DSM_Barrier(), DSM_Startup().
// Usage: dsmip ENGINE ITERS. On OU and MSI: a counter under DSM_Lock, an array filled by
// every node, message passing through a flag. On NC: own writes read back, others' writes
// arriving eventually. Prints "ok dsmip ENGINE N nodes" on thread 0.
#include <squall/dsmip.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct Particle {
    int id;
    double pos[3];
};

static int fail(int me, const char *what, long long got, long long want) {
    std::fprintf(stderr, "thread %d: %s: %lld, expected %lld\n", me, what, got, want);
    std::exit(2);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int me = DSM_Startup(&argc, &argv);
    int n = DSM_NumThreads();
    std::string e = argv[1];
    int iters = std::atoi(argv[2]);
    DSM_Engine engine = e == "ou" ? ENGINE_OU : e == "nc" ? ENGINE_NC : ENGINE_MSI;
    try {
        SharedIntArray slots(8 * n, engine, 8);
        if (engine == ENGINE_NC) {
            for (int it = 1; it <= iters; it++)
                for (int i = 0; i < 8; i++) {
                    slots.Write(8 * me + i, it * 10 + i);
                    if (slots.Read(8 * me + i) != it * 10 + i) fail(me, "own write", slots.Read(8 * me + i), it * 10 + i);
                }
            auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            for (int k = 0; k < 8 * n; k++)
                while (slots.Read(k) != iters * 10 + k % 8)
                    if (std::chrono::steady_clock::now() > end) fail(me, "NC arrival", slots.Read(k), iters * 10 + k % 8);
        } else {
            SharedInt counter(engine);
            SharedDoubleArray data(32, engine, 4);
            SharedInt flag(engine);
            SharedRecordArray<Particle> parts(2 * n, engine, 1);
            DSM_Lock lock(5);
            for (int i = 0; i < iters; i++) {
                lock.Acquire();
                counter.Write(counter.Read() + 1);
                lock.Release();
            }
            for (int i = 0; i < 8; i++) slots.Write(8 * me + i, me * 100 + i);
            Particle p{me, {me * 1.0, me * 2.0, me * 3.0}};
            parts.Write(2 * me, p);
            if (me == 0) {
                for (int i = 0; i < 32; i++) data.Write(i, i * 0.125);
                flag.Write(1);
            } else {
                while (flag.Read() != 1) {
                }
                for (int i = 0; i < 32; i++)
                    if (data.Read(i) != i * 0.125) fail(me, "data after flag", (long long)(data.Read(i) * 1000), i * 125);
            }
            DSM_Barrier();
            if (counter.Read() != iters * n) fail(me, "counter", counter.Read(), iters * n);
            for (int t = 0; t < n; t++) {
                for (int i = 0; i < 8; i++)
                    if (slots.Read(8 * t + i) != t * 100 + i) fail(me, "slot", slots.Read(8 * t + i), t * 100 + i);
                Particle q = parts.Read(2 * t);
                if (q.id != t || q.pos[2] != t * 3.0) fail(me, "record", q.id, t);
            }
        }
        DSM_Barrier();
        SquallObjectStats s;
        squall::check(squall_object_stats(&s), "squall_object_stats");
        if (me == 0) {
            std::printf("stats dsmip %s: remote reads %llu, remote writes %llu, local reads %llu, nc notices %llu\n",
                        e.c_str(), (unsigned long long)s.reads_remote, (unsigned long long)s.writes_remote,
                        (unsigned long long)s.reads_local, (unsigned long long)s.nc_updates_applied);
            if (engine != ENGINE_NC && s.reads_remote + s.writes_remote == 0) fail(me, "remote operations", 0, 1);
            if (engine == ENGINE_NC && s.nc_updates_applied == 0) fail(me, "NC notices applied", 0, 1);
            std::printf("ok dsmip %s %d nodes\n", e.c_str(), n);
        }
        DSM_Barrier();
    } catch (const squall::error &x) {
        std::fprintf(stderr, "thread %d: %s\n", me, x.what());
        return 1;
    }
    DSM_Shutdown();
    return 0;
}
