//! The endpoint: the node's handle on the network and its one service thread. Owns handler
//! dispatch, request/reply matching, posted closures, per-type statistics and the peer-lost
//! policy; must not touch sockets directly (that is the backend's job) nor protocol state.
//!
//! The service thread runs a `mio` poll loop: it does the backend's network I/O itself and runs
//! handlers directly, one at a time, with no thread hop between a packet and its handler.
//! A `mio::Waker` (token 0) wakes it for posted closures and for timers. Sends from any thread
//! go straight to the backend under one lock.
//!
//! Latency path (see `service_loop`): one iteration is poll → readiness events → handlers of
//! what arrived → backend timers. Timers further than `SHORT_TIMER` (2 ms) away (retransmission,
//! heartbeats, peer timeouts) are kept by a small timer thread that wakes the service thread
//! through the waker, so the poll normally sleeps with no kernel timer armed; a send from
//! another thread that creates an earlier timer lowers that thread's deadline instead of waking
//! the service thread. A blocking [`Endpoint::request`] waits on a per-thread reply slot;
//! first, for `NetConfig::reply_spin`, the waiting thread polls the socket itself (see
//! [`Endpoint::wait_reply`]): a reply it reads there is handed over with no thread wake-up at
//! all, and what else it reads goes to the service thread's inbox, in order.
//! A thread waiting for something else a message brings (the runtime's lock grants and barrier
//! releases) polls the same way through [`Endpoint::poll_once`], and runs the messages it
//! claims itself; FIFO with the service thread is kept by the dispatch lock (see `Shared::dispatch`).
//! After a pass that served input the loop may linger (`NetConfig::poll_spin`): it polls
//! without sleeping for a few microseconds, so the answer to what it just sent is read without
//! a wake-up; lingers that end empty are skipped more and more often (see `Linger`).
//!
//! Extra sources: [`Endpoint::add_source`] registers another file descriptor (the runtime's
//! userfaultfd) with the same poll, under tokens from `SOURCE_TOKEN_BASE`; its callback runs on
//! the service thread when the fd becomes readable. [`Endpoint::spin_until`] makes the loop
//! poll without sleeping for a bounded time (a page fetch is out and its reply is due within
//! microseconds): the reply is then read without a wake-up of the service thread.
//!
//! Message type ranges: `0..64` transport and bootstrap (this crate; constants `TY_*` below),
//! `64..=65535` the layers above.
//!
//! The files of this folder, one concern each (all of them `impl Endpoint` blocks over the
//! state defined here): `send` (one-way sends and the per-type send counts), `request`
//! (requests, replies, the pending table and reply slots), `waiting` (application threads that
//! read the network themselves while they wait: the reply spin, [`Endpoint::poll_once`], the
//! buffer lent by [`Endpoint::receive_into`]), `dispatch` (the service thread's handler table,
//! delivery, held messages), `service` (the service thread's poll loop, its hot loop, posted
//! closures, lingering and spinning), `timer` (the timer thread), `sources` (extra file
//! descriptors in the poll), `peers` (peer states, goodbyes and the peer-lost policy).
mod dispatch;
mod peers;
mod request;
mod send;
mod service;
mod sources;
#[cfg(test)]
mod tests;
mod timer;
mod waiting;

pub use sources::SourceId;

use crate::backend::{Backend, BackendEvent, InMsg};
use crate::error::NetError;
use crate::stats::{NetStats, TypeCounters};
use bytes::Bytes;
use crossbeam_channel::bounded;
use dispatch::Handler;
use mio::{Poll, Registry, Waker};
use parking_lot::{Condvar, Mutex};
use peers::{PeerLostFn, PEER_UP};
use request::Pending;
use service::{SOURCE_TOKEN_BASE, WAKER};
use sources::SourceFn;
use squall_core::{JobId, NodeId};
use squall_wire::{Flags, MsgType};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Transport type of goodbye messages.
pub const TY_BYE: u16 = 1;
/// Transport type of heartbeats and pure acks (udp).
pub const TY_LINK: u16 = 2;
/// A node that lost contact with a peer tells the others (payload: u16 peer, reason text),
/// so every node names the node that actually failed.
pub const TY_LOST_NOTICE: u16 = 3;
/// Bootstrap: a joining node's hello to rank 0.
pub const TY_BOOT_HELLO: u16 = 8;
/// Bootstrap: rank 0's table of all nodes.
pub const TY_BOOT_TABLE: u16 = 9;
/// Bootstrap: first frame on a tcp pair connection, naming the connecting rank.
pub const TY_CONN_HELLO: u16 = 10;

/// A message delivered to a handler.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Sending node.
    pub src: NodeId,
    /// Message type.
    pub ty: MsgType,
    /// The whole message (reassembled).
    pub payload: Bytes,
    request_id: u64,
    flags: Flags,
    placed: usize,
}

impl From<InMsg> for Incoming {
    fn from(m: InMsg) -> Incoming {
        Incoming {
            src: m.src,
            ty: m.ty,
            payload: m.payload,
            request_id: m.request_id,
            flags: m.flags,
            placed: m.placed,
        }
    }
}

impl Incoming {
    /// Bytes of the message that follow `payload` and were read straight into the buffer
    /// lent by [`Endpoint::receive_into`] (0 for every other message).
    pub fn placed(&self) -> usize {
        self.placed
    }
    /// True if the sender waits for a [`Endpoint::reply`].
    pub fn is_request(&self) -> bool {
        self.flags.contains(Flags::REQUEST)
    }
    /// The request id (0 if this is not a request).
    pub fn request_id(&self) -> u64 {
        self.request_id
    }
}

type Posted = Box<dyn FnOnce(&Endpoint) + Send + 'static>;
type ReplyFn = Box<dyn FnOnce(&Endpoint, Result<Incoming, NetError>) + Send + 'static>;

/// Hasher for the small integer keys of the dispatch tables (message types, request ids): the
/// keys are not attacker-chosen hash-flooding material, and SipHash showed in the per-message
/// profile.
#[derive(Default)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

thread_local! {
    /// On a service thread: the endpoint it serves (`Endpoint::id`); 0 on other threads.
    static SERVICE_OF: Cell<usize> = const { Cell::new(0) };
}

struct Driver {
    backend: Box<dyn Backend>,
    /// The service thread sleeps in poll until this instant (None: no poll timeout; later
    /// timers are then the timer thread's). `None` while it is awake.
    sleeping_until: Option<Option<Instant>>,
    /// Until this instant the service thread polls without sleeping ([`Endpoint::spin_until`]).
    spin_until: Option<Instant>,
    /// Events a thread waiting for a reply read from the backend and left to the service
    /// thread, oldest first (see [`Endpoint::poll_for_reply`]); they go before anything the
    /// service thread reads later.
    inbox: Vec<BackendEvent>,
}

/// The timer thread's state: it wakes the service thread (through the waker) at `deadline`.
/// Deadlines are only ever lowered (by whoever creates an earlier timer) or cleared when they
/// fire; a deadline that fires early just costs one spurious wake-up, after which the service
/// thread sets the next one.
struct TimerState {
    deadline: Option<Instant>,
    stop: bool,
}

struct Shared {
    rank: NodeId,
    size: u16,
    job: JobId,
    driver: Mutex<Driver>,
    waker: Waker,
    timer: Mutex<TimerState>,
    timer_cv: Condvar,
    posted: Mutex<VecDeque<Posted>>,
    /// Closures in `posted` (changed under its lock; read without it by the service loop).
    posted_len: AtomicUsize,
    /// Handler registrations and removals not yet applied to the service thread's table, in
    /// order; `handlers_gen` counts them (the service thread applies them when it moves).
    handler_changes: Mutex<Vec<(u16, Option<Handler>)>>,
    handlers_gen: AtomicU64,
    /// Extra sources by token: their fd (to deregister) and callback.
    sources: Mutex<HashMap<usize, (RawFd, SourceFn)>>,
    /// How many extra sources are registered (read without the lock by the service loop).
    sources_len: AtomicUsize,
    next_source: AtomicUsize,
    /// The poll's registry (a clone: sources are added from any thread).
    registry: Registry,
    held: Mutex<IntMap<u16, VecDeque<Incoming>>>,
    /// Messages in `held` (changed only on the service thread, under its lock): lets the
    /// per-message path skip that lock while nothing is held.
    held_len: AtomicUsize,
    pending: Mutex<IntMap<u64, (NodeId, Pending)>>,
    next_request: AtomicU64,
    /// Names the buffers lent by [`Endpoint::receive_into`].
    next_landing: AtomicU64,
    /// Per-type counts (lock-free: counted on every message).
    by_type: TypeCounters,
    on_peer_lost: Mutex<Option<PeerLostFn>>,
    peer_state: Vec<AtomicU8>,
    shutting_down: AtomicBool,
    stopped: AtomicBool,
    join: Mutex<Option<JoinHandle<()>>>,
    peer_timeout: Duration,
    /// How long the service thread keeps polling without sleeping after it served something
    /// ([`Linger`]); None: it sleeps at once.
    poll_spin: Option<Duration>,
    /// Lingers started and lingers that caught input (statistics).
    poll_spins: AtomicU64,
    poll_spin_hits: AtomicU64,
    /// How long a thread waiting for a reply polls the backend itself (`NetConfig::reply_spin`).
    reply_spin: Option<Duration>,
    /// True from the moment the service thread takes events out of the backend (under the
    /// driver lock) until it has dispatched them all: while it is, a waiting thread must not
    /// hand a reply over ahead of them (FIFO per peer).
    svc_busy: AtomicBool,
    /// Replies taken by a spinning waiter, and of those, read by the waiter itself.
    replies_spun: AtomicU64,
    replies_polled: AtomicU64,
    /// Held by whoever runs handlers of events taken from the backend: the service thread
    /// around each batch (`dispatch_out`), a waiting thread around the messages it claimed
    /// ([`Endpoint::poll_once`]). With `svc_busy` and the inbox it keeps FIFO per peer: a
    /// waiter only dispatches when it takes this lock (with `try_lock`, under the driver lock)
    /// and nothing read earlier is undispatched; what the service thread reads later waits for
    /// the lock. Order: driver lock → `try_lock` here only; never block on it under the driver
    /// lock (a dispatcher sends, which takes the driver lock).
    dispatch: Mutex<()>,
    /// Messages handled by a waiting thread ([`Endpoint::poll_once`]).
    waiter_handled: AtomicU64,
}

/// The node's network handle: cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Endpoint {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .field("job", &self.shared.job)
            .finish()
    }
}

impl Endpoint {
    /// Starts the service thread over a connected backend. `setup` runs first, on the service
    /// thread, before any packet is handled: register handlers there to miss nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        rank: NodeId,
        size: u16,
        job: JobId,
        mut backend: Box<dyn Backend>,
        peer_timeout: Duration,
        poll_spin: Option<Duration>,
        reply_spin: Option<Duration>,
        setup: Box<dyn FnOnce(&Endpoint) + Send>,
    ) -> Result<Endpoint, NetError> {
        let poll = Poll::new().map_err(|e| NetError::io("creating the poll", e))?;
        let waker = Waker::new(poll.registry(), WAKER)
            .map_err(|e| NetError::io("creating the waker", e))?;
        backend.register(poll.registry())?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(|e| NetError::io("cloning the poll registry", e))?;
        let shared = Arc::new(Shared {
            rank,
            size,
            job,
            driver: Mutex::new(Driver {
                backend,
                sleeping_until: None,
                spin_until: None,
                inbox: Vec::new(),
            }),
            waker,
            timer: Mutex::new(TimerState {
                deadline: None,
                stop: false,
            }),
            timer_cv: Condvar::new(),
            posted: Mutex::new(VecDeque::new()),
            posted_len: AtomicUsize::new(0),
            handler_changes: Mutex::new(Vec::new()),
            handlers_gen: AtomicU64::new(0),
            sources: Mutex::new(HashMap::new()),
            sources_len: AtomicUsize::new(0),
            next_source: AtomicUsize::new(SOURCE_TOKEN_BASE),
            registry,
            held: Mutex::new(IntMap::default()),
            held_len: AtomicUsize::new(0),
            pending: Mutex::new(IntMap::default()),
            next_request: AtomicU64::new(1),
            next_landing: AtomicU64::new(1),
            by_type: TypeCounters::default(),
            on_peer_lost: Mutex::new(None),
            peer_state: (0..size).map(|_| AtomicU8::new(PEER_UP)).collect(),
            shutting_down: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            join: Mutex::new(None),
            peer_timeout,
            poll_spin,
            poll_spins: AtomicU64::new(0),
            poll_spin_hits: AtomicU64::new(0),
            reply_spin,
            svc_busy: AtomicBool::new(false),
            replies_spun: AtomicU64::new(0),
            replies_polled: AtomicU64::new(0),
            dispatch: Mutex::new(()),
            waiter_handled: AtomicU64::new(0),
        });
        let ep = Endpoint { shared };
        let timer_ep = ep.clone();
        std::thread::Builder::new()
            .name(format!("squall-timer-{}", rank.0))
            .spawn(move || timer_ep.timer_loop())
            .map_err(|e| NetError::io("spawning the timer thread", e))?;
        let (ready_tx, ready_rx) = bounded(1);
        let svc = ep.clone();
        let handle = std::thread::Builder::new()
            .name(format!("squall-net-{}", rank.0))
            .spawn(move || {
                SERVICE_OF.with(|c| c.set(svc.id()));
                setup(&svc);
                let _ = ready_tx.send(());
                let rank = svc.shared.rank;
                let run = std::panic::AssertUnwindSafe(|| svc.service_loop(poll));
                if std::panic::catch_unwind(run).is_err() {
                    // A handler (or this crate) panicked: the node's state is unknown; end it
                    // rather than leave peers talking to a node that no longer answers.
                    eprintln!(
                        "squall: node {}: the service thread panicked; ending the node",
                        rank.0
                    );
                    std::process::exit(70);
                }
            })
            .map_err(|e| NetError::io("spawning the service thread", e))?;
        *ep.shared.join.lock() = Some(handle);
        ready_rx.recv().map_err(|_| NetError::Shutdown)?;
        Ok(ep)
    }

    /// This node's rank.
    pub fn rank(&self) -> NodeId {
        self.shared.rank
    }
    /// Number of nodes in the job.
    pub fn size(&self) -> u16 {
        self.shared.size
    }
    /// The job id every packet carries.
    pub fn job_id(&self) -> JobId {
        self.shared.job
    }
    /// True on the service thread (inside handlers, posted closures and reply callbacks).
    pub fn is_service_thread(&self) -> bool {
        SERVICE_OF.with(|c| c.get() == self.id())
    }

    /// This endpoint's identity on its service thread (the address of its shared state).
    fn id(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }
    /// The peer timeout this endpoint runs with.
    pub fn peer_timeout(&self) -> Duration {
        self.shared.peer_timeout
    }

    /// Runs `f` with a communicator of MPI's own (a duplicate of the world's, made at start-up)
    /// while no Squall message moves on this node: for MPI code beside Squall, such as the raw
    /// baselines of `squall bench pingpong --transport mpi`. Its messages never mix with
    /// Squall's. `None` (and `f` not run) unless the transport is mpi and MPI is still up.
    ///
    /// Call it on the service thread (from a handler or [`Endpoint::post`]) so that no Squall
    /// thread spins beside `f`. `f` must not use this endpoint (its lock is held), and should
    /// return well within the peer timeout: the peers hear nothing from this node meanwhile.
    #[cfg(feature = "mpi")]
    pub fn with_mpi<R>(
        &self,
        f: impl FnOnce(&::mpi::topology::SimpleCommunicator) -> R,
    ) -> Option<R> {
        let mut f = Some(f);
        let mut out = None;
        self.shared
            .driver
            .lock()
            .backend
            .with_own_mpi(&mut |comm| out = f.take().map(|f| f(comm)));
        out
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> NetStats {
        let mut s = NetStats {
            by_type: self.shared.by_type.snapshot(),
            poll_spins: self.shared.poll_spins.load(Ordering::Relaxed),
            poll_spin_hits: self.shared.poll_spin_hits.load(Ordering::Relaxed),
            replies_spun: self.shared.replies_spun.load(Ordering::Relaxed),
            replies_polled: self.shared.replies_polled.load(Ordering::Relaxed),
            waiter_handled: self.shared.waiter_handled.load(Ordering::Relaxed),
            ..NetStats::default()
        };
        self.shared
            .driver
            .lock()
            .backend
            .counters()
            .merge_into(&mut s);
        s
    }

    /// The udp socket address (udp transport only), e.g. for tests that inject datagrams.
    pub fn udp_local_addr(&self) -> Option<SocketAddr> {
        self.shared.driver.lock().backend.udp_local_addr()
    }

    /// Orderly exit: goodbye to every peer, flush (udp: until acknowledged, at most the peer
    /// timeout), stop the service thread. Pending requests fail with [`NetError::Shutdown`].
    /// Call from an application thread; idempotent.
    pub fn shutdown(&self) -> Result<(), NetError> {
        if self.is_service_thread() {
            return Err(NetError::Config(format!(
                "node {}: shutdown called on the service thread; call it from an application thread",
                self.shared.rank.0
            )));
        }
        if !self.shared.shutting_down.swap(true, Ordering::SeqCst) {
            // Wake the service thread: it starts the goodbyes itself when it first sees the
            // flag, before it ever judges the backend flushed (see `service_loop`).
            self.post(|_| {});
        }
        let handle = self.shared.join.lock().take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        Ok(())
    }
}
