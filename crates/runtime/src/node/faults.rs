//! Who serves this node's faults: the service thread (the userfaultfd polled beside the
//! network) or, if the poll refuses it, a separate fault thread. Must not touch the protocol
//! beyond handing it faults under the service lock.

use crate::error::Result;
use crate::service::{fatal, Service};
use parking_lot::Mutex;
use squall_memory::{AddressSpace, FaultThread};
use squall_net::endpoint::SourceId;
use squall_net::Endpoint;
use std::sync::Arc;

/// Who serves this node's faults.
pub(super) enum FaultServing {
    /// The service thread: the userfaultfd is one more source of its poll.
    Poll(SourceId),
    /// A separate fault thread (only if the poll refused the userfaultfd); dropping it stops
    /// the thread.
    Thread(FaultThread),
}

/// Serve faults on the service thread: the userfaultfd joins the endpoint's poll, so a fault
/// wakes the thread that sends the page request and then receives the reply (spinning for it
/// briefly, see `Service::on_fault`), one thread wake-up instead of two on the faulting node.
/// Faults are served under the service lock like any message. If the poll cannot take the
/// userfaultfd, a separate fault thread serves them the same way.
pub(super) fn serve_faults(
    ep: &Endpoint,
    space: &Arc<AddressSpace>,
    svc: &Arc<Mutex<Service>>,
) -> Result<FaultServing> {
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
