//! The pthreads compatibility layer behind `include/squall/pthread.h`: that header redirects
//! `pthread_create/join/exit/self`, synchronization objects and `malloc/calloc/realloc/free`
//! by macro to the `squall_pthread_*` / `squall_pt_*` / `squall_sem_*` functions of this
//! module and its siblings (`pthread_mutex`, `pthread_timed` for conditions and timed waits,
//! `pthread_rwlock`, `pthread_once_key`, `semaphore`), registers the program's global data
//! (`squall_register_data`) and starts the node from a constructor (`squall_pthread_start`),
//! and runs `main` through `squall_pthread_main` (`-Wl,--wrap=main`). Every thread's body and
//! `main` run on shared stacks (`crate::stack`), through the thread runner installed at start.
//!
//! Synchronization objects are named by their address (so the static initializers work); what
//! an object needs beyond its name (a barrier's count, a mutex's kind, a rwlock's or
//! semaphore's state) is stored in the object. An address in the program's shared globals or
//! in the Squall range (heap, shared stacks) is the same object on every node; an address in
//! another loaded module (a shared library's `static` mutex) is named by module and offset so
//! that address randomisation does not split it; anything else (a private-heap object) by its
//! raw address, which is only meaningful if every user is on one node. Addresses are mixed by
//! a bijection so that lock managers spread over the nodes. Internal locks and conditions of
//! an object at `a` are named `object_id(a + 1..=3)`: no object starts at such an address, so
//! these ids name nothing else.
//!
//! Owns: the pthread-to-Squall mapping and errno codes. Must not touch: the runtime's state.
use crate::api::{self, node};
use crate::error::{
    guard, record, CapiError, SQUALL_ERR_DEADLOCK, SQUALL_ERR_INVALID, SQUALL_ERR_IN_USE,
    SQUALL_ERR_NOT_HELD, SQUALL_ERR_NO_MEMORY, SQUALL_ERR_UNKNOWN_THREAD, SQUALL_ERR_UNSUPPORTED,
};
use squall::{Contents, Region};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    if in_shared_data(addr) {
        // The program's shared globals: the same address on every node.
        return mix(addr as u64);
    }
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
    // exit() may be called by the program on its shared stack: finalize on the private one.
    crate::stack::on_private(finalize_now);
}

fn finalize_now() {
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
            let regions = regions();
            squall::set_thread_runner(run_thread);
            match squall::init_ssi_with_regions(&regions) {
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

/// This process's shared data regions (the program's `squall_data` and `squall_bss`, or an
/// old-style `SQUALL_GLOBAL` section), registered before the node starts.
static REGIONS: Mutex<Vec<(usize, usize, Contents)>> = Mutex::new(Vec::new());

/// The registered regions as `[start, end)` pairs for the quick test of `object_id` (written
/// before any thread exists, read without a lock).
static SHARED_DATA: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

fn in_shared_data(addr: usize) -> bool {
    SHARED_DATA.chunks(2).any(|r| {
        let (lo, hi) = (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed));
        addr >= lo && addr < hi
    })
}

fn regions() -> Vec<Region> {
    REGIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|&(start, len, contents)| Region {
            start,
            len,
            contents,
        })
        .collect()
}

/// Add `[start, start+bytes)` to the regions every node shares; false if a different set was
/// registered already (a second module) or the node started.
fn add_region(start: usize, bytes: usize, contents: Contents) -> bool {
    let mut g = REGIONS.lock().unwrap_or_else(|p| p.into_inner());
    if g.iter().any(|r| r.0 == start && r.1 == bytes) {
        return true;
    }
    if STARTED.load(Ordering::Acquire) || g.len() >= 2 {
        return false;
    }
    let i = g.len();
    SHARED_DATA[2 * i].store(start, Ordering::Relaxed);
    SHARED_DATA[2 * i + 1].store(start + bytes, Ordering::Relaxed);
    g.push((start, bytes, contents));
    true
}

/// Turn address randomisation off (re-executing the program) so the shared data lies at the
/// same address on every node; a warning if that cannot be done.
fn fix_layout() {
    if let Err(e) = squall_memory::fixed_layout() {
        eprintln!(
            "squall: warning: {e}; the program's shared globals need the same address on every node"
        );
    }
}

/// Register the program's global data for sharing (called by the constructor in
/// `squall/pthread.h`, before `squall_pthread_start`, with the bounds of the `squall_data`
/// and `squall_bss` sections that the linker script fragment of `pkg-config --libs
/// squall-pthread` makes): `squall_pthread_start` then makes both coherent shared memory on
/// every node, homed on node 0 and starting from the binary's initial values
/// (`Node::adopt_regions`; zero pages cost no memory until touched). Null bounds (a program
/// linked without the fragment) print a warning: the globals then stay per node.
///
/// The sections must lie at the same address on every node: if address randomisation is on,
/// this call turns it off (`personality(ADDR_NO_RANDOMIZE)`) and re-executes the program with
/// the same arguments and environment, so it never returns in that case. Only the first
/// module's sections are shared (the main program's); a shared library's are refused with a
/// message. Returns the bytes registered.
///
/// # Safety
/// The bounds are those of the calling program's `squall_data` and `squall_bss` sections (or
/// null).
#[no_mangle]
pub unsafe extern "C" fn squall_register_data(
    data_start: *mut c_void,
    data_end: *mut c_void,
    bss_start: *mut c_void,
    bss_end: *mut c_void,
) -> usize {
    if data_start.is_null() && bss_start.is_null() {
        eprintln!(
            "squall: warning: the program was not linked with the flags of `pkg-config --libs \
             squall-pthread` (its linker script fragment squall-pthread.ld): its global \
             variables stay per node"
        );
        return 0;
    }
    let mut total = 0;
    for (s, e, c) in [
        (data_start, data_end, Contents::Data),
        (bss_start, bss_end, Contents::Zeroed),
    ] {
        let bytes = (e as usize).saturating_sub(s as usize);
        if s.is_null() || bytes == 0 {
            continue;
        }
        if !add_region(s as usize, bytes, c) {
            eprintln!(
                "squall: the shared data section at {:#x} ({bytes} bytes, of a shared library or \
                 loaded after start-up?) is not shared: only the main program's globals are",
                s as usize
            );
            continue;
        }
        total += bytes;
    }
    if total > 0 && !STARTED.load(Ordering::Acquire) {
        fix_layout();
    }
    total
}

/// Register an old-style `SQUALL_GLOBAL` section `[start, end)` (the `squall_globals` section
/// that `squall-globals.ld` of `pkg-config --libs squall` page-aligns; the pthreads header now
/// calls `squall_register_data`, which shares every global). `squall_pthread_start` then makes it
/// coherent shared memory on every node, with node 0 as its home (`Node::adopt_regions`): main
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
    if !add_region(start as usize, bytes, Contents::Data) {
        eprintln!(
            "squall: a second SQUALL_GLOBAL section ({:#x}, {bytes} bytes, in a shared \
             library?) is ignored: only the main program's is shared",
            start as usize
        );
        return 0;
    }
    if !STARTED.load(Ordering::Acquire) {
        fix_layout();
    }
    bytes
}

// ----- threads ------------------------------------------------------------------------------

/// Threads this node's `main` created and has not joined or detached: `pthread_exit` in main
/// joins them before the process ends.
static MAIN_CREATED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Threads detached here (by `pthread_detach` or the attribute): a join of them is `EINVAL`.
static DETACHED: std::sync::LazyLock<Mutex<std::collections::HashSet<u64>>> =
    std::sync::LazyLock::new(Default::default);

fn detached() -> std::sync::MutexGuard<'static, std::collections::HashSet<u64>> {
    DETACHED.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// This thread runs the program's `main` (through `squall_pthread_main`).
    pub(crate) static IS_MAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn lock_list(m: &Mutex<Vec<u64>>) -> std::sync::MutexGuard<'_, Vec<u64>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thread runner of every thread Squall starts in a pthreads program (installed by
/// `squall_pthread_start`): the body runs on a shared stack of `stack` bytes (0: 8 MiB) homed
/// on this node.
fn run_thread(f: squall::ThreadFn, arg: *mut c_void, stack: usize) -> *mut c_void {
    let size = if stack == 0 {
        crate::stack::DEFAULT_STACK
    } else {
        stack
    };
    let st = node().and_then(|n| crate::stack::SharedStack::take(&n, size));
    match st {
        Ok(st) => {
            let v = st.run(f, arg).0;
            st.give();
            v
        }
        Err(e) => {
            eprintln!(
                "squall: cannot allocate a shared stack ({e}): the thread runs on its private \
                 stack (pointers to its stack variables are only valid on its node)"
            );
            f(arg)
        }
    }
}

/// The attributes of `pthread_create` that apply: (stack bytes, 0 for the default; detached).
///
/// # Safety
/// `attr` is null or a valid, initialised `pthread_attr_t`.
unsafe fn thread_attrs(attr: *const c_void) -> (usize, bool) {
    if attr.is_null() {
        return (0, false);
    }
    let a = attr as *const libc::pthread_attr_t;
    let (mut size, mut state): (usize, c_int) = (0, 0);
    // SAFETY: `a` is a valid attribute object per the contract; outputs are locals.
    let (rs, rd) = unsafe {
        (
            libc::pthread_attr_getstacksize(a, &mut size),
            pthread_attr_getdetachstate(a, &mut state),
        )
    };
    let size = if rs == 0 { size } else { 0 };
    (size, rd == 0 && state == libc::PTHREAD_CREATE_DETACHED)
}

/// `pthread_create`: the thread is placed by the node's thread placement (even by default, see
/// `squall_set_thread_placement`) and runs on a shared
/// stack homed where it runs (`pthread_attr_setstacksize` and the detach state are honoured;
/// other attributes do not apply).
///
/// # Safety
/// `thread` is valid; `attr` is null or a valid attribute object; `f` is a valid thread
/// function in a module every node loads.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_create(
    thread: *mut u64,
    attr: *const c_void,
    f: Option<extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: valid per the contract.
    let (stack, detached) = unsafe { thread_attrs(attr) };
    pt("pthread_create", || {
        need("pthread_create", "thread", thread)?;
        let f = f.ok_or_else(|| CapiError::Invalid {
            call: "pthread_create",
            why: "the thread function is a null pointer".into(),
        })?;
        let tid = node()?.spawn_with(None, f, arg, stack)?.0;
        if detached {
            self::detached().insert(tid);
        } else if IS_MAIN.with(std::cell::Cell::get) {
            lock_list(&MAIN_CREATED).push(tid);
        }
        // SAFETY: checked non-null; valid per the contract.
        unsafe { thread.write(tid) };
        Ok(0)
    })
}

/// `pthread_join` of a thread from `squall_pthread_create` (on any node): `EINVAL` for a
/// thread detached on this node, `ESRCH` for an unknown or already joined one.
///
/// # Safety
/// `ret` is null or valid.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_join(thread: u64, ret: *mut *mut c_void) -> c_int {
    pt("pthread_join", || {
        if detached().contains(&thread) {
            return Err(CapiError::Invalid {
                call: "pthread_join",
                why: format!("thread {thread:#x} is detached"),
            });
        }
        let r = api::join(thread)?;
        lock_list(&MAIN_CREATED).retain(|&t| t != thread);
        if !ret.is_null() {
            // SAFETY: valid per the contract.
            unsafe { ret.write(r) };
        }
        Ok(0)
    })
}

/// `pthread_exit(v)`: ends the calling thread; `v` is what `pthread_join` returns for it. In
/// `main`, the threads main created and has not joined or detached are joined first, then the
/// process ends with status 0 (as when the last thread of a process ends).
#[no_mangle]
pub extern "C" fn squall_pthread_exit(v: *mut c_void) -> ! {
    crate::stack::leave(v);
    // Not on a shared stack (a thread Squall did not start, or stacks are not shared on this
    // architecture): nothing to return to.
    eprintln!("squall: pthread_exit outside a thread started by pthread_create or main");
    std::process::abort()
}

/// `pthread_self`: the id `pthread_create` returned for the calling thread (on every node);
/// `main`'s thread has an id of its own.
#[no_mangle]
pub extern "C" fn squall_pthread_self() -> u64 {
    squall::node().map_or(0, |n| n.current_thread().0)
}

/// The signature of the program's `main` as `__real_main` has it.
type SquallMainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

struct MainCall {
    main: SquallMainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
    ret: c_int,
}

extern "C" fn main_body(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the MainCall of squall_pthread_main, alive during the call.
    let m = unsafe { &mut *(p as *mut MainCall) };
    // SAFETY: the program's main with the arguments the C library gave.
    m.ret = unsafe { (m.main)(m.argc, m.argv, m.envp) };
    p
}

/// Run the program's `main` on a shared stack homed on node 0 (called by `__wrap_main` in
/// `squall/pthread.h`; `-Wl,--wrap=main` of `pkg-config --libs squall-pthread` routes the C
/// library's call of `main` there). Returns main's value; after `pthread_exit` in main, joins
/// the threads main created and has not joined or detached and returns 0.
///
/// # Safety
/// `main` is the program's main; `argc`, `argv`, `envp` are what the C library passed.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_main(
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
    main: Option<unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int>,
) -> c_int {
    let Some(main) = main else {
        eprintln!("squall: squall_pthread_main without a main function");
        return 1;
    };
    let mut call = MainCall {
        main,
        argc,
        argv,
        envp,
        ret: 0,
    };
    let st = crate::error::guard(
        "main",
        |_| None,
        || {
            Ok(Some(crate::stack::SharedStack::alloc(
                &node()?,
                main_stack_size(),
            )?))
        },
    );
    let Some(st) = st else {
        // SAFETY: squall_last_error returns a valid NUL-terminated string.
        let text = unsafe { CStr::from_ptr(crate::error::last_error_ptr()) };
        eprintln!(
            "squall: main runs on its private stack ({}): pointers to its stack variables are \
             only valid on node 0",
            text.to_string_lossy()
        );
        // SAFETY: as above.
        return unsafe { main(argc, argv, envp) };
    };
    IS_MAIN.with(|m| m.set(true));
    let (_, exited) = st.run(main_body, std::ptr::addr_of_mut!(call).cast());
    // main's OpenMP thread pool ends with main (not at exit: thread-locals are gone by then).
    crate::omp::pool::shutdown_at_main_end();
    if !exited {
        return call.ret;
    }
    // pthread_exit in main: the process ends when the threads end.
    let pending: Vec<u64> = std::mem::take(&mut *lock_list(&MAIN_CREATED));
    for t in pending {
        if let Err(e) = api::join(t) {
            eprintln!("squall: pthread_exit in main: waiting for thread {t:#x}: {e}");
        }
    }
    0
}

/// main's stack: the soft stack limit (as the kernel gives main), 8 MiB if unlimited, at most
/// 1 GiB.
fn main_stack_size() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a local struct.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut r) } == 0;
    if !ok || r.rlim_cur == libc::RLIM_INFINITY || r.rlim_cur == 0 {
        return crate::stack::DEFAULT_STACK;
    }
    (r.rlim_cur as usize).min(1 << 30)
}

extern "C" {
    // In glibc; not declared by the libc crate.
    fn pthread_attr_getdetachstate(attr: *const libc::pthread_attr_t, state: *mut c_int) -> c_int;
}

/// `pthread_detach`: a Squall thread needs no join (its end is recorded by the runtime until
/// the job ends); a later join of it on this node is `EINVAL`. Always 0.
#[no_mangle]
pub extern "C" fn squall_pthread_detach(thread: u64) -> c_int {
    lock_list(&MAIN_CREATED).retain(|&t| t != thread);
    detached().insert(thread);
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
    let p = api::sited(squall_pt_malloc as *const () as usize, || {
        api::squall_malloc(size)
    });
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
    let p = api::sited(squall_pt_aligned_alloc as *const () as usize, || {
        api::squall_malloc_aligned(size, align)
    });
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
    let p = api::sited(squall_pt_posix_memalign as *const () as usize, || {
        api::squall_malloc_aligned(size, align)
    });
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
    let p = api::sited(squall_pt_calloc as *const () as usize, || {
        api::squall_calloc(count, size)
    });
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
    let q = api::sited(squall_pt_realloc as *const () as usize, || unsafe {
        api::squall_realloc(p, size)
    });
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

/// Set the calling thread's `errno`.
pub(crate) fn set_errno(v: c_int) {
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
