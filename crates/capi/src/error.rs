//! Status codes, the C API's error type, the last error text of each thread, and the guards
//! that turn a Rust result (or a panic) into a C return value.
//!
//! Owns: the mapping from runtime errors to `SQUALL_ERR_*` codes and the thread-local error
//! text behind `squall_last_error()`. Must not touch: the runtime's state (it only formats
//! errors the runtime returned).
use squall::SquallError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const SQUALL_OK: c_int = 0;
/// Not an error: `squall_trylock` found the lock taken (it is not held by the caller).
pub const SQUALL_BUSY: c_int = 1;
/// Not an error: returned by barrier calls in exactly one thread per barrier episode.
pub const SQUALL_SERIAL: c_int = 2;
/// A call before `squall_init` (or outside `squall run` for the pthreads layer).
pub const SQUALL_ERR_NOT_INITIALISED: c_int = -1;
/// A bad argument: null pointer, zero count, unknown placement, bad node number.
pub const SQUALL_ERR_INVALID: c_int = -2;
/// The shared heap could not satisfy an allocation.
pub const SQUALL_ERR_NO_MEMORY: c_int = -3;
/// An address that is not in the shared range or not the start of a live allocation.
pub const SQUALL_ERR_NOT_SQUALL: c_int = -4;
/// Unlock of a lock the calling thread does not hold.
pub const SQUALL_ERR_NOT_HELD: c_int = -5;
/// Lock of a lock the calling thread already holds.
pub const SQUALL_ERR_DEADLOCK: c_int = -6;
/// Destroy of a lock held or waited for, or of a condition with waiters.
pub const SQUALL_ERR_IN_USE: c_int = -7;
/// Any other misuse of a synchronization object (barrier count mismatch, cond/lock mismatch).
pub const SQUALL_ERR_SYNC: c_int = -8;
/// Join of a thread id that no node knows (never created, or already joined).
pub const SQUALL_ERR_UNKNOWN_THREAD: c_int = -9;
/// The transport failed or a peer node was lost.
pub const SQUALL_ERR_NETWORK: c_int = -10;
/// A configuration error (bad `SQUALL_*` variable, address space could not be reserved).
pub const SQUALL_ERR_CONFIG: c_int = -11;
/// The node is shutting down (after `squall_finalize`).
pub const SQUALL_ERR_SHUTDOWN: c_int = -12;
/// The operation is not supported by this build.
pub const SQUALL_ERR_UNSUPPORTED: c_int = -13;
/// Anything else, including a panic caught at the API boundary (a bug in Squall).
pub const SQUALL_ERR_INTERNAL: c_int = -14;

/// What a C API call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error("squall is not initialised: call squall_init() first, or start the program with `squall run -n N prog`")]
    NotInitialised,
    #[error("invalid argument to {call}: {why}")]
    Invalid { call: &'static str, why: String },
    #[error("{0}")]
    Squall(#[from] SquallError),
    #[error("{call} on node {node}: {what} is in use: {why}")]
    InUse {
        call: &'static str,
        node: u16,
        what: String,
        why: &'static str,
    },
    #[error("{0}")]
    UnknownThread(String),
    /// Misuse of a pthreads-layer object that the layer itself detects (its own state, not
    /// the runtime's): `code` is the `SQUALL_ERR_*` it maps to (e.g. `SQUALL_ERR_DEADLOCK`).
    #[error("{call}: {why}")]
    Misuse {
        call: &'static str,
        code: c_int,
        why: String,
    },
    #[error("{0} is not supported by squall")]
    Unsupported(&'static str),
    #[error("internal error in {call} (a bug in squall): {why}")]
    Panic { call: &'static str, why: String },
}

impl CapiError {
    /// The `SQUALL_ERR_*` code of this error.
    pub fn code(&self) -> c_int {
        use squall_sync_errors::*;
        match self {
            CapiError::NotInitialised => SQUALL_ERR_NOT_INITIALISED,
            CapiError::Invalid { .. } => SQUALL_ERR_INVALID,
            CapiError::InUse { .. } => SQUALL_ERR_IN_USE,
            CapiError::UnknownThread(_) => SQUALL_ERR_UNKNOWN_THREAD,
            CapiError::Misuse { code, .. } => *code,
            CapiError::Unsupported(_) => SQUALL_ERR_UNSUPPORTED,
            CapiError::Panic { .. } => SQUALL_ERR_INTERNAL,
            CapiError::Squall(e) => match e {
                SquallError::NotInitialised => SQUALL_ERR_NOT_INITIALISED,
                SquallError::Net(_) => SQUALL_ERR_NETWORK,
                SquallError::Memory(_) | SquallError::Config(_) => SQUALL_ERR_CONFIG,
                SquallError::Alloc { source, .. } => match source {
                    squall_memory::AllocError::OutOfMemory { .. }
                    | squall_memory::AllocError::GlobalFull { .. } => SQUALL_ERR_NO_MEMORY,
                    squall_memory::AllocError::BadAlign { .. } => SQUALL_ERR_INVALID,
                    squall_memory::AllocError::DoubleFree { .. }
                    | squall_memory::AllocError::NotAllocated { .. } => SQUALL_ERR_NOT_SQUALL,
                },
                SquallError::UnknownThread(_) => SQUALL_ERR_UNKNOWN_THREAD,
                SquallError::NotSquall(..) => SQUALL_ERR_NOT_SQUALL,
                SquallError::Sync(s) => sync_code(s),
                SquallError::OnServiceThread(_) => SQUALL_ERR_INVALID,
                SquallError::ShuttingDown => SQUALL_ERR_SHUTDOWN,
                SquallError::Remote(text) => remote_code(text),
                SquallError::Object(_) => SQUALL_ERR_INVALID,
                SquallError::Gptr(g) => match g {
                    squall_gptr_errors::GptrError::Refused { .. } => SQUALL_ERR_NOT_SQUALL,
                    squall_gptr_errors::GptrError::NoSuchNode { .. }
                    | squall_gptr_errors::GptrError::Invalid(_) => SQUALL_ERR_INVALID,
                    _ => SQUALL_ERR_NETWORK,
                },
                #[allow(unreachable_patterns)]
                _ => SQUALL_ERR_INTERNAL,
            },
        }
    }
}

/// The one-sided engine's errors, as the runtime passes them through.
mod squall_gptr_errors {
    pub use squall::GptrError;
}

/// Codes for the synchronization errors the runtime passes through.
mod squall_sync_errors {
    use super::*;

    pub fn sync_code(e: &squall_sync::SyncError) -> c_int {
        use squall_sync::SyncError as S;
        match e {
            S::NotHolder { .. } => SQUALL_ERR_NOT_HELD,
            S::Deadlock { .. } => SQUALL_ERR_DEADLOCK,
            S::LockInUse { .. } | S::CondInUse { .. } => SQUALL_ERR_IN_USE,
            _ => SQUALL_ERR_SYNC,
        }
    }

    /// Errors that came back as text from another node (or the service thread).
    pub fn remote_code(text: &str) -> c_int {
        if text.contains("out of shared memory") || text.contains("overflows") {
            SQUALL_ERR_NO_MEMORY
        } else if text.contains("not a power of two") {
            SQUALL_ERR_INVALID
        } else if text.contains("already freed")
            || text.contains("not the start of a live")
            || text.starts_with("free on")
        {
            SQUALL_ERR_NOT_SQUALL
        } else if text.contains("unknown thread") || text.contains("no thread") {
            SQUALL_ERR_UNKNOWN_THREAD
        } else {
            SQUALL_ERR_INTERNAL
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Remember `e` as this thread's last error and return its code.
pub(crate) fn record(e: &CapiError) -> c_int {
    let text = e.to_string().replace('\0', " ");
    LAST_ERROR.with(|l| *l.borrow_mut() = CString::new(text).unwrap_or_default());
    e.code()
}

/// The calling thread's last error text (valid until that thread's next failing call).
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_string()
    }
}

/// Run `f` for the C call `call`; never unwinds. `Ok(v)` is returned as is; an error (or a
/// panic) is recorded as the thread's last error and `on_error(code)` is returned. Runs on the
/// thread's private stack (`stack::on_private`): Squall's code never runs on a shared stack.
pub(crate) fn guard<T>(
    call: &'static str,
    on_error: impl FnOnce(c_int) -> T,
    f: impl FnOnce() -> Result<T, CapiError>,
) -> T {
    crate::stack::on_private(move || {
        let e = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(v)) => return v,
            Ok(Err(e)) => e,
            Err(p) => CapiError::Panic {
                call,
                why: panic_text(p),
            },
        };
        on_error(record(&e))
    })
}

/// `guard` for calls returning a status code: `Ok(code)` is returned, an error as its code.
pub(crate) fn status(call: &'static str, f: impl FnOnce() -> Result<c_int, CapiError>) -> c_int {
    guard(call, |c| c, f)
}

/// `guard` for calls returning a pointer: an error returns null.
pub(crate) fn pointer<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<*mut T, CapiError>,
) -> *mut T {
    guard(call, |_| std::ptr::null_mut(), f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn errors_map_to_codes_and_text() {
        let c = status("squall_lock", || Err(CapiError::NotInitialised));
        assert_eq!(c, SQUALL_ERR_NOT_INITIALISED);
        // SAFETY: last_error_ptr returns a valid NUL-terminated string of this thread.
        let text = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert!(text.contains("squall_init"), "{text}");
        assert!(text.contains("squall run"), "{text}");
    }

    #[test]
    fn panics_are_caught_and_reported() {
        let c = status("squall_test", || panic!("boom {}", 7));
        assert_eq!(c, SQUALL_ERR_INTERNAL);
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            text.contains("boom 7") && text.contains("squall_test"),
            "{text}"
        );
        let p: *mut u8 = pointer("squall_malloc", || panic!("no"));
        assert!(p.is_null());
    }

    #[test]
    fn runtime_errors_keep_their_category() {
        let e = CapiError::from(SquallError::NotSquall(0x10, 0x1000, 0x2000));
        assert_eq!(e.code(), SQUALL_ERR_NOT_SQUALL);
        let e = CapiError::from(SquallError::Remote(
            "free on node 1: free of 0x10, which was already freed".into(),
        ));
        assert_eq!(e.code(), SQUALL_ERR_NOT_SQUALL);
        let e = CapiError::Invalid {
            call: "squall_barrier_n",
            why: "total is 0".into(),
        };
        assert_eq!(e.code(), SQUALL_ERR_INVALID);
        assert!(e.to_string().contains("squall_barrier_n"));
    }
}
