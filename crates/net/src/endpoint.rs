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
use crate::backend::{Backend, BackendEvent, InMsg, OutMsg};
use crate::error::NetError;
use crate::stats::{NetStats, TypeCounters};
use bytes::Bytes;
use crossbeam_channel::bounded;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::{Condvar, Mutex};
use squall_core::{JobId, NodeId};
use squall_wire::{Flags, MsgType};
use std::cell::{Cell, RefCell};
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

const WAKER: Token = Token(0);
/// Tokens of extra sources ([`Endpoint::add_source`]) start here, far above the backends'
/// (which use small tokens from 1: one per peer at most).
const SOURCE_TOKEN_BASE: usize = usize::MAX / 2;
/// How late a timer set by a send from another thread may fire before that send wakes the
/// service thread.
const WAKE_SLACK: Duration = Duration::from_millis(5);
/// Timers at most this far away are the poll's own timeout; later ones (retransmission,
/// heartbeats, peer timeouts) are left to the timer thread, so the poll usually sleeps without
/// a timeout: arming a kernel timer on every sleep cost about 0.35 us per message on the
/// measuring machine (a virtual machine, where programming the timer is expensive).
const SHORT_TIMER: Duration = Duration::from_millis(2);
/// While the backend is hot ([`Backend::hot`]), the service thread makes up to this many
/// [`Backend::poll_hot`] calls between two passes through its poll (waker, extra sources,
/// timers, the clock): the per-message path then has no system call and no clock read, and an
/// extra source (a page fault) waits at most this many probes (a few microseconds).
const HOT_BATCH: u32 = 32;

/// Most lingers a run of empty ones makes the service thread skip (see [`Linger`]).
const MAX_LINGER_SKIP: u32 = 64;

/// When the service thread lingers: after a pass that served input (a message, a fault, a
/// posted closure) it keeps polling without sleeping for `window`, since the answer to what
/// it just sent usually comes within microseconds and is then read without a thread
/// wake-up (on a loaded virtual machine a wake-up costs more than the whole window). A
/// linger that ends empty makes the next 1, 3, 7, ... (at most [`MAX_LINGER_SKIP`]) be
/// skipped; one that catches input resets that, so a slow or idle peer costs almost no CPU.
/// Pure logic: the caller passes the time.
#[derive(Debug)]
struct Linger {
    window: Option<Duration>,
    misses: u32,
    skip: u32,
}

impl Linger {
    fn new(window: Option<Duration>) -> Linger {
        Linger {
            window,
            misses: 0,
            skip: 0,
        }
    }

    /// Input was served at `now`: the instant to keep polling until, if lingering.
    fn start(&mut self, now: Instant) -> Option<Instant> {
        let w = self.window?;
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        Some(now + w)
    }

    /// The linger caught input.
    fn hit(&mut self) {
        self.misses = 0;
        self.skip = 0;
    }

    /// The linger ended empty.
    fn miss(&mut self) {
        self.misses = (self.misses + 1).min(MAX_LINGER_SKIP.trailing_zeros());
        self.skip = (1 << self.misses) - 1;
    }
}

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

/// A handler. Registered from any thread into [`Shared::handler_changes`]; the service thread
/// moves it into its own table ([`SvcHandlers`]) and owns it from then on, so dispatch takes no
/// lock and touches no shared cache line.
type Handler = Box<dyn FnMut(&Endpoint, Incoming) + Send + 'static>;
type Posted = Box<dyn FnOnce(&Endpoint) + Send + 'static>;
type ReplyFn = Box<dyn FnOnce(&Endpoint, Result<Incoming, NetError>) + Send + 'static>;
type PeerLostFn = Box<dyn FnMut(&Endpoint, NodeId, &str) + Send + 'static>;
/// An extra source's readiness callback (shared like a handler, so the service thread runs it
/// without holding the source table's lock).
type SourceFn = Arc<Mutex<dyn FnMut(&Endpoint) + Send + 'static>>;

/// An extra file descriptor the service thread polls (see [`Endpoint::add_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceId(usize);

enum Pending {
    Blocking(Arc<ReplySlot>),
    Async(ReplyFn),
}

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

/// Where the service thread leaves the outcome of a blocking [`Endpoint::request`]: one per
/// application thread, reused (a request costs no channel allocation). Tagged with the request
/// id so a late outcome of an earlier, abandoned request is never taken for the current one.
struct ReplySlot {
    value: Mutex<Option<(u64, Result<Incoming, NetError>)>>,
    cv: Condvar,
}

impl ReplySlot {
    fn put(&self, id: u64, r: Result<Incoming, NetError>) {
        *self.value.lock() = Some((id, r));
        self.cv.notify_one();
    }

    /// The outcome of request `id` if it is here (an earlier request's is dropped).
    fn try_take(&self, id: u64) -> Option<Result<Incoming, NetError>> {
        let mut v = self.value.lock();
        match v.take() {
            Some((rid, r)) if rid == id => Some(r),
            _ => None,
        }
    }

    /// Blocks until the outcome of request `id` is here.
    fn take(&self, id: u64) -> Result<Incoming, NetError> {
        let mut v = self.value.lock();
        loop {
            match v.take() {
                Some((rid, r)) if rid == id => return r,
                // An outcome of an earlier request of this thread: nobody wants it.
                Some(_) => {}
                None => self.cv.wait(&mut v),
            }
        }
    }
}

thread_local! {
    static REPLY_SLOT: Arc<ReplySlot> = Arc::new(ReplySlot {
        value: Mutex::new(None),
        cv: Condvar::new(),
    });
    /// On a service thread: the endpoint it serves (`Endpoint::id`); 0 on other threads.
    static SERVICE_OF: Cell<usize> = const { Cell::new(0) };
    /// On a service thread: its endpoint's handlers, owned by that thread alone.
    static SVC_HANDLERS: RefCell<SvcHandlers> = const {
        RefCell::new(SvcHandlers {
            gen: 0,
            table: Vec::new(),
        })
    };
}

/// One entry of the service thread's handler table.
enum Slot {
    Empty,
    Ready(Handler),
    /// Taken out for a run; put back after it unless replaced or removed meanwhile.
    Running,
}

/// The service thread's handler table, indexed by message type: dispatch is an index, with no
/// lock, hashing or reference count. Registrations reach it through
/// [`Shared::handler_changes`], applied in order when [`Shared::handlers_gen`] moved.
struct SvcHandlers {
    /// The `handlers_gen` the table reflects.
    gen: u64,
    table: Vec<Slot>,
}

const PEER_UP: u8 = 0;
const PEER_BYE: u8 = 1;
const PEER_LOST: u8 = 2;

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

    /// Registers the handler for a message type (≥ 64), replacing any earlier one. Handlers run
    /// on the service thread, one at a time. Messages that arrived for a type before its handler
    /// was registered are held and delivered, in order, once it is.
    ///
    /// # Panics
    /// If `ty` is below 64 (reserved for the transport): a programming error.
    pub fn register(&self, ty: MsgType, h: impl FnMut(&Endpoint, Incoming) + Send + 'static) {
        assert!(
            !ty.is_reserved(),
            "{ty} is reserved for the transport (types below 64)"
        );
        self.change_handler(ty.0, Some(Box::new(h)));
        if self
            .shared
            .held
            .lock()
            .get(&ty.0)
            .is_some_and(|q| !q.is_empty())
        {
            self.post(move |ep| ep.flush_held(ty.0));
        }
    }

    /// Removes the handler of a type; later messages of that type are held.
    pub fn unregister(&self, ty: MsgType) {
        // A run in progress finishes; no later message reaches it.
        self.change_handler(ty.0, None);
    }

    /// Queues a registration (`Some`) or removal for the service thread's table.
    fn change_handler(&self, ty: u16, h: Option<Handler>) {
        let mut c = self.shared.handler_changes.lock();
        c.push((ty, h));
        self.shared.handlers_gen.fetch_add(1, Ordering::Release);
    }

    /// Sends a one-way message of any size. FIFO per destination, delivered exactly once.
    /// Callable from any thread, including handlers. Sending to oneself delivers through the
    /// service thread like any other message.
    pub fn send(&self, to: NodeId, ty: MsgType, payload: impl Into<Bytes>) -> Result<(), NetError> {
        if ty.is_reserved() {
            return Err(NetError::ReservedType { ty });
        }
        self.send_raw(to, ty, Flags::empty(), 0, payload.into())
    }

    /// Sends a one-way message whose payload is `head` followed by `body`, like
    /// [`Endpoint::send`], without joining them first where the transport can avoid it: tcp
    /// writes both straight from the caller's buffers to the socket (what the socket does not
    /// take at once is copied); other transports and sends to oneself join them (one copy).
    pub fn send_borrowed(
        &self,
        to: NodeId,
        ty: MsgType,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), NetError> {
        if ty.is_reserved() {
            return Err(NetError::ReservedType { ty });
        }
        if to == self.shared.rank || to.0 >= self.shared.size {
            let joined = crate::backend::join(head, body);
            return self.send_raw(to, ty, Flags::empty(), 0, joined);
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(NetError::Shutdown);
        }
        match self.shared.peer_state[to.index()].load(Ordering::Acquire) {
            PEER_BYE => return Err(NetError::PeerGone { peer: to }),
            PEER_LOST => {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: "lost earlier".into(),
                })
            }
            _ => {}
        }
        let on_service = self.is_service_thread();
        self.count_sent(ty, head.len() + body.len(), on_service);
        let msg = OutMsg {
            to,
            ty,
            flags: Flags::empty(),
            request_id: 0,
            payload: Bytes::copy_from_slice(head),
        };
        let timer = {
            let mut d = self.shared.driver.lock();
            let now = match on_service {
                true => d.backend.send_clock(),
                false => None,
            };
            d.backend
                .send_split(now.unwrap_or_else(Instant::now), msg, body)?;
            Self::timer_for_sleeper(&mut d)
        };
        if let Some(t) = timer {
            self.arm_timer(t);
        }
        Ok(())
    }

    /// Sends a request and blocks until its reply arrives. Not callable on the service thread
    /// (it would deadlock): use [`Endpoint::request_async`] there.
    pub fn request(
        &self,
        to: NodeId,
        ty: MsgType,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, NetError> {
        if self.is_service_thread() {
            return Err(NetError::WouldDeadlock { peer: to });
        }
        if ty.is_reserved() {
            return Err(NetError::ReservedType { ty });
        }
        let slot = REPLY_SLOT.with(Arc::clone);
        let id = self.shared.next_request.fetch_add(1, Ordering::Relaxed);
        self.shared
            .pending
            .lock()
            .insert(id, (to, Pending::Blocking(Arc::clone(&slot))));
        if let Err(e) = self.send_raw(to, ty, Flags::REQUEST, id, payload.into()) {
            if self.shared.pending.lock().remove(&id).is_none() {
                // Failed meanwhile (peer lost, shutdown): its outcome is on its way to the
                // slot; collect it so it cannot linger there.
                let _ = slot.take(id);
            }
            return Err(e);
        }
        self.wait_reply(&slot, id, to).map(|inc| inc.payload)
    }

    /// Waits for the outcome of blocking request `id` to `to`. For `reply_spin` this thread
    /// (idle anyway) polls the backend itself between looks at its slot, yielding the CPU
    /// after each so it never keeps a runnable thread (the service thread, a peer's) off it:
    /// the reply is then read and taken with no thread wake-up. After that, or if the backend
    /// cannot be polled from here, it sleeps until the service thread hands the outcome over.
    fn wait_reply(&self, slot: &ReplySlot, id: u64, to: NodeId) -> Result<Incoming, NetError> {
        let Some(window) = self.shared.reply_spin else {
            return slot.take(id);
        };
        let until = Instant::now() + window;
        // Requests to oneself are delivered through the service thread.
        let mut polling = to != self.shared.rank;
        let mut evs = Vec::new();
        loop {
            if polling {
                polling = self.poll_for_reply(to, &mut evs);
            }
            if let Some(r) = slot.try_take(id) {
                self.shared.replies_spun.fetch_add(1, Ordering::Relaxed);
                return r;
            }
            if Instant::now() >= until {
                return slot.take(id);
            }
            std::thread::yield_now();
        }
    }

    /// One look at the backend's input from a thread waiting for a reply from `from` (see
    /// [`Endpoint::wait_reply`]). Replies to blocking requests at the head of what it read are
    /// handed to their waiters from here, when nothing read earlier still waits for the
    /// service thread; everything else, and everything after it, goes to the service
    /// thread's inbox in order, and wakes it. False if the backend cannot be polled this way.
    fn poll_for_reply(&self, from: NodeId, evs: &mut Vec<BackendEvent>) -> bool {
        let mut direct: Vec<(u64, Arc<ReplySlot>, Incoming)> = Vec::new();
        let (timer, wake) = {
            // The service thread is at the backend: it reads what came; look again later.
            let Some(mut d) = self.shared.driver.try_lock() else {
                return true;
            };
            if !d.backend.poll_input(Instant::now(), from, evs) {
                return false;
            }
            let mut in_order = d.inbox.is_empty()
                && !self.shared.svc_busy.load(Ordering::Acquire)
                && !self.shared.dispatch.is_locked();
            let mut wake = false;
            for ev in evs.drain(..) {
                if in_order {
                    match self.take_blocking_reply(ev) {
                        Ok(r) => {
                            direct.extend(r);
                            continue;
                        }
                        Err(ev) => {
                            in_order = false;
                            d.inbox.push(ev);
                        }
                    }
                } else {
                    d.inbox.push(ev);
                }
                wake = true;
            }
            // What the read set going (e.g. an acknowledgement's timer) while the service
            // thread sleeps: as for a send.
            (Self::timer_for_sleeper(&mut d), wake)
        };
        for (id, slot, inc) in direct {
            self.shared.by_type.received(inc.ty.0, inc.payload.len());
            self.shared.replies_polled.fetch_add(1, Ordering::Relaxed);
            slot.put(id, Ok(inc));
        }
        if let Some(t) = timer {
            self.arm_timer(t);
        }
        if wake {
            let _ = self.shared.waker.wake();
        }
        true
    }

    /// `ev` if it is not a reply to a blocking request; else that request's slot and reply
    /// (taken out of the pending table), or None if nobody waits for it any more.
    #[allow(clippy::type_complexity)]
    fn take_blocking_reply(
        &self,
        ev: BackendEvent,
    ) -> Result<Option<(u64, Arc<ReplySlot>, Incoming)>, BackendEvent> {
        let BackendEvent::Deliver(m) = ev else {
            return Err(ev);
        };
        if !m.flags.contains(Flags::REPLY) || m.ty.0 == TY_LOST_NOTICE {
            return Err(BackendEvent::Deliver(m));
        }
        let mut p = self.shared.pending.lock();
        match p.get(&m.request_id) {
            Some((_, Pending::Blocking(_))) => {}
            // An asynchronous request's callback runs on the service thread.
            Some((_, Pending::Async(_))) => return Err(BackendEvent::Deliver(m)),
            None => {
                drop(p);
                // A reply nobody waits for any more (as `deliver` drops it).
                self.shared.by_type.received(m.ty.0, m.payload.len());
                return Ok(None);
            }
        }
        let Some((_, Pending::Blocking(slot))) = p.remove(&m.request_id) else {
            return Ok(None);
        };
        let inc = Incoming {
            src: m.src,
            ty: m.ty,
            payload: m.payload,
            request_id: m.request_id,
            flags: m.flags,
            placed: m.placed,
        };
        Ok(Some((m.request_id, slot, inc)))
    }

    /// Runs `f` while `dest` is lent to the transport for one expected message from `from`
    /// of type `ty` whose payload is `head` followed by exactly `dest.len()` bytes: on tcp
    /// (without authentication) those bytes are read from the socket straight into `dest`,
    /// and the message reaches its handler with `payload` = `head` and
    /// [`Incoming::placed`] = `dest.len()`. A message that began arriving before the call, or
    /// is not complete when `f` returns (its bytes so far are copied back into the
    /// transport's buffer), and every message on udp (and MPI) arrives whole as usual, with
    /// `placed() == 0`: the handler must take both forms. After the call the transport no
    /// longer touches `dest`. The message must be one that is not a reply to a request.
    pub fn receive_into<R>(
        &self,
        from: NodeId,
        ty: MsgType,
        head: &[u8],
        dest: &mut [u8],
        f: impl FnOnce() -> R,
    ) -> R {
        if from == self.shared.rank || from.0 >= self.shared.size {
            return f();
        }
        let id = self.shared.next_landing.fetch_add(1, Ordering::Relaxed);
        crate::landing::lend(
            dest,
            |d| {
                self.shared
                    .driver
                    .lock()
                    .backend
                    .expect_into(id, from, ty, head, d)
            },
            f,
            || self.shared.driver.lock().backend.forget_expect(id),
        )
    }

    /// How long a thread waiting for a reply polls the network itself before it sleeps
    /// (`NetConfig::reply_spin`, `SQUALL_REPLY_SPIN_US`); None: it sleeps at once. Layers
    /// above that wait for other messages ([`Endpoint::poll_once`]) use the same window.
    pub fn reply_spin(&self) -> Option<Duration> {
        self.shared.reply_spin
    }

    /// The waiting loop of an application thread for the reply spin: until `done` yields a
    /// value, look at the network ([`Endpoint::poll_once`]) and yield the CPU between looks.
    /// `None` when there is no spin, the window ended, or the network cannot be polled from
    /// this thread: the caller then sleeps its usual way. Holds no lock across a look or a
    /// yield.
    pub fn wait_polling<T>(
        &self,
        claims: &dyn Fn(MsgType) -> bool,
        handle: &mut dyn FnMut(&Endpoint, Incoming),
        mut done: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        let until = Instant::now() + self.reply_spin()?;
        loop {
            if let Some(v) = done() {
                return Some(v);
            }
            if Instant::now() >= until || !self.poll_once(claims, handle) {
                return None;
            }
            if let Some(v) = done() {
                return Some(v);
            }
            std::thread::yield_now();
        }
    }

    /// One look at the network from an application thread that waits for something a message
    /// will bring (a lock grant, a barrier release), so that the message is read and handled
    /// by the thread that wants it, with no wake-up of the service thread or of itself.
    ///
    /// Reads what has arrived from every peer. The leading messages whose type `claims`
    /// accepts are given to `handle` on this thread, in order, and replies to blocking
    /// requests among them go to their waiters (as in [`Endpoint::request`]); the first
    /// message it may not take, and everything after it, goes to the service thread (which
    /// is woken). It dispatches only when nothing read earlier is still waiting for the
    /// service thread or another waiter, and it holds the dispatch lock while `handle` runs,
    /// so the service thread runs what it reads later afterwards: FIFO per peer holds across
    /// both threads. `handle` runs without the endpoint's locks other than that one: it may
    /// send, and take the caller's own locks, but must not block on anything the service
    /// thread's handlers may hold while they wait (it would stall the service thread too).
    ///
    /// Returns false if there is nothing to look at from here (the service thread, a
    /// stopped endpoint, a backend that cannot be polled by other threads): then sleep
    /// instead. True otherwise, even when someone else was at the network (look again later).
    pub fn poll_once(
        &self,
        claims: &dyn Fn(MsgType) -> bool,
        handle: &mut dyn FnMut(&Endpoint, Incoming),
    ) -> bool {
        enum Local {
            Reply(u64, Arc<ReplySlot>, Incoming),
            Claimed(Incoming),
        }
        if self.is_service_thread() || self.shared.stopped.load(Ordering::Acquire) {
            return false;
        }
        let mut evs = Vec::new();
        let mut mine: Vec<Local> = Vec::new();
        let (order, timer, wake) = {
            let Some(mut d) = self.shared.driver.try_lock() else {
                return true;
            };
            let now = Instant::now();
            for p in (0..self.shared.size).map(NodeId) {
                if p != self.shared.rank && !d.backend.poll_input(now, p, &mut evs) {
                    return false;
                }
            }
            if evs.is_empty() {
                return true;
            }
            // The dispatch lock, only if nothing read earlier waits (see `Shared::dispatch`).
            let mut order = if d.inbox.is_empty() && !self.shared.svc_busy.load(Ordering::Acquire) {
                self.shared.dispatch.try_lock()
            } else {
                None
            };
            let mut wake = false;
            let mut read = std::mem::take(&mut evs).into_iter();
            while let Some(ev) = read.next() {
                if order.is_some() {
                    let ev = match ev {
                        BackendEvent::Deliver(m)
                            if !m.ty.is_reserved()
                                && !m.flags.contains(Flags::REPLY)
                                && claims(m.ty)
                                && self.shared.held_len.load(Ordering::Acquire) == 0 =>
                        {
                            mine.push(Local::Claimed(Incoming {
                                src: m.src,
                                ty: m.ty,
                                payload: m.payload,
                                request_id: m.request_id,
                                flags: m.flags,
                                placed: m.placed,
                            }));
                            continue;
                        }
                        ev => ev,
                    };
                    match self.take_blocking_reply(ev) {
                        Ok(r) => {
                            mine.extend(r.map(|(id, slot, inc)| Local::Reply(id, slot, inc)));
                            continue;
                        }
                        Err(ev) => d.inbox.push(ev),
                    }
                } else {
                    d.inbox.push(ev);
                }
                // From here on everything is the service thread's, in order.
                d.inbox.extend(read.by_ref());
                wake = true;
            }
            if mine.is_empty() {
                // Nothing taken: the service thread need not wait for this thread.
                order = None;
            }
            (order, Self::timer_for_sleeper(&mut d), wake)
        };
        if let Some(t) = timer {
            self.arm_timer(t);
        }
        if wake {
            let _ = self.shared.waker.wake();
        }
        for l in mine {
            match l {
                Local::Reply(id, slot, inc) => {
                    self.shared.by_type.received(inc.ty.0, inc.payload.len());
                    self.shared.replies_polled.fetch_add(1, Ordering::Relaxed);
                    slot.put(id, Ok(inc));
                }
                Local::Claimed(inc) => {
                    self.shared.by_type.received(inc.ty.0, inc.payload.len());
                    self.shared.waiter_handled.fetch_add(1, Ordering::Relaxed);
                    handle(self, inc);
                }
            }
        }
        drop(order);
        true
    }

    /// Sends a request; `on_reply` runs on the service thread with the reply (or the error that
    /// ended the wait, e.g. [`NetError::PeerLost`]). Usable from handlers.
    pub fn request_async(
        &self,
        to: NodeId,
        ty: MsgType,
        payload: impl Into<Bytes>,
        on_reply: impl FnOnce(&Endpoint, Result<Incoming, NetError>) + Send + 'static,
    ) -> Result<(), NetError> {
        if ty.is_reserved() {
            return Err(NetError::ReservedType { ty });
        }
        let id = self.shared.next_request.fetch_add(1, Ordering::Relaxed);
        self.shared
            .pending
            .lock()
            .insert(id, (to, Pending::Async(Box::new(on_reply))));
        if let Err(e) = self.send_raw(to, ty, Flags::REQUEST, id, payload.into()) {
            self.shared.pending.lock().remove(&id);
            return Err(e);
        }
        Ok(())
    }

    /// Answers a request (from its handler or later, from any thread).
    pub fn reply(&self, req: &Incoming, payload: impl Into<Bytes>) -> Result<(), NetError> {
        if !req.is_request() {
            return Err(NetError::NotARequest {
                src: req.src,
                ty: req.ty,
            });
        }
        self.send_raw(
            req.src,
            req.ty,
            Flags::REPLY,
            req.request_id,
            payload.into(),
        )
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

    /// Runs a closure on the service thread (after the handlers already queued).
    pub fn post(&self, f: impl FnOnce(&Endpoint) + Send + 'static) {
        {
            let mut q = self.shared.posted.lock();
            q.push_back(Box::new(f));
            self.shared.posted_len.store(q.len(), Ordering::Release);
        }
        if !self.is_service_thread() {
            let _ = self.shared.waker.wake();
        }
    }

    /// Polls `fd` on the service thread beside the network: `on_ready` runs there (like a
    /// handler, one at a time with them) whenever `fd` becomes readable. Readiness is
    /// edge-triggered: the callback must consume everything available (read until
    /// `EWOULDBLOCK`), or it is not called again until new input arrives. If `fd` is readable
    /// already, the callback runs soon after registration. The caller keeps `fd` open until
    /// [`Endpoint::remove_source`] (or the end of the endpoint). Callable from any thread.
    pub fn add_source(
        &self,
        fd: RawFd,
        on_ready: impl FnMut(&Endpoint) + Send + 'static,
    ) -> Result<SourceId, NetError> {
        let token = self.shared.next_source.fetch_add(1, Ordering::Relaxed);
        let f: SourceFn = Arc::new(Mutex::new(on_ready));
        // In the table before the poll can report it.
        self.change_sources(|s| {
            s.insert(token, (fd, f));
        });
        if let Err(e) =
            self.shared
                .registry
                .register(&mut SourceFd(&fd), Token(token), Interest::READABLE)
        {
            self.change_sources(|s| {
                s.remove(&token);
            });
            return Err(NetError::io(
                format!("registering fd {fd} with the poll"),
                e,
            ));
        }
        Ok(SourceId(token))
    }

    /// Changes the table of extra sources under its lock and keeps its lock-free count.
    fn change_sources<R>(&self, f: impl FnOnce(&mut HashMap<usize, (RawFd, SourceFn)>) -> R) -> R {
        let mut sources = self.shared.sources.lock();
        let r = f(&mut sources);
        self.shared
            .sources_len
            .store(sources.len(), Ordering::Release);
        r
    }

    /// Stops polling a source added with [`Endpoint::add_source`] and drops its callback (a
    /// run in progress finishes). Returns false if it was not registered.
    pub fn remove_source(&self, id: SourceId) -> bool {
        let Some((fd, _)) = self.change_sources(|s| s.remove(&id.0)) else {
            return false;
        };
        // The fd may be closed already (which removed it from the poll): nothing to undo then.
        let _ = self.shared.registry.deregister(&mut SourceFd(&fd));
        true
    }

    /// Until `until` (or [`Endpoint::stop_spin`]), the service thread polls the network and
    /// the sources without sleeping, so input is read the moment it arrives instead of after a
    /// thread wake-up. For short, bounded waits on the critical path (a page fetch whose reply
    /// is due within microseconds); it costs a CPU while it lasts. A later call replaces the
    /// deadline. From another thread it takes effect at the service thread's next wake-up.
    pub fn spin_until(&self, until: Instant) {
        self.shared.driver.lock().spin_until = Some(until);
    }

    /// Ends a spin started with [`Endpoint::spin_until`]: the service thread sleeps again when
    /// it has nothing to do.
    pub fn stop_spin(&self) {
        self.shared.driver.lock().spin_until = None;
    }

    /// Sets what happens when a peer dies or goes silent (runs on the service thread after the
    /// pending requests to that peer have failed). Default: print
    /// `squall: node R: lost contact with node P (reason); ending the job` and exit with status 3.
    pub fn set_on_peer_lost(&self, f: impl FnMut(&Endpoint, NodeId, &str) + Send + 'static) {
        *self.shared.on_peer_lost.lock() = Some(Box::new(f));
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

    fn count_sent(&self, ty: MsgType, len: usize, on_service: bool) {
        if on_service {
            self.shared.by_type.sent_owned(ty.0, len);
        } else {
            self.shared.by_type.sent(ty.0, len);
        }
    }

    fn send_raw(
        &self,
        to: NodeId,
        ty: MsgType,
        flags: Flags,
        request_id: u64,
        payload: Bytes,
    ) -> Result<(), NetError> {
        if to.0 >= self.shared.size {
            return Err(NetError::BadDestination {
                peer: to,
                size: self.shared.size,
            });
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(NetError::Shutdown);
        }
        let on_service = self.is_service_thread();
        self.count_sent(ty, payload.len(), on_service);
        if to == self.shared.rank {
            let msg = InMsg {
                src: to,
                ty,
                flags,
                request_id,
                payload,
                placed: 0,
            };
            self.post(move |ep| ep.deliver(msg));
            return Ok(());
        }
        match self.shared.peer_state[to.index()].load(Ordering::Acquire) {
            PEER_BYE => return Err(NetError::PeerGone { peer: to }),
            PEER_LOST => {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: "lost earlier".into(),
                })
            }
            _ => {}
        }
        let msg = OutMsg {
            to,
            ty,
            flags,
            request_id,
            payload,
        };
        let timer = {
            let mut d = self.shared.driver.lock();
            // The service thread may send with the backend's own recent clock (no clock read
            // per message on the latency path).
            let now = match on_service {
                true => d.backend.send_clock(),
                false => None,
            };
            d.backend.send(now.unwrap_or_else(Instant::now), msg)?;
            Self::timer_for_sleeper(&mut d)
        };
        if let Some(t) = timer {
            // A timer created while the service thread sleeps (e.g. the retransmission timer
            // of a request sent from an application thread): the timer thread takes it, which
            // usually costs nothing, since an earlier deadline is already set.
            self.arm_timer(t);
        }
        Ok(())
    }

    /// After another thread used the backend: the backend's next timer if the service thread
    /// sleeps past it (then the caller arms the timer thread); None while it is awake (it
    /// computes its next sleep afterwards) or already wakes in time.
    fn timer_for_sleeper(d: &mut Driver) -> Option<Instant> {
        match d.sleeping_until {
            None => None,
            Some(deadline) => match (d.backend.poll_timeout(), deadline) {
                (Some(t), Some(dl)) if t + WAKE_SLACK >= dl => None,
                (t, _) => t,
            },
        }
    }

    /// Moves what waiting threads read for the service thread ahead of what it reads now
    /// (service thread, under the driver lock; `out` is empty between dispatches).
    fn take_inbox(d: &mut Driver, out: &mut Vec<BackendEvent>) {
        if !d.inbox.is_empty() {
            out.append(&mut d.inbox);
        }
    }

    /// The service thread took `out` from the backend (under the driver lock): until it has
    /// dispatched them, waiting threads leave replies they read to it.
    fn mark_busy(&self, out: &[BackendEvent]) {
        if !out.is_empty() {
            self.shared.svc_busy.store(true, Ordering::Release);
        }
    }

    /// Dispatches `out` (under the dispatch lock: after a waiting thread's dispatch of what
    /// it read earlier) and ends the busy mark. Not under the driver lock.
    fn dispatch_out(&self, out: &mut Vec<BackendEvent>) {
        if !out.is_empty() {
            let _order = self.shared.dispatch.lock();
            self.handle_events(out);
            self.shared.svc_busy.store(false, Ordering::Release);
        }
    }

    /// Makes the timer thread wake the service thread by `t` (give or take [`WAKE_SLACK`]:
    /// timers may run a little late rather than cost a wake-up per send; they only matter
    /// when something was lost).
    fn arm_timer(&self, t: Instant) {
        let mut st = self.shared.timer.lock();
        if st.deadline.is_none_or(|d| t + WAKE_SLACK < d) {
            st.deadline = Some(t);
            self.shared.timer_cv.notify_one();
        }
    }

    /// The timer thread: sleeps until the deadline, then wakes the service thread.
    fn timer_loop(&self) {
        let mut st = self.shared.timer.lock();
        while !st.stop {
            match st.deadline {
                None => self.shared.timer_cv.wait(&mut st),
                Some(d) if d > Instant::now() => {
                    let _ = self.shared.timer_cv.wait_until(&mut st, d);
                }
                Some(_) => {
                    st.deadline = None;
                    let _ = self.shared.waker.wake();
                }
            }
        }
    }

    /// Takes the handler of `ty` out of the service thread's table for one run (registrations
    /// made since the last look applied first). Service thread only.
    fn take_handler(&self, ty: u16) -> Option<Handler> {
        let gen = self.shared.handlers_gen.load(Ordering::Acquire);
        SVC_HANDLERS.with(|t| {
            let mut t = t.borrow_mut();
            if t.gen != gen {
                let mut c = self.shared.handler_changes.lock();
                for (ty, h) in c.drain(..) {
                    let i = usize::from(ty);
                    if t.table.len() <= i {
                        t.table.resize_with(i + 1, || Slot::Empty);
                    }
                    t.table[i] = h.map_or(Slot::Empty, Slot::Ready);
                }
                t.gen = self.shared.handlers_gen.load(Ordering::Acquire);
            }
            let slot = t.table.get_mut(usize::from(ty))?;
            match std::mem::replace(slot, Slot::Running) {
                Slot::Ready(h) => Some(h),
                other => {
                    *slot = other;
                    None
                }
            }
        })
    }

    /// Runs `inc`'s handler; gives `inc` back if its type has none (service thread only).
    fn run_handler(&self, inc: Incoming) -> Result<(), Incoming> {
        let ty = inc.ty.0;
        let Some(mut h) = self.take_handler(ty) else {
            return Err(inc);
        };
        h(self, inc);
        SVC_HANDLERS.with(|t| {
            if let Some(slot) = t.borrow_mut().table.get_mut(usize::from(ty)) {
                // Replaced or removed while it ran: the old one is dropped here.
                if matches!(slot, Slot::Running) {
                    *slot = Slot::Ready(h);
                }
            }
        });
        Ok(())
    }

    /// Queues `inc` until its type has a handler (service thread only).
    ///
    /// A registration can race with this: [`Endpoint::register`] publishes the handler, then
    /// looks at the held queue under its lock; this thread found no handler, then queues under
    /// that lock. If the registration looked first (and saw nothing held), its handler is
    /// already published: the generation this thread's table was built from is stale, and the
    /// queue is flushed here. Without it the message (and every later one of its type, which
    /// queues behind it) would wait forever.
    fn hold(&self, inc: Incoming, front: bool) {
        let ty = inc.ty.0;
        #[cfg(test)]
        tests::widen_hold_race();
        {
            let mut held = self.shared.held.lock();
            let q = held.entry(ty).or_default();
            if front {
                q.push_front(inc);
            } else {
                q.push_back(inc);
            }
            self.shared.held_len.fetch_add(1, Ordering::Release);
        }
        let gen = self.shared.handlers_gen.load(Ordering::Acquire);
        if SVC_HANDLERS.with(|t| t.borrow().gen != gen) {
            self.post(move |ep| ep.flush_held(ty));
        }
    }

    fn flush_held(&self, ty: u16) {
        loop {
            let next = {
                let mut held = self.shared.held.lock();
                let next = held.get_mut(&ty).and_then(VecDeque::pop_front);
                if next.is_some() {
                    self.shared.held_len.fetch_sub(1, Ordering::Release);
                }
                next
            };
            let Some(inc) = next else { break };
            if !self.dispatch(inc) {
                break;
            }
        }
    }

    /// Runs the handler for `inc`, or holds it (at the front: it came out of the hold queue).
    /// Returns false if it was held.
    fn dispatch(&self, inc: Incoming) -> bool {
        match self.run_handler(inc) {
            Ok(()) => true,
            Err(inc) => {
                self.hold(inc, true);
                false
            }
        }
    }

    fn deliver(&self, msg: InMsg) {
        if msg.ty.0 == TY_LOST_NOTICE {
            if msg.payload.len() >= 2 {
                let peer = NodeId(u16::from_le_bytes([msg.payload[0], msg.payload[1]]));
                let why = String::from_utf8_lossy(&msg.payload[2..]);
                self.peer_lost(peer, format!("{} reports: {why}", msg.src));
            }
            return;
        }
        // Deliveries run on the service thread: the owner of the counters' cheap half.
        self.shared
            .by_type
            .received_owned(msg.ty.0, msg.payload.len());
        let inc = Incoming {
            src: msg.src,
            ty: msg.ty,
            payload: msg.payload,
            request_id: msg.request_id,
            flags: msg.flags,
            placed: msg.placed,
        };
        if msg.flags.contains(Flags::REPLY) {
            let pending = self.shared.pending.lock().remove(&msg.request_id);
            match pending {
                Some((_, Pending::Blocking(slot))) => slot.put(msg.request_id, Ok(inc)),
                Some((_, Pending::Async(f))) => f(self, Ok(inc)),
                None => {} // a reply nobody waits for any more
            }
            return;
        }
        // Earlier messages of this type still held: queue behind them (FIFO).
        let must_hold = self.shared.held_len.load(Ordering::Acquire) > 0 && {
            let held = self.shared.held.lock();
            held.get(&msg.ty.0).is_some_and(|q| !q.is_empty())
        };
        if must_hold {
            self.hold(inc, false);
            return;
        }
        if let Err(inc) = self.run_handler(inc) {
            self.hold(inc, false);
        }
    }

    fn fail_pending(&self, peer: Option<NodeId>, err: impl Fn() -> NetError) {
        let failed: Vec<(u64, Pending)> = {
            let mut p = self.shared.pending.lock();
            let ids: Vec<u64> = p
                .iter()
                .filter(|(_, (to, _))| peer.is_none_or(|x| x == *to))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| p.remove(&id).map(|(_, x)| (id, x)))
                .collect()
        };
        for (id, f) in failed {
            match f {
                Pending::Blocking(slot) => slot.put(id, Err(err())),
                Pending::Async(cb) => cb(self, Err(err())),
            }
        }
    }

    fn peer_lost(&self, peer: NodeId, reason: String) {
        if peer.0 >= self.shared.size {
            return;
        }
        let prev = self.shared.peer_state[peer.index()].swap(PEER_LOST, Ordering::AcqRel);
        if prev != PEER_UP {
            self.shared.peer_state[peer.index()].store(prev, Ordering::Release);
            return;
        }
        self.fail_pending(Some(peer), || NetError::PeerLost {
            peer,
            reason: reason.clone(),
        });
        if self.shared.shutting_down.load(Ordering::Acquire) {
            return;
        }
        // Tell the others first (best effort), so they name the node that failed.
        let mut notice = peer.0.to_le_bytes().to_vec();
        notice.extend_from_slice(reason.as_bytes());
        let notice = Bytes::from(notice);
        for p in (0..self.shared.size).map(NodeId) {
            if p != peer && p != self.shared.rank {
                let _ = self.send_raw(
                    p,
                    MsgType(TY_LOST_NOTICE),
                    Flags::empty(),
                    0,
                    notice.clone(),
                );
            }
        }
        let cb = self.shared.on_peer_lost.lock().take();
        match cb {
            Some(mut f) => {
                f(self, peer, &reason);
                let mut slot = self.shared.on_peer_lost.lock();
                if slot.is_none() {
                    *slot = Some(f);
                }
            }
            None => {
                eprintln!(
                    "squall: node {}: lost contact with node {} ({reason}); ending the job",
                    self.shared.rank.0, peer.0
                );
                std::process::exit(3);
            }
        }
    }

    fn handle_events(&self, events: &mut Vec<BackendEvent>) {
        // Drained in place: the vector keeps its capacity from one iteration to the next.
        for ev in events.drain(..) {
            match ev {
                BackendEvent::Deliver(m) => self.deliver(m),
                BackendEvent::PeerBye(p) => {
                    if let Some(s) = self.shared.peer_state.get(p.index()) {
                        let _ = s.compare_exchange(
                            PEER_UP,
                            PEER_BYE,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                    }
                    self.fail_pending(Some(p), || NetError::PeerGone { peer: p });
                }
                BackendEvent::PeerLost { peer, reason } => self.peer_lost(peer, reason),
            }
        }
    }

    /// Runs the posted closures (they may send or post more).
    fn run_posted(&self) {
        while self.shared.posted_len.load(Ordering::Acquire) > 0 {
            let next = {
                let mut q = self.shared.posted.lock();
                let f = q.pop_front();
                self.shared.posted_len.store(q.len(), Ordering::Release);
                f
            };
            match next {
                Some(f) => f(self),
                None => break,
            }
        }
    }

    /// While the backend is hot, looks for its input [`HOT_BATCH`] times in a tight loop and
    /// runs the handlers of what arrives, without the poll or the clock; returns at once when
    /// it is not, and early when closures are posted or shutdown begins.
    fn run_hot(&self, out: &mut Vec<BackendEvent>) {
        for _ in 0..HOT_BATCH {
            {
                let mut d = self.shared.driver.lock();
                if !d.backend.hot() {
                    return;
                }
                Self::take_inbox(&mut d, out);
                d.backend.poll_hot(out);
                self.mark_busy(out);
            }
            self.dispatch_out(out);
            if self.shared.posted_len.load(Ordering::Acquire) > 0
                || self.shared.shutting_down.load(Ordering::Acquire)
            {
                return;
            }
        }
    }

    /// One iteration: posted closures, sleep in the poll until readiness, a wake-up or the
    /// backend's next timer, then readiness events and their handlers, then timers.
    /// Timers run after the handlers of what just arrived, so a backend may leave a socket's
    /// remaining reads (the udp driver's final, usually empty, `recvfrom`) to `handle_timeout`:
    /// the reply a handler sends leaves before that syscall instead of after it.
    fn service_loop(&self, mut poll: Poll) {
        let mut events = Events::with_capacity(256);
        let mut out = Vec::new();
        let mut ready: Vec<usize> = Vec::new();
        let mut shutdown_started: Option<Instant> = None;
        let mut linger = Linger::new(self.shared.poll_spin);
        // While Some: polling without sleeping until then (see `Linger`).
        let mut linger_until: Option<Instant> = None;
        loop {
            self.run_hot(&mut out);
            self.run_posted();
            let now = Instant::now();
            if self.shared.shutting_down.load(Ordering::Acquire) {
                if shutdown_started.is_none() {
                    // Goodbyes go out before "flushed" can mean anything: a loop that saw the
                    // flag but not yet the goodbyes would stop with nothing queued, and the
                    // peers would take the closed connections for a failure.
                    self.shared.driver.lock().backend.start_shutdown(now);
                }
                let started = *shutdown_started.get_or_insert(now);
                let flushed = self.shared.driver.lock().backend.is_flushed();
                if flushed || now >= started + self.shared.peer_timeout {
                    break;
                }
            }
            let (timeout, later, spinning, skip_poll) = {
                let mut d = self.shared.driver.lock();
                let spinning = d.spin_until.is_some_and(|u| u > now);
                if !spinning {
                    d.spin_until = None;
                }
                let lingering = linger_until.is_some_and(|u| u > now);
                let t = if spinning
                    || lingering
                    || !d.inbox.is_empty()
                    || self.shared.posted_len.load(Ordering::Acquire) > 0
                {
                    Some(now)
                } else {
                    d.backend.poll_timeout()
                };
                let (poll_until, later) = match t {
                    Some(t) if t > now + SHORT_TIMER => (None, Some(t)),
                    t => (t, None),
                };
                d.sleeping_until = Some(poll_until);
                // A deadline a hair ahead of `now` is due: the poll would round any non-zero
                // wait up to a whole millisecond.
                let wait = poll_until.map(|t| match t.saturating_duration_since(now) {
                    d if d < Duration::from_micros(1) => Duration::ZERO,
                    d => d,
                });
                // A hot backend whose input is not a file descriptor (MPI), with no extra
                // sources: a poll that must not wait could only report the endpoint's or the
                // backend's waker, whose work (posted closures, input queued by other threads)
                // the loop looks at anyway. Its system call is skipped.
                let skip_poll = wait == Some(Duration::ZERO)
                    && d.backend.hot()
                    && self.shared.sources_len.load(Ordering::Acquire) == 0;
                (wait, later, spinning, skip_poll)
            };
            if let Some(t) = later {
                self.arm_timer(t);
            }
            let res = if skip_poll {
                events.clear();
                Ok(())
            } else {
                poll.poll(&mut events, timeout)
            };
            let now = Instant::now();
            if let Some(u) = linger_until {
                if !events.is_empty() {
                    linger.hit();
                    linger_until = None;
                    self.shared.poll_spin_hits.fetch_add(1, Ordering::Relaxed);
                } else if now >= u {
                    linger.miss();
                    linger_until = None;
                }
            }
            if spinning && events.is_empty() && linger_until.is_none() {
                // Nothing yet: let another runnable thread of this CPU (the peer we wait for,
                // on a machine with few cores) go first.
                std::thread::yield_now();
            }
            {
                let mut d = self.shared.driver.lock();
                d.sleeping_until = None;
                if let Err(e) = res {
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        eprintln!("squall: node {}: poll failed: {e}", self.shared.rank.0);
                    }
                }
                Self::take_inbox(&mut d, &mut out);
                for ev in events.iter() {
                    if ev.token().0 >= SOURCE_TOKEN_BASE {
                        ready.push(ev.token().0);
                    } else if ev.token() != WAKER {
                        d.backend.handle_event(now, ev, &mut out);
                    }
                }
                self.mark_busy(&out);
            }
            // Input served in this pass (not a bare wake-up): its answer may come soon.
            let served = !ready.is_empty() || !out.is_empty();
            if served && linger_until.is_none() {
                linger_until = linger.start(now);
                if linger_until.is_some() {
                    self.shared.poll_spins.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Extra sources first: a fault's page request leaves before the handlers of what
            // arrived meanwhile run.
            for token in ready.drain(..) {
                let f = self
                    .shared
                    .sources
                    .lock()
                    .get(&token)
                    .map(|(_, f)| f.clone());
                if let Some(f) = f {
                    (f.lock())(self);
                }
            }
            self.dispatch_out(&mut out);
            {
                let mut d = self.shared.driver.lock();
                Self::take_inbox(&mut d, &mut out);
                d.backend.handle_timeout(Instant::now(), &mut out);
                self.mark_busy(&out);
            }
            self.dispatch_out(&mut out);
        }
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.timer.lock().stop = true;
        self.shared.timer_cv.notify_one();
        self.fail_pending(None, || NetError::Shutdown);
        // The handlers (and what they hold) go with the service thread.
        let table = SVC_HANDLERS.with(|t| std::mem::take(&mut t.borrow_mut().table));
        drop(table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn reply(n: u8) -> Incoming {
        Incoming {
            src: NodeId(1),
            ty: MsgType(70),
            payload: Bytes::from(vec![n]),
            request_id: u64::from(n),
            flags: Flags::REPLY,
            placed: 0,
        }
    }

    #[test]
    fn reply_slot_hands_over_across_threads_and_skips_other_ids() {
        let slot = Arc::new(ReplySlot {
            value: Mutex::new(None),
            cv: Condvar::new(),
        });
        // An outcome of an abandoned request sits in the slot: it must not answer request 2.
        slot.put(1, Ok(reply(1)));
        let s2 = Arc::clone(&slot);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.put(2, Ok(reply(2)));
        });
        let got = slot.take(2).expect("reply 2");
        assert_eq!(&got.payload[..], &[2]);
        t.join().expect("putter");
        assert!(slot.value.lock().is_none());
        slot.put(3, Err(NetError::Shutdown));
        assert!(matches!(slot.take(3), Err(NetError::Shutdown)));
    }

    #[test]
    fn extra_source_runs_on_the_service_thread_until_removed() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
        let (mut tx, rx) = UnixStream::pair().expect("socket pair");
        rx.set_nonblocking(true).expect("non-blocking");
        let fd = rx.as_raw_fd();
        let (got_tx, got_rx) = bounded::<(usize, bool)>(16);
        // The callback owns a clone; `rx` keeps the socket open after the source is removed.
        let mut reader = rx.try_clone().expect("clone");
        let id = ep
            .add_source(fd, move |ep| {
                // Edge-triggered: read everything there is.
                let mut n = 0;
                let mut buf = [0u8; 64];
                while let Ok(k) = reader.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    n += k;
                }
                let _ = got_tx.send((n, ep.is_service_thread()));
            })
            .expect("add source");
        tx.write_all(b"abc").expect("write");
        let (n, on_service) = got_rx.recv_timeout(Duration::from_secs(5)).expect("ready");
        assert_eq!((n, on_service), (3, true));
        // While spinning, posted work and further input are still served.
        ep.spin_until(Instant::now() + Duration::from_millis(50));
        let (done_tx, done_rx) = bounded(1);
        ep.post(move |_| {
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("posted closure ran");
        tx.write_all(b"de").expect("write");
        let (n, _) = got_rx.recv_timeout(Duration::from_secs(5)).expect("ready");
        assert_eq!(n, 2);
        ep.stop_spin();
        assert!(ep.remove_source(id));
        assert!(!ep.remove_source(id), "removed once");
        tx.write_all(b"f").expect("write");
        assert!(
            got_rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a removed source is not polled"
        );
        ep.shutdown().expect("shutdown");
        drop(rx);
    }

    #[test]
    fn handler_table_holds_replaces_and_removes_in_order() {
        let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
        let me = ep.rank();
        let (tx, rx) = bounded::<(u8, u8)>(64);
        // Sent before any handler: held, then delivered in order once one is registered.
        for i in 0..3u8 {
            ep.send(me, MsgType(100), vec![i]).expect("send");
        }
        let t1 = tx.clone();
        ep.register(MsgType(100), move |ep, inc| {
            let n = inc.payload[0];
            let _ = t1.send((1, n));
            if n == 3 {
                // Replaced from inside: the next message goes to the new handler.
                let t2 = t1.clone();
                ep.register(MsgType(100), move |ep, inc| {
                    let n = inc.payload[0];
                    let _ = t2.send((2, n));
                    if n == 4 {
                        // Removed while it runs: later messages are held.
                        ep.unregister(MsgType(100));
                    }
                });
            }
        });
        for i in 3..7u8 {
            ep.send(me, MsgType(100), vec![i]).expect("send");
        }
        let got: Vec<(u8, u8)> = (0..5)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("delivered"))
            .collect();
        assert_eq!(got, vec![(1, 0), (1, 1), (1, 2), (1, 3), (2, 4)]);
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "held while no handler is registered"
        );
        ep.register(MsgType(100), move |_, inc| {
            let _ = tx.send((3, inc.payload[0]));
        });
        let got: Vec<(u8, u8)> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("delivered"))
            .collect();
        assert_eq!(got, vec![(3, 5), (3, 6)]);
        let by_type = ep.stats().by_type;
        let c = by_type.get(&100).expect("counted");
        assert_eq!((c.sent, c.received), (7, 7));
        ep.shutdown().expect("shutdown");
    }

    /// Microseconds `hold` sleeps before queueing (tests only): widens the window in which a
    /// registration can slip between "no handler" and "held".
    static HOLD_RACE_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    pub(super) fn widen_hold_race() {
        let us = HOLD_RACE_US.load(Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    #[test]
    fn a_handler_registered_while_its_messages_arrive_gets_every_one() {
        // Registration races with the service thread finding no handler and holding the
        // message (a CI hang: a barrier request held forever behind a handler registered a
        // moment too late). Many rounds, each a new type, registered mid-stream.
        let ep = crate::bootstrap::start(crate::NetConfig::single()).expect("single node");
        let me = ep.rank();
        HOLD_RACE_US.store(300, Ordering::Relaxed);
        for round in 0..60u16 {
            let ty = MsgType(100 + round);
            let sender = {
                let ep = ep.clone();
                std::thread::spawn(move || {
                    for i in 0..40u8 {
                        ep.send(me, ty, vec![i]).expect("send");
                    }
                })
            };
            // Register while the first messages are being found handler-less.
            std::thread::sleep(Duration::from_micros(u64::from(round % 4) * 100));
            let (tx, rx) = bounded::<u8>(64);
            ep.register(ty, move |_, inc| {
                let _ = tx.send(inc.payload[0]);
            });
            sender.join().expect("sender");
            let got: Vec<u8> = (0..40)
                .map(|_| {
                    rx.recv_timeout(Duration::from_secs(5))
                        .unwrap_or_else(|_| panic!("round {round}: a message was never delivered"))
                })
                .collect();
            assert_eq!(got, (0..40).collect::<Vec<u8>>(), "round {round}: in order");
            ep.unregister(ty);
        }
        HOLD_RACE_US.store(0, Ordering::Relaxed);
        ep.shutdown().expect("shutdown");
    }

    #[test]
    fn linger_backs_off_after_empty_windows_and_resets_on_a_hit() {
        let t0 = Instant::now();
        let w = Duration::from_micros(20);
        let mut l = Linger::new(Some(w));
        assert_eq!(l.start(t0), Some(t0 + w));
        l.hit();
        assert_eq!(l.start(t0), Some(t0 + w), "a hit keeps lingering on");
        // Empty windows in a row: the next 1, 3, 7, ... up to 63 are skipped.
        let mut skips = Vec::new();
        for _ in 0..8 {
            l.miss();
            let mut skipped = 0;
            while l.start(t0).is_none() {
                skipped += 1;
            }
            skips.push(skipped);
        }
        assert_eq!(skips, [1, 3, 7, 15, 31, 63, 63, 63]);
        l.hit();
        assert!(l.start(t0).is_some(), "no back-off after a hit");
        assert_eq!(Linger::new(None).start(t0), None, "off: never");
    }

    #[test]
    fn int_hasher_keeps_small_keys_apart() {
        let b = BuildHasherDefault::<IntHasher>::default();
        let mut seen = std::collections::HashSet::new();
        for ty in 0u16..4096 {
            assert!(seen.insert(b.hash_one(ty)), "type {ty} collides");
        }
        assert_ne!(b.hash_one(1u64), b.hash_one(2u64));
    }
}
