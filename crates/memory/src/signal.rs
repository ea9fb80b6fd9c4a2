//! Fault capture by signal (`SQUALL_FAULTS=signal`): the faulting thread serves its own fault.
//!
//! With the default capture a faulting thread blocks in the kernel while another thread (the
//! runtime's service thread) reads the fault message and grants the access: a fault costs at
//! least two thread wake-ups even when it needs no message (a write to a read copy only takes
//! a twin). Here the address space's userfaultfd is opened with `UFFD_FEATURE_SIGBUS`: the
//! kernel raises SIGBUS in the faulting thread instead, the handler hands the fault to the
//! registered server ([`SignalServer::register`]), which runs the protocol on that thread and
//! returns once the access is granted; the instruction then runs again. No thread is woken
//! for a fault served locally, and for a remote one the faulting thread itself reads the reply.
//!
//! What a program must allow (documented with the variable): system calls that read or write
//! shared memory whose page this node cannot access at that moment fail with `EFAULT` instead
//! of waiting, as with `UFFD_USER_MODE_ONLY`. The handler runs on an alternate signal stack
//! (threads' own stacks may be shared memory); a thread that may fault calls
//! [`prepare_thread`] once (the runtime does for every thread it starts and for the thread that
//! starts the node). A fault the server does not take (an address outside the range) goes to
//! the program's previous SIGBUS action, or ends the process as SIGBUS would. A program's later
//! `sigaction(SIGBUS)` can replace that action without removing the handler
//! ([`program_sigbus_action`], which the C layer's interposed `sigaction` calls), and a mask
//! about to be blocked can be stripped of SIGBUS ([`keep_sigbus_deliverable`]).
//!
//! Owns: the process's one server registration and the per-thread alternate stacks. Must not
//! touch: the protocol (the server is the caller's) or page states (the `AddressSpace` does).

use crate::error::MemoryError;
use crate::signal_sys::{self, AltStack};
use std::cell::RefCell;
use std::sync::{Arc, RwLock};

/// What serves a fault: `(address, write) -> taken`. It returns once the access is granted
/// (or after a grant that may have been revoked again: the instruction faults once more).
type Serve = dyn Fn(usize, bool) -> bool + Send + Sync;

/// The process's server (one node per process uses signals).
static SERVER: RwLock<Option<Arc<Serve>>> = RwLock::new(None);

thread_local! {
    static ALT: RefCell<Option<AltStack>> = const { RefCell::new(None) };
}

/// The handler's call: serve the fault at `addr` if a server is registered and takes it.
pub(crate) fn serve(addr: usize, write: bool) -> bool {
    let server = match SERVER.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    let Some(f) = server else {
        return false;
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(addr, write))) {
        Ok(taken) => taken,
        Err(_) => {
            // Unwinding out of a signal handler is undefined: end the process loudly.
            eprintln!("squall: serving the fault at {addr:#x} panicked; aborting");
            std::process::abort();
        }
    }
}

/// Give the calling thread an alternate signal stack for the fault handler (once per thread;
/// it is freed when the thread ends).
pub fn prepare_thread() -> Result<(), MemoryError> {
    ALT.with(|a| {
        let mut a = a.borrow_mut();
        if a.is_none() {
            *a = Some(AltStack::install().map_err(|e| MemoryError::Signal {
                why: format!("cannot give this thread an alternate signal stack: {e}"),
            })?);
        }
        Ok(())
    })
}

/// The registration of this process's fault server; dropping it unregisters it (faults then
/// go to the previous SIGBUS action).
#[derive(Debug)]
pub struct SignalServer(());

impl SignalServer {
    /// Install the SIGBUS handler (once per process) and make `serve` the process's fault
    /// server. Fails if another is registered (one node per process serves faults by signal).
    pub fn register(
        serve: impl Fn(usize, bool) -> bool + Send + Sync + 'static,
    ) -> Result<SignalServer, MemoryError> {
        signal_sys::install_sigbus().map_err(|e| MemoryError::Signal {
            why: format!("cannot install the SIGBUS handler: {e}"),
        })?;
        let mut g = SERVER.write().unwrap_or_else(|p| p.into_inner());
        if g.is_some() {
            return Err(MemoryError::Signal {
                why: "another node of this process already serves faults by signal".into(),
            });
        }
        *g = Some(Arc::new(serve));
        drop(g);
        prepare_thread()?;
        Ok(SignalServer(()))
    }
}

impl Drop for SignalServer {
    fn drop(&mut self) {
        *SERVER.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The program's own `sigaction(SIGBUS, new, old)` once the handler is installed: the
/// handler stays, `new` (if given) becomes the action faults that are not ours go to, and
/// `old` receives the one they went to. `false` if the handler is not installed (the caller
/// then calls the C library).
pub fn program_sigbus_action(
    new: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> bool {
    if !signal_sys::installed() {
        return false;
    }
    signal_sys::set_chained(new, old);
    true
}

/// Takes SIGBUS out of a mask the program is about to block, once the handler is installed
/// (a fault with SIGBUS blocked would end the process). `true` if it was in the mask.
pub fn keep_sigbus_deliverable(set: &mut libc::sigset_t) -> bool {
    signal_sys::unblock_sigbus(set)
}
