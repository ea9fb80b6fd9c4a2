//! Read-write locks of the pthreads layer, with readers that share.
//!
//! The state lives in the `pthread_rwlock_t` itself, in shared memory (so the lock must be in
//! malloc'd memory or a global; `PTHREAD_RWLOCK_INITIALIZER` starts with zero words, the
//! unlocked state): four `u32` words — active readers, writer (0 or 1), waiting writers,
//! waiting readers (so nobody is woken, and no message sent, when nobody waits). It is
//! only read and written while holding an internal Squall lock named after the object
//! (`object_id(addr + 1)`: no object starts at an odd address, so the id names no other
//! object); readers wait on the Squall condition `object_id(addr + 2)`, writers on
//! `object_id(addr + 3)`. Readers hold no Squall lock while they read, so readers on every node
//! overlap.
//!
//! Consistency: a writer's writes precede its release of the internal lock in `unlock`; a
//! reader's `rdlock` acquires that lock afterwards, so it sees them (and a writer sees the data
//! as the last writer left it). A reader's reads need no publication.
//!
//! Policy: writer preference — a new reader waits while a writer holds or waits for the lock,
//! so writers are not starved; a thread that already holds a read lock may take it again
//! (POSIX requires recursive read locks to succeed) even if writers wait. When a writer
//! leaves, one waiting writer is woken if there is one, else every waiting reader.
//!
//! This thread's read/write holdings are tracked thread-locally, to make misuse an error:
//! `wrlock` while holding it (`EDEADLK`), `rdlock` while holding the write lock (`EDEADLK`),
//! `unlock` when not holding it (`EPERM`); `destroy` of a held lock is `EBUSY`.
//!
//! Owns: the rwlock state words and the thread-local holdings. Must not touch: the runtime's
//! lock internals (only `api::*_id` and `Node::cond_*`).
use crate::api::{self, node};
use crate::error::{CapiError, SQUALL_ERR_DEADLOCK, SQUALL_ERR_NOT_HELD};
use crate::pthread::{need, object_id, pt};
use crate::pthread_timed::{cond_wait_until, read_abstime, Deadline};
use squall::CondId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::time::Instant;

extern "C" {
    // In glibc; not declared by the libc crate.
    fn pthread_rwlockattr_getpshared(
        attr: *const libc::pthread_rwlockattr_t,
        pshared: *mut c_int,
    ) -> c_int;
}

/// What this thread holds of one rwlock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Held {
    /// Read locks, counted (recursive read locking).
    Read(u32),
    Write,
}

thread_local! {
    static HELD: RefCell<HashMap<u64, Held>> = RefCell::new(HashMap::new());
}

/// The rwlock at one address: its ids and its state words.
struct Rw {
    addr: usize,
    id: u64,
    lock: u64,
    readers_cond: u64,
    writers_cond: u64,
}

const READERS: usize = 0;
const WRITER: usize = 1;
const WAITING_WRITERS: usize = 2;
const WAITING_READERS: usize = 3;

impl Rw {
    fn new(call: &'static str, p: *mut c_void) -> Result<Rw, CapiError> {
        let addr = need(call, "rwlock", p)?;
        Ok(Rw {
            addr,
            id: object_id(addr),
            lock: object_id(addr + 1),
            readers_cond: object_id(addr + 2),
            writers_cond: object_id(addr + 3),
        })
    }

    fn get(&self, word: usize) -> u32 {
        // SAFETY: a pthread_rwlock_t is 56 bytes, 8-byte aligned; the internal lock is held.
        unsafe { (self.addr as *const u32).add(word).read_volatile() }
    }

    fn set(&self, word: usize, v: u32) {
        // SAFETY: as in `get`.
        unsafe { (self.addr as *mut u32).add(word).write_volatile(v) }
    }

    fn held(&self) -> Option<Held> {
        HELD.with(|h| h.borrow().get(&self.id).copied())
    }

    fn set_held(&self, v: Option<Held>) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            match v {
                Some(v) => h.insert(self.id, v),
                None => h.remove(&self.id),
            }
        });
    }

    /// Run `f` with the internal lock held.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, CapiError>) -> Result<T, CapiError> {
        let n = node()?;
        api::lock_id(&n, self.lock)?;
        let r = f();
        api::unlock_id(&n, self.lock)?;
        r
    }

    /// Wait (internal lock held) on `cond` until woken or until `until` (if any).
    fn wait(&self, cond: u64, until: Option<Instant>) -> Result<(), CapiError> {
        match until {
            None => api::cond_wait_id(&node()?, cond, self.lock),
            Some(at) => cond_wait_until(cond, self.lock, at),
        }
    }

    /// Take a read lock; `Ok(false)` if `try_only` and it would wait, or at the deadline.
    fn read(
        &self,
        call: &'static str,
        try_only: bool,
        deadline: Option<Deadline>,
    ) -> Result<bool, CapiError> {
        match self.held() {
            Some(Held::Write) => return Err(deadlock(call, "the write lock")),
            Some(Held::Read(k)) => {
                // Already a reader: the shared count includes this thread once.
                self.set_held(Some(Held::Read(k + 1)));
                return Ok(true);
            }
            None => {}
        }
        let got = self.locked(|| {
            while self.get(WRITER) != 0 || self.get(WAITING_WRITERS) != 0 {
                if try_only {
                    return Ok(false);
                }
                let until = match deadline {
                    Some(d) => match d.left() {
                        Some(at) => Some(at),
                        None => return Ok(false),
                    },
                    None => None,
                };
                self.set(WAITING_READERS, self.get(WAITING_READERS) + 1);
                let r = self.wait(self.readers_cond, until);
                self.set(WAITING_READERS, self.get(WAITING_READERS).saturating_sub(1));
                r?;
            }
            self.set(READERS, self.get(READERS) + 1);
            Ok(true)
        })?;
        if got {
            self.set_held(Some(Held::Read(1)));
        }
        Ok(got)
    }

    /// Take the write lock; `Ok(false)` if `try_only` and it would wait, or at the deadline.
    fn write(
        &self,
        call: &'static str,
        try_only: bool,
        deadline: Option<Deadline>,
    ) -> Result<bool, CapiError> {
        match self.held() {
            Some(Held::Write) => return Err(deadlock(call, "the write lock")),
            Some(Held::Read(_)) => {
                return Err(deadlock(call, "a read lock"));
            }
            None => {}
        }
        let got = self.locked(|| {
            let busy = |rw: &Rw| rw.get(WRITER) != 0 || rw.get(READERS) != 0;
            if !busy(self) {
                self.set(WRITER, 1);
                return Ok(true);
            }
            if try_only {
                return Ok(false);
            }
            self.set(WAITING_WRITERS, self.get(WAITING_WRITERS) + 1);
            let mut got = true;
            let r = (|| -> Result<(), CapiError> {
                while busy(self) {
                    let until = match deadline {
                        Some(d) => match d.left() {
                            Some(at) => Some(at),
                            None => {
                                got = false;
                                return Ok(());
                            }
                        },
                        None => None,
                    };
                    self.wait(self.writers_cond, until)?;
                }
                Ok(())
            })();
            self.set(WAITING_WRITERS, self.get(WAITING_WRITERS) - 1);
            r?;
            if got {
                self.set(WRITER, 1);
            } else if self.get(WAITING_WRITERS) == 0
                && self.get(WRITER) == 0
                && self.get(WAITING_READERS) > 0
            {
                // This writer gave up: readers it held back may go.
                node()?.cond_broadcast(CondId(self.readers_cond))?;
            }
            Ok(got)
        })?;
        if got {
            self.set_held(Some(Held::Write));
        }
        Ok(got)
    }

    fn unlock(&self) -> Result<(), CapiError> {
        let held = self.held();
        match held {
            None => {
                return Err(CapiError::Misuse {
                    call: "pthread_rwlock_unlock",
                    code: SQUALL_ERR_NOT_HELD,
                    why: format!(
                        "the calling thread does not hold the rwlock at {:#x}",
                        self.addr
                    ),
                })
            }
            Some(Held::Read(k)) if k > 1 => {
                self.set_held(Some(Held::Read(k - 1)));
                return Ok(());
            }
            _ => {}
        }
        self.locked(|| {
            let n = node()?;
            if held == Some(Held::Write) {
                self.set(WRITER, 0);
            } else {
                self.set(READERS, self.get(READERS).saturating_sub(1));
            }
            if self.get(READERS) == 0 && self.get(WAITING_WRITERS) > 0 {
                n.cond_signal(CondId(self.writers_cond))?;
            } else if self.get(WAITING_WRITERS) == 0 && self.get(WAITING_READERS) > 0 {
                n.cond_broadcast(CondId(self.readers_cond))?;
            }
            Ok(())
        })?;
        self.set_held(None);
        Ok(())
    }
}

fn deadlock(call: &'static str, what: &str) -> CapiError {
    CapiError::Misuse {
        call,
        code: SQUALL_ERR_DEADLOCK,
        why: format!("the calling thread already holds {what} of this rwlock"),
    }
}

/// `pthread_rwlock_init`: an unlocked rwlock (a process-shared one is `ENOTSUP`).
///
/// # Safety
/// `l` is null or a `pthread_rwlock_t`; `attr` null or a valid `pthread_rwlockattr_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_rwlock_init(l: *mut c_void, attr: *const c_void) -> c_int {
    pt("pthread_rwlock_init", || {
        let rw = Rw::new("pthread_rwlock_init", l)?;
        if !attr.is_null() {
            let mut pshared: c_int = 0;
            // SAFETY: attr is a valid pthread_rwlockattr_t per the contract.
            let rc = unsafe {
                pthread_rwlockattr_getpshared(
                    attr as *const libc::pthread_rwlockattr_t,
                    &mut pshared,
                )
            };
            if rc == 0 && pshared == libc::PTHREAD_PROCESS_SHARED {
                return Err(CapiError::Unsupported(
                    "a process-shared rwlock (PTHREAD_PROCESS_SHARED: squall rwlocks are shared \
                     by the threads of one job on every node, not between processes)",
                ));
            }
        }
        for w in [READERS, WRITER, WAITING_WRITERS, WAITING_READERS] {
            rw.set(w, 0);
        }
        rw.set_held(None);
        Ok(0)
    })
}

/// How a lock call waits when the lock is not free.
#[derive(Clone, Copy)]
enum Wait {
    /// As long as it takes.
    Block,
    /// Not at all: `EBUSY`.
    Try,
    /// Until this absolute `CLOCK_REALTIME` time (a `struct timespec`, null or valid by the
    /// caller's contract, checked by `read_abstime`): `ETIMEDOUT`.
    Until(*const c_void),
}

/// The six lock calls: a read (`write == false`) or the write lock of the rwlock at `l`,
/// waiting as `wait` says; 0 once held, else `EBUSY` or `ETIMEDOUT`.
fn acquire(call: &'static str, l: *mut c_void, write: bool, wait: Wait) -> c_int {
    pt(call, || {
        let rw = Rw::new(call, l)?;
        let (try_only, deadline, missed) = match wait {
            Wait::Block | Wait::Try => (matches!(wait, Wait::Try), None, libc::EBUSY),
            Wait::Until(abstime) => (
                false,
                Some(Deadline::realtime(read_abstime(call, abstime)?)),
                libc::ETIMEDOUT,
            ),
        };
        let got = if write {
            rw.write(call, try_only, deadline)?
        } else {
            rw.read(call, try_only, deadline)?
        };
        Ok(if got { 0 } else { missed })
    })
}

/// `pthread_rwlock_rdlock`: shared with other readers (see the module doc for the policy).
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_rdlock(l: *mut c_void) -> c_int {
    acquire("pthread_rwlock_rdlock", l, false, Wait::Block)
}

/// `pthread_rwlock_wrlock`: exclusive.
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_wrlock(l: *mut c_void) -> c_int {
    acquire("pthread_rwlock_wrlock", l, true, Wait::Block)
}

/// `pthread_rwlock_tryrdlock`: `EBUSY` if a writer holds or waits for it.
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_tryrdlock(l: *mut c_void) -> c_int {
    acquire("pthread_rwlock_tryrdlock", l, false, Wait::Try)
}

/// `pthread_rwlock_trywrlock`: `EBUSY` if anyone holds it.
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_trywrlock(l: *mut c_void) -> c_int {
    acquire("pthread_rwlock_trywrlock", l, true, Wait::Try)
}

/// `pthread_rwlock_timedrdlock`: `ETIMEDOUT` once `abstime` (`CLOCK_REALTIME`) has passed.
///
/// # Safety
/// `abstime` is null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_rwlock_timedrdlock(
    l: *mut c_void,
    abstime: *const c_void,
) -> c_int {
    acquire("pthread_rwlock_timedrdlock", l, false, Wait::Until(abstime))
}

/// `pthread_rwlock_timedwrlock`: `ETIMEDOUT` once `abstime` (`CLOCK_REALTIME`) has passed.
///
/// # Safety
/// `abstime` is null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_rwlock_timedwrlock(
    l: *mut c_void,
    abstime: *const c_void,
) -> c_int {
    acquire("pthread_rwlock_timedwrlock", l, true, Wait::Until(abstime))
}

/// `pthread_rwlock_unlock`: releases this thread's read or write lock (`EPERM` if it holds
/// none).
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_unlock(l: *mut c_void) -> c_int {
    pt("pthread_rwlock_unlock", || {
        Rw::new("pthread_rwlock_unlock", l)?.unlock().map(|()| 0)
    })
}

/// `pthread_rwlock_destroy`: `EBUSY` if it is held or waited for.
#[no_mangle]
pub extern "C" fn squall_pthread_rwlock_destroy(l: *mut c_void) -> c_int {
    pt("pthread_rwlock_destroy", || {
        let rw = Rw::new("pthread_rwlock_destroy", l)?;
        let busy = rw.locked(|| {
            Ok([READERS, WRITER, WAITING_WRITERS, WAITING_READERS]
                .iter()
                .any(|w| rw.get(*w) != 0))
        })?;
        if busy {
            return Err(CapiError::InUse {
                call: "pthread_rwlock_destroy",
                node: node()?.rank().0,
                what: format!("rwlock at {:#x}", rw.addr),
                why: "a thread holds it or waits for it",
            });
        }
        api::lock_destroy_id(&node()?, "pthread_rwlock_destroy", rw.lock)?;
        Ok(0)
    })
}
