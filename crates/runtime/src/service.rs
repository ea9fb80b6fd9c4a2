//! The node's service state: the coherence protocol core, the synchronization core and the
//! heap of this node's arena, and the loop that routes actions between them and the network.
//! It lives behind one lock (the service lock): message handlers on the endpoint's service
//! thread, the fault thread serving a fault, and application threads starting an operation
//! each take it, so the cores see one call at a time. Nobody blocks while holding it.
//!
//! Owns: routing of protocol and sync actions, waking application threads, data-stall and
//! protocol-time accounting. Must not touch: sockets (it sends through the `Endpoint`), page
//! protections (the protocol core does that through `PageMemory`).
use crate::msg;
use crate::stats::ServiceTimes;
use crate::threads::ThreadTable;
use crossbeam_channel::Sender;
use squall_core::{AllocInfo, NodeId, PageId};
use squall_memory::{AddressSpace, Heap};
use squall_net::Endpoint;
use squall_protocol::{Action as PAction, ArenaSplit, Protocol, ProtocolKind};
use squall_sync::{Action as SAction, Outcome, SyncCore, SyncError, Waiter};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What an application thread waiting on the service thread gets back.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A synchronization operation finished.
    Sync(Result<Outcome, SyncError>),
    /// A value (an address, an atomic's old value, ...).
    Value(u64),
    /// The operation failed.
    Failed(crate::error::SquallError),
}

/// The protocol core as the service thread holds it.
pub(crate) type BoxedProtocol = Box<dyn Protocol + Send>;

pub(crate) struct Service {
    pub me: NodeId,
    pub protocol: BoxedProtocol,
    pub sync: SyncCore,
    /// The heaps of this node's two half arenas: `hlrc` allocations, then `sc` ones.
    heaps: [Heap; 2],
    split: ArenaSplit,
    pub space: Arc<AddressSpace>,
    waiters: HashMap<u64, Sender<Reply>>,
    /// Faults not yet served, by page, with the time each arrived (for data-stall time).
    pending_faults: HashMap<PageId, Vec<Instant>>,
    pub times: ServiceTimes,
    pub(crate) threads: ThreadTable,
    /// Continuations of releases the runtime itself started (thread create/exit, atomics),
    /// by token; their tokens have [`RUNTIME_TOKEN`] set so they never meet the sync core's.
    releases: HashMap<u64, Continuation>,
    next_release: u64,
}

/// Bit set in the tokens of releases the runtime starts itself.
const RUNTIME_TOKEN: u64 = 1 << 63;

/// Work to do on the service thread once a release has completed.
pub(crate) type Continuation = Box<dyn FnOnce(&mut Service, &Endpoint) + Send>;

impl Service {
    pub fn new(
        me: NodeId,
        protocol: BoxedProtocol,
        sync: SyncCore,
        heaps: [Heap; 2],
        split: ArenaSplit,
        space: Arc<AddressSpace>,
    ) -> Self {
        Service {
            me,
            protocol,
            sync,
            heaps,
            split,
            space,
            waiters: HashMap::new(),
            pending_faults: HashMap::new(),
            times: ServiceTimes::default(),
            threads: ThreadTable::default(),
            releases: HashMap::new(),
            next_release: 0,
        }
    }

    /// The heap allocations following `kind` come from.
    pub fn heap_for(&mut self, kind: ProtocolKind) -> &mut Heap {
        &mut self.heaps[usize::from(kind == ProtocolKind::Sc)]
    }

    /// The heap that handed out `addr` (by the half arena it lies in).
    pub fn heap_of(&mut self, addr: usize) -> &mut Heap {
        let kind = match self.space.page_of(addr) {
            Some(p) => self.split.kind_of(p),
            None => ProtocolKind::Hlrc,
        };
        self.heap_for(kind)
    }

    /// Remember who to wake when `waiter`'s operation completes.
    pub fn park(&mut self, waiter: Waiter, tx: Sender<Reply>) {
        self.waiters.insert(waiter.0, tx);
    }

    /// Complete `waiter`'s operation.
    pub fn wake(&mut self, waiter: Waiter, reply: Reply) {
        if let Some(tx) = self.waiters.remove(&waiter.0) {
            // The thread may have gone (its node is ending); nothing to do then.
            let _ = tx.send(reply);
        }
    }

    /// An application thread faulted on `page`.
    pub fn on_fault(&mut self, ep: &Endpoint, page: PageId, write: bool) {
        self.pending_faults
            .entry(page)
            .or_default()
            .push(Instant::now());
        let t = Instant::now();
        let r = self.protocol.handle_fault(page, write);
        self.times.protocol_ns += t.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            fatal(
                self.me,
                &format!(
                    "a thread touched address {:#x} ({page}) that no allocation covers: {e}",
                    self.space.addr_of(page)
                ),
            );
        }
        self.drain(ep);
    }

    /// A protocol message from `from`.
    pub fn on_protocol_message(&mut self, ep: &Endpoint, from: NodeId, bytes: &[u8]) {
        let t = Instant::now();
        let r = self.protocol.handle_message(from, bytes);
        self.times.protocol_ns += t.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            fatal(self.me, &format!("coherence protocol: {e}"));
        }
        self.drain(ep);
    }

    /// A synchronization message from `from`.
    pub fn on_sync_message(&mut self, ep: &Endpoint, from: NodeId, bytes: &[u8]) {
        let t = Instant::now();
        let r = self.sync.handle_message(&mut *self.protocol, from, bytes);
        self.times.protocol_ns += t.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            fatal(self.me, &format!("synchronization: {e}"));
        }
        self.drain(ep);
    }

    /// Make this node's writes visible (a release), then run `then` on the service thread.
    pub fn release_then(&mut self, ep: &Endpoint, then: Continuation) {
        self.next_release += 1;
        let token = RUNTIME_TOKEN | self.next_release;
        if self.protocol.begin_release(token) {
            then(self, ep);
        } else {
            self.releases.insert(token, then);
        }
    }

    /// Register pages this node just allocated with the protocol.
    pub fn register(&mut self, info: AllocInfo) {
        self.protocol.register_allocation(info);
    }

    /// Route every pending action of both cores until neither has any.
    pub fn drain(&mut self, ep: &Endpoint) {
        loop {
            let mut progressed = false;
            while let Some(a) = self.protocol.poll_action() {
                progressed = true;
                match a {
                    PAction::Send { to, msg } => self.send(ep, to, msg::PROTO, msg),
                    PAction::Resume { page } => {
                        // Threads whose fault was served without an access change (a
                        // duplicate fault) are still blocked in the kernel: wake them.
                        if let Err(e) = self.space.wake(page) {
                            fatal(self.me, &format!("waking threads blocked on {page}: {e}"));
                        }
                        if let Some(started) = self.pending_faults.remove(&page) {
                            let now = Instant::now();
                            for s in started {
                                self.times.stall_ns += now.duration_since(s).as_nanos() as u64;
                            }
                        }
                    }
                    PAction::ReleaseDone { token } if token & RUNTIME_TOKEN != 0 => {
                        if let Some(then) = self.releases.remove(&token) {
                            then(self, ep);
                        }
                    }
                    PAction::ReleaseDone { token } => {
                        let t = Instant::now();
                        let r = self.sync.release_done(&mut *self.protocol, token);
                        self.times.protocol_ns += t.elapsed().as_nanos() as u64;
                        if let Err(e) = r {
                            fatal(self.me, &format!("synchronization: {e}"));
                        }
                    }
                    PAction::AtomicDone { token, old } => {
                        self.wake(Waiter(token), Reply::Value(old))
                    }
                }
            }
            while let Some(a) = self.sync.poll_action() {
                progressed = true;
                match a {
                    SAction::Send { to, msg } => self.send(ep, to, msg::SYNC, msg),
                    SAction::Wake { waiter, result } => self.wake(waiter, Reply::Sync(result)),
                    SAction::ProtocolError { error } => {
                        fatal(self.me, &format!("synchronization: {error}"))
                    }
                }
            }
            if !progressed {
                break;
            }
        }
    }

    fn send(&mut self, ep: &Endpoint, to: NodeId, ty: squall_net::MsgType, bytes: Vec<u8>) {
        let t = Instant::now();
        let r = ep.send(to, ty, bytes);
        self.times.messaging_ns += t.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            fatal(self.me, &format!("sending to {to}: {e}"));
        }
    }
}

/// End the node: something happened that leaves its memory in an unknown state. Never returns.
pub(crate) fn fatal(me: NodeId, what: &str) -> ! {
    eprintln!("squall: {me}: {what}; ending the job");
    std::process::exit(4)
}
