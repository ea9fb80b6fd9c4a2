//! POSIX unnamed semaphores across nodes: `sem_init/wait/trywait/timedwait/post/getvalue/
//! destroy`, redirected by `squall/pthread.h`.
//!
//! The state lives in the `sem_t` (32 bytes) in shared memory — so a semaphore must be in
//! malloc'd memory or a global to be used by threads of several nodes: a magic word (set by
//! `sem_init`, cleared by `sem_destroy`), the value, and the number of waiters. It is read and
//! written only while holding an internal Squall lock named after the object
//! (`object_id(addr + 1)`, an id no object has); waiters sleep on the Squall condition
//! `object_id(addr + 2)`. `sem_post` is a release and a successful `sem_wait` an acquire (both
//! take the internal lock), so data written before a post is visible after the wait it lets
//! through. Waiters are woken in the condition's order (FIFO job-wide), but a new `sem_wait`
//! may take a posted unit before a woken waiter re-checks (as with futex semaphores).
//!
//! `sem_timedwait` takes an absolute `CLOCK_REALTIME` deadline (see `pthread_timed` for how
//! timed waits work and how fast they notice the deadline).
//!
//! Refused with a message: `sem_init` with `pshared != 0` (`ENOSYS`: a squall semaphore is
//! shared by the threads of the job, not between separate processes) and named semaphores
//! (`sem_open`: `ENOSYS`, they would be per machine, not per job).
//!
//! Owns: the semaphore words. Must not touch: the runtime's internals.
use crate::api::{self, node};
use crate::error::{guard, CapiError};
use crate::pthread::{errno_of, need, object_id, set_errno};
use crate::pthread_timed::{cond_wait_until, read_abstime, Deadline};
use squall::CondId;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Marks an initialised semaphore.
const SEM_MAGIC: u32 = 0x5351_534d; // "SQSM"
const MAGIC: usize = 0;
const VALUE: usize = 1;
const WAITERS: usize = 2;
/// glibc's SEM_VALUE_MAX.
const SEM_VALUE_MAX: u32 = i32::MAX as u32;

struct Sem {
    addr: usize,
    lock: u64,
    cond: u64,
}

impl Sem {
    fn new(call: &'static str, p: *mut c_void) -> Result<Sem, CapiError> {
        let addr = need(call, "semaphore", p)?;
        Ok(Sem {
            addr,
            lock: object_id(addr + 1),
            cond: object_id(addr + 2),
        })
    }

    fn get(&self, word: usize) -> u32 {
        // SAFETY: a sem_t is 32 bytes, 8-byte aligned.
        unsafe { (self.addr as *const u32).add(word).read_volatile() }
    }

    fn set(&self, word: usize, v: u32) {
        // SAFETY: as in `get`.
        unsafe { (self.addr as *mut u32).add(word).write_volatile(v) }
    }

    /// Run `f` with the internal lock held, after checking the semaphore is initialised.
    fn locked<T>(
        &self,
        call: &'static str,
        f: impl FnOnce() -> Result<T, CapiError>,
    ) -> Result<T, CapiError> {
        let n = node()?;
        api::lock_id(&n, self.lock)?;
        let r = if self.get(MAGIC) == SEM_MAGIC {
            f()
        } else {
            Err(CapiError::Invalid {
                call,
                why: format!(
                    "the semaphore at {:#x} is not initialised (call sem_init; it must live in \
                     squall memory: malloc'd or a global)",
                    self.addr
                ),
            })
        };
        api::unlock_id(&n, self.lock)?;
        r
    }

    /// Take one unit: wait while the value is 0 (unless `try_only`), until `deadline` if any.
    /// `Ok(false)`: busy (`try_only`) or the deadline passed.
    fn take(
        &self,
        call: &'static str,
        try_only: bool,
        deadline: Option<Deadline>,
    ) -> Result<bool, CapiError> {
        self.locked(call, || {
            while self.get(VALUE) == 0 {
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
                self.set(WAITERS, self.get(WAITERS) + 1);
                let r = match until {
                    None => api::cond_wait_id(&node()?, self.cond, self.lock),
                    Some(at) => cond_wait_until(self.cond, self.lock, at),
                };
                self.set(WAITERS, self.get(WAITERS).saturating_sub(1));
                r?;
            }
            self.set(VALUE, self.get(VALUE) - 1);
            Ok(true)
        })
    }
}

/// Run a semaphore call: 0, or -1 with `errno` set (and the error printed on stderr).
fn sem_call(call: &'static str, f: impl FnOnce() -> Result<c_int, CapiError>) -> c_int {
    guard(
        call,
        |_| {
            set_errno(libc::EIO);
            -1
        },
        || match f() {
            Ok(0) => Ok(0),
            Ok(errno) => {
                set_errno(errno);
                Ok(-1)
            }
            Err(e) => {
                eprintln!("squall: {call}: {e}");
                set_errno(errno_of(&e));
                Ok(-1)
            }
        },
    )
}

/// `sem_init`: a semaphore with `value` units, usable by threads on every node. `pshared != 0`
/// is refused (`ENOSYS`), a value above `SEM_VALUE_MAX` is `EINVAL`.
#[no_mangle]
pub extern "C" fn squall_sem_init(sem: *mut c_void, pshared: c_int, value: c_uint) -> c_int {
    sem_call("sem_init", || {
        let s = Sem::new("sem_init", sem)?;
        if pshared != 0 {
            eprintln!(
                "squall: sem_init: a process-shared semaphore (pshared = {pshared}) is not \
                 supported: squall semaphores are shared by the threads of one job on every \
                 node, not between separate processes; pass 0"
            );
            return Ok(libc::ENOSYS);
        }
        if value > SEM_VALUE_MAX {
            return Err(CapiError::Invalid {
                call: "sem_init",
                why: format!("the value {value} is above SEM_VALUE_MAX"),
            });
        }
        s.set(VALUE, value);
        s.set(WAITERS, 0);
        s.set(MAGIC, SEM_MAGIC);
        Ok(0)
    })
}

/// `sem_wait`: take a unit, waiting while there is none.
#[no_mangle]
pub extern "C" fn squall_sem_wait(sem: *mut c_void) -> c_int {
    sem_call("sem_wait", || {
        Sem::new("sem_wait", sem)?.take("sem_wait", false, None)?;
        Ok(0)
    })
}

/// `sem_trywait`: take a unit if there is one, else `EAGAIN`.
#[no_mangle]
pub extern "C" fn squall_sem_trywait(sem: *mut c_void) -> c_int {
    sem_call("sem_trywait", || {
        let got = Sem::new("sem_trywait", sem)?.take("sem_trywait", true, None)?;
        Ok(if got { 0 } else { libc::EAGAIN })
    })
}

/// `sem_timedwait`: as `sem_wait`, or `ETIMEDOUT` once `abstime` (`CLOCK_REALTIME`) passed.
///
/// # Safety
/// `abstime` is null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_sem_timedwait(sem: *mut c_void, abstime: *const c_void) -> c_int {
    sem_call("sem_timedwait", || {
        let s = Sem::new("sem_timedwait", sem)?;
        // POSIX: the deadline is not checked if a unit is available at once.
        if s.take("sem_timedwait", true, None)? {
            return Ok(0);
        }
        let d = Deadline::realtime(read_abstime("sem_timedwait", abstime)?);
        let got = s.take("sem_timedwait", false, Some(d))?;
        Ok(if got { 0 } else { libc::ETIMEDOUT })
    })
}

/// `sem_post`: add a unit and wake a waiter (`EOVERFLOW` above `SEM_VALUE_MAX`).
#[no_mangle]
pub extern "C" fn squall_sem_post(sem: *mut c_void) -> c_int {
    sem_call("sem_post", || {
        let s = Sem::new("sem_post", sem)?;
        s.locked("sem_post", || {
            let v = s.get(VALUE);
            if v >= SEM_VALUE_MAX {
                return Ok(libc::EOVERFLOW);
            }
            s.set(VALUE, v + 1);
            if s.get(WAITERS) > 0 {
                node()?.cond_signal(CondId(s.cond))?;
            }
            Ok(0)
        })
    })
}

/// `sem_getvalue`: the current value (0 when threads wait).
///
/// # Safety
/// `value` is null or a valid `int` pointer.
#[no_mangle]
pub unsafe extern "C" fn squall_sem_getvalue(sem: *mut c_void, value: *mut c_int) -> c_int {
    sem_call("sem_getvalue", || {
        need("sem_getvalue", "value", value)?;
        let s = Sem::new("sem_getvalue", sem)?;
        let v = s.locked("sem_getvalue", || Ok(s.get(VALUE)))?;
        // SAFETY: non-null and valid per the contract.
        unsafe { value.write(c_int::try_from(v).unwrap_or(c_int::MAX)) };
        Ok(0)
    })
}

/// `sem_destroy`: `EBUSY` if threads wait on it; afterwards it is uninitialised.
#[no_mangle]
pub extern "C" fn squall_sem_destroy(sem: *mut c_void) -> c_int {
    sem_call("sem_destroy", || {
        let s = Sem::new("sem_destroy", sem)?;
        s.locked("sem_destroy", || {
            if s.get(WAITERS) > 0 {
                return Err(CapiError::InUse {
                    call: "sem_destroy",
                    node: node()?.rank().0,
                    what: format!("semaphore at {:#x}", s.addr),
                    why: "threads wait on it",
                });
            }
            s.set(MAGIC, 0);
            Ok(0)
        })
    })
}

/// `sem_open`: named semaphores are not supported (`SEM_FAILED`, `errno` = `ENOSYS`, with a
/// message): they would be shared per machine, not per job. Use `sem_init` on a semaphore in
/// shared memory.
#[no_mangle]
pub extern "C" fn squall_sem_open(name: *const c_char) -> *mut c_void {
    let _ = name;
    eprintln!(
        "squall: sem_open: named semaphores are not supported (they would be per machine, not \
         per job): use sem_init on a sem_t in malloc'd memory or a global"
    );
    set_errno(libc::ENOSYS);
    std::ptr::null_mut() // SEM_FAILED
}
