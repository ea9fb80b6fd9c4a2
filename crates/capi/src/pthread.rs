//! The pthreads compatibility layer behind `include/squall/pthread.h`: that header redirects
//! `pthread_create/join`, synchronization objects and `malloc/calloc/realloc/free` by macro to
//! the `squall_pthread_*` / `squall_pt_*` / `squall_sem_*` functions of this module and its
//! siblings (`pthread_mutex`, `pthread_timed` for conditions and timed waits, `pthread_rwlock`,
//! `pthread_once_key`, `semaphore`), and starts the node from a constructor
//! (`squall_pthread_start`).
//!
//! Synchronization objects are named by their address (so the static initializers work); what
//! an object needs beyond its name (a barrier's count, a mutex's kind, a rwlock's or
//! semaphore's state) is stored in the object. An address in the Squall range is the same
//! object on every node; an address in a loaded module (a `static` mutex) is named by module
//! and offset so that address randomisation does not split it; anything else (a stack or
//! private-heap object) by its raw address, which is only meaningful if every user is on one
//! node. Addresses are mixed by a bijection so that lock managers spread over the nodes.
//! Internal locks and conditions of an object at `a` are named `object_id(a + 1..=3)`: no
//! object starts at such an address, so these ids name nothing else.
//!
//! Owns: the pthread-to-Squall mapping and errno codes. Must not touch: the runtime's state.
use crate::api::{self, node};
use crate::error::{
    guard, record, CapiError, SQUALL_ERR_DEADLOCK, SQUALL_ERR_INVALID, SQUALL_ERR_IN_USE,
    SQUALL_ERR_NOT_HELD, SQUALL_ERR_NO_MEMORY, SQUALL_ERR_UNKNOWN_THREAD, SQUALL_ERR_UNSUPPORTED,
};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Bijective 64-bit mixer (the splitmix64 finalizer): distinct addresses stay distinct ids.
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The job-wide id of the synchronization object at `addr` (see the module doc).
#[inline]
pub(crate) fn object_id(addr: usize) -> u64 {
    if let Some(n) = squall::node_ref() {
        let (base, size) = n.range();
        if addr >= base && addr - base < size {
            return mix(addr as u64);
        }
    }
    if let Some((module, offset)) = crate::modules::encode_cached(addr) {
        // Tag bit 63 so a module-relative id never equals a raw-address id of a small offset.
        return mix(module.wrapping_add(offset) | (1 << 63));
    }
    mix(addr as u64)
}

/// The job-wide id of the object at `p` (as the pthreads layer names mutexes, conditions and
/// barriers): for `squall_lock`, `squall_barrier_n`, `squall_flag_*` on an object's address.
#[no_mangle]
pub extern "C" fn squall_object_id(p: *const c_void) -> u64 {
    guard("squall_object_id", |_| 0, || Ok(object_id(p as usize)))
}

/// The errno value for a failed call, after recording its text.
pub(crate) fn errno_of(e: &CapiError) -> c_int {
    match record(e) {
        SQUALL_ERR_NOT_HELD => libc::EPERM,
        SQUALL_ERR_DEADLOCK => libc::EDEADLK,
        SQUALL_ERR_IN_USE => libc::EBUSY,
        SQUALL_ERR_INVALID => libc::EINVAL,
        SQUALL_ERR_UNKNOWN_THREAD => libc::ESRCH,
        SQUALL_ERR_NO_MEMORY => libc::EAGAIN,
        SQUALL_ERR_UNSUPPORTED => libc::ENOTSUP,
        _ => libc::EIO,
    }
}

/// Run a pthread call: `Ok(v)` is returned; an error is printed on standard error (programs
/// rarely check these codes, and misuse must not pass silently) and returned as an errno.
pub(crate) fn pt(call: &'static str, f: impl FnOnce() -> Result<c_int, CapiError>) -> c_int {
    guard(
        call,
        |_| libc::EIO,
        || match f() {
            Ok(v) => Ok(v),
            Err(e) => {
                let code = errno_of(&e);
                eprintln!("squall: {call}: {e}");
                Ok(code)
            }
        },
    )
}

pub(crate) fn need<T>(call: &'static str, what: &str, p: *const T) -> Result<usize, CapiError> {
    if p.is_null() {
        Err(CapiError::Invalid {
            call,
            why: format!("{what} is a null pointer"),
        })
    } else {
        Ok(p as usize)
    }
}

// ----- start-up -----------------------------------------------------------------------------

static STARTED: AtomicBool = AtomicBool::new(false);

extern "C" fn finalize_at_exit() {
    if let Ok(n) = squall::node() {
        if n.endpoint().is_service_thread() {
            // The runtime itself is ending the process (a lost peer): nothing to finalize.
            return;
        }
        if let Err(e) = n.finalize() {
            eprintln!("squall: {}: finalize at exit: {e}", n.rank());
        }
    }
}

/// Start the node for a pthreads program (called by the constructor in `squall/pthread.h`;
/// later calls do nothing). Under `squall run`, rank 0 returns and runs `main` while every
/// other rank serves threads until rank 0 exits; without the launcher the program is a
/// one-node job. Exits the process with a message if the node cannot start.
#[no_mangle]
pub extern "C" fn squall_pthread_start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let r = guard(
        "squall_pthread_start",
        |_| Err(String::new()),
        || {
            api::default_single_node();
            let (start, len) = globals();
            let g = (len > 0).then_some((start, len));
            match squall::init_ssi_with_globals(g) {
                Ok(_) => Ok(Ok(())),
                Err(e) => Ok(Err(e.to_string())),
            }
        },
    );
    match r {
        Ok(()) => {
            crate::pthread_once_key::install_hook();
            // SAFETY: registering a plain extern "C" function with no arguments.
            if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                eprintln!("squall: could not register the finalize-at-exit handler");
            }
        }
        Err(e) => {
            let text = if e.is_empty() {
                // SAFETY: squall_last_error returns a valid NUL-terminated string.
                unsafe { CStr::from_ptr(crate::error::last_error_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            } else {
                e
            };
            eprintln!("squall: the node could not start: {text}");
            std::process::exit(2);
        }
    }
}

/// This process's `SQUALL_GLOBAL` section: (start, length).
static GLOBALS: Mutex<(usize, usize)> = Mutex::new((0, 0));

fn globals() -> (usize, usize) {
    *GLOBALS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Register the program's `SQUALL_GLOBAL` section `[start, end)` (called by the constructor in
/// `squall/pthread.h`, before `squall_pthread_start`, with the bounds of the `squall_globals`
/// section of the module that includes the header). `squall_pthread_start` then makes it
/// coherent shared memory on every node, with node 0 as its home (`Node::adopt_globals`): main
/// may set globals before or after creating threads, and threads on any node read and write
/// them like malloc'd memory (synchronize as for any shared data).
///
/// The section must lie at the same address on every node: if address randomisation is on,
/// this call turns it off (`personality(ADDR_NO_RANDOMIZE)`) and re-executes the program with
/// the same arguments and environment, so it never returns in that case. The section must be
/// page aligned with a page-aligned end (the linker script fragment added by
/// `pkg-config --libs squall` does that); otherwise the node fails to start with a message.
/// Only the first module with a non-empty section is adopted (the main program); a second,
/// different one is refused with a message. Returns the section's length in bytes.
///
/// # Safety
/// `start..end` is the program's `squall_globals` section (or both null).
#[no_mangle]
pub unsafe extern "C" fn squall_register_globals(start: *mut c_void, end: *mut c_void) -> usize {
    let bytes = (end as usize).saturating_sub(start as usize);
    if bytes == 0 || start.is_null() {
        return 0;
    }
    {
        let mut g = GLOBALS.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 == 0 {
            *g = (start as usize, bytes);
        } else if *g != (start as usize, bytes) {
            eprintln!(
                "squall: a second SQUALL_GLOBAL section ({:#x}, {bytes} bytes, in a shared \
                 library?) is ignored: only the main program's ({:#x}, {} bytes) is shared",
                start as usize, g.0, g.1
            );
            return 0;
        }
    }
    if STARTED.load(Ordering::Acquire) {
        // A library loaded after start-up: too late to adopt its section.
        return bytes;
    }
    if let Err(e) = squall_memory::fixed_layout() {
        eprintln!(
            "squall: warning: {e}; SQUALL_GLOBAL variables need the same address on every node"
        );
    }
    bytes
}

// ----- threads ------------------------------------------------------------------------------

/// `pthread_create`: the thread is placed by the node's thread placement (even by default, see
/// `squall_set_thread_placement`); attributes are ignored.
///
/// # Safety
/// `thread` is valid; `f` is a valid thread function in a module every node loads.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_create(
    thread: *mut u64,
    attr: *const c_void,
    f: Option<extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> c_int {
    let _ = attr; // attributes (stack size, detach state) do not apply to squall threads
    pt("pthread_create", || {
        need("pthread_create", "thread", thread)?;
        let tid = api::spawn(api::SQUALL_ANY_NODE, f, arg)?;
        // SAFETY: checked non-null; valid per the contract.
        unsafe { thread.write(tid) };
        Ok(0)
    })
}

/// `pthread_join` of a thread from `squall_pthread_create` (on any node).
///
/// # Safety
/// `ret` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_join(thread: u64, ret: *mut *mut c_void) -> c_int {
    pt("pthread_join", || {
        let r = api::join(thread)?;
        if !ret.is_null() {
            // SAFETY: valid per the contract.
            unsafe { ret.write(r) };
        }
        Ok(0)
    })
}

/// `pthread_detach`: a Squall thread needs no join; its end is recorded by the runtime until the
/// job ends. Always 0.
#[no_mangle]
pub extern "C" fn squall_pthread_detach(thread: u64) -> c_int {
    let _ = thread;
    0
}

/// `pthread_cancel`: not supported for Squall threads (`ENOTSUP`, with a message).
#[no_mangle]
pub extern "C" fn squall_pthread_cancel(thread: u64) -> c_int {
    let _ = thread;
    pt("pthread_cancel", || {
        Err(CapiError::Unsupported("cancelling a thread"))
    })
}

// ----- spinlocks (Squall locks; see pthread_mutex.rs for mutexes) ------------------------

/// `pthread_spin_init` (the process-shared flag does not apply). Spinlocks are Squall locks.
#[no_mangle]
pub extern "C" fn squall_pthread_spin_init(l: *mut c_void, pshared: c_int) -> c_int {
    let _ = pshared;
    pt("pthread_spin_init", || {
        need("pthread_spin_init", "spinlock", l)?;
        Ok(0)
    })
}

/// `pthread_spin_lock` (error-checking: relocking is `EDEADLK`).
#[no_mangle]
pub extern "C" fn squall_pthread_spin_lock(l: *mut c_void) -> c_int {
    pt("pthread_spin_lock", || {
        let a = need("pthread_spin_lock", "spinlock", l)?;
        api::lock_id(&node()?, object_id(a))?;
        Ok(0)
    })
}

/// `pthread_spin_trylock`: `EBUSY` if taking it would need waiting.
#[no_mangle]
pub extern "C" fn squall_pthread_spin_trylock(l: *mut c_void) -> c_int {
    pt("pthread_spin_trylock", || {
        let a = need("pthread_spin_trylock", "spinlock", l)?;
        Ok(if api::trylock_id(&node()?, object_id(a))? {
            0
        } else {
            libc::EBUSY
        })
    })
}

/// `pthread_spin_unlock`: `EPERM` if the calling thread does not hold it.
#[no_mangle]
pub extern "C" fn squall_pthread_spin_unlock(l: *mut c_void) -> c_int {
    pt("pthread_spin_unlock", || {
        let a = need("pthread_spin_unlock", "spinlock", l)?;
        api::unlock_id(&node()?, object_id(a))?;
        Ok(0)
    })
}

/// `pthread_spin_destroy`: `EBUSY` if a thread of this node holds or waits for it.
#[no_mangle]
pub extern "C" fn squall_pthread_spin_destroy(l: *mut c_void) -> c_int {
    pt("pthread_spin_destroy", || {
        let a = need("pthread_spin_destroy", "spinlock", l)?;
        api::lock_destroy_id(&node()?, "pthread_spin_destroy", object_id(a))?;
        Ok(0)
    })
}

// ----- conditions ---------------------------------------------------------------------------

/// `pthread_cond_signal`.
#[no_mangle]
pub extern "C" fn squall_pthread_cond_signal(c: *mut c_void) -> c_int {
    pt("pthread_cond_signal", || {
        let a = need("pthread_cond_signal", "condition", c)?;
        node()?.cond_signal(squall::CondId(object_id(a)))?;
        Ok(0)
    })
}

/// `pthread_cond_broadcast`.
#[no_mangle]
pub extern "C" fn squall_pthread_cond_broadcast(c: *mut c_void) -> c_int {
    pt("pthread_cond_broadcast", || {
        let a = need("pthread_cond_broadcast", "condition", c)?;
        node()?.cond_broadcast(squall::CondId(object_id(a)))?;
        Ok(0)
    })
}

/// `pthread_cond_destroy`: `EBUSY` if threads of this node wait on it.
#[no_mangle]
pub extern "C" fn squall_pthread_cond_destroy(c: *mut c_void) -> c_int {
    pt("pthread_cond_destroy", || {
        let a = need("pthread_cond_destroy", "condition", c)?;
        api::cond_destroy_id(&node()?, "pthread_cond_destroy", object_id(a))?;
        Ok(0)
    })
}

// ----- barriers -----------------------------------------------------------------------------

/// Marks an initialised barrier; the count follows it in the `pthread_barrier_t` bytes.
const BARRIER_MAGIC: u32 = 0x5351_4252; // "SQBR"

/// `pthread_barrier_init`: stores `count` in the barrier object (which must be in Squall
/// memory, or a static, for threads on other nodes to read it).
#[no_mangle]
pub extern "C" fn squall_pthread_barrier_init(
    b: *mut c_void,
    attr: *const c_void,
    count: c_uint,
) -> c_int {
    let _ = attr; // process-shared attributes do not apply
    pt("pthread_barrier_init", || {
        need("pthread_barrier_init", "barrier", b)?;
        if count == 0 {
            return Err(CapiError::Invalid {
                call: "pthread_barrier_init",
                why: "the count is 0".into(),
            });
        }
        let w = b as *mut u32;
        // SAFETY: a pthread_barrier_t is at least 8 bytes and 4-byte aligned.
        unsafe {
            w.add(1).write_volatile(count);
            w.write_volatile(BARRIER_MAGIC);
        }
        Ok(0)
    })
}

/// `pthread_barrier_wait`: `PTHREAD_BARRIER_SERIAL_THREAD` in one thread per episode, 0 in
/// the others.
#[no_mangle]
pub extern "C" fn squall_pthread_barrier_wait(b: *mut c_void) -> c_int {
    pt("pthread_barrier_wait", || {
        let a = need("pthread_barrier_wait", "barrier", b)?;
        let w = b as *const u32;
        // SAFETY: as in init; the object was initialised (checked by the magic).
        let (magic, count) = unsafe { (w.read_volatile(), w.add(1).read_volatile()) };
        if magic != BARRIER_MAGIC || count == 0 {
            return Err(CapiError::Invalid {
                call: "pthread_barrier_wait",
                why: format!("the barrier at {a:#x} is not initialised (call pthread_barrier_init; it must live in squall memory)"),
            });
        }
        let serial = api::barrier_total(&node()?, object_id(a), count)?;
        Ok(if serial {
            libc::PTHREAD_BARRIER_SERIAL_THREAD
        } else {
            0
        })
    })
}

/// `pthread_barrier_destroy`.
#[no_mangle]
pub extern "C" fn squall_pthread_barrier_destroy(b: *mut c_void) -> c_int {
    pt("pthread_barrier_destroy", || {
        need("pthread_barrier_destroy", "barrier", b)?;
        // SAFETY: as in init.
        unsafe { (b as *mut u32).write_volatile(0) };
        Ok(0)
    })
}

// ----- memory -------------------------------------------------------------------------------

fn in_squall(p: *mut c_void) -> bool {
    node().is_ok_and(|n| {
        let (base, size) = n.range();
        let a = p as usize;
        a >= base && a - base < size
    })
}

/// `malloc` from the shared heap (the C library's before the node started).
#[no_mangle]
pub extern "C" fn squall_pt_malloc(size: usize) -> *mut c_void {
    if node().is_err() {
        // SAFETY: plain libc allocation.
        return unsafe { libc::malloc(size) };
    }
    let p = api::squall_malloc(size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `aligned_alloc` from the shared heap (`align` a power of two).
#[no_mangle]
pub extern "C" fn squall_pt_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if node().is_err() {
        // SAFETY: plain libc allocation.
        return unsafe { libc::aligned_alloc(align, size) };
    }
    let p = api::squall_malloc_aligned(size, align);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `posix_memalign` from the shared heap: 0, `EINVAL` (bad alignment) or `ENOMEM`.
///
/// # Safety
/// `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn squall_pt_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    if out.is_null() || !align.is_power_of_two() || align < std::mem::size_of::<usize>() {
        return libc::EINVAL;
    }
    if node().is_err() {
        // SAFETY: plain libc allocation into a valid out pointer.
        return unsafe { libc::posix_memalign(out, align, size) };
    }
    let p = api::squall_malloc_aligned(size, align);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: valid per the contract.
    unsafe { out.write(p) };
    0
}

/// `calloc` from the shared heap.
#[no_mangle]
pub extern "C" fn squall_pt_calloc(count: usize, size: usize) -> *mut c_void {
    if node().is_err() {
        // SAFETY: plain libc allocation.
        return unsafe { libc::calloc(count, size) };
    }
    let p = api::squall_calloc(count, size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `realloc`: Squall memory stays in the shared heap; other memory (from the C library, e.g.
/// `strdup`) is handed to the C library's `realloc`.
///
/// # Safety
/// `p` is null or a live allocation of either heap.
#[no_mangle]
pub unsafe extern "C" fn squall_pt_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if !p.is_null() && !in_squall(p) {
        // SAFETY: a C-library allocation per the contract.
        return unsafe { libc::realloc(p, size) };
    }
    if node().is_err() {
        // SAFETY: p is null here (a squall pointer implies a node).
        return unsafe { libc::realloc(p, size) };
    }
    // SAFETY: p is null or a squall allocation.
    let q = unsafe { api::squall_realloc(p, size) };
    if q.is_null() {
        set_errno(libc::ENOMEM);
    }
    q
}

/// `free`: Squall memory goes back to the shared heap, other memory to the C library. A
/// failure (double free, not an allocation) is reported on standard error.
///
/// # Safety
/// `p` is null or a live allocation of either heap.
#[no_mangle]
pub unsafe extern "C" fn squall_pt_free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if !in_squall(p) {
        // SAFETY: a C-library allocation per the contract.
        unsafe { libc::free(p) };
        return;
    }
    // SAFETY: a squall allocation per the contract.
    if unsafe { api::squall_free(p) } != 0 {
        // SAFETY: squall_last_error returns a valid NUL-terminated string.
        let text = unsafe { CStr::from_ptr(crate::error::last_error_ptr()) };
        eprintln!("squall: free: {}", text.to_string_lossy());
    }
}

fn set_errno(v: c_int) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = v };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_a_bijection_on_samples() {
        let mut seen = std::collections::HashSet::new();
        for a in (0..1u64 << 16).map(|i| 0x7f00_0000_0000 + i * 8) {
            assert!(seen.insert(mix(a)), "collision at {a:#x}");
        }
        // Ids of 8-byte-aligned addresses spread over the managers (id % nodes).
        let on_zero = (0..1024u64)
            .filter(|i| mix(0x1000 + i * 64) & 3 == 0)
            .count();
        assert!(
            (150..=370).contains(&on_zero),
            "{on_zero} of 1024 ids on manager 0"
        );
    }

    #[test]
    fn statics_are_named_by_module_and_offset() {
        static M: [u64; 2] = [0, 0];
        let a = std::ptr::addr_of!(M) as usize;
        let id = object_id(a);
        assert_eq!(id, object_id(a), "the same object has one id");
        assert_ne!(
            id,
            mix(a as u64),
            "a static is not named by its raw address"
        );
        assert_ne!(object_id(a + 8), id);
        let on_stack = 5u64;
        let s = std::ptr::addr_of!(on_stack) as usize;
        assert_eq!(object_id(s), mix(s as u64));
    }

    #[test]
    fn calls_before_start_are_clear_errors() {
        let mut m = [0u64; 5];
        // SAFETY: a zeroed 40-byte object stands for a pthread_mutex_t.
        let rc = unsafe { crate::squall_pthread_mutex_lock(m.as_mut_ptr().cast()) };
        assert_eq!(rc, libc::EIO);
        // SAFETY: reads this thread's last error text.
        let text = unsafe { CStr::from_ptr(crate::error::last_error_ptr()) };
        assert!(text.to_string_lossy().contains("not initialised"));
        // SAFETY: a null mutex is checked before use.
        let rc = unsafe { crate::squall_pthread_mutex_lock(std::ptr::null_mut()) };
        assert_eq!(rc, libc::EINVAL);
        // Before the node exists, the allocation functions fall back to the C library.
        let p = squall_pt_malloc(64);
        assert!(!p.is_null());
        // SAFETY: p is a C-library allocation of 64 bytes.
        unsafe { squall_pt_free(p) };
    }
}
