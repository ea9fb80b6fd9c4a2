//! The sharing profile of one node (`squall run --profile`, `SQUALL_PROFILE=1`): where each
//! allocation came from (the C caller's return address, or the Rust caller's location),
//! the adopted globals, lock and barrier waits and holds, and the faults over time; the
//! per-page counters themselves are the protocol core's (`squall_protocol::profile`).
//! At finalize every node symbolizes its own addresses (`symbols`) and sends rank 0 a
//! [`NodeProfile`]; rank 0 puts them together and reports (`report`).
//!
//! Owns: the recorder the node's entry points call when profiling is on (each call site
//! tests [`Recorder::on`] first: one branch when it is off). Must not touch: protocol or
//! synchronization decisions.

pub mod report;
mod symbols;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use squall_protocol::profile::PageCounts;
use squall_protocol::SharingProfile;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::Location;
use std::time::Instant;

pub use symbols::SiteName;

/// Width of one bucket of the faults-over-time series.
pub const BUCKET_MS: u64 = 10;
/// Buckets kept (the rest of a longer run falls into the last one).
const MAX_BUCKETS: usize = 360_000;
/// Bytes of each adopted region whose variables are named (8-byte steps).
const GLOBALS_SCAN: u64 = 256 * 1024;

thread_local! {
    /// The C caller's return address, set by the C entry points around an allocation.
    static C_CALLER: Cell<usize> = const { Cell::new(0) };
    /// The Rust caller of an allocation made inside a closure (`alloc_collective`).
    static RUST_CALLER: Cell<Option<&'static Location<'static>>> = const { Cell::new(None) };
    /// Locks this thread holds: lock id and when it took it (ns since the node started).
    static HELD: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` (an allocation) on behalf of the C function that called `entry` (the C entry
/// point's own address): with profiling on, the allocation is attributed to that caller's
/// return address. The stack is walked (`backtrace::trace`) only when profiling is on.
pub fn with_c_caller<R>(entry: usize, f: impl FnOnce() -> R) -> R {
    if !crate::node_ref().is_some_and(|n| n.profiling()) || C_CALLER.with(|c| c.get()) != 0 {
        // Off, or an outer entry point (the pthreads layer's malloc) already named the caller.
        return f();
    }
    let ip = caller_of(entry);
    C_CALLER.with(|c| c.set(ip));
    let r = f();
    C_CALLER.with(|c| c.set(0));
    r
}

/// Run `f` (an allocation inside a closure, where `#[track_caller]` does not reach) on
/// behalf of the Rust `caller`.
pub(crate) fn with_rust_caller<R>(caller: &'static Location<'static>, f: impl FnOnce() -> R) -> R {
    let before = RUST_CALLER.with(|c| c.replace(Some(caller)));
    let r = f();
    RUST_CALLER.with(|c| c.set(before));
    r
}

/// The return address into the function that called `entry` (0 if the walk did not find
/// `entry`'s frame).
#[inline(never)]
fn caller_of(entry: usize) -> usize {
    let mut seen = false;
    let mut found = 0usize;
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if seen {
            found = ip;
            return false;
        }
        let sym = frame.symbol_address() as usize;
        // The entry point's frame: by the start of its function, or (no unwind symbol
        // information) by an address inside its first 16 KiB.
        seen = sym == entry || (sym == 0 && ip > entry && ip < entry + 16 * 1024);
        true
    });
    found
}

/// Where one allocation came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Site {
    /// A C caller's return address (symbolized at finalize).
    Code(usize),
    /// A Rust caller (`#[track_caller]`).
    Rust(&'static Location<'static>),
}

impl Site {
    /// The site of the allocation being made on this thread: the C caller if a C entry point
    /// set one, else the Rust caller.
    pub(crate) fn current(rust: &'static Location<'static>) -> Site {
        match C_CALLER.with(|c| c.get()) {
            0 => Site::Rust(RUST_CALLER.with(|c| c.get()).unwrap_or(rust)),
            ip => Site::Code(ip),
        }
    }
}

/// Lock (or barrier) waits and holds seen on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRec {
    pub acquires: u64,
    /// Acquisitions whose token came from another node.
    pub transfers: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    /// Holds measured (acquire to release by the same thread) and their total.
    pub holds: u64,
    pub hold_ns: u64,
    /// Barriers: episodes this node's threads completed as the episode's one serial thread
    /// (summed over nodes: the job's episodes).
    #[serde(default)]
    pub episodes: u64,
}

impl SyncRec {
    pub fn merge(&mut self, o: &SyncRec) {
        self.acquires += o.acquires;
        self.transfers += o.transfers;
        self.wait_ns += o.wait_ns;
        self.max_wait_ns = self.max_wait_ns.max(o.max_wait_ns);
        self.holds += o.holds;
        self.hold_ns += o.hold_ns;
        self.episodes += o.episodes;
    }
}

/// One allocation as its node reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRec {
    pub addr: u64,
    pub len: u64,
    pub site: SiteName,
}

/// What one node sends rank 0 at finalize.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeProfile {
    pub node: u16,
    pub allocs: Vec<AllocRec>,
    /// Adopted global data: (first address, length, symbol) per named variable.
    pub globals: Vec<AllocRec>,
    /// Per page with activity: its address and what this node saw of it.
    pub pages: Vec<(u64, PageCounts)>,
    pub locks: Vec<(u64, SyncRec)>,
    pub barriers: Vec<(u64, SyncRec)>,
    /// Faults per `BUCKET_MS` since the node started.
    pub faults_over_time: Vec<u32>,
    /// The node's time breakdown (as the statistics report it).
    pub breakdown: crate::stats::Breakdown,
}

/// The recorder of one node.
pub(crate) struct Recorder {
    on: bool,
    started: Instant,
    allocs: Mutex<Vec<(u64, u64, Site)>>,
    locks: Mutex<HashMap<u64, SyncRec>>,
    barriers: Mutex<HashMap<u64, SyncRec>>,
    faults: Mutex<Vec<u32>>,
    /// The adopted global data regions (start, length).
    adopted: Mutex<Vec<(u64, u64)>>,
}

impl Recorder {
    pub(crate) fn new(on: bool, started: Instant) -> Self {
        Recorder {
            on,
            started,
            allocs: Mutex::new(Vec::new()),
            locks: Mutex::new(HashMap::new()),
            barriers: Mutex::new(HashMap::new()),
            faults: Mutex::new(Vec::new()),
            adopted: Mutex::new(Vec::new()),
        }
    }

    /// Whether profiling is on (every recording call site tests this first).
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    pub(crate) fn adopted(&self, start: u64, len: u64) {
        self.adopted.lock().push((start, len));
    }

    pub(crate) fn alloc(&self, addr: u64, len: u64, site: Site) {
        self.allocs.lock().push((addr, len, site));
    }

    /// A fault of this node now (the faults-over-time series).
    pub(crate) fn fault(&self) {
        let b =
            ((self.started.elapsed().as_millis() as u64 / BUCKET_MS) as usize).min(MAX_BUCKETS - 1);
        let mut f = self.faults.lock();
        if f.len() <= b {
            f.resize(b + 1, 0);
        }
        f[b] += 1;
    }

    /// This thread acquired `lock` after waiting since `t0` (ns since start); `remote`: its
    /// token came from another node.
    pub(crate) fn acquired(&self, lock: u64, t0: u64, remote: bool) {
        let now = self.now_ns();
        let wait = now.saturating_sub(t0);
        {
            let mut l = self.locks.lock();
            let r = l.entry(lock).or_default();
            r.acquires += 1;
            r.transfers += u64::from(remote);
            r.wait_ns += wait;
            r.max_wait_ns = r.max_wait_ns.max(wait);
        }
        HELD.with(|h| h.borrow_mut().push((lock, now)));
    }

    /// This thread released `lock`.
    pub(crate) fn released(&self, lock: u64) {
        let taken = HELD.with(|h| {
            let mut h = h.borrow_mut();
            let i = h.iter().rposition(|(l, _)| *l == lock)?;
            Some(h.swap_remove(i).1)
        });
        if let Some(at) = taken {
            let hold = self.now_ns().saturating_sub(at);
            let mut l = self.locks.lock();
            let r = l.entry(lock).or_default();
            r.holds += 1;
            r.hold_ns += hold;
        }
    }

    /// A barrier episode of `id` this thread waited in from `t0` (ns since start); `serial`:
    /// this thread is the episode's one serial thread in the job (counts the episode).
    pub(crate) fn barrier(&self, id: u64, t0: u64, serial: bool) {
        let wait = self.now_ns().saturating_sub(t0);
        let mut b = self.barriers.lock();
        let r = b.entry(id).or_default();
        r.acquires += 1;
        r.episodes += u64::from(serial);
        r.wait_ns += wait;
        r.max_wait_ns = r.max_wait_ns.max(wait);
    }

    /// This node's profile, its addresses symbolized here (each node's program is mapped at
    /// its own addresses).
    pub(crate) fn collect(
        &self,
        node: u16,
        pages: SharingProfile,
        addr_of: impl Fn(u64) -> u64,
        breakdown: crate::stats::Breakdown,
    ) -> NodeProfile {
        let mut names = symbols::Symbolizer::default();
        let allocs = self
            .allocs
            .lock()
            .iter()
            .map(|&(addr, len, site)| AllocRec {
                addr,
                len,
                site: names.site(site),
            })
            .collect();
        // Rank 0 names the globals (every node has them at the same addresses); the first
        // GLOBALS_SCAN bytes of each region are looked up.
        let globals = if node == 0 {
            self.adopted
                .lock()
                .iter()
                .flat_map(|&(start, len)| symbols::globals_in(start, len.min(GLOBALS_SCAN)))
                .map(|(addr, len, name)| AllocRec {
                    addr,
                    len,
                    site: SiteName {
                        file: None,
                        line: None,
                        function: Some(name.clone()),
                        raw: name,
                    },
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut locks: Vec<(u64, SyncRec)> = self
            .locks
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        locks.sort_by_key(|(k, _)| *k);
        let mut barriers: Vec<(u64, SyncRec)> = self
            .barriers
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        barriers.sort_by_key(|(k, _)| *k);
        NodeProfile {
            node,
            allocs,
            globals,
            pages: pages
                .pages
                .into_iter()
                .map(|(p, c)| (addr_of(p), c))
                .collect(),
            locks,
            barriers,
            faults_over_time: self.faults.lock().clone(),
            breakdown,
        }
    }
}
