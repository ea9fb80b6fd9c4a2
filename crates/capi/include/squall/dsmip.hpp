// squall/dsmip.hpp - DSM/IP shared objects with the names of their paper (seed 004 §3.1):
// C++ classes derived from SharedObject (SharedInt, SharedIntArray, SharedFloatArray, ...),
// accessed only through Read() and Write() (each atomic per element), a segment size per
// object (the granularity of coherence), one of three coherence engines per object, and the
// DSM_Startup(), DSM_Barrier() and DSM_Lock synchronization API. Header-only over squall.h.
//
//   int me = DSM_Startup(&argc, &argv);          // this node's thread id, 0..DSM_NumThreads()-1
//   SharedIntArray a(1000, ENGINE_MSI, 16);      // collective: every node declares it, same order
//   DSM_Lock l(3);
//   l.Acquire(); a.Write(7, a.Read(7) + 1); l.Release();
//   DSM_Barrier();
//   DSM_Shutdown();
//
// ENGINE_OU: a fixed owner per segment serialises every access (sequential consistency).
// ENGINE_MSI: broadcast-based MSI caching (sequential consistency; reads and writes with
// permission are local). ENGINE_NC: reads local, writes broadcast without acknowledgement:
// no consistency, and no use of DSM_Lock or DSM_Barrier makes it consistent (a node reads its
// own writes; on Squall's reliable backbone other nodes' writes arrive eventually).
// Errors throw squall::error (squall.hpp). Build: `pkg-config --cflags --libs squall`.
#ifndef SQUALL_DSMIP_HPP
#define SQUALL_DSMIP_HPP

#include "../squall.hpp"

#include <cstdint>
#include <cstring>
#include <string>

enum DSM_Engine { ENGINE_OU = SQUALL_ENGINE_OU, ENGINE_NC = SQUALL_ENGINE_NC, ENGINE_MSI = SQUALL_ENGINE_MSI };

/// Start this node (squall_init) and return its thread identifier (its rank). The arguments
/// are accepted for the seed's signature; `squall run -n N` chooses the number of threads.
inline int DSM_Startup(int * = nullptr, char *** = nullptr) {
    if (!squall_initialized()) squall::check(squall_init(), "squall_init");
    return squall::check(squall_rank(), "squall_rank");
}
inline int DSM_NumThreads() { return squall::check(squall_size(), "squall_size"); }
inline void DSM_Shutdown() { squall::check(squall_finalize(), "squall_finalize"); }

/// No thread continues until every thread has arrived.
inline void DSM_Barrier() { squall::check(squall_barrier(), "DSM_Barrier"); }

/// A global lock (mutual exclusion across every node) named by a number.
class DSM_Lock {
public:
    explicit DSM_Lock(uint64_t id = 0) : id_(id) {}
    void Acquire() { squall::check(squall_lock(id_), "DSM_Lock::Acquire"); }
    void Release() { squall::check(squall_unlock(id_), "DSM_Lock::Release"); }

private:
    uint64_t id_;
};

/// The base of every shared object: an id, a length, an engine, a segment size.
class SharedObject {
public:
    uint32_t Id() const { return id_; }
    uint64_t Length() const { return len_; }
    /// Look up an object another node created with a name (see the named constructors).
    static uint32_t Lookup(const char *name) {
        int64_t id = squall_object_lookup(name);
        if (id < 0) throw squall::error((int)id, "SharedObject::Lookup");
        return (uint32_t)id;
    }

protected:
    SharedObject(int kind, uint32_t rec, uint64_t len, int engine, uint32_t seg, const char *name)
        : len_(len) {
        int64_t id = name ? squall_object_create_named(name, kind, rec, len, seg, engine)
                          : squall_object_create(kind, rec, len, seg, engine);
        if (id < 0) throw squall::error((int)id, "SharedObject");
        id_ = (uint32_t)id;
    }
    explicit SharedObject(uint32_t id) : id_(id) {
        int64_t n = squall_object_len(id);
        if (n < 0) throw squall::error((int)n, "SharedObject");
        len_ = (uint64_t)n;
    }
    void get(uint64_t i, void *out, size_t size) const {
        squall::check(squall_object_read(id_, i, out, size), "Read");
    }
    void put(uint64_t i, const void *v, size_t size) {
        squall::check(squall_object_write(id_, i, v, size), "Write");
    }

private:
    uint32_t id_ = 0;
    uint64_t len_ = 0;
};

namespace squall_dsmip {
template <class T> struct kind;
template <> struct kind<int> { static constexpr int v = SQUALL_ELEM_INT; };
template <> struct kind<int64_t> { static constexpr int v = SQUALL_ELEM_LONG; };
template <> struct kind<float> { static constexpr int v = SQUALL_ELEM_FLOAT; };
template <> struct kind<double> { static constexpr int v = SQUALL_ELEM_DOUBLE; };
}  // namespace squall_dsmip

/// An array of T in shared memory: `segment` elements per coherence segment (0: about 256
/// bytes). Declared collectively (every node, same order), or by one node with a name.
template <class T> class SharedArrayOf : public SharedObject {
public:
    SharedArrayOf(uint64_t len, DSM_Engine engine = ENGINE_MSI, uint32_t segment = 0,
                  const char *name = nullptr)
        : SharedObject(squall_dsmip::kind<T>::v, 0, len, engine, segment, name) {}
    /// The object another node created under `name`.
    explicit SharedArrayOf(const char *name) : SharedObject(Lookup(name)) {}
    T Read(uint64_t i) const {
        T v;
        get(i, &v, sizeof v);
        return v;
    }
    void Write(uint64_t i, T v) { put(i, &v, sizeof v); }
};

/// One shared T (an array of one element, one segment).
template <class T> class SharedScalarOf : public SharedObject {
public:
    explicit SharedScalarOf(DSM_Engine engine = ENGINE_MSI, const char *name = nullptr)
        : SharedObject(squall_dsmip::kind<T>::v, 0, 1, engine, 1, name) {}
    T Read() const {
        T v;
        get(0, &v, sizeof v);
        return v;
    }
    void Write(T v) { put(0, &v, sizeof v); }
};

using SharedInt = SharedScalarOf<int>;
using SharedLong = SharedScalarOf<int64_t>;
using SharedFloat = SharedScalarOf<float>;
using SharedDouble = SharedScalarOf<double>;
using SharedIntArray = SharedArrayOf<int>;
using SharedLongArray = SharedArrayOf<int64_t>;
using SharedFloatArray = SharedArrayOf<float>;
using SharedDoubleArray = SharedArrayOf<double>;

/// An array of fixed-size records R (trivially copyable), each read and written whole.
template <class R> class SharedRecordArray : public SharedObject {
public:
    SharedRecordArray(uint64_t len, DSM_Engine engine = ENGINE_MSI, uint32_t segment = 0,
                      const char *name = nullptr)
        : SharedObject(SQUALL_ELEM_RECORD, sizeof(R), len, engine, segment, name) {}
    R Read(uint64_t i) const {
        R v;
        get(i, &v, sizeof v);
        return v;
    }
    void Write(uint64_t i, const R &v) { put(i, &v, sizeof v); }
};

#endif
