/* DSM/IP shared objects through the C API (squall.h), as an SPMD program: every node runs
 * main. Usage: objects SCENARIO ENGINE [N]
 *   counter: a shared int incremented under a lock by every node, plus an array each node
 *            fills its part of; every node checks the totals after a barrier (SC engines).
 *   message: node 0 fills a double array then sets a flag; the others spin on the flag and
 *            must then see every element (message passing needs SC: OU, MSI).
 *   race:    every node writes its own element of shared segments over and over while the
 *            others write theirs (segments move between nodes; the interrupted-write race);
 *            final values must be each writer's last write (SC engines).
 *   types:   long, float and record objects, written by one node, read by all (SC engines).
 *   named:   node 0 creates a named object, the others look it up; values checked.
 *   nc:      ENGINE_NC: a node reads its own writes at once; the others' writes arrive
 *            eventually (on Squall's reliable backbone; NC itself promises no more).
 * Each run prints "ok SCENARIO ENGINE ..." on rank 0 when every check passed. */
#include <squall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, size;

#define CHECK(rc, what)                                                                    \
    do {                                                                                   \
        long long _r = (long long)(rc);                                                    \
        if (_r < 0) {                                                                      \
            fprintf(stderr, "node %d: %s failed: %lld %s\n", rank, what, _r,              \
                    squall_last_error());                                                  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "node %d: ", rank);                                                \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        exit(2);                                                                           \
    } while (0)

static int engine_of(const char *s) {
    if (!strcmp(s, "ou")) return SQUALL_ENGINE_OU;
    if (!strcmp(s, "nc")) return SQUALL_ENGINE_NC;
    if (!strcmp(s, "msi")) return SQUALL_ENGINE_MSI;
    fprintf(stderr, "unknown engine %s\n", s);
    exit(2);
}

static SquallObjectStats stats(void) {
    SquallObjectStats s;
    CHECK(squall_object_stats(&s), "squall_object_stats");
    return s;
}

/* Every node's remote operations, summed at rank 0 through a shared OU array. */
static void report(const char *name, const char *eng) {
    SquallObjectStats s = stats();
    /* Remote operations: OU and MSI accesses that needed other nodes; NC notices applied. */
    long long mine[4] = {(long long)(s.reads_remote + s.writes_remote + s.nc_updates_applied),
                         (long long)s.reads_local,
                         (long long)(s.msi_upgrades_s + s.msi_upgrades_m),
                         (long long)s.flag_completions};
    int64_t t = squall_object_create(SQUALL_ELEM_LONG, 0, 4 * (uint64_t)size, 1, SQUALL_ENGINE_OU);
    CHECK(t, "create stats");
    for (int k = 0; k < 4; k++) CHECK(squall_object_write_long((uint32_t)t, 4 * rank + k, mine[k]), "write stats");
    CHECK(squall_barrier(), "barrier");
    if (rank == 0) {
        long long sum[4] = {0, 0, 0, 0};
        for (int r = 0; r < size; r++)
            for (int k = 0; k < 4; k++) {
                int64_t v;
                CHECK(squall_object_read_long((uint32_t)t, 4 * r + k, &v), "read stats");
                sum[k] += v;
            }
        if (sum[0] == 0) FAIL("%s/%s: no remote object operation happened", name, eng);
        printf("stats %s %s: remote ops (or NC notices applied) %lld, local reads %lld, msi upgrades %lld, "
               "flag completions %lld\n",
               name, eng, sum[0], sum[1], sum[2], sum[3]);
    }
}

static void counter(int eng, int iters) {
    int64_t c = squall_object_create(SQUALL_ELEM_INT, 0, 1, 1, eng);
    CHECK(c, "create counter");
    int n = 64 * size;
    int64_t a = squall_object_create(SQUALL_ELEM_INT, 0, (uint64_t)n, 8, eng);
    CHECK(a, "create array");
    for (int i = 0; i < iters; i++) {
        CHECK(squall_lock(11), "lock");
        int v;
        CHECK(squall_object_read_int((uint32_t)c, 0, &v), "read counter");
        CHECK(squall_object_write_int((uint32_t)c, 0, v + 1), "write counter");
        CHECK(squall_unlock(11), "unlock");
    }
    for (int i = rank; i < n; i += size) CHECK(squall_object_write_int((uint32_t)a, i, 3 * i + 1), "write a");
    CHECK(squall_barrier(), "barrier");
    int v;
    CHECK(squall_object_read_int((uint32_t)c, 0, &v), "read counter");
    if (v != iters * size) FAIL("counter %d, expected %d", v, iters * size);
    long long sum = 0, want = 0;
    for (int i = 0; i < n; i++) {
        int x;
        CHECK(squall_object_read_int((uint32_t)a, i, &x), "read a");
        sum += x;
        want += 3 * i + 1;
    }
    if (sum != want) FAIL("array sum %lld, expected %lld", sum, want);
    CHECK(squall_barrier(), "barrier");
}

static void message(int eng, int n) {
    int64_t data = squall_object_create(SQUALL_ELEM_DOUBLE, 0, (uint64_t)n, 4, eng);
    int64_t flag = squall_object_create(SQUALL_ELEM_INT, 0, 1, 1, eng);
    CHECK(data, "create data");
    CHECK(flag, "create flag");
    for (int round = 1; round <= 3; round++) {
        if (rank == 0) {
            for (int i = 0; i < n; i++)
                CHECK(squall_object_write_double((uint32_t)data, i, round * 1000.0 + i * 0.5), "write data");
            CHECK(squall_object_write_int((uint32_t)flag, 0, round), "write flag");
        } else {
            int f = 0;
            while (f < round) CHECK(squall_object_read_int((uint32_t)flag, 0, &f), "read flag");
            for (int i = 0; i < n; i++) {
                double d;
                CHECK(squall_object_read_double((uint32_t)data, i, &d), "read data");
                if (d != round * 1000.0 + i * 0.5)
                    FAIL("round %d: data[%d] = %g after the flag, expected %g", round, i, d, round * 1000.0 + i * 0.5);
            }
        }
        CHECK(squall_barrier(), "barrier");
    }
}

static void race(int eng, int iters) {
    /* Segments of 4 elements: element k of segment s is written by node k % size. */
    int n = 16;
    int64_t a = squall_object_create(SQUALL_ELEM_INT, 0, (uint64_t)n, 4, eng);
    CHECK(a, "create");
    for (int it = 1; it <= iters; it++)
        for (int i = rank; i < n; i += size) {
            CHECK(squall_object_write_int((uint32_t)a, i, it * 100 + rank), "write");
            int v;
            CHECK(squall_object_read_int((uint32_t)a, i, &v), "read own");
            if (v != it * 100 + rank) FAIL("read own element %d: %d, wrote %d", i, v, it * 100 + rank);
        }
    CHECK(squall_barrier(), "barrier");
    for (int i = 0; i < n; i++) {
        int v;
        CHECK(squall_object_read_int((uint32_t)a, i, &v), "read");
        if (v != iters * 100 + i % size) FAIL("element %d = %d, expected %d", i, v, iters * 100 + i % size);
    }
    CHECK(squall_barrier(), "barrier");
}

struct rec { int id; double x; char tag[16]; };

static void types(int eng, int n) {
    int64_t l = squall_object_create(SQUALL_ELEM_LONG, 0, (uint64_t)n, 3, eng);
    int64_t f = squall_object_create(SQUALL_ELEM_FLOAT, 0, (uint64_t)n, 0, eng);
    int64_t r = squall_object_create(SQUALL_ELEM_RECORD, sizeof(struct rec), (uint64_t)n, 2, eng);
    CHECK(l, "create long");
    CHECK(f, "create float");
    CHECK(r, "create record");
    if (squall_object_len((uint32_t)r) != n) FAIL("length %lld", (long long)squall_object_len((uint32_t)r));
    for (int i = rank; i < n; i += size) {
        CHECK(squall_object_write_long((uint32_t)l, i, (int64_t)i << 40), "write long");
        CHECK(squall_object_write_float((uint32_t)f, i, i * 0.25f), "write float");
        struct rec x;
        memset(&x, 0, sizeof x);
        x.id = i;
        x.x = i * 1.5;
        snprintf(x.tag, sizeof x.tag, "r%d", i);
        CHECK(squall_object_write((uint32_t)r, i, &x, sizeof x), "write record");
    }
    CHECK(squall_barrier(), "barrier");
    for (int i = 0; i < n; i++) {
        int64_t lv;
        float fv;
        struct rec x;
        char tag[16];
        CHECK(squall_object_read_long((uint32_t)l, i, &lv), "read long");
        CHECK(squall_object_read_float((uint32_t)f, i, &fv), "read float");
        CHECK(squall_object_read((uint32_t)r, i, &x, sizeof x), "read record");
        snprintf(tag, sizeof tag, "r%d", i);
        if (lv != (int64_t)i << 40 || fv != i * 0.25f || x.id != i || x.x != i * 1.5 || strcmp(x.tag, tag))
            FAIL("element %d: %lld %g {%d %g %s}", i, (long long)lv, fv, x.id, x.x, x.tag);
    }
    /* Misuse is an error, not a crash. */
    int bad;
    if (squall_object_read_int((uint32_t)l, 0, &bad) >= 0) FAIL("int read of a long object accepted");
    if (squall_object_read_long((uint32_t)l, n, &(int64_t){0}) >= 0) FAIL("read past the end accepted");
    CHECK(squall_barrier(), "barrier");
}

static void named(int eng, int n) {
    int64_t id;
    if (rank == 0) {
        id = squall_object_create_named("dsmip.table", SQUALL_ELEM_INT, 0, (uint64_t)n, 4, eng);
        CHECK(id, "create named");
        for (int i = 0; i < n; i++) CHECK(squall_object_write_int((uint32_t)id, i, i * i), "write");
    } else {
        id = squall_object_lookup("dsmip.table");
        CHECK(id, "lookup");
    }
    CHECK(squall_barrier(), "barrier");
    for (int i = 0; i < n; i++) {
        int v;
        CHECK(squall_object_read_int((uint32_t)id, i, &v), "read");
        if (v != i * i) FAIL("named[%d] = %d", i, v);
    }
    CHECK(squall_barrier(), "barrier");
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void nc(int n) {
    int64_t a = squall_object_create(SQUALL_ELEM_INT, 0, (uint64_t)(n * size), 8, SQUALL_ENGINE_NC);
    CHECK(a, "create");
    for (int it = 1; it <= 5; it++)
        for (int i = 0; i < n; i++) {
            int k = rank * n + i, v;
            CHECK(squall_object_write_int((uint32_t)a, k, it * 7 + k), "write");
            CHECK(squall_object_read_int((uint32_t)a, k, &v), "read own");
            if (v != it * 7 + k) FAIL("NC: own write of %d not read back (%d)", k, v);
        }
    /* Eventual arrival (Squall's backbone is reliable); poll, with a deadline. */
    double end = now_s() + 30;
    for (int k = 0; k < n * size; k++) {
        int v;
        for (;;) {
            CHECK(squall_object_read_int((uint32_t)a, k, &v), "read");
            if (v == 5 * 7 + k) break;
            if (now_s() > end) FAIL("NC: element %d still %d after 30 s", k, v);
        }
    }
    CHECK(squall_barrier(), "barrier");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SCENARIO ENGINE [N]\n", argv[0]);
        return 2;
    }
    CHECK(squall_init(), "squall_init");
    rank = squall_rank();
    size = squall_size();
    int eng = engine_of(argv[2]);
    int n = argc > 3 ? atoi(argv[3]) : 50;
    const char *sc = argv[1];
    if (!strcmp(sc, "counter")) counter(eng, n);
    else if (!strcmp(sc, "message")) message(eng, n);
    else if (!strcmp(sc, "race")) race(eng, n);
    else if (!strcmp(sc, "types")) types(eng, n);
    else if (!strcmp(sc, "named")) named(eng, n);
    else if (!strcmp(sc, "nc")) nc(n);
    else FAIL("unknown scenario %s", sc);
    report(sc, argv[2]);
    if (rank == 0) printf("ok %s %s %d nodes\n", sc, argv[2], size);
    CHECK(squall_finalize(), "squall_finalize");
    return 0;
}
