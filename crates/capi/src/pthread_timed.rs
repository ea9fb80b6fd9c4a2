//! Timed waits for the pthreads layer: `pthread_cond_init` (its clock), `pthread_cond_wait`,
//! `pthread_cond_timedwait`, and the deadline machinery that `sem_timedwait` and
//! `pthread_rwlock_timed*lock` share.
//!
//! The runtime's condition waits have no timeout. A timed wait is an ordinary Squall condition
//! wait plus a deadline registered with this node's timer thread: when the deadline passes,
//! the timer broadcasts the condition (job-wide), which wakes the timed waiter — and, as a
//! spurious wake-up that POSIX allows, the other waiters of that condition, which re-check
//! their predicate. A signal reaches a timed waiter exactly as it reaches any waiter (the
//! waiter is registered at the condition's manager), so it is never lost. The broadcast may
//! overtake the waiter's registration at the manager; the timer therefore repeats it (after
//! 1, 2, 4 ... up to 64 ms) until the waiter has returned. A waiter that returns `ETIMEDOUT`
//! passes on a signal it may have consumed (`pthread_cond_signal` once more), so a signal to a
//! waiter that timed out at the same moment still wakes another waiter.
//!
//! Latency: the timer thread wakes at the deadline (the OS sleep granularity, ~0.1 ms), the
//! broadcast reaches the condition's manager (a message when it is on another node), and the
//! waiter then re-acquires the mutex like any condition waiter.
//!
//! Clocks: the deadline is an absolute time on the condition's clock, `CLOCK_REALTIME` unless
//! `pthread_condattr_setclock(CLOCK_MONOTONIC)` was used; `pthread_cond_init` stores the clock
//! in the `pthread_cond_t` (a magic word and the clock id), so a condition made with
//! `PTHREAD_COND_INITIALIZER` uses `CLOCK_REALTIME`. The wait itself is measured on the
//! monotonic clock from the remaining time.
//!
//! Owns: the timer thread and its table, the clock word of conditions. Must not touch: the
//! runtime's condition internals (only `Node::cond_*` and `api::cond_wait_id`).
use crate::api::{self, node};
use crate::error::CapiError;
use crate::pthread::{need, object_id, pt};
use crate::pthread_mutex::{resume_depth, suspend_depth};
use squall::CondId;
use std::ffi::{c_int, c_void};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

extern "C" {
    // In glibc; not all are declared by the libc crate.
    fn pthread_condattr_getclock(
        attr: *const libc::pthread_condattr_t,
        clock: *mut libc::clockid_t,
    ) -> c_int;
    fn pthread_condattr_getpshared(
        attr: *const libc::pthread_condattr_t,
        pshared: *mut c_int,
    ) -> c_int;
}

// ----- deadlines ----------------------------------------------------------------------------

/// The longest pause between two repeated broadcasts for one overdue waiter.
const MAX_REPEAT: Duration = Duration::from_millis(64);

struct Entry {
    id: u64,
    cond: u64,
    next: Instant,
    repeat: Duration,
}

struct Timers {
    entries: Vec<Entry>,
    next_id: u64,
    thread: bool,
}

static TIMERS: Mutex<Timers> = Mutex::new(Timers {
    entries: Vec::new(),
    next_id: 1,
    thread: false,
});
static TICK: Condvar = Condvar::new();

fn timers() -> MutexGuard<'static, Timers> {
    TIMERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ask the timer thread to broadcast `cond` at `at` (and again until `unregister`).
fn register(cond: u64, at: Instant) -> Result<u64, CapiError> {
    let mut t = timers();
    if !t.thread {
        std::thread::Builder::new()
            .name("squall-timer".into())
            .spawn(timer_loop)
            .map_err(|e| CapiError::Invalid {
                call: "a timed wait",
                why: format!("the timer thread could not start: {e}"),
            })?;
        t.thread = true;
    }
    let id = t.next_id;
    t.next_id += 1;
    t.entries.push(Entry {
        id,
        cond,
        next: at,
        repeat: Duration::from_millis(1),
    });
    TICK.notify_one();
    Ok(id)
}

fn unregister(id: u64) {
    timers().entries.retain(|e| e.id != id);
}

/// The timer thread: broadcasts the conditions of overdue waiters.
fn timer_loop() {
    loop {
        let due = {
            let mut t = timers();
            loop {
                let now = Instant::now();
                match t.entries.iter().map(|e| e.next).min() {
                    None => t = TICK.wait(t).unwrap_or_else(|p| p.into_inner()),
                    Some(n) if n > now => {
                        t = TICK
                            .wait_timeout(t, n - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    Some(_) => break,
                }
            }
            let now = Instant::now();
            let mut due: Vec<u64> = Vec::new();
            for e in t.entries.iter_mut().filter(|e| e.next <= now) {
                due.push(e.cond);
                e.next = now + e.repeat;
                e.repeat = (e.repeat * 2).min(MAX_REPEAT);
            }
            due.sort_unstable();
            due.dedup();
            due
        };
        if let Ok(n) = node() {
            for c in due {
                if let Err(e) = n.cond_broadcast(CondId(c)) {
                    eprintln!("squall: timed wait: waking condition {c:#x}: {e}");
                }
            }
        }
    }
}

/// Wait on condition `cond` with lock `lock` held (Squall ids) until woken or until `at`
/// (spurious returns are possible: callers re-check their predicate and the time).
pub(crate) fn cond_wait_until(cond: u64, lock: u64, at: Instant) -> Result<(), CapiError> {
    let n = node()?;
    let id = register(cond, at)?;
    let r = api::cond_wait_id(&n, cond, lock);
    unregister(id);
    r
}

// ----- clocks -------------------------------------------------------------------------------

/// Read an absolute deadline (`struct timespec`), checking its fields.
pub(crate) fn read_abstime(
    call: &'static str,
    abstime: *const c_void,
) -> Result<libc::timespec, CapiError> {
    need(call, "abstime", abstime)?;
    // SAFETY: non-null, a struct timespec per the caller's contract.
    let ts = unsafe { (abstime as *const libc::timespec).read() };
    if !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return Err(CapiError::Invalid {
            call,
            why: format!("abstime.tv_nsec = {} is not in [0, 1e9)", ts.tv_nsec),
        });
    }
    Ok(ts)
}

/// The time left until `abstime` on `clock`; `None` once it has passed.
pub(crate) fn remaining(clock: libc::clockid_t, abstime: &libc::timespec) -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; the clock id is one of the two we store.
    unsafe { libc::clock_gettime(clock, &mut now) };
    let ns = |t: &libc::timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let left = ns(abstime) - ns(&now);
    (left > 0).then(|| Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)))
}

/// An absolute deadline on a clock.
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    clock: libc::clockid_t,
    at: libc::timespec,
}

impl Deadline {
    /// A deadline on `CLOCK_REALTIME` (the clock of `sem_timedwait` and the timed rwlocks).
    pub(crate) fn realtime(at: libc::timespec) -> Deadline {
        Deadline {
            clock: libc::CLOCK_REALTIME,
            at,
        }
    }

    /// The monotonic instant of the deadline; `None` once it has passed.
    pub(crate) fn left(&self) -> Option<Instant> {
        remaining(self.clock, &self.at).map(|d| Instant::now() + d)
    }
}

/// Marks a condition whose clock word was set by `pthread_cond_init`.
const COND_MAGIC: u32 = 0x5351_4356; // "SQCV"

/// The clock of the condition at `c` (`CLOCK_REALTIME` unless its init chose another).
fn cond_clock(c: *mut c_void) -> libc::clockid_t {
    let w = c as *const u32;
    // SAFETY: a pthread_cond_t is 48 bytes, 8-byte aligned.
    let (magic, clock) = unsafe { (w.read_volatile(), w.add(1).read_volatile()) };
    if magic == COND_MAGIC && clock == libc::CLOCK_MONOTONIC as u32 {
        libc::CLOCK_MONOTONIC
    } else {
        libc::CLOCK_REALTIME
    }
}

// ----- conditions ---------------------------------------------------------------------------

/// `pthread_cond_init`: stores the clock of `pthread_condattr_setclock` (for
/// `pthread_cond_timedwait`) in the condition. A process-shared condition is `ENOTSUP`.
///
/// # Safety
/// `c` is null or a `pthread_cond_t`; `attr` is null or a valid `pthread_condattr_t`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_cond_init(c: *mut c_void, attr: *const c_void) -> c_int {
    pt("pthread_cond_init", || {
        need("pthread_cond_init", "condition", c)?;
        let mut clock = libc::CLOCK_REALTIME;
        if !attr.is_null() {
            let a = attr as *const libc::pthread_condattr_t;
            let mut pshared: c_int = 0;
            // SAFETY: attr is a valid pthread_condattr_t per the contract.
            let rc = unsafe { pthread_condattr_getpshared(a, &mut pshared) };
            if rc == 0 && pshared == libc::PTHREAD_PROCESS_SHARED {
                return Err(CapiError::Unsupported(
                    "a process-shared condition (PTHREAD_PROCESS_SHARED: squall conditions are \
                     shared by the threads of one job on every node, not between processes)",
                ));
            }
            // SAFETY: as above.
            if unsafe { pthread_condattr_getclock(a, &mut clock) } != 0 {
                clock = libc::CLOCK_REALTIME;
            }
        }
        let w = c as *mut u32;
        // SAFETY: a pthread_cond_t is 48 bytes, 8-byte aligned.
        unsafe {
            w.write_volatile(COND_MAGIC);
            w.add(1).write_volatile(clock as u32);
        }
        Ok(0)
    })
}

/// `pthread_cond_wait` with `m` held (a recursive mutex is released completely while waiting
/// and gets its depth back).
#[no_mangle]
pub extern "C" fn squall_pthread_cond_wait(c: *mut c_void, m: *mut c_void) -> c_int {
    pt("pthread_cond_wait", || {
        let ca = need("pthread_cond_wait", "condition", c)?;
        let ma = need("pthread_cond_wait", "mutex", m)?;
        let mid = object_id(ma);
        let depth = suspend_depth(mid);
        let r = api::cond_wait_id(&node()?, object_id(ca), mid);
        resume_depth(mid, depth);
        r.map(|()| 0)
    })
}

/// `pthread_cond_timedwait`: as `pthread_cond_wait`, or `ETIMEDOUT` once `abstime` (on the
/// condition's clock) has passed; the mutex is held again in both cases. Spurious returns (0)
/// are possible, as POSIX allows. See the module doc for how and how fast.
///
/// # Safety
/// `abstime` is null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_cond_timedwait(
    c: *mut c_void,
    m: *mut c_void,
    abstime: *const c_void,
) -> c_int {
    pt("pthread_cond_timedwait", || {
        timed_wait("pthread_cond_timedwait", c, m, cond_clock(c), abstime)
    })
}

/// `pthread_cond_clockwait` (glibc 2.30): `pthread_cond_timedwait` with the clock given
/// (`CLOCK_REALTIME` or `CLOCK_MONOTONIC`, else `EINVAL`).
///
/// # Safety
/// `abstime` is null or a valid `struct timespec`.
#[no_mangle]
pub unsafe extern "C" fn squall_pthread_cond_clockwait(
    c: *mut c_void,
    m: *mut c_void,
    clock: c_int,
    abstime: *const c_void,
) -> c_int {
    pt("pthread_cond_clockwait", || {
        let clock = checked_clock("pthread_cond_clockwait", clock)?;
        timed_wait("pthread_cond_clockwait", c, m, clock, abstime)
    })
}

/// `clock` if it is one a deadline may use.
pub(crate) fn checked_clock(
    call: &'static str,
    clock: c_int,
) -> Result<libc::clockid_t, CapiError> {
    if clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_MONOTONIC {
        Ok(clock)
    } else {
        Err(CapiError::Invalid {
            call,
            why: format!("clock {clock} (use CLOCK_REALTIME or CLOCK_MONOTONIC)"),
        })
    }
}

fn timed_wait(
    call: &'static str,
    c: *mut c_void,
    m: *mut c_void,
    clock: libc::clockid_t,
    abstime: *const c_void,
) -> Result<c_int, CapiError> {
    {
        let ca = need(call, "condition", c)?;
        let ma = need(call, "mutex", m)?;
        let ts = read_abstime(call, abstime)?;
        let Some(left) = remaining(clock, &ts) else {
            return Ok(libc::ETIMEDOUT);
        };
        let (cid, mid) = (object_id(ca), object_id(ma));
        let depth = suspend_depth(mid);
        let r = cond_wait_until(cid, mid, Instant::now() + left);
        resume_depth(mid, depth);
        r?;
        if remaining(clock, &ts).is_some() {
            return Ok(0);
        }
        // Timed out: pass on a signal this wait may have consumed at the same moment.
        node()?.cond_signal(CondId(cid))?;
        Ok(libc::ETIMEDOUT)
    }
}
