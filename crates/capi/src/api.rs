//! The `extern "C"` entry points of `squall.h`: start-up and shutdown, allocation, locks,
//! barriers, conditions, flags, atomics, threads and statistics.
//!
//! Every entry point runs inside [`guard`](crate::error::guard): it never unwinds into C, and a
//! failure returns a `SQUALL_ERR_*` code (or null) with the text in `squall_last_error()`.
//! Owns: argument checking and the local bookkeeping that makes misuse a clear error (which
//! conditions this node's threads wait on; locks in use are the runtime's to know, since most
//! lock and unlock calls never leave the node's lock cache). Must not touch: protocol or sync
//! internals (everything goes through `squall::Node`).
use crate::error::{
    last_error_ptr, pointer, status, CapiError, SQUALL_BUSY, SQUALL_OK, SQUALL_SERIAL,
};
use squall::{
    AtomicOp, BarrierCount, BarrierId, CondId, FlagId, LockId, Node, NodeId, Placement, ThreadId,
    ThreadPlacement,
};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::{Mutex, OnceLock};

/// A thread function: `void *fn(void *arg)`.
pub type SquallThreadFn = extern "C" fn(*mut c_void) -> *mut c_void;

/// Placement `0`: the job's default (`SQUALL_PLACEMENT`, first touch unless set).
pub const SQUALL_PLACE_DEFAULT: c_int = 0;
/// The first node to touch a page becomes its home.
pub const SQUALL_PLACE_FIRST_TOUCH: c_int = 1;
/// Pages dealt to the nodes in turn, `arg` pages at a time (0 means 1).
pub const SQUALL_PLACE_ROUND_ROBIN: c_int = 2;
/// The allocation cut into one contiguous block per node.
pub const SQUALL_PLACE_BLOCKED: c_int = 3;
/// Every page homed at node `arg`.
pub const SQUALL_PLACE_NODE: c_int = 4;
/// `squall_thread_create` node argument: the node the thread placement picks
/// (`squall_set_thread_placement`; even by default).
pub const SQUALL_ANY_NODE: i32 = -1;
/// Thread placement (the default): the k-th thread node r creates without naming a node runs
/// on node (r + k + 1) mod N, so `main` on node 0 plus P-1 created threads put P/N (+-1)
/// threads on every node.
pub const SQUALL_THREADS_EVEN: c_int = 0;
/// Thread placement: the k-th thread a node creates runs on node k mod N.
pub const SQUALL_THREADS_ROUND_ROBIN: c_int = 1;
/// Thread placement: every thread runs on the node that creates it.
pub const SQUALL_THREADS_LOCAL: c_int = 2;

/// The running node, or the error a call before `squall_init` gets.
pub(crate) fn node() -> Result<Node, CapiError> {
    squall::node().map_err(|_| CapiError::NotInitialised)
}

/// [`node`] borrowed for the whole process: no reference count touched (a shared counter
/// that every thread would write), for the hot paths (locks).
#[inline]
pub(crate) fn node_ref() -> Result<&'static Node, CapiError> {
    squall::node_ref().ok_or(CapiError::NotInitialised)
}

/// The lock fast path of the C entry points, tried before anything else (no `guard`, no
/// error, no allocation, never blocks): take lock `id` if its token is idle in this node's
/// lock cache. `false`: take the full path.
#[inline]
pub(crate) fn lock_cached(id: u64) -> bool {
    squall::node_ref().is_some_and(|n| n.lock_fast(LockId(id)))
}

/// [`lock_cached`] for unlocking: `false`: take the full path.
#[inline]
pub(crate) fn unlock_cached(id: u64) -> bool {
    squall::node_ref().is_some_and(|n| n.unlock_fast(LockId(id)))
}

/// Without any launcher variable the program is a one-node job.
pub(crate) fn default_single_node() {
    if std::env::var_os("SQUALL_RANK").is_none() && std::env::var_os("SQUALL_SIZE").is_none() {
        std::env::set_var("SQUALL_SIZE", "1");
    }
}

// ----- local bookkeeping of synchronization objects in use --------------------------------

/// How many threads of this node wait on each condition: a destroy of a condition in use is
/// refused with `SQUALL_ERR_IN_USE` (for locks the runtime knows: `Node::lock_destroy`).
#[derive(Default)]
struct InUse {
    conds: HashMap<u64, u32>,
}

fn in_use() -> &'static Mutex<InUse> {
    static T: OnceLock<Mutex<InUse>> = OnceLock::new();
    T.get_or_init(Mutex::default)
}

fn with_in_use<R>(f: impl FnOnce(&mut InUse) -> R) -> R {
    let mut g = in_use().lock().unwrap_or_else(|p| p.into_inner());
    f(&mut g)
}

fn bump(map: &mut HashMap<u64, u32>, id: u64, up: bool) {
    if up {
        *map.entry(id).or_insert(0) += 1;
    } else if let Some(c) = map.get_mut(&id) {
        *c -= 1;
        if *c == 0 {
            map.remove(&id);
        }
    }
}

/// Take lock `lock` (on this node's lock cache when its token is idle here: one
/// compare-and-swap, no bookkeeping).
#[inline]
pub(crate) fn lock_id(node: &Node, lock: u64) -> Result<(), CapiError> {
    Ok(node.lock(LockId(lock))?)
}

pub(crate) fn trylock_id(node: &Node, lock: u64) -> Result<bool, CapiError> {
    Ok(node.trylock(LockId(lock))?)
}

#[inline]
pub(crate) fn unlock_id(node: &Node, lock: u64) -> Result<(), CapiError> {
    Ok(node.unlock(LockId(lock))?)
}

/// `SQUALL_ERR_IN_USE` if a thread of this node holds `lock`, waits for it or waits on a
/// condition with it (the runtime's error names the lock and the node).
pub(crate) fn lock_destroy_id(node: &Node, call: &'static str, lock: u64) -> Result<(), CapiError> {
    node.lock_destroy(LockId(lock)).map_err(|e| match e {
        squall::SquallError::Sync(squall_sync::SyncError::LockInUse { node, .. }) => {
            CapiError::InUse {
                call,
                node: node.0,
                what: format!("lock {lock:#x}"),
                why: "a thread of this node holds it, waits for it or waits on a condition with it",
            }
        }
        e => e.into(),
    })
}

pub(crate) fn cond_wait_id(node: &Node, cond: u64, lock: u64) -> Result<(), CapiError> {
    with_in_use(|t| bump(&mut t.conds, cond, true));
    let r = node.cond_wait(CondId(cond), LockId(lock));
    with_in_use(|t| bump(&mut t.conds, cond, false));
    Ok(r?)
}

pub(crate) fn cond_destroy_id(node: &Node, call: &'static str, cond: u64) -> Result<(), CapiError> {
    if with_in_use(|t| t.conds.contains_key(&cond)) {
        return Err(CapiError::InUse {
            call,
            node: node.rank().0,
            what: format!("condition {cond:#x}"),
            why: "threads of this node wait on it",
        });
    }
    Ok(())
}

pub(crate) fn barrier_total(node: &Node, id: u64, total: u32) -> Result<bool, CapiError> {
    Ok(node.barrier_with(BarrierId(id), BarrierCount::Total { total })?)
}

pub(crate) fn placement(
    call: &'static str,
    kind: c_int,
    arg: u64,
) -> Result<Option<Placement>, CapiError> {
    Ok(Some(match kind {
        SQUALL_PLACE_DEFAULT => return Ok(None),
        SQUALL_PLACE_FIRST_TOUCH => Placement::FirstTouch,
        SQUALL_PLACE_ROUND_ROBIN => Placement::RoundRobin {
            block_pages: arg.max(1),
        },
        SQUALL_PLACE_BLOCKED => Placement::Blocked,
        SQUALL_PLACE_NODE => {
            let n = u16::try_from(arg).map_err(|_| CapiError::Invalid {
                call,
                why: format!("node {arg} is not a node number"),
            })?;
            let size = node()?.size();
            if n >= size {
                return Err(CapiError::Invalid {
                    call,
                    why: format!("node {n} does not exist: the job has {size} nodes"),
                });
            }
            Placement::Node(NodeId(n))
        }
        k => {
            return Err(CapiError::Invalid {
                call,
                why: format!("unknown placement {k} (use one of the SQUALL_PLACE_* values)"),
            })
        }
    }))
}

fn non_null<T>(call: &'static str, what: &str, p: *const T) -> Result<(), CapiError> {
    if p.is_null() {
        Err(CapiError::Invalid {
            call,
            why: format!("{what} is a null pointer"),
        })
    } else {
        Ok(())
    }
}

// ----- start-up and shutdown ----------------------------------------------------------------

/// Start this node (SPMD style: every rank runs `main` and calls this). Reads the `SQUALL_*`
/// variables `squall run` sets; without them the program is a one-node job. Calling it again
/// returns `SQUALL_OK`.
#[no_mangle]
pub extern "C" fn squall_init() -> c_int {
    status("squall_init", || {
        default_single_node();
        squall::init()?;
        Ok(SQUALL_OK)
    })
}

/// Start this node as one part of a single system image: rank 0 returns `SQUALL_OK` and runs
/// the program; every other rank serves thread creation and memory until rank 0 calls
/// `squall_finalize` (or exits), then exits the process. The pthreads layer calls this itself.
#[no_mangle]
pub extern "C" fn squall_init_ssi() -> c_int {
    status("squall_init_ssi", || {
        default_single_node();
        squall::init_ssi()?;
        Ok(SQUALL_OK)
    })
}

/// 1 if this process's node is started, else 0.
#[no_mangle]
pub extern "C" fn squall_initialized() -> c_int {
    c_int::from(squall::node().is_ok())
}

/// Collective: end this node's part of the job (every node calls it; in a single-system-image
/// program only rank 0 does). Prints statistics if `SQUALL_STATS=1`.
#[no_mangle]
pub extern "C" fn squall_finalize() -> c_int {
    status("squall_finalize", || {
        node()?.finalize()?;
        Ok(SQUALL_OK)
    })
}

/// The last error of the calling thread, as text (empty if none). Valid until the thread's
/// next failing Squall call; never null.
#[no_mangle]
pub extern "C" fn squall_last_error() -> *const c_char {
    last_error_ptr()
}

/// This node's rank (`>= 0`), or a negative error code.
#[no_mangle]
pub extern "C" fn squall_rank() -> c_int {
    status("squall_rank", || Ok(c_int::from(node()?.rank().0)))
}

/// The number of nodes in the job (`>= 1`), or a negative error code.
#[no_mangle]
pub extern "C" fn squall_size() -> c_int {
    status("squall_size", || Ok(c_int::from(node()?.size())))
}

// ----- allocation ---------------------------------------------------------------------------

/// Run an allocation of the C entry point `entry` (its own address): with profiling on
/// (`SQUALL_PROFILE`), the allocation is attributed to the C code that called `entry`.
#[inline]
pub(crate) fn sited<R>(entry: usize, f: impl FnOnce() -> R) -> R {
    squall::profile::with_c_caller(entry, f)
}

/// Allocate `size` bytes of shared memory (default placement), 16-byte aligned. Null on error.
#[no_mangle]
pub extern "C" fn squall_malloc(size: usize) -> *mut c_void {
    sited(squall_malloc as *const () as usize, || {
        pointer("squall_malloc", || Ok(node()?.alloc(size.max(1))?.cast()))
    })
}

/// Allocate `size` bytes of shared memory aligned to `align` (a power of two; 0 means 16).
/// Null on error.
#[no_mangle]
pub extern "C" fn squall_malloc_aligned(size: usize, align: usize) -> *mut c_void {
    sited(squall_malloc_aligned as *const () as usize, || {
        pointer("squall_malloc_aligned", || {
            if align != 0 && !align.is_power_of_two() {
                return Err(CapiError::Invalid {
                    call: "squall_malloc_aligned",
                    why: format!("alignment {align} is not a power of two"),
                });
            }
            let n = node()?;
            Ok(n.alloc_with(size.max(1), align, n.default_placement())?
                .cast())
        })
    })
}

/// Allocate zeroed shared memory for `count` items of `size` bytes. Null on error.
#[no_mangle]
pub extern "C" fn squall_calloc(count: usize, size: usize) -> *mut c_void {
    sited(squall_calloc as *const () as usize, || {
        pointer("squall_calloc", || {
            Ok(node()?.calloc(count.max(1), size.max(1))?.cast())
        })
    })
}

/// Resize a shared allocation (`ptr` null: allocate). Null on error (then `ptr` is kept).
///
/// # Safety
/// `ptr` is null or a live allocation of `squall_malloc`/`calloc`/`realloc`.
#[no_mangle]
pub unsafe extern "C" fn squall_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    sited(squall_realloc as *const () as usize, || {
        pointer("squall_realloc", || {
            Ok(node()?.realloc(ptr.cast(), size.max(1))?.cast())
        })
    })
}

/// Free shared memory allocated on any node. Null is a no-op.
///
/// # Safety
/// `ptr` is null or a live Squall allocation that no thread uses any more.
#[no_mangle]
pub unsafe extern "C" fn squall_free(ptr: *mut c_void) -> c_int {
    status("squall_free", || {
        if !ptr.is_null() {
            node()?.free(ptr.cast())?;
        }
        Ok(SQUALL_OK)
    })
}

/// The usable size of the allocation at `ptr`, or 0 on error.
///
/// # Safety
/// `ptr` is a live Squall allocation.
#[no_mangle]
pub unsafe extern "C" fn squall_usable_size(ptr: *mut c_void) -> usize {
    crate::error::guard(
        "squall_usable_size",
        |_| 0,
        || Ok(node()?.usable_size(ptr.cast())?),
    )
}

/// Allocate with an explicit home placement: `placement` is a `SQUALL_PLACE_*` value, `arg`
/// its parameter (block pages for round-robin, the node for `SQUALL_PLACE_NODE`).
#[no_mangle]
pub extern "C" fn squall_malloc_placed(
    size: usize,
    placement_kind: c_int,
    arg: u64,
) -> *mut c_void {
    sited(squall_malloc_placed as *const () as usize, || {
        pointer("squall_malloc_placed", || {
            let n = node()?;
            let p = placement("squall_malloc_placed", placement_kind, arg)?
                .unwrap_or_else(|| n.default_placement());
            Ok(n.alloc_with(size.max(1), 0, p)?.cast())
        })
    })
}

/// Collective (SPMD): every node calls it in the same order and gets the same address, which
/// rank 0 allocated with this placement. Null on error.
#[no_mangle]
pub extern "C" fn squall_alloc_collective(
    size: usize,
    placement_kind: c_int,
    arg: u64,
) -> *mut c_void {
    sited(squall_alloc_collective as *const () as usize, || {
        pointer("squall_alloc_collective", || {
            let n = node()?;
            let p = placement("squall_alloc_collective", placement_kind, arg)?
                .unwrap_or_else(|| n.default_placement());
            Ok(n.alloc_collective(size.max(1), p)?.cast())
        })
    })
}

/// Collective (SPMD): rank 0's `*value` is stored into every node's `*value`.
///
/// # Safety
/// `value` points to a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_broadcast_u64(value: *mut u64) -> c_int {
    status("squall_broadcast_u64", || {
        non_null("squall_broadcast_u64", "value", value)?;
        let n = node()?;
        // SAFETY: the caller passes a valid pointer (checked non-null).
        let mine = unsafe { value.read() };
        let v = n.broadcast((n.rank() == NodeId(0)).then_some(mine))?;
        // SAFETY: as above.
        unsafe { value.write(v) };
        Ok(SQUALL_OK)
    })
}

/// The global shared range: `*base` and `*size` (the same on every node).
///
/// # Safety
/// `base` and `size` are null or valid pointers.
#[no_mangle]
pub unsafe extern "C" fn squall_range(base: *mut usize, size: *mut usize) -> c_int {
    status("squall_range", || {
        let (b, s) = node()?.range();
        // SAFETY: non-null pointers are valid per the contract.
        unsafe {
            if !base.is_null() {
                base.write(b);
            }
            if !size.is_null() {
                size.write(s);
            }
        }
        Ok(SQUALL_OK)
    })
}

// ----- locks --------------------------------------------------------------------------------

/// Acquire global lock `id` (any number names a lock; FIFO across nodes). Locking a lock the
/// calling thread holds is `SQUALL_ERR_DEADLOCK`.
/// When the lock's token is idle on this node (its last holder was a thread of this node and
/// no other node asked for it since), this and `squall_unlock` are one compare-and-swap each
/// in the node's lock cache (`SQUALL_LOCK_CACHE`), with no message.
#[no_mangle]
pub extern "C" fn squall_lock(id: u64) -> c_int {
    if lock_cached(id) {
        return SQUALL_OK;
    }
    status("squall_lock", || {
        lock_id(node_ref()?, id)?;
        Ok(SQUALL_OK)
    })
}

/// Take lock `id` if that needs no waiting: `SQUALL_OK` if now held, `SQUALL_BUSY` if not.
#[no_mangle]
pub extern "C" fn squall_trylock(id: u64) -> c_int {
    if lock_cached(id) {
        return SQUALL_OK;
    }
    status("squall_trylock", || {
        Ok(if trylock_id(node_ref()?, id)? {
            SQUALL_OK
        } else {
            SQUALL_BUSY
        })
    })
}

/// Release lock `id`; `SQUALL_ERR_NOT_HELD` if the calling thread does not hold it.
#[no_mangle]
pub extern "C" fn squall_unlock(id: u64) -> c_int {
    if unlock_cached(id) {
        return SQUALL_OK;
    }
    status("squall_unlock", || {
        unlock_id(node_ref()?, id)?;
        Ok(SQUALL_OK)
    })
}

/// Check that lock `id` is not in use on this node (`SQUALL_ERR_IN_USE` if a thread of this
/// node holds it, waits for it or waits on a condition with it). The id may be used again.
#[no_mangle]
pub extern "C" fn squall_lock_destroy(id: u64) -> c_int {
    status("squall_lock_destroy", || {
        lock_destroy_id(&node()?, "squall_lock_destroy", id)?;
        Ok(SQUALL_OK)
    })
}

// ----- barriers -----------------------------------------------------------------------------

/// Barrier of every node, one calling thread per node.
#[no_mangle]
pub extern "C" fn squall_barrier() -> c_int {
    status("squall_barrier", || {
        node()?.barrier()?;
        Ok(SQUALL_OK)
    })
}

/// Barrier `id` for `total` threads of the whole job (any nodes). Returns `SQUALL_SERIAL` in
/// exactly one thread per episode, `SQUALL_OK` in the others.
#[no_mangle]
pub extern "C" fn squall_barrier_n(id: u64, total: u32) -> c_int {
    status("squall_barrier_n", || {
        if total == 0 {
            return Err(CapiError::Invalid {
                call: "squall_barrier_n",
                why: format!("barrier {id:#x} needs at least one participant"),
            });
        }
        Ok(if barrier_total(&node()?, id, total)? {
            SQUALL_SERIAL
        } else {
            SQUALL_OK
        })
    })
}

/// Barrier `id` for `local` threads on every node. Returns like `squall_barrier_n`.
#[no_mangle]
pub extern "C" fn squall_barrier_per_node(id: u64, local: u32) -> c_int {
    status("squall_barrier_per_node", || {
        if local == 0 {
            return Err(CapiError::Invalid {
                call: "squall_barrier_per_node",
                why: format!("barrier {id:#x} needs at least one thread per node"),
            });
        }
        let serial = node()?.barrier_with(BarrierId(id), BarrierCount::PerNode { local })?;
        Ok(if serial { SQUALL_SERIAL } else { SQUALL_OK })
    })
}

// ----- conditions and flags -----------------------------------------------------------------

/// Wait on condition `cond` with lock `lock` held (released while waiting, held again on
/// return). Mesa semantics: re-check the predicate in a loop.
#[no_mangle]
pub extern "C" fn squall_cond_wait(cond: u64, lock: u64) -> c_int {
    status("squall_cond_wait", || {
        cond_wait_id(&node()?, cond, lock)?;
        Ok(SQUALL_OK)
    })
}

/// Wake one waiter of condition `cond`.
#[no_mangle]
pub extern "C" fn squall_cond_signal(cond: u64) -> c_int {
    status("squall_cond_signal", || {
        node()?.cond_signal(CondId(cond))?;
        Ok(SQUALL_OK)
    })
}

/// Wake every waiter of condition `cond`.
#[no_mangle]
pub extern "C" fn squall_cond_broadcast(cond: u64) -> c_int {
    status("squall_cond_broadcast", || {
        node()?.cond_broadcast(CondId(cond))?;
        Ok(SQUALL_OK)
    })
}

/// Check that no thread of this node waits on condition `cond` (`SQUALL_ERR_IN_USE` if one does).
#[no_mangle]
pub extern "C" fn squall_cond_destroy(cond: u64) -> c_int {
    status("squall_cond_destroy", || {
        cond_destroy_id(&node()?, "squall_cond_destroy", cond)?;
        Ok(SQUALL_OK)
    })
}

/// Set flag `id` (a release): wakes every waiter.
#[no_mangle]
pub extern "C" fn squall_flag_set(id: u64) -> c_int {
    status("squall_flag_set", || {
        node()?.flag_set(FlagId(id))?;
        Ok(SQUALL_OK)
    })
}

/// Wait until flag `id` is set (an acquire), without spinning on shared memory.
#[no_mangle]
pub extern "C" fn squall_flag_wait(id: u64) -> c_int {
    status("squall_flag_wait", || {
        node()?.flag_wait(FlagId(id))?;
        Ok(SQUALL_OK)
    })
}

/// Clear flag `id`.
#[no_mangle]
pub extern "C" fn squall_flag_clear(id: u64) -> c_int {
    status("squall_flag_clear", || {
        node()?.flag_clear(FlagId(id))?;
        Ok(SQUALL_OK)
    })
}

// ----- atomics ------------------------------------------------------------------------------

fn atomic(call: &'static str, addr: *mut u64, op: AtomicOp, old: *mut u64) -> c_int {
    status(call, || {
        non_null(call, "addr", addr)?;
        if (addr as usize) & 7 != 0 {
            return Err(CapiError::Invalid {
                call,
                why: format!("{:#x} is not 8-byte aligned", addr as usize),
            });
        }
        let v = node()?.atomic(addr, op)?;
        if !old.is_null() {
            // SAFETY: the caller passes null or a valid pointer for the old value.
            unsafe { old.write(v) };
        }
        Ok(SQUALL_OK)
    })
}

/// Atomically add `value` to the shared word at `addr` (8-byte aligned, in Squall memory);
/// the old value goes to `*old` (if not null). A release for the calling thread; atomics on
/// one word are sequentially consistent with each other. Read such words with
/// `squall_atomic_load`, not plain loads.
///
/// # Safety
/// `addr` is a shared word; `old` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn squall_atomic_fetch_add(
    addr: *mut u64,
    value: u64,
    old: *mut u64,
) -> c_int {
    atomic(
        "squall_atomic_fetch_add",
        addr,
        AtomicOp::FetchAdd(value),
        old,
    )
}

/// Atomically store `value` into the shared word at `addr`; the old value goes to `*old`.
///
/// # Safety
/// As `squall_atomic_fetch_add`.
#[no_mangle]
pub unsafe extern "C" fn squall_atomic_swap(addr: *mut u64, value: u64, old: *mut u64) -> c_int {
    atomic("squall_atomic_swap", addr, AtomicOp::Swap(value), old)
}

/// Atomically store `desired` into the shared word at `addr` if it equals `expected`; the old
/// value goes to `*old` (the swap happened iff `*old == expected`).
///
/// # Safety
/// As `squall_atomic_fetch_add`.
#[no_mangle]
pub unsafe extern "C" fn squall_atomic_compare_swap(
    addr: *mut u64,
    expected: u64,
    desired: u64,
    old: *mut u64,
) -> c_int {
    atomic(
        "squall_atomic_compare_swap",
        addr,
        AtomicOp::CompareSwap {
            expected,
            new: desired,
        },
        old,
    )
}

/// Atomically read the shared word at `addr` into `*value`.
///
/// # Safety
/// As `squall_atomic_fetch_add`; `value` is valid.
#[no_mangle]
pub unsafe extern "C" fn squall_atomic_load(addr: *mut u64, value: *mut u64) -> c_int {
    if value.is_null() {
        return status("squall_atomic_load", || {
            non_null("squall_atomic_load", "value", value).map(|_| SQUALL_OK)
        });
    }
    atomic("squall_atomic_load", addr, AtomicOp::FetchAdd(0), value)
}

// ----- threads ------------------------------------------------------------------------------

/// Start `fn(arg)` as a thread on node `node` (`SQUALL_ANY_NODE`: the node the thread
/// placement picks, see `squall_set_thread_placement`); its job-wide id goes to `*tid`. A release: the new thread sees everything the
/// caller wrote before. `arg` is passed as is (pointers into Squall memory are valid on every
/// node, others only on this one). `fn` must be in the program or a library every node loads.
///
/// # Safety
/// `tid` is valid; `fn` is a valid thread function.
#[no_mangle]
pub unsafe extern "C" fn squall_thread_create(
    node_id: i32,
    f: Option<extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
    tid: *mut u64,
) -> c_int {
    status("squall_thread_create", || {
        non_null("squall_thread_create", "tid", tid)?;
        let t = spawn(node_id, f, arg)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { tid.write(t) };
        Ok(SQUALL_OK)
    })
}

/// Choose where this node puts the threads it creates without naming a node
/// (`SQUALL_ANY_NODE`, `pthread_create`, SPLASH `CREATE`): `SQUALL_THREADS_EVEN`,
/// `SQUALL_THREADS_ROUND_ROBIN` or `SQUALL_THREADS_LOCAL`. The environment variable
/// `SQUALL_THREAD_PLACEMENT` (even, round-robin, local) sets the start value on every node.
/// `SQUALL_OK`, or `SQUALL_ERR_INVALID` for an unknown placement.
#[no_mangle]
pub extern "C" fn squall_set_thread_placement(placement: c_int) -> c_int {
    status("squall_set_thread_placement", || {
        let p = match placement {
            SQUALL_THREADS_EVEN => ThreadPlacement::Even,
            SQUALL_THREADS_ROUND_ROBIN => ThreadPlacement::RoundRobin,
            SQUALL_THREADS_LOCAL => ThreadPlacement::Local,
            other => {
                return Err(CapiError::Invalid {
                    call: "squall_set_thread_placement",
                    why: format!(
                        "unknown thread placement {other}: use SQUALL_THREADS_EVEN, \
                         SQUALL_THREADS_ROUND_ROBIN or SQUALL_THREADS_LOCAL"
                    ),
                })
            }
        };
        node()?.set_thread_placement(p);
        Ok(SQUALL_OK)
    })
}

/// This node's thread placement (`SQUALL_THREADS_*`), or a negative error code.
#[no_mangle]
pub extern "C" fn squall_thread_placement() -> c_int {
    status("squall_thread_placement", || {
        Ok(match node()?.thread_placement() {
            ThreadPlacement::Even => SQUALL_THREADS_EVEN,
            ThreadPlacement::RoundRobin => SQUALL_THREADS_ROUND_ROBIN,
            ThreadPlacement::Local => SQUALL_THREADS_LOCAL,
        })
    })
}

pub(crate) fn spawn(
    node_id: i32,
    f: Option<SquallThreadFn>,
    arg: *mut c_void,
) -> Result<u64, CapiError> {
    let call = "squall_thread_create";
    let f = f.ok_or_else(|| CapiError::Invalid {
        call,
        why: "the thread function is a null pointer".into(),
    })?;
    let n = node()?;
    let on = match node_id {
        SQUALL_ANY_NODE => None,
        k if k >= 0 && k < i32::from(n.size()) => Some(NodeId(k as u16)),
        k => {
            return Err(CapiError::Invalid {
                call,
                why: format!("node {k} does not exist: the job has {} nodes", n.size()),
            })
        }
    };
    Ok(n.spawn_on(on, f, arg)?.0)
}

pub(crate) fn join(tid: u64) -> Result<*mut c_void, CapiError> {
    node()?.join(ThreadId(tid)).map_err(|e| match e {
        squall::SquallError::Remote(text) => CapiError::UnknownThread(text),
        e @ squall::SquallError::UnknownThread(_) => CapiError::UnknownThread(e.to_string()),
        e => CapiError::Squall(e),
    })
}

/// Wait for thread `tid` (created on any node) to end; its return value goes to `*ret` (if
/// not null). An acquire: the thread's writes are visible afterwards. A thread is joined once;
/// an unknown or already joined id is `SQUALL_ERR_UNKNOWN_THREAD`.
///
/// # Safety
/// `ret` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn squall_thread_join(tid: u64, ret: *mut *mut c_void) -> c_int {
    status("squall_thread_join", || {
        let r = join(tid)?;
        if !ret.is_null() {
            // SAFETY: valid per the contract.
            unsafe { ret.write(r) };
        }
        Ok(SQUALL_OK)
    })
}

// ----- statistics and time --------------------------------------------------------------------

/// This node's statistics (time breakdown and counters) as a JSON text; free it with
/// `squall_string_free`. Null on error.
#[no_mangle]
pub extern "C" fn squall_stats_json() -> *mut c_char {
    pointer("squall_stats_json", || {
        let st = node()?.stats();
        let text = serde_json::to_string(&st).map_err(|e| CapiError::Panic {
            call: "squall_stats_json",
            why: e.to_string(),
        })?;
        Ok(CString::new(text).unwrap_or_default().into_raw())
    })
}

/// Print this node's statistics as JSON on standard error.
#[no_mangle]
pub extern "C" fn squall_stats_print() -> c_int {
    status("squall_stats_print", || {
        let st = node()?.stats();
        eprintln!(
            "squall stats {}: {}",
            st.node.unwrap_or(0),
            serde_json::to_string(&st).unwrap_or_default()
        );
        Ok(SQUALL_OK)
    })
}

/// Mark the statistics of the whole job: call it from ONE thread anywhere (e.g. the first
/// thread right after the barrier that starts the timed phase, and again right after the one
/// that ends it). Every node snapshots its counters (the calling node at once, the others when
/// the mark's message arrives), and the report at exit (`squall run --stats`, `SQUALL_STATS=1`,
/// `SQUALL_STATS_FILE` under `"phase"`) shows the timed phase, from the first mark to the
/// second (or to the end), beside the whole run. Marks after the second are ignored.
#[no_mangle]
pub extern "C" fn squall_stats_mark() -> c_int {
    status("squall_stats_mark", || {
        node()?.stats_mark()?;
        Ok(SQUALL_OK)
    })
}

/// Free a string returned by Squall (`squall_stats_json`).
///
/// # Safety
/// `s` is null or a string from `squall_stats_json`, freed once.
#[no_mangle]
pub unsafe extern "C" fn squall_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: `s` came from CString::into_raw in this library.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Wall-clock seconds since an arbitrary point (monotonic), for timing.
#[no_mangle]
pub extern "C" fn squall_wtime() -> f64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}
