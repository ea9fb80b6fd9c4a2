//! The node handle and the public Rust API: start-up (transport, address space, fault thread,
//! protocol and sync cores), allocation, synchronization, collectives, statistics, shutdown.
//!
//! Application threads call these methods; each posts a closure to the service thread and
//! waits for its reply, so no protocol state is ever touched off the service thread. Owns the
//! composition of the layers; must not touch sockets or page protections itself.
use crate::array::{Pod, SharedArray};
use crate::config::{PlacementSpec, RuntimeConfig, ThreadPlacement};
use crate::error::{Result, SquallError};
use crate::fnptr;
use crate::msg;
use crate::order::{self, MemOrder};
use crate::service::{fatal, BoxedProtocol, Reply, Service};
use crate::stats::{self, Breakdown, NodeReport, NodeStats};
use crate::threads::{self, Joiner, SpawnMsg, ThreadFn};
use crossbeam_channel::bounded;
use parking_lot::{Condvar, Mutex};
use serde_json::{Map, Value};
use squall_core::{HeapLayout, LockId, NodeId, PageId, Placement, ThreadId};
use squall_memory::{AddressSpace, FaultThread, Heap, Region, SpaceConfig};
use squall_net::endpoint::SourceId;
use squall_net::{bootstrap, Endpoint, NetConfig};
use squall_protocol::{ArenaSplit, AtomicCall, AtomicOp, Mixed, ProtocolKind};
use squall_sync::{BarrierCount, BarrierId, CondId, FastLocks, FlagId, Outcome, SyncCore, Waiter};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

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
    fn take(&self, key: u64) -> T {
        let mut g = self.items.lock();
        loop {
            if let Some(v) = g.remove(&key) {
                return v;
            }
            self.cv.wait(&mut g);
        }
    }
}

struct Inner {
    /// The node-local lock cache (shared with the sync core): the lock fast path.
    fast: Arc<FastLocks>,
    ep: Endpoint,
    space: Arc<AddressSpace>,
    svc: Arc<Mutex<Service>>,
    cfg: RuntimeConfig,
    layout: HeapLayout,
    faults: Mutex<Option<FaultServing>>,
    coll_seq: AtomicU64,
    coll: Arc<Mailbox<u64>>,
    stats_in: Arc<Mailbox<NodeReport>>,
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

/// Timed activities in progress (running threads, waiting sync calls): how many, and the sum of
/// their start times in ns since the node started, so their time so far is `count * now - sum`
/// (read at a stats mark; a begin or end racing with the read skews it by that one activity).
#[derive(Default)]
struct Live {
    count: AtomicU64,
    start_sum: AtomicU64,
}

impl Live {
    fn begin(&self, at: u64) {
        self.start_sum.fetch_add(at, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn end(&self, at: u64) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.start_sum.fetch_sub(at, Ordering::Relaxed);
    }

    fn so_far(&self, now: u64) -> u64 {
        let n = self.count.load(Ordering::Relaxed);
        let sum = self.start_sum.load(Ordering::Relaxed);
        n.saturating_mul(now).saturating_sub(sum)
    }
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
    /// Start a node with explicit settings (tests and embedders; `init` reads the environment).
    pub fn start(net: NetConfig, cfg: RuntimeConfig) -> Result<Node> {
        let thread_placement = cfg.thread_placement;
        let me = net.rank;
        let nodes = net.size;
        let space = AddressSpace::reserve(&SpaceConfig::from_env()?)?;
        // Whole half arenas per node (see `ArenaSplit`): round the page count down.
        let unit = 2 * u64::from(nodes.max(1));
        let layout = HeapLayout {
            nodes,
            total_pages: space.total_pages() / unit * unit,
        };
        let split = ArenaSplit::new(layout);
        let heaps = [
            Heap::new(
                split.halves(),
                ArenaSplit::half(me, ProtocolKind::Hlrc),
                space.base(),
            ),
            Heap::new(
                split.halves(),
                ArenaSplit::half(me, ProtocolKind::Sc),
                space.base(),
            ),
        ];
        let mut mixed = Mixed::new(space.clone(), me, layout);
        let hlrc = mixed.hlrc_mut();
        hlrc.set_barrier_fetch(cfg.barrier_fetch);
        hlrc.set_push_updates(cfg.push_updates);
        let protocol: BoxedProtocol = Box::new(mixed);
        let mut sync = SyncCore::new(me, nodes);
        sync.set_barrier_eager_cap((!cfg.barrier_eager).then_some(0));
        sync.set_lock_cache(cfg.lock_cache);
        let fast = sync.fast_locks();
        let svc = Arc::new(Mutex::new(Service::new(
            me,
            protocol,
            sync,
            heaps,
            split,
            space.clone(),
            cfg.fetch_spin,
        )));
        let coll: Arc<Mailbox<u64>> = Arc::default();
        let stats_in: Arc<Mailbox<NodeReport>> = Arc::default();
        let (s, c, st) = (svc.clone(), coll.clone(), stats_in.clone());
        let ep = bootstrap::start_with(net, move |ep| register_handlers(ep, s, c, st))?;
        let node = Node {
            inner: Arc::new(Inner {
                fast,
                ep: ep.clone(),
                space: space.clone(),
                svc: svc.clone(),
                cfg,
                layout,
                faults: Mutex::new(None),
                coll_seq: AtomicU64::new(0),
                coll,
                stats_in,
                started: Instant::now(),
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

    /// The transport endpoint (for explicit messaging beside shared memory).
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.ep
    }

    /// The protocol this run uses.
    pub fn protocol(&self) -> ProtocolKind {
        self.inner.cfg.protocol
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

    /// Collective, at start-up (before any application thread touches the range and before
    /// any thread creation): make the program's global data `regions` (page aligned, whole
    /// pages: under the pthreads layer its `squall_data` and `squall_bss` sections) coherent
    /// shared memory, with node 0 as the home of every page (CableS' GLOBAL: the primary copy
    /// is on the first node, which holds the initial values). Every node adopts the regions
    /// into its address space; their pages are numbered at the top of node 0's `hlrc` half
    /// arena (node 0's heap gives them up) and follow `hlrc`. Zero pages cost no memory until
    /// touched ([`squall_memory::Contents`]). Rank 0 broadcasts its regions: a node where they
    /// lie elsewhere fails with an error (address randomisation must be off: see
    /// `squall_memory::fixed_layout`). No regions on rank 0 does nothing. Returns the first
    /// page and the page count.
    pub fn adopt_regions(&self, regions: &[Region]) -> Result<(PageId, u64)> {
        let me = self.rank();
        let zero = me == NodeId(0);
        let count = self.broadcast(zero.then_some(regions.len() as u64))? as usize;
        let mut same = count == regions.len();
        for i in 0..count {
            let mine = regions
                .get(i)
                .map_or((0, 0), |r| (r.start as u64, r.len as u64));
            let s0 = self.broadcast(zero.then_some(mine.0))?;
            let l0 = self.broadcast(zero.then_some(mine.1))?;
            same &= (s0, l0) == mine;
        }
        if !same {
            let here: Vec<String> = regions
                .iter()
                .map(|r| format!("{:#x}+{:#x}", r.start, r.len))
                .collect();
            return Err(SquallError::Config(format!(
                "{me}: the program's shared data sections are at [{}] here but elsewhere on \
                 node 0: every node must run the same binary with address randomisation off \
                 (the pthreads layer re-executes the program with personality \
                 ADDR_NO_RANDOMIZE; if that is refused, run under `setarch -R` or set \
                 kernel.randomize_va_space=0)",
                here.join(", ")
            )));
        }
        if regions.is_empty() {
            return Ok((PageId(0), 0));
        }
        let len: usize = regions.iter().map(|r| r.len).sum();
        let pages = (len / squall_core::PAGE_SIZE) as u64;
        let split = ArenaSplit::new(self.inner.layout);
        let first = split.halves().adopted_first(pages).ok_or_else(|| {
            SquallError::Config(format!(
                "the program's shared data ({len} bytes) is larger than node 0's arena"
            ))
        })?;
        if zero {
            let mut s = self.inner.svc.lock();
            let got = s
                .heap_for(ProtocolKind::Hlrc)
                .reserve_top(pages)
                .map_err(|e| SquallError::Alloc {
                    node: me,
                    source: e,
                })?;
            if got != first {
                return Err(SquallError::Config(format!(
                    "node 0's heap reserved {got} for the program's shared data, expected {first}"
                )));
            }
        }
        self.inner.space.adopt_regions(regions, first)?;
        if zero {
            let mut s = self.inner.svc.lock();
            s.register(squall_core::AllocInfo {
                first,
                pages,
                placement: Placement::Node(NodeId(0)),
            });
            s.drain(&self.inner.ep);
        }
        // Every node has adopted (and node 0 registered) before anyone touches the regions.
        self.barrier()?;
        Ok((first, pages))
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
        rx.recv().map_err(|_| SquallError::ShuttingDown)
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

    // ----- allocation -------------------------------------------------------------------

    /// Allocate `size` bytes of shared memory aligned to `align` (0: 16) with this placement
    /// for its pages, kept coherent by the run's protocol (`SQUALL_PROTOCOL`). Any thread, any
    /// node, any time.
    pub fn alloc_with(&self, size: usize, align: usize, placement: Placement) -> Result<*mut u8> {
        self.alloc_in(size, align, placement, self.inner.cfg.protocol)
    }

    /// Allocate as [`Node::alloc_with`], kept coherent by `protocol` whatever the run's default
    /// (e.g. `sc` for data a program reads and writes without synchronization).
    pub fn alloc_in(
        &self,
        size: usize,
        align: usize,
        placement: Placement,
        protocol: ProtocolKind,
    ) -> Result<*mut u8> {
        self.alloc_fresh(size, align, placement, protocol)
            .map(|(p, _)| p)
    }

    /// [`Node::alloc_in`], also telling whether the memory was never handed out before (and so
    /// is zero on every node without anyone writing it).
    fn alloc_fresh(
        &self,
        size: usize,
        align: usize,
        placement: Placement,
        protocol: ProtocolKind,
    ) -> Result<(*mut u8, bool)> {
        let me = self.rank();
        let r = self.call("alloc", move |s, _, w| {
            match s.heap_for(protocol).alloc(size, align, placement) {
                Ok(a) => {
                    if let Some(info) = a.new_pages {
                        s.register(info);
                    }
                    // Addresses are at least 16-aligned: bit 0 carries `fresh`.
                    s.wake(w, Reply::Value(a.addr as u64 | u64::from(a.fresh)))
                }
                Err(e) => s.wake(
                    w,
                    Reply::Failed(SquallError::Alloc {
                        node: me,
                        source: e,
                    }),
                ),
            }
        })?;
        match r {
            Reply::Value(a) => Ok(((a & !1) as usize as *mut u8, a & 1 == 1)),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to alloc".into())),
        }
    }

    /// Allocate with the default placement (`SQUALL_PLACEMENT`, first touch unless set).
    pub fn alloc(&self, size: usize) -> Result<*mut u8> {
        self.alloc_with(size, 0, self.default_placement())
    }

    /// Allocate zeroed memory.
    pub fn calloc(&self, count: usize, size: usize) -> Result<*mut u8> {
        let bytes = count
            .checked_mul(size)
            .ok_or_else(|| SquallError::Config(format!("calloc({count}, {size}) overflows")))?;
        let (p, fresh) =
            self.alloc_fresh(bytes, 0, self.default_placement(), self.inner.cfg.protocol)?;
        // Memory never handed out is zero on every node: writing it would make this node the
        // first toucher (and home) of every page of it. A reused chunk is not zero: zero it
        // through the application view (an ordinary write, coherent like any other).
        if !fresh {
            // SAFETY: `p` was just allocated with at least `bytes` usable bytes.
            unsafe { std::ptr::write_bytes(p, 0, bytes) };
        }
        Ok(p)
    }

    /// Free memory from any `alloc` on any node.
    pub fn free(&self, ptr: *mut u8) -> Result<()> {
        let addr = ptr as usize;
        let page = self.page_of(addr)?;
        let manager = self.inner.layout.manager_of(page);
        if manager == self.rank() {
            match self.call("free", move |s, _, w| {
                let r = free_local(s, addr);
                s.wake(w, r)
            })? {
                Reply::Failed(e) => Err(e),
                _ => Ok(()),
            }
        } else {
            let mut p = vec![0u8];
            p.extend_from_slice(&(addr as u64).to_le_bytes());
            let r = self.inner.ep.request(manager, msg::HEAP, p)?;
            if r.is_empty() {
                Ok(())
            } else {
                Err(SquallError::Remote(
                    String::from_utf8_lossy(&r).into_owned(),
                ))
            }
        }
    }

    /// Usable size of the allocation at `ptr`.
    pub fn usable_size(&self, ptr: *mut u8) -> Result<usize> {
        let addr = ptr as usize;
        let page = self.page_of(addr)?;
        let manager = self.inner.layout.manager_of(page);
        let bad = || {
            SquallError::Remote(format!(
                "{addr:#x} is not the start of a live squall allocation"
            ))
        };
        if manager == self.rank() {
            match self.call("usable_size", move |s, _, w| {
                let v = s
                    .heap_of(addr)
                    .size_of(addr)
                    .map(|n| n as u64)
                    .unwrap_or(u64::MAX);
                s.wake(w, Reply::Value(v))
            })? {
                Reply::Value(v) if v != u64::MAX => Ok(v as usize),
                _ => Err(bad()),
            }
        } else {
            let mut p = vec![1u8];
            p.extend_from_slice(&(addr as u64).to_le_bytes());
            let r = self.inner.ep.request(manager, msg::HEAP, p)?;
            let b: [u8; 8] = r.as_ref().try_into().map_err(|_| bad())?;
            match u64::from_le_bytes(b) {
                u64::MAX => Err(bad()),
                v => Ok(v as usize),
            }
        }
    }

    /// Resize an allocation (the contents up to the smaller size are kept).
    pub fn realloc(&self, ptr: *mut u8, size: usize) -> Result<*mut u8> {
        if ptr.is_null() {
            return self.alloc(size);
        }
        let old = self.usable_size(ptr)?;
        if size <= old {
            return Ok(ptr);
        }
        let src = ptr as usize;
        let new = self.alloc(size)?;
        // SAFETY: `usable_size` just confirmed `src` is the start of a live squall allocation of
        // `old` bytes; `new` is a fresh one of at least `size > old` bytes; they are disjoint.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, new, old) };
        self.free(src as *mut u8)?;
        Ok(new)
    }

    /// Collective: every node calls this in the same order; rank 0 allocates and every node
    /// gets the same address.
    pub fn alloc_collective(&self, size: usize, placement: Placement) -> Result<*mut u8> {
        let v = if self.rank() == NodeId(0) {
            Some(self.alloc_with(size, 0, placement)? as u64)
        } else {
            None
        };
        Ok(self.broadcast(v)? as usize as *mut u8)
    }

    /// Allocate a shared array of `len` elements (zero if fresh; see [`Node::calloc`]).
    pub fn alloc_array<T: Pod>(&self, len: usize, placement: Placement) -> Result<SharedArray<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            SquallError::Config(format!(
                "an array of {len} elements overflows the address space"
            ))
        })?;
        let p = self.alloc_with(bytes.max(1), std::mem::align_of::<T>().max(16), placement)?;
        // SAFETY: a live allocation of `bytes` bytes aligned for T.
        Ok(unsafe { SharedArray::from_raw(p as usize, len) })
    }

    /// Collective [`Node::alloc_array`]: rank 0 allocates, every node gets the same array.
    pub fn alloc_array_collective<T: Pod>(
        &self,
        len: usize,
        placement: Placement,
    ) -> Result<SharedArray<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            SquallError::Config(format!(
                "an array of {len} elements overflows the address space"
            ))
        })?;
        let p = self.alloc_collective(bytes.max(1), placement)?;
        // SAFETY: rank 0 allocated `bytes` bytes (16-aligned, enough for every Pod type).
        Ok(unsafe { SharedArray::from_raw(p as usize, len) })
    }

    /// Collective: rank 0 passes `Some(value)`, everyone gets it back. All nodes must make the
    /// same sequence of collective calls.
    pub fn broadcast(&self, value: Option<u64>) -> Result<u64> {
        let seq = self.inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        if self.rank() == NodeId(0) {
            let v = value.ok_or_else(|| {
                SquallError::Config("broadcast: rank 0 must supply the value".into())
            })?;
            let mut p = seq.to_le_bytes().to_vec();
            p.extend_from_slice(&v.to_le_bytes());
            for n in 1..self.size() {
                self.inner.ep.send(NodeId(n), msg::COLLECTIVE, p.clone())?;
            }
            Ok(v)
        } else {
            Ok(self.inner.coll.take(seq))
        }
    }

    // ----- synchronization --------------------------------------------------------------

    /// The barriers of `finalize`: not application synchronization, so not timed as such.
    fn end_barrier(&self) -> Result<()> {
        let r = self.call("finalize", move |s, _, w| {
            s.sync.barrier(
                &mut *s.protocol,
                BarrierId(0),
                w,
                BarrierCount::PerNode { local: 1 },
            )
        })?;
        match r {
            Reply::Sync(r) => r.map(|_| ()).map_err(Into::into),
            Reply::Failed(e) => Err(e),
            Reply::Value(_) => Ok(()),
        }
    }

    /// Barrier of every node, with one participating thread per node.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_with(BarrierId(0), BarrierCount::PerNode { local: 1 })
            .map(|_| ())
    }

    /// A barrier with an explicit id and participant count. Returns `true` in exactly one
    /// thread of the job per episode.
    pub fn barrier_with(&self, id: BarrierId, count: BarrierCount) -> Result<bool> {
        let o = self.sync_call("barrier", move |s, _, w| {
            s.sync.barrier(&mut *s.protocol, id, w, count)
        })?;
        Ok(o == Outcome::Serial)
    }

    /// Acquire a global lock (FIFO across nodes). When the lock's token is idle on this node
    /// (the last holder was a thread of this node and no other node asked for it since), the
    /// lock cache takes it with one compare-and-swap, without the service lock (counted in
    /// `lock_acquires_local_fast`, not timed as sync time).
    #[inline]
    pub fn lock(&self, lock: LockId) -> Result<()> {
        if self.lock_fast(lock) {
            return Ok(());
        }
        self.lock_slow(lock)
    }

    /// Only the fast path of [`Node::lock`]: take `lock` if its token is idle in this node's
    /// lock cache (one compare-and-swap, no service lock, no allocation, never blocks);
    /// `false`: call [`Node::lock`].
    #[inline]
    pub fn lock_fast(&self, lock: LockId) -> bool {
        self.inner.fast.try_lock(lock.0, my_waiter().0)
    }

    /// Only the fast path of [`Node::unlock`]: put `lock`, taken through the lock cache by
    /// this thread, back when nobody waits for it; `false`: call [`Node::unlock`].
    #[inline]
    pub fn unlock_fast(&self, lock: LockId) -> bool {
        self.inner.fast.try_unlock(lock.0, my_waiter().0)
    }

    #[cold]
    fn lock_slow(&self, lock: LockId) -> Result<()> {
        self.sync_call("lock", move |s, _, w| {
            s.sync.lock(&mut *s.protocol, lock, w)
        })
        .map(|_| ())
    }

    /// Try to acquire a global lock without waiting; `true` if it is now held.
    pub fn trylock(&self, lock: LockId) -> Result<bool> {
        if self.lock_fast(lock) {
            return Ok(true);
        }
        let o = self.sync_call("trylock", move |s, _, w| {
            s.sync.trylock(&mut *s.protocol, lock, w)
        })?;
        Ok(o != Outcome::Busy)
    }

    /// Release a global lock held by this thread: back into the lock cache with one
    /// compare-and-swap when it was taken there and no other node or thread waits for it.
    #[inline]
    pub fn unlock(&self, lock: LockId) -> Result<()> {
        if self.unlock_fast(lock) {
            return Ok(());
        }
        self.unlock_slow(lock)
    }

    #[cold]
    fn unlock_slow(&self, lock: LockId) -> Result<()> {
        self.sync_call("unlock", move |s, _, w| {
            s.sync.unlock(&mut *s.protocol, lock, w)
        })
        .map(|_| ())
    }

    /// Check that `lock` may be destroyed: no thread of this node holds it or waits for it
    /// (misuse is an error naming the lock).
    pub fn lock_destroy(&self, lock: LockId) -> Result<()> {
        self.sync_call("lock_destroy", move |s, _, w| s.sync.destroy_lock(lock, w))
            .map(|_| ())
    }

    /// Check that `cond` may be destroyed: no thread of this node waits on it.
    pub fn cond_destroy(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_destroy", move |s, _, w| s.sync.destroy_cond(cond, w))
            .map(|_| ())
    }

    /// Wait on a condition variable bound to `lock` (held by this thread); Mesa semantics.
    pub fn cond_wait(&self, cond: CondId, lock: LockId) -> Result<()> {
        self.sync_call("cond_wait", move |s, _, w| {
            s.sync.cond_wait(&mut *s.protocol, cond, lock, w)
        })
        .map(|_| ())
    }

    /// Wake one waiter of `cond`.
    pub fn cond_signal(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_signal", move |s, _, w| {
            s.sync.cond_signal(&mut *s.protocol, cond, w)
        })
        .map(|_| ())
    }

    /// Wake every waiter of `cond`.
    pub fn cond_broadcast(&self, cond: CondId) -> Result<()> {
        self.sync_call("cond_broadcast", move |s, _, w| {
            s.sync.cond_broadcast(&mut *s.protocol, cond, w)
        })
        .map(|_| ())
    }

    /// Set a flag (a release); wakes every waiter.
    pub fn flag_set(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_set", move |s, _, w| {
            s.sync.flag_set(&mut *s.protocol, flag, w)
        })
        .map(|_| ())
    }

    /// Wait until a flag is set (an acquire), without spinning on shared memory.
    pub fn flag_wait(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_wait", move |s, _, w| {
            s.sync.flag_wait(&mut *s.protocol, flag, w)
        })
        .map(|_| ())
    }

    /// Clear a flag.
    pub fn flag_clear(&self, flag: FlagId) -> Result<()> {
        self.sync_call("flag_clear", move |s, _, w| s.sync.flag_clear(flag, w))
            .map(|_| ())
    }

    // ----- threads --------------------------------------------------------------------------

    /// Where threads created without a named node run (see [`ThreadPlacement`]; from
    /// `SQUALL_THREAD_PLACEMENT`, `even` by default).
    pub fn thread_placement(&self) -> ThreadPlacement {
        let i = self.inner.thread_placement.load(Ordering::Relaxed);
        ThreadPlacement::ALL[usize::from(i) % ThreadPlacement::ALL.len()]
    }

    /// Choose where this node puts the threads it creates from now on without naming a node
    /// (the k of [`ThreadPlacement`] keeps counting every thread this node created).
    pub fn set_thread_placement(&self, p: ThreadPlacement) {
        self.inner
            .thread_placement
            .store(placement_index(p), Ordering::Relaxed);
    }

    /// Start `f(arg)` as a thread on `on` (or, for `None`, the node [`Node::thread_placement`]
    /// picks: by default the k-th thread this node creates runs on node (rank + k + 1) mod N,
    /// so the creating thread and its threads spread evenly). Creating a thread is
    /// a release: everything this thread wrote before is visible to the new thread. `arg` is
    /// passed as is: pointers into Squall memory are valid everywhere, other pointers only on
    /// this node.
    pub fn spawn_on(&self, on: Option<NodeId>, f: ThreadFn, arg: *mut c_void) -> Result<ThreadId> {
        self.spawn_with(on, f, arg, 0)
    }

    /// [`Node::spawn_on`] asking for a stack of `stack` bytes (0: the default), which the
    /// thread runner of the node where the thread runs honours
    /// ([`crate::set_thread_runner`]).
    pub fn spawn_with(
        &self,
        on: Option<NodeId>,
        f: ThreadFn,
        arg: *mut c_void,
        stack: usize,
    ) -> Result<ThreadId> {
        let n = self.inner.spawned.fetch_add(1, Ordering::Relaxed);
        let target =
            on.unwrap_or_else(|| self.thread_placement().target(self.rank(), n, self.size()));
        if target.0 >= self.size() {
            return Err(SquallError::Config(format!(
                "cannot create a thread on {target}: the job has {} nodes",
                self.size()
            )));
        }
        let fref = fnptr::encode(f as usize).ok_or_else(|| {
            SquallError::Config(format!(
                "thread function at {:#x} is not in any loaded module",
                f as usize
            ))
        })?;
        // Counted from 1: no thread id is 0 (a pthread_t of 0 often means "no thread"), and 0
        // is what CURRENT holds in threads spawn_on did not start.
        let tid = threads::make_tid(target, self.rank(), (n as u32).wrapping_add(1));
        let arg = arg as usize as u64;
        let r = self.call("spawn", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, ep| {
                    let info = s.protocol.grant_info(&[]);
                    let sp = SpawnMsg {
                        tid,
                        f: fref,
                        arg,
                        info,
                        stack: stack as u64,
                    };
                    if target == s.me {
                        let r = start_thread(s, sp);
                        let reply = match r {
                            Ok(()) => Reply::Value(0),
                            Err(why) => Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why,
                            }),
                        };
                        s.wake(w, reply);
                        return;
                    }
                    let svc_me = s.me;
                    let sent = ep.request_async(target, msg::SPAWN, sp.encode(), move |ep, r| {
                        let reply = match r {
                            Ok(m) => match threads::decode_answer(&m.payload) {
                                Ok(_) => Reply::Value(0),
                                Err((_, why)) => Reply::Failed(SquallError::Thread {
                                    what: format!("creating a thread on {target}"),
                                    why,
                                }),
                            },
                            Err(e) => Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why: e.to_string(),
                            }),
                        };
                        if let Ok(n) = node() {
                            n.inner.svc.lock().wake(w, reply);
                        } else {
                            eprintln!(
                                "squall: {svc_me}: spawn answer without a node ({})",
                                ep.rank()
                            );
                        }
                    });
                    if let Err(e) = sent {
                        s.wake(
                            w,
                            Reply::Failed(SquallError::Thread {
                                what: format!("creating a thread on {target}"),
                                why: e.to_string(),
                            }),
                        );
                    }
                }),
            )
        })?;
        match r {
            Reply::Failed(e) => Err(e),
            _ => Ok(tid),
        }
    }

    /// The calling thread's global id: the id `spawn_on` returned for it, or for any other
    /// thread (such as `main`) an id naming this node that no spawned thread has.
    pub fn current_thread(&self) -> ThreadId {
        match CURRENT.with(Cell::get) {
            0 => threads::make_tid(self.rank(), self.rank(), u32::MAX),
            t => ThreadId(t),
        }
    }

    /// Called by a thread started with `spawn_on` when its function returned.
    fn thread_exit(&self, tid: ThreadId, ret: u64) {
        let r = self.call("thread exit", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, ep| {
                    let info = s.protocol.grant_info(&[]);
                    s.thread_done(ep, tid, ret, info);
                    s.wake(w, Reply::Value(0));
                }),
            )
        });
        if let Err(e) = r {
            eprintln!("squall: {}: {tid} could not end cleanly: {e}", self.rank());
        }
    }

    /// Wait for a thread created with `spawn_on` (on any node) to end; returns its result.
    /// A successful join is an acquire: the thread's writes are visible afterwards.
    pub fn join(&self, tid: ThreadId) -> Result<*mut c_void> {
        let run = threads::node_of(tid);
        if run.0 >= self.size() {
            return Err(SquallError::Remote(format!(
                "join of unknown {tid}: no such node"
            )));
        }
        self.timed_sync(|| self.join_wait(run, tid))
    }

    /// The waiting part of `join` (timed as sync time by the caller).
    fn join_wait(&self, run: NodeId, tid: ThreadId) -> Result<*mut c_void> {
        if run == self.rank() {
            match self.call("join", move |s, ep, w| s.join(ep, tid, Joiner::Local(w)))? {
                Reply::Value(ret) => Ok(ret as usize as *mut c_void),
                Reply::Failed(e) => Err(e),
                Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to join".into())),
            }
        } else {
            let answer = self
                .inner
                .ep
                .request(run, msg::JOIN, tid.0.to_le_bytes().to_vec())?;
            let (ret, info) = threads::decode_answer(&answer).map_err(|(kind, why)| {
                if kind == threads::ERR_UNKNOWN_THREAD {
                    SquallError::UnknownThread(tid)
                } else {
                    SquallError::Thread {
                        what: format!("joining {tid}"),
                        why,
                    }
                }
            })?;
            self.call("join", move |s, _, w| {
                s.protocol.apply_grant(&info);
                s.wake(w, Reply::Value(0))
            })?;
            Ok(ret as usize as *mut c_void)
        }
    }

    // ----- atomics ----------------------------------------------------------------------

    /// Execute `op` on the `u64` at `addr` at its home and return the old value. Ordering: a
    /// release first (this thread's earlier writes are visible before the atomic takes
    /// effect); atomics on one word are sequentially consistent with each other. It is not an
    /// acquire, and a cached copy of the word's page is not updated: read such words with
    /// `atomic(addr, AtomicOp::FetchAdd(0))`.
    pub fn atomic(&self, addr: *mut u64, op: AtomicOp) -> Result<u64> {
        let a = addr as usize;
        let page = self.page_of(a)?;
        let offset = a - self.inner.space.addr_of(page);
        let r = self.call("atomic", move |s, ep, w| {
            s.release_then(
                ep,
                Box::new(move |s, _| {
                    if let Err(e) = s.protocol.atomic(page, offset, op.into(), w.0) {
                        s.wake(w, Reply::Failed(e.into()));
                    }
                }),
            )
        })?;
        match r {
            Reply::Value(v) => Ok(v),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to an atomic".into())),
        }
    }

    /// Whether `addr` is Squall memory (the global range or an adopted region): atomics there
    /// must go through [`Node::atomic_ordered`].
    pub fn is_shared(&self, addr: usize) -> bool {
        self.inner.space.page_of(addr).is_some()
    }

    /// Execute `op` on the `width`-byte word (1, 2, 4 or 8, naturally aligned) at `addr` at its
    /// page's home and return the old value (zero-extended), with C11 ordering `order`:
    ///
    /// * a release (`Release`, `AcqRel`, `SeqCst`) first makes this node's writes visible
    ///   (`begin_release`) and leaves the node's synchronization info at the location;
    /// * an acquire (`Acquire`, `AcqRel`, `SeqCst`) applies the infos other nodes left at the
    ///   location (their writes before their releasing operations become visible here);
    /// * `Relaxed` does neither: one message to the home and back (none if this node is it).
    ///
    /// All operations on one location are executed one at a time at its home, so they are
    /// atomic and totally ordered (sequentially consistent per location). After any of them,
    /// the word's new value is in this node's copy of its page (if it has one), so a plain
    /// read of the word on this node sees it or a later value.
    pub fn atomic_ordered(
        &self,
        addr: usize,
        width: u8,
        op: AtomicOp,
        order: MemOrder,
    ) -> Result<u64> {
        let page = self.page_of(addr)?;
        let offset = addr - self.inner.space.addr_of(page);
        let (acquire, release) = order.acquire_release();
        let writes = !matches!(op, AtomicOp::Load);
        // After a release fence, a relaxed write carries the fence's info (see `order`).
        let fenced = if !release && writes {
            order::fence_info()
        } else {
            None
        };
        if !acquire {
            order::note_relaxed_read(addr, width);
        }
        let r = self.call("atomic", move |s, ep, w| {
            let go = move |s: &mut Service, _: &Endpoint| {
                let info = if release {
                    Some(s.protocol.grant_info(&[]))
                } else {
                    fenced
                };
                let call = AtomicCall {
                    op,
                    width,
                    acquire,
                    release: info,
                };
                let seen = AtomicCall {
                    release: None,
                    ..call.clone()
                };
                s.atomics.insert(w.0, (page, offset, seen));
                if let Err(e) = s.protocol.atomic(page, offset, call, w.0) {
                    s.atomics.remove(&w.0);
                    s.wake(w, Reply::Failed(e.into()));
                }
            };
            if release {
                s.release_then(ep, Box::new(go));
            } else {
                go(s, ep);
            }
        })?;
        match r {
            Reply::Value(v) => Ok(v),
            Reply::Failed(e) => Err(e),
            Reply::Sync(_) => Err(SquallError::Remote("unexpected reply to an atomic".into())),
        }
    }

    /// A fence with C11 ordering `order` (`atomic_thread_fence`): a release fence makes this
    /// node's writes visible at their homes (`begin_release`), an acquire fence is a no-op
    /// beyond the CPU's (acquires happen at the acquiring atomics themselves; see
    /// docs/memory-model.md for what a fence can and cannot order across nodes).
    pub fn fence(&self, order: MemOrder) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let (acquire, release) = order.acquire_release();
        if release {
            let (tx, rx) = bounded(1);
            let r = self.call("fence", move |s, ep, w| {
                s.release_then(
                    ep,
                    Box::new(move |s, _| {
                        let _ = tx.send(s.protocol.grant_info(&[]));
                        s.wake(w, Reply::Value(0))
                    }),
                )
            })?;
            if let Reply::Failed(e) = r {
                return Err(e);
            }
            let info = rx.recv().map_err(|_| SquallError::ShuttingDown)?;
            order::set_fence_info(info);
        }
        if acquire {
            for (addr, width) in order::take_relaxed_reads() {
                self.atomic_ordered(addr, width, AtomicOp::Load, MemOrder::Acquire)?;
            }
        }
        Ok(())
    }

    // ----- statistics and shutdown ------------------------------------------------------

    /// Nanoseconds since this node started (the clock of the time accounting).
    fn now_ns(&self) -> u64 {
        self.inner.started.elapsed().as_nanos() as u64
    }

    /// This node's statistics so far.
    pub fn stats(&self) -> NodeStats {
        // Application time: the main thread's (where it runs application code) plus every
        // ended thread this node ran for the job.
        let main = if self.inner.main_is_app.load(Ordering::Relaxed) {
            self.inner.started.elapsed().as_secs_f64()
        } else {
            0.0
        };
        let now = self.now_ns();
        let threads =
            self.inner.thread_ns.load(Ordering::Relaxed) + self.inner.live_threads.so_far(now);
        let wall = main + threads as f64 / 1e9;
        let sync = self.inner.sync_ns.load(Ordering::Relaxed) + self.inner.live_sync.so_far(now);
        let sync_s = sync as f64 / 1e9;
        let s = self.inner.svc.lock();
        let stall_s = s.times.stall_ns as f64 / 1e9;
        let mut counts = Map::new();
        counts.insert(
            "protocol".into(),
            serde_json::to_value(s.protocol.stats()).unwrap_or(Value::Null),
        );
        counts.insert(
            "sync".into(),
            serde_json::to_value(s.sync.stats_now()).unwrap_or(Value::Null),
        );
        drop(s);
        counts.insert("net".into(), net_counts(&self.inner.ep));
        let sp = self.inner.space.stats();
        counts.insert(
            "memory".into(),
            serde_json::json!({"faults": sp.faults, "write_faults": sp.write_faults, "transitions": sp.transitions}),
        );
        let s = self.inner.svc.lock();
        NodeStats {
            node: Some(self.rank().0),
            protocol: self.inner.cfg.protocol.name().into(),
            breakdown: Breakdown {
                task_s: (wall - sync_s - stall_s).max(0.0),
                sync_s,
                data_stall_s: stall_s,
                messaging_s: s.times.messaging_ns as f64 / 1e9,
                protocol_s: s.times.protocol_ns as f64 / 1e9,
            },
            counts,
        }
    }

    /// Mark the statistics of the whole job (any one thread calls it; e.g. the first thread
    /// right after the barrier that starts the timed phase, and again right after the one that
    /// ends it). Every node snapshots its counters: this node at once, the others when the
    /// mark's message reaches them (microseconds later). The report at finalize
    /// (`SQUALL_STATS=1`, `SQUALL_STATS_FILE`) then also shows the timed phase: from each
    /// node's first mark to its second, or to the end. Later marks are ignored.
    pub fn stats_mark(&self) -> Result<()> {
        self.record_mark();
        for n in 0..self.size() {
            let to = NodeId(n);
            if to != self.rank() {
                self.inner.ep.send(to, msg::STATS_MARK, Vec::new())?;
            }
        }
        Ok(())
    }

    /// Snapshot this node's statistics for a stats mark (only the first two are kept).
    fn record_mark(&self) {
        if self.inner.marks.lock().len() < 2 {
            let st = self.stats();
            let mut marks = self.inner.marks.lock();
            if marks.len() < 2 {
                marks.push(st);
            }
        }
    }

    /// This node's statistics of the timed phase: from its first stats mark to its second, or
    /// to now; `None` before the first mark reached this node.
    pub fn stats_phase(&self) -> Option<NodeStats> {
        if self.inner.marks.lock().is_empty() {
            return None;
        }
        self.phase(&self.stats())
    }

    /// The timed phase of this node (first mark to second mark, or to `now`), if marked.
    fn phase(&self, now: &NodeStats) -> Option<NodeStats> {
        let marks = self.inner.marks.lock();
        let start = marks.first()?;
        Some(stats::diff(marks.get(1).unwrap_or(now), start))
    }

    /// Collective: end this node's part of the job. Waits for every node, prints and writes
    /// the statistics if asked (`SQUALL_STATS=1`), says goodbye to the peers.
    pub fn finalize(&self) -> Result<()> {
        if self.inner.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // No barrier fetch at the last barriers (a peer past them may have left already), as
        // soon as no thread runs here either.
        self.inner.svc.lock().finalizing();
        self.end_barrier()?;
        if self.inner.cfg.stats {
            let run = self.stats();
            let mine = NodeReport {
                phase: self.phase(&run),
                run,
            };
            if self.rank() == NodeId(0) {
                let mut all = vec![mine];
                for n in 1..self.size() {
                    all.push(self.inner.stats_in.take(u64::from(n)));
                }
                let runs: Vec<NodeStats> = all.iter().map(|r| r.run.clone()).collect();
                eprint!("{}", stats::table(&runs));
                let mut doc = serde_json::json!({"nodes": runs, "total": stats::total(&runs)});
                // The timed phase, if every node marked one (a node the mark never reached
                // would make the sum meaningless).
                let phases: Option<Vec<NodeStats>> = all.iter().map(|r| r.phase.clone()).collect();
                if let Some(phases) = phases {
                    eprint!(
                        "{}",
                        stats::table_titled(&phases, "timed phase: stats marks")
                    );
                    doc["phase"] = serde_json::json!({
                        "nodes": phases,
                        "total": stats::total(&phases),
                    });
                }
                if let Err(e) = std::fs::write(&self.inner.cfg.stats_file, doc.to_string()) {
                    eprintln!("squall: could not write {}: {e}", self.inner.cfg.stats_file);
                }
            } else {
                let j = serde_json::to_vec(&mine).unwrap_or_default();
                self.inner.ep.send(NodeId(0), msg::STATS, j)?;
            }
        }
        self.end_barrier()?;
        self.inner.ep.shutdown()?;
        // Give the fault stream back; nothing may touch shared memory after this.
        match self.inner.faults.lock().take() {
            Some(FaultServing::Poll(id)) => {
                self.inner.ep.remove_source(id);
            }
            Some(FaultServing::Thread(ft)) => drop(ft),
            None => {}
        }
        // The program's globals and stacks stay usable by what runs after this (exit handlers,
        // destructors): plain memory from now on (node 0, their home, has the final values).
        if let Err(e) = self.inner.space.detach() {
            eprintln!("squall: {}: {e}", self.rank());
        }
        Ok(())
    }
}

/// Who serves this node's faults.
enum FaultServing {
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
fn serve_faults(
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

fn net_counts(ep: &Endpoint) -> Value {
    let st = ep.stats();
    let mut by_type = Map::new();
    for (ty, c) in &st.by_type {
        let name = msg::name(*ty);
        by_type.insert(
            name,
            serde_json::json!({"sent": c.sent, "sent_bytes": c.sent_bytes,
                               "received": c.received, "received_bytes": c.received_bytes}),
        );
    }
    let drops: u64 = st.drops.values().sum();
    serde_json::json!({
        "messages_sent": st.messages_sent(),
        "messages_received": st.messages_received(),
        "bytes_sent": st.by_type.values().map(|c| c.sent_bytes).sum::<u64>(),
        "packets_sent": st.packets_sent,
        "retransmissions": st.retransmissions,
        "dropped": drops,
        "per_type": by_type,
    })
}

fn free_local(s: &mut Service, addr: usize) -> Reply {
    match s.heap_of(addr).free(addr) {
        Ok(rec) => {
            if let Some(info) = rec.released {
                if let Err(e) = s.space.release_pages(info.first, info.pages) {
                    return Reply::Failed(e.into());
                }
            }
            Reply::Value(0)
        }
        Err(e) => Reply::Failed(SquallError::Alloc {
            node: s.me,
            source: e,
        }),
    }
}

/// On the service thread of the node a thread is to run on: apply the creator's release,
/// record the thread and start it.
fn start_thread(s: &mut Service, sp: SpawnMsg) -> std::result::Result<(), String> {
    let me = s.me;
    let addr = fnptr::decode(&sp.f).ok_or_else(|| {
        format!(
            "{me} cannot find the thread function ({} + {:#x}): every node must run the same binaries",
            if sp.f.module.is_empty() { "main executable" } else { sp.f.module.as_str() },
            sp.f.offset
        )
    })?;
    s.protocol.apply_grant(&sp.info);
    s.thread_started(sp.tid);
    // SAFETY: `addr` is the local address of the function the creator named, which has the
    // `ThreadFn` signature (the creator passed a `ThreadFn`, and all nodes run one binary).
    let f: ThreadFn = unsafe { std::mem::transmute::<usize, ThreadFn>(addr) };
    let (tid, arg, stack) = (sp.tid, sp.arg, sp.stack as usize);
    std::thread::Builder::new()
        .name(format!("squall-{}", tid.0 & 0xffff_ffff))
        .spawn(move || {
            CURRENT.with(|c| c.set(tid.0));
            let t = Instant::now();
            // Counted as running for the statistics (a stats mark may come while it runs).
            let start_ns = node().ok().map(|n| {
                let at = n.now_ns();
                n.inner.live_threads.begin(at);
                at
            });
            let ret = threads::run_thread(f, arg as usize as *mut c_void, stack) as usize as u64;
            threads::run_thread_end_hook();
            match node() {
                Ok(n) => {
                    if let Some(at) = start_ns {
                        n.inner.live_threads.end(at);
                    }
                    n.inner
                        .thread_ns
                        .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    n.thread_exit(tid, ret)
                }
                Err(e) => eprintln!("squall: {tid} ended without a node: {e}"),
            }
        })
        .map(|_| ())
        .map_err(|e| format!("{me} could not start a thread: {e}"))
}

fn register_handlers(
    ep: &Endpoint,
    svc: Arc<Mutex<Service>>,
    coll: Arc<Mailbox<u64>>,
    stats_in: Arc<Mailbox<NodeReport>>,
) {
    let s = svc.clone();
    ep.register(msg::PROTO, move |ep, m| {
        s.lock().on_protocol_message(ep, m.src, &m.payload)
    });
    let s = svc.clone();
    ep.register(msg::SYNC, move |ep, m| {
        s.lock().on_sync_message(ep, m.src, &m.payload)
    });
    ep.register(msg::COLLECTIVE, move |ep, m| {
        let p = &m.payload;
        if p.len() != 16 {
            fatal(
                ep.rank(),
                &format!("malformed collective message from {}", m.src),
            );
        }
        let seq = u64::from_le_bytes(p[0..8].try_into().unwrap_or([0; 8]));
        let v = u64::from_le_bytes(p[8..16].try_into().unwrap_or([0; 8]));
        coll.put(seq, v);
    });
    ep.register(msg::STATS, move |ep, m| {
        match serde_json::from_slice::<NodeReport>(&m.payload) {
            Ok(st) => stats_in.put(u64::from(m.src.0), st),
            Err(e) => eprintln!("squall: {}: bad statistics from {}: {e}", ep.rank(), m.src),
        }
    });
    ep.register(msg::STATS_MARK, move |ep, m| match node() {
        Ok(n) => n.record_mark(),
        Err(e) => eprintln!("squall: {}: stats mark from {}: {e}", ep.rank(), m.src),
    });
    let s = svc.clone();
    ep.register(msg::SPAWN, move |ep, m| {
        let answer = match SpawnMsg::decode(&m.payload) {
            None => threads::encode_err(
                threads::ERR_OTHER,
                &format!("malformed spawn request from {}", m.src),
            ),
            Some(sp) => match start_thread(&mut s.lock(), sp) {
                Ok(()) => threads::encode_join_ok(0, &[]),
                Err(e) => threads::encode_err(threads::ERR_OTHER, &e),
            },
        };
        if let Err(e) = ep.reply(&m, answer) {
            eprintln!(
                "squall: {}: could not answer a spawn from {}: {e}",
                ep.rank(),
                m.src
            );
        }
    });
    let s = svc.clone();
    ep.register(msg::JOIN, move |ep, m| {
        let Ok(b) = <[u8; 8]>::try_from(m.payload.as_ref()) else {
            let _ = ep.reply(
                &m,
                threads::encode_err(threads::ERR_OTHER, "malformed join request"),
            );
            return;
        };
        let tid = ThreadId(u64::from_le_bytes(b));
        s.lock().join(ep, tid, Joiner::Remote(m));
    });
    let s = svc;
    ep.register(msg::HEAP, move |ep, m| {
        let p = &m.payload;
        let reply: Vec<u8> = if p.len() != 9 {
            format!("malformed heap request from {}", m.src).into_bytes()
        } else {
            let addr = u64::from_le_bytes(p[1..9].try_into().unwrap_or([0; 8])) as usize;
            let mut g = s.lock();
            match p[0] {
                0 => match free_local(&mut g, addr) {
                    Reply::Failed(e) => e.to_string().into_bytes(),
                    _ => Vec::new(),
                },
                _ => g
                    .heap_of(addr)
                    .size_of(addr)
                    .map(|n| n as u64)
                    .unwrap_or(u64::MAX)
                    .to_le_bytes()
                    .to_vec(),
            }
        };
        if let Err(e) = ep.reply(&m, reply) {
            eprintln!("squall: {}: could not answer {}: {e}", ep.rank(), m.src);
        }
    });
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
