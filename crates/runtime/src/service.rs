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
use squall_core::{AllocInfo, Consistency, NodeId, PageId};
use squall_memory::{AddressSpace, GlobalPart, Heap};
use squall_net::Endpoint;
use squall_protocol::{Action as PAction, AtomicCall, Protocol, Router};
use squall_sync::{Action as SAction, Outcome, SyncCore, SyncError, Waiter};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The protocol router (every protocol's core) as the service thread holds it.
pub(crate) type BoxedProtocol = Box<Router<dyn Protocol + Send>>;

pub(crate) struct Service {
    pub me: NodeId,
    pub protocol: BoxedProtocol,
    pub sync: SyncCore,
    /// The heap of this node's arena (allocations under every policy).
    heap: Heap,
    /// The claims of the global part of the range: used on node 0 only, which decides every
    /// claim of the job (`node::alloc`).
    global: GlobalPart,
    /// Allocations being announced to every node (`Router::register_with`): by waiter token,
    /// the reply their caller gets once every node has recorded them.
    announcing: HashMap<u64, Reply>,
    pub space: Arc<AddressSpace>,
    waiters: HashMap<u64, Sender<Reply>>,
    /// Faults not yet served, by page, with the time each arrived (for data-stall time).
    pending_faults: HashMap<PageId, Vec<Instant>>,
    pub times: ServiceTimes,
    /// Faults resumed so far and `times.stall_ns`, readable without the service lock
    /// (`Node::data_stall`): a thread timing one fault must not wait for the lock, or park
    /// on it, around the fault.
    stall_shared: Arc<StallCounter>,
    pub(crate) threads: ThreadTable,
    /// Continuations of releases the runtime itself started (thread create/exit, atomics),
    /// by token; their tokens have [`RUNTIME_TOKEN`] set so they never meet the sync core's.
    releases: HashMap<u64, Continuation>,
    /// Ordered atomics in flight (by waiter token): their word's page and offset, and the
    /// call (its release info taken out), to put the word's new value into this node's copy.
    pub(crate) atomics: HashMap<u64, (PageId, usize, AtomicCall)>,
    next_release: u64,
    /// When the service thread spins for page replies (see `on_fault`).
    spin: SpinPolicy,
    /// This node has passed the job's last barrier and told every peer so (the departure
    /// round of `finalize`): a peer that has said goodbye since needs nothing more from it.
    pub(crate) departing: bool,
    /// The sharing profile recorder, when profiling is on (faults over time).
    pub profile: Option<Arc<crate::profile::Recorder>>,
}

/// The data stall as the service thread last left it (see [`Service::stall_counter`]).
#[derive(Debug, Default)]
pub(crate) struct StallCounter {
    /// Faults resumed so far (raised after `ns` took theirs).
    pub faults: AtomicU64,
    /// Sum over them of the time from the service thread taking each to resuming its thread.
    pub ns: AtomicU64,
}

/// Most faults a run of missed spins makes the service thread skip spinning for.
const MAX_SPIN_SKIP: u32 = 64;

/// When the service thread spins for the replies of page requests. A spin lasts `window`
/// after the latest fault that sent a request, or until no fault is pending. A spin that ran
/// out before the reply came (a slow or busy peer, more runnable threads than CPUs) makes
/// the next 2, 4, 8, ... (at most [`MAX_SPIN_SKIP`]) faults sleep instead; a reply within
/// its spin resets that. Pure logic: the caller passes the time.
#[derive(Debug)]
pub(crate) struct SpinPolicy {
    /// `None`: never spin (one CPU: spinning would only delay the peer that must answer).
    window: Option<Duration>,
    /// Deadline of the spin in progress.
    until: Option<Instant>,
    misses: u32,
    skip: u32,
}

impl SpinPolicy {
    pub fn new(window: Option<Duration>) -> Self {
        SpinPolicy {
            window,
            until: None,
            misses: 0,
            skip: 0,
        }
    }

    /// A fault sent a page request at `now`: the deadline to spin until, if spinning.
    pub fn request_out(&mut self, now: Instant) -> Option<Instant> {
        let w = self.window?;
        if self.until.is_none() && self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        self.until = Some(now + w);
        self.until
    }

    /// No fault is pending any more (at `now`). Returns true if a spin was on (the caller
    /// ends it).
    pub fn all_served(&mut self, now: Instant) -> bool {
        let Some(until) = self.until.take() else {
            return false;
        };
        if now <= until {
            self.misses = 0;
        } else {
            self.misses = (self.misses + 1).min(MAX_SPIN_SKIP.trailing_zeros());
            self.skip = 1 << self.misses;
        }
        true
    }
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
        heap: Heap,
        space: Arc<AddressSpace>,
        fetch_spin: Option<Duration>,
    ) -> Self {
        let global = GlobalPart::new(heap.layout(), space.base());
        Service {
            me,
            protocol,
            sync,
            heap,
            global,
            announcing: HashMap::new(),
            space,
            waiters: HashMap::new(),
            pending_faults: HashMap::new(),
            times: ServiceTimes::default(),
            stall_shared: Arc::default(),
            threads: ThreadTable::default(),
            releases: HashMap::new(),
            atomics: HashMap::new(),
            next_release: 0,
            spin: SpinPolicy::new(fetch_spin),
            departing: false,
            profile: None,
        }
    }

    /// The data stall so far (`times.stall_ns`), kept current for reading without the lock.
    pub fn stall_counter(&self) -> Arc<StallCounter> {
        self.stall_shared.clone()
    }

    /// The heap of this node's arena.
    pub fn heap(&mut self) -> &mut Heap {
        &mut self.heap
    }

    /// The allocator of the global part (node 0's decides for the job).
    pub fn global(&mut self) -> &mut GlobalPart {
        &mut self.global
    }

    /// Wake `waiter` with `reply` once the allocation announced with its token is known to
    /// every node (`PAction::Announced`).
    pub fn wake_when_announced(&mut self, waiter: Waiter, reply: Reply) {
        self.announcing.insert(waiter.0, reply);
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

    /// An application thread faulted on `page`. On the service thread (the usual case: it
    /// polls the userfaultfd), a fault that sent a page request makes the thread spin for the
    /// reply (`RuntimeConfig::fetch_spin`) and allocates the page's memory while the reply travels.
    pub fn on_fault(&mut self, ep: &Endpoint, page: PageId, write: bool) {
        self.pending_faults
            .entry(page)
            .or_default()
            .push(Instant::now());
        if let Some(p) = &self.profile {
            p.fault();
        }
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
        if !self.pending_faults.contains_key(&page) {
            return;
        }
        // Not served yet: its request is out (or waits its turn). Allocate the page's memory
        // now, so installing the reply takes no page fault (a failure here only means the
        // install allocates it).
        let _ = self.space.prepare_install(page);
        if ep.is_service_thread() {
            // The reply is due within microseconds: read it without sleeping (the fault
            // itself already cost this thread one wake-up).
            if let Some(until) = self.spin.request_out(Instant::now()) {
                ep.spin_until(until);
            }
        }
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

    /// Route every pending action of both cores until neither has any. The messages they
    /// send leave together at the end (one write per peer: a release's diffs, a barrier's
    /// fetches).
    pub fn drain(&mut self, ep: &Endpoint) {
        ep.batch(|| self.drain_actions(ep))
    }

    fn drain_actions(&mut self, ep: &Endpoint) {
        loop {
            let mut progressed = false;
            while let Some(a) = self.protocol.poll_action() {
                progressed = true;
                match a {
                    PAction::Send { to, msg } => self.send(ep, to, msg::PROTO, msg),
                    PAction::Resume { page } => {
                        // Threads whose fault was served without an access change (a
                        // duplicate fault) are still blocked in the kernel: wake them (a
                        // grant since their fault was read woke them already).
                        if let Err(e) = self.space.resume(page) {
                            fatal(self.me, &format!("waking threads blocked on {page}: {e}"));
                        }
                        if let Some(started) = self.pending_faults.remove(&page) {
                            let now = Instant::now();
                            let n = started.len() as u64;
                            for s in started {
                                self.times.stall_ns += now.duration_since(s).as_nanos() as u64;
                            }
                            let c = &self.stall_shared;
                            c.ns.store(self.times.stall_ns, Ordering::Relaxed);
                            c.faults.fetch_add(n, Ordering::Release);
                        }
                        if self.pending_faults.is_empty() && self.spin.all_served(Instant::now()) {
                            ep.stop_spin();
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
                    PAction::AtomicDone { token, old, infos } => {
                        // An acquiring atomic: the writes other nodes released through this
                        // location become visible here; then the word's new value goes into
                        // this node's copy of its page (which may be older), so a plain read
                        // after the atomic sees it.
                        for info in &infos {
                            self.protocol.apply_atomic_grant(info);
                        }
                        if let Some((page, offset, call)) = self.atomics.remove(&token) {
                            let value = call.result_bytes(old);
                            self.protocol.observe_atomic(page, offset, &value);
                        }
                        self.wake(Waiter(token), Reply::Value(old))
                    }
                    PAction::Announced { token } => {
                        if let Some(r) = self.announcing.remove(&token) {
                            self.wake(Waiter(token), r)
                        }
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
        match r {
            Ok(()) => {}
            // A peer leaves only after every node's done notice of the departure round, each
            // sent after everything its last barrier made it send (FIFO): whatever is sent to
            // it now (a `Dropped` batch, an ack, a late reply) is something it no longer
            // needs, and this node, past the last barrier, waits for nothing from it.
            Err(squall_net::NetError::PeerGone { .. }) if self.departing => {}
            Err(e) => fatal(self.me, &format!("sending to {to}: {e}")),
        }
    }
}

/// End the node, and the job with it (every peer is told the cause, see `crate::failure`):
/// something happened that leaves its memory in an unknown state. Never returns.
pub(crate) fn fatal(me: NodeId, what: &str) -> ! {
    crate::failure::end_job(crate::node::node_ref().map(|n| n.endpoint()), me, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_policy_backs_off_after_misses_and_resets_on_a_hit() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let w = Duration::from_millis(1);
        let mut p = SpinPolicy::new(Some(w));
        // A hit: the reply came within the spin.
        assert_eq!(p.request_out(ms(0)), Some(ms(0) + w));
        assert!(p.all_served(ms(0)));
        assert!(!p.all_served(ms(0)), "no spin on any more");
        // A second fault while spinning extends the spin.
        assert_eq!(p.request_out(ms(10)), Some(ms(10) + w));
        assert_eq!(p.request_out(ms(11)), Some(ms(11) + w));
        // A miss: the next 2 faults sleep, then spinning resumes.
        assert!(p.all_served(ms(13)));
        assert_eq!(p.request_out(ms(20)), None);
        assert_eq!(p.request_out(ms(21)), None);
        assert!(!p.all_served(ms(21)));
        assert!(p.request_out(ms(22)).is_some());
        // Misses in a row: 4, 8, ... skipped, up to the cap; then a hit resets the back-off.
        assert!(p.all_served(ms(30)));
        let mut skips = Vec::new();
        for round in 0..8 {
            let t = ms(100 * round + 100);
            let mut skipped = 0;
            while p.request_out(t).is_none() {
                skipped += 1;
            }
            skips.push(skipped);
            assert!(p.all_served(t + Duration::from_millis(50)), "a miss");
        }
        assert_eq!(skips, [4, 8, 16, 32, 64, 64, 64, 64]);
        let mut skipped = 0;
        while p.request_out(ms(2000)).is_none() {
            skipped += 1;
        }
        assert_eq!(skipped, 64);
        assert!(p.all_served(ms(2000)), "a hit");
        assert!(p.request_out(ms(3000)).is_some(), "no back-off after a hit");
        // One CPU: never.
        let mut one = SpinPolicy::new(None);
        assert_eq!(one.request_out(ms(0)), None);
        assert!(!one.all_served(ms(0)));
    }
}
