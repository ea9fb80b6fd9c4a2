//! CRL regions on a node: drives the `squall-regions` core with the node's endpoint (messages
//! of type `msg::REGION`), keeps the node's copies (`buf`), parks application threads on
//! their calls' completions, and offers the Rust API (`api`: `Node::region_create`,
//! `region_map`, guards). The core runs under this module's own lock (never the service
//! lock), taken by application threads making calls and by the message handler; nobody
//! blocks while holding it. Owns the region glue; must not touch pages or the service state.

mod api;
mod buf;
mod collective;

pub use api::{ReadGuard, Region, WriteGuard};
pub use buf::RegionBuf;
pub use collective::ReduceOp;
pub use squall_regions::{RegionError, RegionId, RegionStats};

use crate::msg;
use parking_lot::{Condvar, Mutex};
use squall_core::NodeId;
use squall_net::Endpoint;
use squall_regions::{Action, RegionMemory, Regions, Waiter};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A parked call's outcome.
type Outcome = Result<u64, RegionError>;

/// Where a parked call's outcome lands.
#[derive(Default)]
struct Slot {
    value: Mutex<Option<Outcome>>,
    cv: Condvar,
}

impl Slot {
    fn put(&self, v: Outcome) {
        *self.value.lock() = Some(v);
        self.cv.notify_one();
    }
    fn take(&self) -> Outcome {
        let mut g = self.value.lock();
        loop {
            if let Some(v) = g.take() {
                return v;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// The node's copies, by region (the core's `RegionMemory`).
#[derive(Default)]
struct Bufs {
    map: HashMap<RegionId, Arc<RegionBuf>>,
}

impl RegionMemory for Bufs {
    fn ensure(&mut self, rid: RegionId, size: usize) {
        self.map
            .entry(rid)
            .or_insert_with(|| Arc::new(RegionBuf::zeroed(size)));
    }
    fn install(&mut self, rid: RegionId, data: &[u8]) {
        if let Some(b) = self.map.get(&rid) {
            b.install(data);
        }
    }
    fn read_into(&self, rid: RegionId, out: &mut [u8]) {
        if let Some(b) = self.map.get(&rid) {
            b.read_into(out);
        }
    }
    fn append_to(&self, rid: RegionId, len: usize, out: &mut Vec<u8>) {
        if let Some(b) = self.map.get(&rid) {
            b.append_to(len, out);
        }
    }
    fn forget(&mut self, rid: RegionId) {
        self.map.remove(&rid);
    }
}

struct State {
    core: Regions,
    bufs: Bufs,
    waiters: HashMap<Waiter, Arc<Slot>>,
}

/// The region service of one node.
pub(crate) struct RegionService {
    state: Mutex<State>,
    coll: collective::Collectives,
    next_waiter: AtomicU64,
}

impl RegionService {
    pub(crate) fn new(me: NodeId, nodes: u16) -> RegionService {
        RegionService {
            state: Mutex::new(State {
                core: Regions::new(me, nodes),
                bufs: Bufs::default(),
                waiters: HashMap::new(),
            }),
            next_waiter: AtomicU64::new(1),
            coll: collective::Collectives::default(),
        }
    }

    /// A region message arrived (the handler, on the service thread).
    pub(crate) fn on_message(&self, ep: &Endpoint, from: NodeId, payload: &[u8]) {
        match self.coll.on_message(from, payload) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => crate::service::fatal(ep.rank(), &format!("regions: {e}")),
        }
        let mut g = self.state.lock();
        let st = &mut *g;
        let r = st.core.on_message(from, payload, &mut st.bufs);
        Self::drain(st, ep);
        drop(g);
        if let Err(e) = r {
            crate::service::fatal(ep.rank(), &format!("regions: {e}"));
        }
    }

    /// Run `f` on the core and carry out its actions (without waiting).
    fn with<R>(&self, ep: &Endpoint, f: impl FnOnce(&mut Regions, &mut Bufs) -> R) -> R {
        let mut g = self.state.lock();
        let st = &mut *g;
        let r = f(&mut st.core, &mut st.bufs);
        Self::drain(st, ep);
        r
    }

    /// Run `f` with a fresh waiter and wait for that waiter's completion.
    fn call(
        &self,
        ep: &Endpoint,
        f: impl FnOnce(&mut Regions, Waiter, &mut Bufs),
    ) -> crate::Result<u64> {
        if ep.is_service_thread() {
            return Err(crate::SquallError::OnServiceThread("a region call"));
        }
        let w = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        {
            let mut g = self.state.lock();
            let st = &mut *g;
            st.waiters.insert(w, slot.clone());
            f(&mut st.core, w, &mut st.bufs);
            Self::drain(st, ep);
        }
        Ok(slot.take()?)
    }

    fn drain(st: &mut State, ep: &Endpoint) {
        while let Some(a) = st.core.poll_action() {
            match a {
                Action::Send { to, msg } => {
                    if let Err(e) = ep.send(to, msg::REGION, msg) {
                        // A lost peer ends the job through the transport; say what was lost.
                        eprintln!("squall: {}: region message to {to}: {e}", ep.rank());
                    }
                }
                Action::Complete { waiter, result } => {
                    if let Some(s) = st.waiters.remove(&waiter) {
                        s.put(result);
                    }
                }
            }
        }
    }

    fn buf(&self, rid: RegionId) -> Option<Arc<RegionBuf>> {
        self.state.lock().bufs.map.get(&rid).cloned()
    }

    /// The core's counters (for the node's statistics).
    pub(crate) fn stats(&self) -> RegionStats {
        self.state.lock().core.stats().clone()
    }
}
