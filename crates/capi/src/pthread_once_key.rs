//! `pthread_once` and thread-specific data keys across nodes.
//!
//! `pthread_once`: the `pthread_once_t` (an `int`, `PTHREAD_ONCE_INIT` = 0) in shared memory
//! holds the state; an internal Squall lock named after it (`object_id(addr + 1)`) serialises
//! the first calls job-wide: the first caller runs the routine while holding the lock (the
//! other callers, on any node, wait for it to finish), then stores a "done" word (bit 1 set,
//! the other bits a job-unique stamp) and releases the lock. A later caller that reads "done"
//! and finds the same stamp in its node's cache returns at once (a shared read, no message);
//! the first call on each node takes the lock once, an acquire, so the routine's writes are
//! visible on that node before it returns. (The stamp keeps the cache right when the memory of
//! a `pthread_once_t` is reused for a new one.)
//!
//! Keys: `pthread_key_create` allocates a 64-byte record in the shared heap (never freed, so a
//! key value is never reused) holding a magic word, the destructor (named by module and
//! offset, as thread functions are, so address randomisation does not matter) and a deleted
//! flag; the key is 1 + the record's offset in the shared range / 64, so every node agrees on it
//! with no message. Values are per thread (thread-local). When a thread started by
//! `pthread_create` ends, `squall_pt_run_key_destructors` runs the destructors of its non-null
//! values (up to `PTHREAD_DESTRUCTOR_ITERATIONS` rounds), before the thread's end is reported
//! (so a joiner sees what they did); the runtime calls it through its thread-end hook.
//!
//! Owns: once states and stamps, key records and thread-local values. Must not touch: the
//! runtime (only the `api` calls and `squall::set_thread_end_hook`).
use crate::api::{self, node};
use crate::error::{CapiError, SQUALL_ERR_NO_MEMORY};
use crate::pthread::{need, object_id, pt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

// ----- pthread_once -------------------------------------------------------------------------

/// This node's completed onces: object id -> the done word it saw.
static ONCE_DONE: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);
static ONCE_STAMPS: AtomicU32 = AtomicU32::new(0);

fn once_cached(id: u64, word: u32) -> bool {
    let g = ONCE_DONE.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref().and_then(|m| m.get(&id)) == Some(&word)
}

fn once_remember(id: u64, word: u32) {
    let mut g = ONCE_DONE.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(HashMap::new).insert(id, word);
}

/// A "done" word: bit 1 set (glibc's done bit), bit 0 clear, the rest a stamp unique to this
/// node and call (rank in the high bits).
fn done_word(rank: u16) -> u32 {
    let n = ONCE_STAMPS.fetch_add(1, Ordering::Relaxed) & 0x3fff;
    (u32::from(rank) << 16) | (n << 2) | 2
}

/// `pthread_once`: runs `init` exactly once in the whole job, whichever node calls first;
/// every caller returns after it has finished, with its writes visible.
///
/// # Safety
/// `once` is null or a `pthread_once_t` in shared memory; `init` is a valid routine.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_once(
    once: *mut c_void,
    init: Option<unsafe extern "C" fn()>,
) -> c_int {
    pt("pthread_once", || {
        let a = need("pthread_once", "once control", once)?;
        let Some(init) = init else {
            return Err(CapiError::Invalid {
                call: "pthread_once",
                why: "the init routine is null".into(),
            });
        };
        let word = once as *mut u32;
        let id = object_id(a);
        // SAFETY: a pthread_once_t is a 4-byte aligned int.
        let seen = unsafe { word.read_volatile() };
        if seen & 2 != 0 && once_cached(id, seen) {
            return Ok(0);
        }
        let n = node()?;
        let lock = object_id(a + 1);
        api::lock_id(&n, lock)?;
        // SAFETY: as above; the lock is held.
        let mut w = unsafe { word.read_volatile() };
        if w & 2 == 0 {
            // SAFETY: the caller's routine, run once with the lock held.
            unsafe { init() };
            w = done_word(n.rank().0);
            // SAFETY: as above.
            unsafe { word.write_volatile(w) };
        }
        api::unlock_id(&n, lock)?;
        once_remember(id, w);
        Ok(0)
    })
}

// ----- keys ---------------------------------------------------------------------------------

/// Marks a live key record; `KEY_DELETED` a deleted one.
const KEY_MAGIC: u64 = 0x5351_4b45_595f_4f4b; // "SQKEY_OK"
const KEY_DELETED: u64 = 0x5351_4b45_595f_4445; // "SQKEY_DE"
/// Bytes per key record (and its alignment): key = 1 + offset in the range / KEY_RECORD.
const KEY_RECORD: usize = 64;
/// glibc's PTHREAD_DESTRUCTOR_ITERATIONS.
const DESTRUCTOR_ROUNDS: usize = 4;

/// A key record in shared memory: [magic, has destructor, module, offset].
fn record(key: c_uint) -> Result<*mut u64, CapiError> {
    let n = node()?;
    let (base, size) = n.range();
    let off = (key as usize).wrapping_sub(1).wrapping_mul(KEY_RECORD);
    if key == 0 || off >= size {
        return Err(bad_key(key));
    }
    let r = (base + off) as *mut u64;
    // SAFETY: an aligned address inside the shared range (mapped on every node).
    if unsafe { r.read_volatile() } != KEY_MAGIC {
        return Err(bad_key(key));
    }
    Ok(r)
}

fn bad_key(key: c_uint) -> CapiError {
    CapiError::Invalid {
        call: "pthread key",
        why: format!("{key} is not a key from pthread_key_create (or it was deleted)"),
    }
}

thread_local! {
    /// This thread's values: key -> value.
    static VALUES: RefCell<HashMap<c_uint, *mut c_void>> = RefCell::new(HashMap::new());
}

/// `pthread_key_create`: a key every node knows, with an optional destructor run when a
/// thread with a non-null value ends.
///
/// # Safety
/// `key` is null or a valid `pthread_key_t` pointer; `destructor` is null or a function in a
/// module every node loads.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_key_create(
    key: *mut c_uint,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int {
    pt("pthread_key_create", || {
        need("pthread_key_create", "key", key)?;
        let n = node()?;
        let (base, size) = n.range();
        let (module, offset) = match destructor {
            None => (0, 0),
            Some(f) => crate::modules::encode(f as usize).ok_or_else(|| CapiError::Invalid {
                call: "pthread_key_create",
                why: format!(
                    "the destructor at {:#x} is not in any loaded module",
                    f as usize
                ),
            })?,
        };
        let p = api::squall_malloc_aligned(KEY_RECORD, KEY_RECORD) as usize;
        if p == 0 {
            return Err(CapiError::Misuse {
                call: "pthread_key_create",
                code: SQUALL_ERR_NO_MEMORY,
                why: "no shared memory for the key record".into(),
            });
        }
        let k = (p - base) / KEY_RECORD + 1;
        let k = c_uint::try_from(k).map_err(|_| CapiError::Misuse {
            call: "pthread_key_create",
            code: SQUALL_ERR_NO_MEMORY,
            why: format!(
                "the key record at offset {:#x} of a {size}-byte range does not fit a key",
                p - base
            ),
        })?;
        let r = p as *mut u64;
        // SAFETY: a fresh 64-byte allocation, 64-byte aligned; `key` is valid per the contract.
        unsafe {
            r.add(1).write_volatile(u64::from(destructor.is_some()));
            r.add(2).write_volatile(module);
            r.add(3).write_volatile(offset);
            r.write_volatile(KEY_MAGIC);
            key.write(k);
        }
        install_hook();
        Ok(0)
    })
}

/// Make the runtime run `run_key_destructors` at the end of every thread it starts on this
/// node (called at start-up and again, harmlessly, when a value is set).
pub(crate) fn install_hook() {
    squall::set_thread_end_hook(run_key_destructors);
}

/// `pthread_key_delete`: the key becomes invalid everywhere; destructors are not called (as
/// POSIX says). Values other threads stored are forgotten when they end.
#[no_mangle]
pub extern "C" fn squall_pthread_key_delete(key: c_uint) -> c_int {
    pt("pthread_key_delete", || {
        let r = record(key)?;
        // SAFETY: a live key record (checked by `record`).
        unsafe { r.write_volatile(KEY_DELETED) };
        VALUES.with(|v| v.borrow_mut().remove(&key));
        Ok(0)
    })
}

/// `pthread_getspecific`: this thread's value for `key` (null if it set none).
#[no_mangle]
pub extern "C" fn squall_pthread_getspecific(key: c_uint) -> *mut c_void {
    VALUES.with(|v| {
        v.borrow()
            .get(&key)
            .copied()
            .unwrap_or(std::ptr::null_mut())
    })
}

/// `pthread_setspecific`: set this thread's value for `key` (`EINVAL` for a key that was not
/// created or was deleted).
#[no_mangle]
pub extern "C" fn squall_pthread_setspecific(key: c_uint, value: *const c_void) -> c_int {
    pt("pthread_setspecific", || {
        record(key)?;
        install_hook();
        VALUES.with(|v| {
            let mut v = v.borrow_mut();
            if value.is_null() {
                v.remove(&key);
            } else {
                v.insert(key, value as *mut c_void);
            }
        });
        Ok(0)
    })
}

/// Run the calling thread's key destructors, as at thread exit: for each key with a
/// destructor and a non-null value, the value is set to null and the destructor called with
/// it; repeated while destructors set new values (at most `PTHREAD_DESTRUCTOR_ITERATIONS`
/// rounds). Squall calls this when a thread started by `pthread_create` ends; a thread end
/// path of its own (e.g. `pthread_exit`) must call it too.
#[no_mangle]
pub extern "C" fn squall_pt_run_key_destructors() {
    run_key_destructors();
}

fn run_key_destructors() {
    for _ in 0..DESTRUCTOR_ROUNDS {
        let values: Vec<(c_uint, *mut c_void)> = VALUES.with(|v| v.borrow_mut().drain().collect());
        if values.is_empty() {
            return;
        }
        for (key, value) in values {
            let Ok(r) = record(key) else { continue };
            // SAFETY: a live key record (checked by `record`).
            let (has, module, offset) = unsafe {
                (
                    r.add(1).read_volatile(),
                    r.add(2).read_volatile(),
                    r.add(3).read_volatile(),
                )
            };
            if has == 0 || value.is_null() {
                continue;
            }
            let Some(addr) = crate::modules::decode(module, offset) else {
                eprintln!("squall: the destructor of key {key} is not in any module of this node");
                continue;
            };
            // SAFETY: `addr` is the local address of the destructor the key's creator passed,
            // a `void (*)(void *)` (every node runs the same binaries).
            let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(addr) };
            // SAFETY: calling the program's destructor with its value, as pthreads does.
            unsafe { f(value) };
        }
    }
}
