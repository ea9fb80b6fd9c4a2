//! Who serves this node's faults: the service thread (the userfaultfd polled beside the
//! network), a separate fault thread if the poll refuses it, or, with `SQUALL_FAULTS=signal`,
//! the faulting thread itself (a SIGBUS handler, `squall_memory::signal`). Must not touch the
//! protocol beyond handing it faults under the service lock.

use super::sync::{claims, handle_claimed};
use crate::error::Result;
use crate::service::{fatal, Service};
use parking_lot::Mutex;
use squall_core::{Access, PageMemory};
use squall_memory::{AddressSpace, FaultThread, SignalServer};
use squall_net::endpoint::SourceId;
use squall_net::Endpoint;
use std::sync::Arc;
use std::time::Duration;

/// Who serves this node's faults.
pub(super) enum FaultServing {
    /// The service thread: the userfaultfd is one more source of its poll.
    Poll(SourceId),
    /// A separate fault thread (only if the poll refused the userfaultfd); dropping it stops
    /// the thread.
    Thread(FaultThread),
    /// The faulting threads (`SQUALL_FAULTS=signal`); dropping it unregisters the handler's
    /// server (only after the range is detached: no fault comes any more).
    Signal(SignalServer),
}

/// Serve faults on the service thread: the userfaultfd joins the endpoint's poll, so a fault
/// wakes the thread that sends the page request and then receives the reply (spinning for it
/// briefly, see `Service::on_fault`), one thread wake-up instead of two on the faulting node.
/// Faults are served under the service lock like any message. If the poll cannot take the
/// userfaultfd, a separate fault thread serves them the same way. In signal mode the faulting
/// thread serves its own fault ([`serve_own`]).
pub(super) fn serve_faults(
    ep: &Endpoint,
    space: &Arc<AddressSpace>,
    svc: &Arc<Mutex<Service>>,
) -> Result<FaultServing> {
    if space.signal_faults() {
        let (ep, sp, svc) = (ep.clone(), space.clone(), svc.clone());
        let server =
            SignalServer::register(move |addr, write| serve_own(&ep, &sp, &svc, addr, write))?;
        return Ok(FaultServing::Signal(server));
    }
    let source = space.fault_source()?;
    let fd = source.fd();
    let s = svc.clone();
    let polled = ep.add_source(fd, move |ep| {
        if let Err(e) = source.drain(|f| s.lock().on_fault(ep, f.page, f.write)) {
            fatal(ep.rank(), &format!("cannot serve faults: {e}"));
        }
    });
    match polled {
        Ok(id) => Ok(FaultServing::Poll(id)),
        Err(e) => {
            // The failed registration dropped the source: the stream is free for a thread.
            eprintln!(
                "squall: {}: serving faults on a separate thread ({e})",
                ep.rank()
            );
            let (s, ep) = (svc.clone(), ep.clone());
            let ft = space.start_fault_thread(move |f| s.lock().on_fault(&ep, f.page, f.write))?;
            Ok(FaultServing::Thread(ft))
        }
    }
}

/// How long a thread sleeps for its page without a wake-up before it retries its access (a
/// backstop: every resumed fault wakes it).
const WAKE_BACKSTOP: Duration = Duration::from_millis(10);

/// Signal mode: serve the fault at `addr` on the faulting thread (from its SIGBUS handler, on
/// its alternate stack). It hands the fault to the protocol under the service lock as the
/// service thread would; a fault served locally (a twin) is done when that returns. For a
/// remote one the thread then waits for the grant as a thread waiting for a lock does: it
/// polls the network itself for the reply spin, handling the reply it reads there, then sleeps
/// until this node resumes a fault; then it returns to retry the access. Returns false for an
/// address outside the range (not ours).
///
/// Safe to run at any point of the program: the faulting code, like any code that may fault,
/// holds no lock the fault path takes (the service thread needs the same ones), and Squall's
/// own code never touches the application view while it holds the service lock.
fn serve_own(
    ep: &Endpoint,
    space: &AddressSpace,
    svc: &Mutex<Service>,
    addr: usize,
    write: bool,
) -> bool {
    let Some(page) = space.page_of(addr) else {
        return false;
    };
    if ep.is_service_thread() {
        fatal(
            ep.rank(),
            &format!("the service thread touched shared address {addr:#x} ({page}) itself"),
        );
    }
    // Like a thread the kernel wakes, this one retries its access after any fault this node
    // resumed since it handed its own over (it faults again if that was not enough: its page
    // may have been granted and taken back meanwhile). The epoch moves only once every access
    // change the resumed fault needed is done; the access table changes before the kernel
    // does, and a miss that writes is granted read before it is twinned, so a thread that
    // looked at the table could retry too early and fault again.
    let since = space.wake_epoch();
    space.count_fault(write);
    svc.lock().on_fault(ep, page, write);
    let done = || space.wake_epoch() != since;
    if done() {
        return true;
    }
    let mut handle = |ep: &Endpoint, m| handle_claimed(svc, ep, m);
    if ep
        .wait_polling(&claims, &mut handle, || done().then_some(()))
        .is_none()
    {
        space.wait_for_wake(since, WAKE_BACKSTOP);
    }
    true
}

/// Give the calling thread what it needs to fault in signal mode (an alternate signal stack);
/// nothing otherwise. Every thread the runtime starts calls it first.
pub(super) fn prepare_thread() -> Result<()> {
    match super::node_ref() {
        Some(n) if n.inner.space.signal_faults() => Ok(squall_memory::prepare_thread()?),
        _ => Ok(()),
    }
}

impl super::Node {
    /// Whether this node's faults are served by the faulting threads (`SQUALL_FAULTS=signal`).
    #[inline]
    pub fn signal_faults(&self) -> bool {
        self.inner.space.signal_faults()
    }

    /// Signal mode: give this node the access to `len` bytes from `addr` that a system call
    /// about to read (`write` false) or write them needs, serving the faults a thread's own
    /// access would take, one page at a time (the kernel's own accesses do not fault into a
    /// handler: they fail with EFAULT). Bytes outside Squall memory are skipped; in the default
    /// mode it does nothing (the kernel waits for the service thread). The access holds until
    /// the next synchronization of this node takes it back.
    pub fn prepare_access(&self, addr: usize, len: usize, write: bool) {
        let space = &self.inner.space;
        // After the node's end the range is plain memory (exit handlers may still write).
        if !space.signal_faults() || len == 0 || space.detached() {
            return;
        }
        let first = addr & !(squall_core::PAGE_SIZE - 1);
        let end = addr.saturating_add(len);
        for a in (first..end).step_by(squall_core::PAGE_SIZE) {
            let Some(page) = space.page_of(a) else {
                continue;
            };
            loop {
                let ok = match space.access(page) {
                    Access::ReadWrite => true,
                    Access::Read => !write,
                    Access::None => false,
                };
                if ok {
                    break;
                }
                serve_own(&self.inner.ep, space, &self.inner.svc, a, write);
            }
        }
    }
}
