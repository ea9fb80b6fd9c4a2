//! The node handle: start-up (transport, address space, fault serving, protocol and sync
//! cores), the process-wide node, and the one way application threads reach the service state
//! (`Node::call`: take the service lock, advance the cores, park until the reply).
//!
//! The public API is split by concern, one module each: `alloc` (the shared heap and the
//! program's global data), `collective` (broadcast), `sync` (barriers, locks, conditions,
//! flags), `spawn` (threads), `atomics` (atomics and fences), `statistics`, `lifecycle`
//! (finalize), `handlers` (the runtime's message handlers) and `faults` (who serves faults).
//! Owns the composition of the layers; must not touch sockets or page protections itself.

use crate::config::{PlacementSpec, RuntimeConfig, ThreadPlacement};
use crate::error::{Result, SquallError};
use crate::profile::{NodeProfile, Recorder};
use crate::regions::RegionService;
use crate::service::{BoxedProtocol, Reply, Service};
use crate::stats::{NodeReport, NodeStats};
use crossbeam_channel::bounded;
use faults::{serve_faults, FaultServing};
use handlers::register_handlers;
use parking_lot::{Condvar, Mutex};
use squall_core::{HeapLayout, NodeId, PageId, Placement};
use squall_memory::{AddressSpace, Heap, Region, SpaceConfig};
use squall_net::{bootstrap, Endpoint, NetConfig};
use squall_protocol::{Hlrc, Policy, Protocol, ProtocolKind, Router, Sc, UserCore};
use squall_sync::{FastLocks, Outcome, SyncCore, Waiter};
use statistics::Live;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

mod alloc;
mod atomics;
mod collective;
pub use collective::decode as decode_collective;
mod faults;
mod handlers;
mod lifecycle;
mod profiling;
mod spawn;
mod statistics;
mod sync;

static NODE: OnceLock<Node> = OnceLock::new();
static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static WAITER: Cell<u64> = const { Cell::new(0) };
    /// The global id of a thread started by `spawn_on` (0 for other threads).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// This thread's waiter id (stable for the thread's life: locks are held by threads).
#[inline]
fn my_waiter() -> Waiter {
    WAITER.with(|w| {
        if w.get() == 0 {
            w.set(NEXT_WAITER.fetch_add(1, Ordering::Relaxed));
        }
        Waiter(w.get())
    })
}

/// A mailbox of values keyed by sequence number, filled by a handler and waited on by
/// application threads.
struct Mailbox<T> {
    items: Mutex<HashMap<u64, T>>,
    cv: Condvar,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            items: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
        }
    }
}

impl<T> Mailbox<T> {
    fn put(&self, key: u64, v: T) {
        self.items.lock().insert(key, v);
        self.cv.notify_all();
    }
    /// Wait for `key`'s value with no deadline: for values whose sender decides when (rank 0
    /// reaching a collective call). The wait still ends with the job when a node fails: a lost
    /// peer or a failure notice ends this process (`crate::failure`).
    fn take(&self, key: u64) -> T {
        let mut g = self.items.lock();
        loop {
            if let Some(v) = g.remove(&key) {
                return v;
            }
            self.cv.wait(&mut g);
        }
    }

    /// Wait for `key`'s value until `deadline`; `None` if it did not come.
    fn take_until(&self, key: u64, deadline: Instant) -> Option<T> {
        let mut g = self.items.lock();
        loop {
            if let Some(v) = g.remove(&key) {
                return Some(v);
            }
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                return g.remove(&key);
            }
        }
    }
}

/// A collective call's outcome as rank 0 sends it: the value, or the text of its failure.
type CollValue = std::result::Result<u64, String>;

/// The mailboxes the handlers fill.
struct Mailboxes {
    coll: Arc<Mailbox<CollValue>>,
    stats_in: Arc<Mailbox<NodeReport>>,
    profile_in: Arc<Mailbox<NodeProfile>>,
    done: Arc<Mailbox<()>>,
    regions: Arc<RegionService>,
}

struct Inner {
    /// CRL regions (`crate::regions`).
    regions: Arc<RegionService>,
    /// The node-local lock cache (shared with the sync core): the lock fast path.
    fast: Arc<FastLocks>,
    ep: Endpoint,
    space: Arc<AddressSpace>,
    svc: Arc<Mutex<Service>>,
    /// The service's data stall counter (`Service::stall_counter`).
    stall: Arc<crate::service::StallCounter>,
    cfg: RuntimeConfig,
    layout: HeapLayout,
    faults: Mutex<Option<FaultServing>>,
    coll_seq: AtomicU64,
    /// Rank 0's values of collective calls by sequence number, or its failure's text.
    coll: Arc<Mailbox<CollValue>>,
    stats_in: Arc<Mailbox<NodeReport>>,
    /// The other nodes' sharing profiles (rank 0, `SQUALL_PROFILE`).
    profile_in: Arc<Mailbox<NodeProfile>>,
    /// The sharing profile recorder (`SQUALL_PROFILE`; off: every call site one branch).
    prof: Arc<Recorder>,
    /// The departure notices (`msg::DONE`) received, by sender rank.
    done: Arc<Mailbox<()>>,
    started: Instant,
    sync_ns: AtomicU64,
    /// Run time of threads started here by `spawn_on` that have ended.
    thread_ns: AtomicU64,
    /// Threads started here by `spawn_on` that are running (for a stats mark while they run).
    live_threads: Live,
    /// Synchronization calls (and joins) in progress, counted in `sync_ns` only when they end.
    live_sync: Live,
    /// Snapshots taken at stats marks (`stats_mark`): the first two bound the timed phase.
    marks: Mutex<Vec<NodeStats>>,
    /// Whether this process's main thread runs application code (not on the serving ranks of
    /// a single-system-image program).
    main_is_app: AtomicBool,
    finalized: AtomicBool,
    /// Threads this node created (for thread ids) and the placement cursor.
    spawned: AtomicU64,
    /// Where `spawn_on(None, ..)` puts threads: an index into `ThreadPlacement::ALL`.
    thread_placement: AtomicU8,
}

/// One node of a Squall job. Cheap to clone; every clone is the same node.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

/// Start this node from the `SQUALL_*` environment (what `squall run` sets), once per process;
/// later calls return the same node.
pub fn init() -> Result<Node> {
    if let Some(n) = NODE.get() {
        return Ok(n.clone());
    }
    Node::start(NetConfig::from_env()?, RuntimeConfig::from_env()?)
}

/// Start this node for a single-system-image program (the pthreads layer): rank 0 returns and
/// runs `main`; every other rank serves thread creation and memory until rank 0 finalizes,
/// then exits the process with status 0 (or 1 if its end failed). Never returns on those ranks.
pub fn init_ssi() -> Result<Node> {
    init_ssi_with_regions(&[])
}

/// [`init_ssi`] for a program whose global data `regions` every node shares: every node
/// adopts them ([`Node::adopt_regions`]) before rank 0 runs `main` and before any thread
/// exists.
pub fn init_ssi_with_regions(regions: &[Region]) -> Result<Node> {
    let node = init()?;
    node.adopt_regions(regions)?;
    if node.rank() != NodeId(0) {
        let code = match node.finalize() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("squall: {}: {e}", node.rank());
                1
            }
        };
        std::process::exit(code);
    }
    Ok(node)
}

/// The node started by [`init`].
pub fn node() -> Result<Node> {
    NODE.get().cloned().ok_or(SquallError::NotInitialised)
}

/// The node started by [`init`], borrowed for the whole process: no reference count is
/// touched (what hot paths such as the pthreads layer's mutexes use). `None` before `init`.
#[inline]
pub fn node_ref() -> Option<&'static Node> {
    NODE.get()
}

impl Node {
    /// Whether this node records the sharing profile (`SQUALL_PROFILE`).
    #[inline]
    pub fn profiling(&self) -> bool {
        self.inner.prof.on()
    }

    /// Start a node with explicit settings (tests and embedders; `init` reads the environment).
    pub fn start(net: NetConfig, cfg: RuntimeConfig) -> Result<Node> {
        let thread_placement = cfg.thread_placement;
        let me = net.rank;
        let nodes = net.size;
        let space = AddressSpace::reserve(&SpaceConfig::from_env()?)?;
        // Whole arenas per node: round the page count down.
        let unit = u64::from(nodes.max(1));
        let layout = HeapLayout {
            nodes,
            total_pages: space.total_pages() / unit * unit,
        };
        let heap = Heap::new(layout, me, space.base());
        let mut hlrc = Hlrc::new(space.clone(), me, layout);
        hlrc.set_barrier_fetch(cfg.barrier_fetch);
        hlrc.set_push_updates(cfg.push_updates);
        hlrc.set_watch_shared(cfg.watch_shared);
        let mut cores: Vec<Box<dyn Protocol + Send>> =
            vec![Box::new(hlrc), Box::new(Sc::new(space.clone(), me, layout))];
        // User protocols after the built-in cores, as `ProtocolKind::User(i)`.
        for (_, make) in crate::protocol::take_registered() {
            cores.push(Box::new(UserCore::new(
                space.clone(),
                me,
                layout,
                make(me, layout),
            )));
        }
        let default = Policy::new(cfg.protocol, cfg.push_updates, Placement::FirstTouch);
        let mut protocol: BoxedProtocol = Box::new(
            Router::new(me, layout, default.coherence(), cores)
                .map_err(|e| SquallError::Config(e.to_string()))?,
        );
        let started = Instant::now();
        let prof = Arc::new(Recorder::new(cfg.profile, started));
        if cfg.profile {
            protocol.set_profiling();
        }
        let mut sync = SyncCore::new(me, nodes);
        sync.set_barrier_eager_cap((!cfg.barrier_eager).then_some(0));
        sync.set_lock_cache(cfg.lock_cache);
        sync.set_lock_cohort(cfg.lock_cohort);
        let fast = sync.fast_locks();
        let svc = Arc::new(Mutex::new(Service::new(
            me,
            protocol,
            sync,
            heap,
            space.clone(),
            cfg.fetch_spin,
        )));
        if prof.on() {
            svc.lock().profile = Some(prof.clone());
        }
        let coll: Arc<Mailbox<CollValue>> = Arc::default();
        let stats_in: Arc<Mailbox<NodeReport>> = Arc::default();
        let profile_in: Arc<Mailbox<NodeProfile>> = Arc::default();
        let done: Arc<Mailbox<()>> = Arc::default();
        let regions = Arc::new(RegionService::new(me, nodes));
        let boxes = Mailboxes {
            coll: coll.clone(),
            stats_in: stats_in.clone(),
            profile_in: profile_in.clone(),
            done: done.clone(),
            regions: regions.clone(),
        };
        let s = svc.clone();
        let ep = bootstrap::start_with(net, move |ep| register_handlers(ep, s, boxes))?;
        let node = Node {
            inner: Arc::new(Inner {
                regions,
                fast,
                ep: ep.clone(),
                space: space.clone(),
                stall: svc.lock().stall_counter(),
                svc: svc.clone(),
                cfg,
                layout,
                faults: Mutex::new(None),
                coll_seq: AtomicU64::new(0),
                coll,
                stats_in,
                profile_in,
                prof: prof.clone(),
                done,
                started,
                sync_ns: AtomicU64::new(0),
                thread_ns: AtomicU64::new(0),
                live_threads: Live::default(),
                live_sync: Live::default(),
                marks: Mutex::new(Vec::new()),
                main_is_app: AtomicBool::new(true),
                finalized: AtomicBool::new(false),
                spawned: AtomicU64::new(0),
                thread_placement: AtomicU8::new(placement_index(thread_placement)),
            }),
        };
        // Handlers that start threads need the node; a process has one.
        let _ = NODE.set(node.clone());
        *node.inner.faults.lock() = Some(serve_faults(&ep, &space, &svc)?);
        // Everyone's fault serving and handlers are up before anyone touches shared memory.
        node.barrier()?;
        Ok(node)
    }

    /// This node's rank.
    pub fn rank(&self) -> NodeId {
        self.inner.ep.rank()
    }

    /// Number of nodes in the job.
    pub fn size(&self) -> u16 {
        self.inner.ep.size()
    }

    /// The node's CRL region service (`crate::regions`).
    pub(crate) fn region_service(&self) -> &RegionService {
        &self.inner.regions
    }

    /// The transport endpoint (for explicit messaging beside shared memory).
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.ep
    }

    /// The protocol allocations follow unless they name another (`SQUALL_PROTOCOL`).
    pub fn protocol(&self) -> ProtocolKind {
        self.inner.cfg.protocol
    }

    /// The policy of allocations that do not name one: `SQUALL_PROTOCOL`, `SQUALL_UNIT_PAGES`,
    /// updates if `SQUALL_PUSH_UPDATES` (under `hlrc`), `SQUALL_PLACEMENT`.
    pub fn default_policy(&self) -> Policy {
        Policy {
            unit_pages: self.inner.cfg.unit_pages,
            ..Policy::new(
                self.inner.cfg.protocol,
                self.inner.cfg.push_updates,
                self.default_placement(),
            )
        }
    }

    /// The default policy under `protocol` (updates as the default says, under `hlrc`).
    pub fn policy(&self, protocol: ProtocolKind) -> Policy {
        Policy::new(
            protocol,
            self.inner.cfg.push_updates,
            self.default_placement(),
        )
    }

    /// The global address range `(base, size)`: the same on every node.
    #[inline]
    pub fn range(&self) -> (usize, usize) {
        (self.inner.space.base(), self.inner.space.size())
    }

    /// The home placement of allocations that do not name one.
    pub fn default_placement(&self) -> Placement {
        self.inner.cfg.placement.resolve(self.rank())
    }

    /// Run `f` on the service state with this thread's waiter, then wait for its reply. The
    /// calling thread takes the service lock and advances the cores itself (no thread hop);
    /// replies that need other nodes arrive later through the service thread's handlers.
    fn call(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Service, &Endpoint, Waiter),
    ) -> Result<Reply> {
        if self.inner.ep.is_service_thread() {
            return Err(SquallError::OnServiceThread(what));
        }
        let (tx, rx) = bounded(1);
        let w = my_waiter();
        {
            let mut s = self.inner.svc.lock();
            s.park(w, tx);
            f(&mut s, &self.inner.ep, w);
            s.drain(&self.inner.ep);
        }
        // The service lock is released here: the wait below never holds it while it blocks.
        self.wait_woken(&rx)
    }

    /// Runs `f` timed as sync time (counted while it waits too, for a stats mark meanwhile).
    fn timed_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        let at = self.now_ns();
        self.inner.live_sync.begin(at);
        let r = f();
        self.inner.live_sync.end(at);
        self.inner
            .sync_ns
            .fetch_add(self.now_ns().saturating_sub(at), Ordering::Relaxed);
        r
    }

    /// A synchronization call: time it as sync time and map its outcome.
    fn sync_call(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Service, &Endpoint, Waiter),
    ) -> Result<Outcome> {
        match self.timed_sync(|| self.call(what, f))? {
            Reply::Sync(r) => Ok(r?),
            Reply::Value(_) => Ok(Outcome::Done),
            Reply::Failed(e) => Err(e),
        }
    }

    fn page_of(&self, addr: usize) -> Result<PageId> {
        self.inner.space.page_of(addr).ok_or(SquallError::NotSquall(
            addr,
            self.inner.space.base(),
            self.inner.space.base() + self.inner.space.size(),
        ))
    }
}

/// Convenience: the placement spec parser for command lines.
pub fn parse_placement(s: &str, me: NodeId) -> Result<Placement> {
    PlacementSpec::parse(s).map(|p| p.resolve(me))
}

/// `p`'s index in `ThreadPlacement::ALL` (how `Inner::thread_placement` stores it).
fn placement_index(p: ThreadPlacement) -> u8 {
    ThreadPlacement::ALL
        .iter()
        .position(|q| *q == p)
        .map_or(0, |i| i as u8)
}
