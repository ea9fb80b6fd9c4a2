//! The MPI backend (feature `mpi`): a plain message, request or reply of up to [`RX_MAX`]
//! bytes travels *headerless*: one MPI point-to-point message on `MPI_COMM_WORLD` holding just
//! its payload (a request or reply: plus its 8-byte request id), sent straight from the
//! caller's buffer, with the message type, the kind and 10 job-check bits in the MPI tag
//! ([`mpi_tag`]); MPI supplies the rest of what the wire header carries elsewhere (source
//! rank and length in the status, exactly-once, per-pair order). Everything else (goodbyes,
//! and every message if `MPI_TAG_UB` is below `2^31 - 1` or `SQUALL_MPI_HEADERLESS=0`) is
//! *framed*: a frame (wire header + payload) up to [`RX_MAX`] bytes is one message (tag
//! [`TAG`]); a larger one is its header alone (tag [`TAG`]) followed by the payload, sent
//! straight from the caller's buffer ([`TAG_BODY`]), so bulk data is not copied. One receive
//! kept posted for any tag takes both kinds, in each sender's order. Owns the progress thread, MPI
//! initialisation/finalisation and the MPI bootstrap (rank and size from
//! `MPI_Comm_rank`/`MPI_Comm_size`, the job id broadcast by rank 0); must not touch handlers,
//! requests or statistics by type.
//!
//! Ranks on the same machine (`MPI_Comm_split_type` SHARED) skip MPI point-to-point: each
//! message to one of them, of any size, is one record in a ring of an MPI-3 shared-memory
//! window ([`super::mpi_shm`], the ring protocol in [`super::mpi_ring`]) carrying the same tag
//! and bytes the MPI message would, so decoding is shared. Rings are read under the MPI lock
//! like the posted receive, by the same threads and at the same moments (the service thread's
//! looks, the progress thread while it is cold, a sender waiting for room), and written by the
//! sending thread under that lock; a full ring makes its writer read its own rings (and MPI)
//! while it waits, so two ranks filling each other's rings both make room. With every peer on
//! the machine, a hot look tests MPI only every [`MPI_TEST_EVERY`] looks. `SQUALL_MPI_SHM=0`
//! (on any rank) turns the rings off.
//!
//! Who calls MPI: MPI is initialised with `MPI_THREAD_SERIALIZED` and every MPI call is made
//! under one lock ([`Shared::mpi`]), by whichever thread needs it, so no message crosses a
//! thread to be sent or received on the latency path:
//! - **Sends** are posted by the sending thread itself ([`Backend::send`], already under the
//!   endpoint's lock): a headerless message straight from its payload (a request or reply
//!   with its id, or a whole frame, from a reused buffer), with one blocking
//!   `MPI_Send` up to [`BLOCKING_SEND_MAX`] (eager: it never waits for the receiver), else with
//!   `MPI_Isend` (a header and body: two), then `MPI_Test` while receiving (so two large sends
//!   crossing each other cannot deadlock). Only when earlier
//!   sends are still queued for the progress thread, or the MPI lock is busy, does a send join
//!   that queue, behind them.
//! - **Receives** go through one receive kept posted for [`TAG`] from any source
//!   ([`super::mpi_rx::PostedRecv`]): a message is matched to it as MPI pulls it in, and one
//!   `MPI_Test` finds it, as `MPI_Recv` does in a raw MPI program. The endpoint's service
//!   thread tests it itself while *hot* (a message came or went within [`SVC_SPIN`]): in the
//!   endpoint's tight loop ([`Backend::hot`], [`Backend::poll_hot`]: no poll system call, no
//!   clock read) while the last message is less than [`YIELD_AFTER`] old, then in
//!   [`Backend::handle_timeout`], which [`Backend::poll_timeout`] keeps calling without sleep,
//!   yielding its core between tests. A headerless message needs no decoding (source, tag,
//!   length from the status; the job bits and kind checked, the type taken from the tag); a
//!   frame is decoded straight from the posted receive's buffer; both are delivered to the
//!   handlers: a payload up to 1 KiB is copied out, a larger one keeps the buffer itself
//!   ([`COPY_MAX`]). When the machine runs more nodes than it has cores,
//!   the service thread does not spin at all ([`SpinPolicy`]): spinning nodes would keep the
//!   nodes they wait for off the cores.
//! - The **progress thread** receives while the service thread is cold (asleep in its poll) or
//!   stalled in a long handler ([`STALL`]), handing what it receives to the service thread
//!   through a channel plus a `mio::Waker` registered under this backend's token; it spins
//!   for [`SPIN`] after its last piece of work, then naps with a timeout growing from 2 µs to
//!   [`MAX_NAP`]. It also initialises and finalises MPI and posts sends queued behind it.
//!
//! Per-pair FIFO: sends are posted in order (a send posts itself only when nothing is queued
//! for the progress thread, and the queue is emptied in order; a busy lock sends it to the
//! queue rather than wait for a holder that may have lost its core); MPI does not let one
//! sender's messages overtake each other among those one receive matches, and every [`TAG`]
//! message goes through the one posted receive, reposted before the next test (a new
//! receive matches the oldest waiting message first); a body is taken from its header's
//! sender right after the header (bodies of one sender stay in order too); frames another
//! thread received are queued under the MPI lock, which the service thread holds while it
//! drains that queue before testing the receive itself.
//!
//! Goodbye: a `BYE` frame to every peer; once all peers said goodbye (or [`LINGER`] passed)
//! the progress thread withdraws the posted receive and calls `MPI_Finalize`, and the backend
//! reports itself flushed. A dead peer normally makes mpirun end the whole job; in case it
//! does not, heartbeats (`TY_LINK`, every third of the peer timeout when nothing else was
//! sent) and a silence limit of `SQUALL_PEER_TIMEOUT_MS` report the peer lost by name instead
//! of hanging.
use super::mpi_ring::{Msg, Reader};
use super::mpi_rx::{self, MpiLock, OwnComm, PostedRecv};
use super::mpi_shm::Shm;
use super::mpi_tag;
use super::{Backend, BackendEvent, InMsg, OutMsg};
use crate::config::NetConfig;
use crate::endpoint::{TY_BYE, TY_LINK};
use crate::error::NetError;
use crate::stats::{DropReason, LinkCounters};
use ::mpi::collective::{CommunicatorCollectives, SystemOperation};
use ::mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use ::mpi::topology::{Communicator, SimpleCommunicator};
use ::mpi::traits::Root;
use bytes::{Buf, Bytes};
use crossbeam_channel::{unbounded, Receiver, Sender, TryRecvError};
use mio::event::Event;
use mio::{Registry, Token, Waker};
use parking_lot::Mutex;
use squall_core::{JobId, NodeId};
use squall_wire::{decode_header, Flags, Header, MsgType, HEADER_LEN};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The MPI tag of a whole frame (header + payload in one message), or of a header alone whose
/// payload follows as one [`TAG_BODY`] message from the same sender.
pub(crate) const TAG: i32 = 0x5155;
/// The payload after a header alone.
pub(crate) const TAG_BODY: i32 = 0x5157;
/// The largest [`TAG`] message (the posted receive's buffer): frames up to this size are sent
/// whole and their payload copied out of that buffer; larger ones go as header + body, the body
/// straight from the sender's buffer into a vector that becomes the payload. Splitting pages
/// (4 KiB) too cost the 4-node runs on 2 cores dearly (a receiver spins for the body of a
/// header while its sender may be off its core), so only bulk data is split.
pub(crate) const RX_MAX: usize = HEADER_LEN + 16 * 1024;
/// Whole frames up to this size are sent with a blocking `MPI_Send`: well under Open MPI's
/// shared-memory eager limit (4 KiB including its own header), so the call never waits for the
/// receiver to match it (two nodes sending to each other cannot deadlock). Larger whole frames
/// go with `MPI_Isend` and a test loop that keeps receiving.
const BLOCKING_SEND_MAX: usize = 2048;
/// Received whole frames up to this size have their payload copied out of the posted receive's
/// buffer; larger ones take the buffer itself (no copy; the next post allocates a new one, after
/// the handler ran).
const COPY_MAX: usize = HEADER_LEN + 1024;
/// While hot, one look at MPI tests the posted receive up to this many times under one
/// acquisition of the locks (the empty probe is then little more than `MPI_Test`, as in the
/// `MPI_Recv` loop of a raw program).
const TESTS_PER_LOOK: u32 = 4;
/// `SQUALL_MPI_HEADERLESS=0` frames every message (a wire header in the payload, as before
/// headerless messages): for comparing the two paths.
fn framed_by_env() -> bool {
    std::env::var(squall_core::env::MPI_HEADERLESS).is_ok_and(|v| v.trim() == "0")
}
/// `SQUALL_MPI_SHM=0` sends messages between ranks of one machine through MPI point-to-point
/// too, instead of the shared-memory rings ([`super::mpi_shm`]).
fn shm_by_env() -> bool {
    !std::env::var(squall_core::env::MPI_SHM).is_ok_and(|v| v.trim() == "0")
}
/// `SQUALL_MPI_SHM_GROUPS=k` (testing): the ranks of each machine form k groups (by rank
/// modulo k), rings within a group and MPI point-to-point between groups, as if the machine
/// were k machines.
fn shm_groups_by_env() -> i32 {
    std::env::var(squall_core::env::MPI_SHM_GROUPS)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|k| *k >= 1)
        .unwrap_or(1)
}
/// With every peer on this machine (all reached through rings), the hot service thread tests
/// the posted MPI receive only once per this many looks at the rings.
const MPI_TEST_EVERY: u32 = 16;
/// Passes over the rings in one look while MPI is not due and nothing has come.
const RING_PASSES: u32 = 16;

/// This backend's token in the service thread's poll (the waker).
const WAKE_TOKEN: Token = Token(1);
/// How long the progress thread keeps probing after its last piece of work before napping.
const SPIN: Duration = Duration::from_micros(50);
/// Longest nap of an idle progress thread.
const MAX_NAP: Duration = Duration::from_micros(50);
/// How long the service thread keeps polling MPI itself after the last message it sent or
/// received (then it sleeps and the progress thread watches MPI).
const SVC_SPIN: Duration = Duration::from_micros(100);
/// A hot service thread idle for this long yields the core between probes: an application
/// thread that a reply woke (or a peer node sharing the cores) must get to run. Yielding
/// sooner costs the ping-pong time when other processes load the machine.
const YIELD_AFTER: Duration = Duration::from_micros(20);
/// A hot service thread that finds nothing in `handle_timeout` probes up to this many times
/// before it returns to the endpoint's loop (which mostly probes through [`Backend::poll_hot`],
/// without its poll's system call and clock read).
const INNER_PROBES: u32 = 4;
/// How the hot service thread spins; chosen at start from the nodes on this machine and its
/// cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpinPolicy {
    /// The service thread polls MPI until this long after the last message.
    hot_for: Duration,
    /// Idle this long, it yields the core between probes (and probes once per loop).
    yield_after: Duration,
}

impl SpinPolicy {
    fn for_machine(local_nodes: usize, cores: usize) -> SpinPolicy {
        if local_nodes > cores {
            // More nodes than cores: a spinning node keeps the node it waits for off the
            // cores (measured: the 4-node barrier test on 2 cores took ~40% longer even with a
            // yield after every empty probe). The service thread sleeps; the progress thread
            // watches MPI, spinning with yields for a while after each piece of work.
            SpinPolicy {
                hot_for: Duration::ZERO,
                yield_after: Duration::ZERO,
            }
        } else {
            SpinPolicy {
                hot_for: SVC_SPIN,
                yield_after: YIELD_AFTER,
            }
        }
    }
}

/// The cores this machine has online (not just those this process may run on: mpirun may
/// bind each node to one core), from `/sys/devices/system/cpu/online` ("0-3,6").
fn online_cores() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpu_list(&t))
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
}

/// The number of cpus in a kernel cpu list ("0-3,6" is 5); None if malformed or empty.
fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut n = 0;
    for part in text.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>()
                    .ok()?
                    .checked_sub(a.parse::<usize>().ok()?)?
                    + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// A hot service thread that has not probed for this long is stuck in a handler: the progress
/// thread probes meanwhile (so a peer's large send to this node is not held up).
const STALL: Duration = Duration::from_millis(2);
/// How long a node that said goodbye waits for its peers' goodbyes before finalising MPI.
const LINGER: Duration = Duration::from_millis(2000);
/// How long bootstrap waits for the progress thread to initialise MPI.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Work for the progress thread.
enum Cmd {
    Send {
        to: i32,
        frame: Frame,
    },
    /// `all_gone`: every peer said goodbye, so every rank of this machine frees the shared
    /// window (a collective call) too.
    Finalize {
        all_gone: bool,
    },
}

/// One encoded message: a whole frame, or a header with the payload beside it (`tag`
/// [`TAG`]), or a headerless message (its payload and any request-id trailer; a tag of
/// [`mpi_tag`]).
struct Frame {
    tag: i32,
    head: Vec<u8>,
    body: Option<Bytes>,
}

/// A received message: source rank, tag, frame (or header, or headerless message), body.
type Received = (i32, i32, Vec<u8>, Option<Vec<u8>>);

/// What the MPI lock guards.
struct MpiState {
    /// True once MPI is (being) finalised: nobody calls MPI any more.
    closed: bool,
    /// The receive kept posted for [`TAG`] messages.
    rx: PostedRecv,
    /// The shared-memory rings to and from the ranks of this machine (None: every peer is
    /// reached through MPI point-to-point).
    shm: Option<Shm>,
    /// The communicator lent to MPI code beside Squall ([`Backend::with_own_mpi`]).
    own: Option<OwnComm>,
}

/// State shared between the backend (service thread and senders) and the progress thread.
struct Shared {
    waker: Mutex<Option<Arc<Waker>>>,
    wake_pending: AtomicBool,
    /// Held around every MPI call (`MPI_THREAD_SERIALIZED`). Frames are pushed to the received
    /// queue under it, which keeps them in order with what the holder receives next.
    mpi: MpiLock<MpiState>,
    /// Frames queued for the progress thread or being sent by it.
    in_flight: AtomicUsize,
    /// `MPI_Finalize` returned (or the progress thread ended).
    finalized: AtomicBool,
    /// The service thread is polling MPI itself (see [`SVC_SPIN`]).
    svc_hot: AtomicBool,
    /// MPI is lent to code beside Squall ([`Backend::with_own_mpi`]): the progress thread
    /// naps instead of trying the lock, so it takes no time from that code's core.
    lent: AtomicBool,
    /// When a sending thread last posted a send itself, in nanoseconds since `epoch`.
    sent_ns: AtomicU64,
    /// When the service thread last probed, in nanoseconds since `epoch`.
    svc_seen_ns: AtomicU64,
    /// Peers whose ring stayed full past the peer timeout while a send waited (world ranks;
    /// the service thread reports them lost), and whether there are any.
    ring_stuck: Mutex<Vec<i32>>,
    ring_stuck_any: AtomicBool,
    epoch: Instant,
}

impl Shared {
    fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            if let Some(w) = self.waker.lock().as_ref() {
                // A failed wake only delays delivery to the service thread's next timeout.
                let _ = w.wake();
            }
        }
    }

    /// Records that a send to world rank `to` gave up on its full ring.
    fn note_ring_stuck(&self, to: i32) {
        self.ring_stuck.lock().push(to);
        self.ring_stuck_any.store(true, Ordering::Release);
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// True while the hot service thread probes MPI (and has done so recently).
    fn service_polling(&self, now: Instant) -> bool {
        self.svc_hot.load(Ordering::Acquire)
            && self
                .nanos(now)
                .saturating_sub(self.svc_seen_ns.load(Ordering::Acquire))
                < STALL.as_nanos() as u64
    }
}

/// What MPI reported at start-up.
struct Started {
    rank: NodeId,
    size: u16,
    job: JobId,
    spin: SpinPolicy,
    /// `MPI_TAG_UB` is large enough for headerless messages ([`mpi_tag`]).
    headerless: bool,
    /// Peers reached through MPI point-to-point (the others through rings).
    p2p_peers: usize,
}

struct PeerState {
    bye_received: bool,
    lost: bool,
    last_heard: Instant,
    last_sent: Instant,
}

pub(crate) struct MpiBackend {
    rank: NodeId,
    job: JobId,
    /// This job's check bits in a headerless message's tag ([`mpi_tag::job_bits`]); None if
    /// every message is framed (`MPI_TAG_UB` too small, or `SQUALL_MPI_HEADERLESS=0`).
    headerless: Option<i32>,
    peers: Vec<PeerState>,
    cmds: Sender<Cmd>,
    /// Frames received by the progress thread or by a sender (pushed under the MPI lock).
    incoming: Receiver<Received>,
    incoming_tx: Sender<Received>,
    /// Reused buffer of frames taken off `incoming` by the service thread.
    rx_buf: Vec<Received>,
    /// Reused buffer small frames are encoded into by a thread that sends them itself.
    tx_buf: Vec<u8>,
    /// The service thread probes MPI in a tight loop ([`Backend::hot`]): set by the last
    /// `handle_timeout` while messages came or went within the spin policy's `yield_after`.
    hot_probe: bool,
    progress: Thread,
    join: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    counters: LinkCounters,
    peer_timeout: Duration,
    shutdown_at: Option<Instant>,
    /// The last message sent or delivered: the service thread polls MPI until [`SVC_SPIN`]
    /// after it.
    last_activity: Instant,
    spin: SpinPolicy,
    /// The service thread's clock at its last `handle_timeout` (`poll_timeout` reuses it).
    now_seen: Instant,
    /// A message came or went since the last `handle_timeout`, whose fresh clock then becomes
    /// `last_activity` (the clock those events carried is `now_seen`, up to a batch of looks
    /// old, which would make a busy service thread look idle and yield its core).
    active: bool,
    /// Peers reached through MPI point-to-point: with none, the hot service thread tests MPI
    /// only every [`MPI_TEST_EVERY`] looks.
    p2p_peers: usize,
    /// Looks at MPI and the rings so far (wrapping).
    looks: u32,
    /// Reused buffer of what one look took off the rings.
    ring_buf: Vec<Result<(Header, Bytes), DropReason>>,
}

/// Starts the progress thread (which initialises MPI) and returns the backend with this node's
/// rank, the job size and the job id (rank 0's, broadcast).
pub(crate) fn start(cfg: &NetConfig) -> Result<(MpiBackend, NodeId, u16, JobId), NetError> {
    if let Some(f) = cfg.faults.filter(|f| !f.is_noop()) {
        return Err(NetError::Config(format!(
            "SQUALL_NET_FAULTS ({f:?}) cannot be applied to the mpi transport; use SQUALL_TRANSPORT=udp or tcp"
        )));
    }
    let shared = Arc::new(Shared {
        waker: Mutex::new(None),
        wake_pending: AtomicBool::new(false),
        mpi: MpiLock::new(MpiState {
            closed: false,
            rx: PostedRecv::new(RX_MAX),
            shm: None,
            own: None,
        }),
        in_flight: AtomicUsize::new(0),
        finalized: AtomicBool::new(false),
        svc_hot: AtomicBool::new(false),
        lent: AtomicBool::new(false),
        svc_seen_ns: AtomicU64::new(0),
        sent_ns: AtomicU64::new(0),
        ring_stuck: Mutex::new(Vec::new()),
        ring_stuck_any: AtomicBool::new(false),
        epoch: Instant::now(),
    });
    let (cmd_tx, cmd_rx) = unbounded::<Cmd>();
    let (in_tx, in_rx) = unbounded::<Received>();
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<Result<Started, String>>(1);
    let job_hint = cfg.job_id;
    let slice = cfg.service_slice;
    let peer_timeout = cfg.peer_timeout;
    let sh = shared.clone();
    let progress_in = in_tx.clone();
    let join = std::thread::Builder::new()
        .name("squall-mpi".into())
        .spawn(move || {
            crate::sched::apply(slice, "the mpi progress thread");
            progress_main(job_hint, peer_timeout, cmd_rx, progress_in, ready_tx, sh)
        })
        .map_err(|e| NetError::io("spawning the mpi progress thread", e))?;
    let started = match ready_rx.recv_timeout(INIT_TIMEOUT) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(NetError::Bootstrap(e)),
        Err(_) => {
            return Err(NetError::Bootstrap(format!(
                "mpi initialisation did not finish within {}s",
                INIT_TIMEOUT.as_secs()
            )))
        }
    };
    let now = Instant::now();
    let peers = (0..started.size)
        .map(|_| PeerState {
            bye_received: false,
            lost: false,
            last_heard: now,
            last_sent: now,
        })
        .collect();
    let progress = join.thread().clone();
    Ok((
        MpiBackend {
            rank: started.rank,
            job: started.job,
            headerless: (started.headerless && !framed_by_env())
                .then(|| mpi_tag::job_bits(started.job)),
            peers,
            cmds: cmd_tx,
            incoming: in_rx,
            incoming_tx: in_tx,
            rx_buf: Vec::new(),
            tx_buf: Vec::with_capacity(RX_MAX),
            hot_probe: false,
            progress,
            join: Some(join),
            shared,
            counters: LinkCounters::default(),
            peer_timeout: cfg.peer_timeout,
            shutdown_at: None,
            last_activity: now,
            spin: started.spin,
            now_seen: now,
            active: false,
            p2p_peers: started.p2p_peers,
            looks: 0,
            ring_buf: Vec::new(),
        },
        started.rank,
        started.size,
        started.job,
    ))
}

/// The progress thread: initialise, report, then post queued sends and receive (while the
/// service thread does not) until told to finalise.
fn progress_main(
    job_hint: Option<JobId>,
    peer_timeout: Duration,
    cmds: Receiver<Cmd>,
    incoming: Sender<Received>,
    ready: Sender<Result<Started, String>>,
    shared: Arc<Shared>,
) {
    // Naps shorter than the default 50 µs timer slack only help if the slack is small.
    let _ = nix::sys::prctl::set_timerslack(1_000);
    let Some((universe, _level)) = ::mpi::initialize_with_threading(::mpi::Threading::Serialized)
    else {
        let _ = ready.send(Err(
            "mpi was already initialised in this process (one squall node per process)".into(),
        ));
        shared.finalized.store(true, Ordering::Release);
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let (Ok(rank16), Ok(size16)) = (u16::try_from(rank), u16::try_from(size)) else {
        let _ = ready.send(Err(format!(
            "mpi rank {rank} of {size} does not fit squall's 16-bit node ids"
        )));
        shared.finalized.store(true, Ordering::Release);
        return;
    };
    let mut job: u64 = if rank == 0 {
        job_hint.map_or_else(rand::random, |j| j.0)
    } else {
        0
    };
    world.process_at_rank(0).broadcast_into(&mut job);
    // The nodes sharing this machine (MPI_Comm_split_type SHARED; collective, like the rest
    // of start-up).
    let local_nodes = usize::try_from(world.split_shared(rank).size()).unwrap_or(1);
    // Every rank runs the same MPI library, so all agree on the headerless path.
    // (The layout uses all 31 bits a tag has: only the largest MPI_TAG_UB will do.)
    let headerless = mpi_rx::tag_ub() == mpi_tag::NEEDED_TAG_UB;
    // Rings between the ranks of each machine, unless any rank was told not to (all must
    // agree: the window is created collectively, and a ring nobody reads would hang).
    let mut shm_all = 0i32;
    world.all_reduce_into(
        &i32::from(shm_by_env()),
        &mut shm_all,
        SystemOperation::min(),
    );
    let mut groups = 1i32;
    world.all_reduce_into(&shm_groups_by_env(), &mut groups, SystemOperation::max());
    let shm = (shm_all == 1)
        .then(|| Shm::create(rank, size, groups))
        .flatten();
    let p2p_peers = shm
        .as_ref()
        .map_or(usize::from(size16).saturating_sub(1), Shm::remote_ranks);
    // Collective too: every rank makes its duplicate here, at start-up.
    let own = OwnComm(world.duplicate());
    {
        let mut st = shared.mpi.lock();
        st.shm = shm;
        st.own = Some(own);
    }
    let _ = ready.send(Ok(Started {
        rank: NodeId(rank16),
        size: size16,
        job: JobId(job),
        spin: SpinPolicy::for_machine(local_nodes, online_cores()),
        headerless,
        p2p_peers,
    }));
    let mut push = |r: Received| {
        // The backend is gone only when the endpoint is; then nobody wants the frame.
        let _ = incoming.send(r);
    };
    let mut last_work = Instant::now();
    let mut nap = Duration::from_micros(2);
    let mut free_window = false;
    loop {
        let mut worked = false;
        let mut finalize = false;
        loop {
            match cmds.try_recv() {
                Ok(Cmd::Send { to, frame }) => {
                    worked = true;
                    let mut st = shared.mpi.lock();
                    if !st.closed {
                        let (got, sent) = send_one(
                            &world,
                            &mut st,
                            to,
                            frame.tag,
                            &frame.head,
                            frame.body.as_ref(),
                            &mut push,
                            peer_timeout,
                        );
                        if !sent {
                            shared.note_ring_stuck(to);
                        }
                        if got || !sent {
                            shared.wake();
                        }
                    }
                    // Still under the lock: a sender that sees nothing in flight may post
                    // its own send, which then follows this one.
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                }
                Ok(Cmd::Finalize { all_gone }) => {
                    finalize = true;
                    free_window |= all_gone;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    finalize = true;
                    break;
                }
            }
        }
        if finalize {
            break;
        }
        let now = Instant::now();
        if shared.service_polling(now) || shared.lent.load(Ordering::Acquire) {
            // The service thread receives itself; it (or a queued send) unparks this thread
            // when it stops.
            std::thread::park_timeout(STALL);
            last_work = now;
            continue;
        }
        if let Some(mut st) = shared.mpi.try_lock() {
            if !st.closed && receive_all(&mut st, &mut push) {
                worked = true;
                shared.wake();
            }
        }
        let sent = shared.sent_ns.load(Ordering::Acquire);
        if sent > shared.nanos(last_work) {
            // A send posted by another thread counts as work: its answer is due soon.
            last_work = shared.epoch + Duration::from_nanos(sent);
            nap = Duration::from_micros(2);
        }
        if worked {
            last_work = Instant::now();
            nap = Duration::from_micros(2);
        } else if last_work.elapsed() < SPIN {
            // Yield rather than burn: on a machine with fewer cores than busy threads, the
            // service and application threads must get the core to answer at all.
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
    // Nobody calls MPI once the flag is set (every caller checks it under the lock); the
    // posted receive is withdrawn before MPI_Finalize.
    {
        let mut st = shared.mpi.lock();
        st.rx.cancel();
        drop(st.own.take()); // MPI_Comm_free, before MPI_Finalize
        if let Some(shm) = st.shm.take() {
            // Collective over this machine's ranks: only when all said goodbye (then all
            // get here); otherwise the window is left to MPI_Finalize.
            if free_window {
                shm.free();
            }
        }
        st.closed = true;
    }
    drop(world);
    drop(universe); // MPI_Finalize
    shared.finalized.store(true, Ordering::Release);
    shared.wake_pending.store(false, Ordering::Release);
    shared.wake();
}

/// Posts one send and completes it, receiving whatever arrives meanwhile into `sink`:
/// (something was received, the send went out). A send to a rank of this machine goes
/// through its ring ([`ring_send`]); it fails only if that ring stays full for `limit`.
/// Caller holds the MPI lock.
#[allow(clippy::too_many_arguments)]
fn send_one(
    world: &SimpleCommunicator,
    st: &mut MpiState,
    to: i32,
    tag: i32,
    head: &[u8],
    body: Option<&Bytes>,
    sink: &mut dyn FnMut(Received),
    limit: Duration,
) -> (bool, bool) {
    let mut got = false;
    let parts = [head, body.map_or(&[][..], |b| &b[..])];
    match ring_send(st, to, tag, &parts, sink, &mut got, limit) {
        Some(sent) => (got, sent),
        None => (send_p2p(world, st, to, tag, head, body, sink), true),
    }
}

/// Posts one MPI point-to-point send and completes it, receiving whatever arrives meanwhile
/// into `sink` (true if something did). Caller holds the MPI lock.
fn send_p2p(
    world: &SimpleCommunicator,
    st: &mut MpiState,
    to: i32,
    tag: i32,
    head: &[u8],
    body: Option<&Bytes>,
    sink: &mut dyn FnMut(Received),
) -> bool {
    if body.is_none() && head.len() <= BLOCKING_SEND_MAX {
        // Eager size: MPI_Send returns once the frame is copied out, without waiting for
        // the receiver (and progresses incoming messages meanwhile if it must wait for room).
        mpi_rx::send(head, to, tag);
        return false;
    }
    let mut got = false;
    let dest = world.process_at_rank(to);
    ::mpi::request::scope(|scope| {
        let mut head = Some(dest.immediate_send_with_tag(scope, head, tag));
        let mut body = body.map(|b| dest.immediate_send_with_tag(scope, &b[..], TAG_BODY));
        while head.is_some() || body.is_some() {
            if let Some(r) = head.take() {
                head = r.test().err();
            }
            if let Some(r) = body.take() {
                body = r.test().err();
            }
            if head.is_some() || body.is_some() {
                got |= receive_all(st, sink);
            }
        }
    });
    got
}

/// Appends one message (`parts` one after the other: a headerless message and its trailer,
/// or a frame's header and payload) to the ring to `to`; None if `to` is not on this machine.
/// While the ring is full, receives what arrives (the rings from this machine, MPI) into
/// `sink` (setting `got`), so two ranks filling each other's rings both make room; gives up
/// (Some(false)) after `limit`. Caller holds the MPI lock.
#[allow(clippy::too_many_arguments)]
fn ring_send(
    st: &mut MpiState,
    to: i32,
    tag: i32,
    parts: &[&[u8]],
    sink: &mut dyn FnMut(Received),
    got: &mut bool,
    limit: Duration,
) -> Option<bool> {
    let MpiState { rx, shm, .. } = st;
    let shm = shm.as_mut()?;
    let mut since: Option<Instant> = None;
    let mut waits = 0u32;
    shm.send(to, tag, parts, &mut |rings| {
        *got |= drain(rx, rings, sink);
        waits += 1;
        if waits < 64 {
            std::hint::spin_loop();
        } else {
            // The reader may be waiting for this core.
            std::thread::yield_now();
        }
        since.get_or_insert_with(Instant::now).elapsed() < limit
    })
}

/// Receives every message already arrived into `sink` (copied out of the posted receive or
/// the rings); true if there was one. Caller holds the MPI lock.
fn receive_all(st: &mut MpiState, sink: &mut dyn FnMut(Received)) -> bool {
    let MpiState { rx, shm, .. } = st;
    drain(rx, shm.as_mut().map_or(&mut [], |s| &mut s.rx[..]), sink)
}

/// Takes every whole message off `rings`, handing each to `f` with its writer's rank and its
/// tag (small ones in place, see [`Reader::next`]); true if there was one.
fn read_rings(rings: &mut [Reader], f: &mut dyn FnMut(i32, i32, Msg<'_>)) -> bool {
    let mut got = false;
    for r in rings.iter_mut() {
        let src = r.src;
        while r.next(COPY_MAX, &mut |tag, m| f(src, tag, m)) {
            got = true;
        }
    }
    got
}

/// [`receive_all`] on the parts of the MPI state.
fn drain(rx: &mut PostedRecv, rings: &mut [Reader], sink: &mut dyn FnMut(Received)) -> bool {
    let mut got = read_rings(rings, &mut |src, tag, m| match m {
        Msg::Here(d) => sink((src, tag, d.to_vec(), None)),
        Msg::Owned(v) => sink((src, tag, v, None)),
    });
    while let Some((src, tag, len)) = rx.test() {
        got = true;
        let data = if len > COPY_MAX {
            rx.take()
        } else {
            let d = rx.data().to_vec();
            rx.release();
            d
        };
        let body = (tag == TAG && is_split_header(&data))
            .then(|| receive_body(&SimpleCommunicator::world(), src));
        sink((src, tag, data, body));
    }
    got
}

/// Checks one received frame from MPI rank `src` (a whole frame, or a header with its `body`)
/// against this node (`job`, `rank`, `peers` nodes) and returns its header and payload (a
/// whole frame's payload copied out: frames are at most [`RX_MAX`] bytes), or why it is
/// dropped. Pure: it may run under the MPI lock, on the posted receive's buffer.
fn decode_frame(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    data: &[u8],
    body: Option<Vec<u8>>,
) -> Result<(Header, Bytes), DropReason> {
    let h = check_frame(job, rank, peers, src, data, body.as_ref().map(Vec::len))?;
    let payload = match body {
        Some(b) => Bytes::from(b),
        None => Bytes::copy_from_slice(&data[HEADER_LEN..]),
    };
    Ok((h, payload))
}

/// The checks of [`decode_frame`] alone: the header of a frame from MPI rank `src` that is
/// whole (`body_len` None: `data` is exactly header + payload) or a header with a body of
/// `body_len` bytes beside it.
fn check_frame(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    data: &[u8],
    body_len: Option<usize>,
) -> Result<Header, DropReason> {
    let src = u16::try_from(src)
        .ok()
        .filter(|s| usize::from(*s) < peers)
        .ok_or(DropReason::BadDest)?;
    let h = decode_header(data).map_err(|_| DropReason::Garbage)?;
    if h.job != job {
        return Err(DropReason::ForeignJob);
    }
    if h.src.0 != src || h.dst != rank {
        return Err(DropReason::BadDest);
    }
    let whole = match body_len {
        Some(b) => data.len() == HEADER_LEN && b == h.payload_len as usize,
        None => data.len() == HEADER_LEN + h.payload_len as usize,
    };
    if !whole {
        return Err(DropReason::Truncated);
    }
    Ok(h)
}

/// Decodes a whole frame held in its own buffer (taken from the posted receive): the payload is
/// that buffer past the header, trimmed to its length (no copy).
fn decode_owned(
    job: JobId,
    rank: NodeId,
    peers: usize,
    src: i32,
    mut data: Vec<u8>,
) -> Result<(Header, Bytes), DropReason> {
    let h = check_frame(job, rank, peers, src, &data, None)?;
    // Gives the unused rest of the receive's buffer back (glibc shrinks in place).
    data.shrink_to_fit();
    let mut payload = Bytes::from(data);
    payload.advance(HEADER_LEN);
    Ok((h, payload))
}

/// The checks of a headerless message (a tag with [`mpi_tag::HEADERLESS`]) from MPI rank
/// `src` for this node (`job`, whose check bits are `job_bits`, `rank`, `peers` nodes): a
/// header standing for it (what [`MpiBackend::accept`] reads; nothing is decoded from the
/// bytes but the request-id trailer) and its payload's length (the first bytes of `data`).
fn check_headerless(
    (job_bits, job, rank, peers): (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, usize), DropReason> {
    let src = u16::try_from(src)
        .ok()
        .filter(|s| usize::from(*s) < peers && *s != rank.0)
        .ok_or(DropReason::BadDest)?;
    let d = mpi_tag::decode(job_bits, tag, data).map_err(|e| match e {
        mpi_tag::TagError::ForeignJob => DropReason::ForeignJob,
        mpi_tag::TagError::Malformed => DropReason::Garbage,
    })?;
    let mut h = Header::new(job, d.ty, NodeId(src), rank);
    h.flags = d.flags;
    h.request_id = d.request_id;
    h.payload_len = d.payload_len as u32;
    Ok((h, d.payload_len))
}

/// Decodes a headerless message read in place (the posted receive's buffer): its payload is
/// copied out.
fn decode_headerless(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, Bytes), DropReason> {
    let (h, n) = check_headerless(me, src, tag, data)?;
    Ok((h, Bytes::copy_from_slice(&data[..n])))
}

/// Decodes a headerless message held in its own buffer: the buffer becomes the payload.
fn decode_headerless_owned(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    mut data: Vec<u8>,
) -> Result<(Header, Bytes), DropReason> {
    let (h, n) = check_headerless(me, src, tag, &data)?;
    data.truncate(n);
    data.shrink_to_fit();
    Ok((h, Bytes::from(data)))
}

/// Decodes a message received into a buffer of its own (`data`; `body` beside a split
/// header) from MPI rank `src` with `tag`, for this node (`me` as in [`check_headerless`], the
/// check bits -1 when headerless messages are off): headerless or framed, a large one keeping
/// its buffer.
fn decode_received(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: Vec<u8>,
    body: Option<Vec<u8>>,
) -> Result<(Header, Bytes), DropReason> {
    let (_, job, rank, peers) = me;
    let headerless = me.0 >= 0 && tag & mpi_tag::HEADERLESS != 0;
    match (body, data.len() > COPY_MAX) {
        (None, false) => decode_slice(me, src, tag, &data),
        (None, true) if headerless => decode_headerless_owned(me, src, tag, data),
        (None, true) if tag == TAG => decode_owned(job, rank, peers, src, data),
        (Some(body), _) if !headerless && tag == TAG => {
            decode_frame(job, rank, peers, src, &data, Some(body))
        }
        _ => Err(DropReason::Garbage),
    }
}

/// Decodes a whole message read in place (a ring's bytes), payload copied out: headerless
/// or framed (see [`decode_received`]).
fn decode_slice(
    me: (i32, JobId, NodeId, usize),
    src: i32,
    tag: i32,
    data: &[u8],
) -> Result<(Header, Bytes), DropReason> {
    if me.0 >= 0 && tag & mpi_tag::HEADERLESS != 0 {
        decode_headerless(me, src, tag, data)
    } else if tag != TAG {
        Err(DropReason::Garbage)
    } else {
        decode_frame(me.1, me.2, me.3, src, data, None)
    }
}

/// Why a peer whose ring stayed full for `timeout` is lost.
fn ring_stuck_reason(timeout: Duration) -> String {
    format!(
        "its shared-memory ring stayed full for {} ms: the node stopped reading",
        timeout.as_millis()
    )
}

/// True if `frame` is a header alone whose payload follows as a [`TAG_BODY`] message.
fn is_split_header(frame: &[u8]) -> bool {
    frame.len() == HEADER_LEN
        && frame
            .get(44..48)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .is_some_and(|b| u32::from_le_bytes(b) > 0)
}

/// The body behind a split header from `src`: posted right behind it, so this waits only for
/// its transfer. Caller holds the MPI lock.
fn receive_body(world: &SimpleCommunicator, src: i32) -> Vec<u8> {
    world
        .process_at_rank(src)
        .matched_probe_with_tag(TAG_BODY)
        .matched_receive_vec::<u8>()
        .0
}

impl MpiBackend {
    /// Sends one frame: posted by this thread when nothing is queued for the progress thread,
    /// else queued behind what is (per-pair FIFO).
    fn send_frame(&mut self, now: Instant, to: NodeId, frame: Frame) -> Result<(), NetError> {
        let Some(p) = self.peers.get_mut(to.index()) else {
            return Err(NetError::BadDestination {
                peer: to,
                size: self.peers.len() as u16,
            });
        };
        if p.lost {
            return Err(NetError::PeerGone { peer: to });
        }
        p.last_sent = now;
        self.last_activity = now;
        // Only this backend (under the endpoint's lock) adds to `in_flight`: zero means every
        // queued send has been posted and completed, so a send posted now follows them.
        // If another thread holds the MPI lock (the progress thread probing, a large send),
        // the send is queued rather than waited for: a lock holder that lost its core (more
        // threads than cores) would hold this thread up for a whole time slice.
        let lock = if self.shared.in_flight.load(Ordering::Acquire) == 0 {
            self.shared.mpi.try_lock()
        } else {
            None
        };
        if let Some(mut st) = lock {
            if st.closed {
                return Err(NetError::PeerLost {
                    peer: to,
                    reason: "mpi has been finalised on this node".into(),
                });
            }
            let world = SimpleCommunicator::world();
            let tx = &self.incoming_tx;
            let (got, sent) = send_one(
                &world,
                &mut st,
                i32::from(to.0),
                frame.tag,
                &frame.head,
                frame.body.as_ref(),
                &mut |r| {
                    let _ = tx.send(r);
                },
                self.peer_timeout,
            );
            drop(st);
            if got {
                self.shared.wake();
            }
            if !sent {
                return Err(self.ring_stuck(i32::from(to.0)));
            }
            // A large send takes a while: the wait for its answer starts when it is done.
            let done = Instant::now();
            self.last_activity = done;
            self.shared
                .sent_ns
                .store(self.shared.nanos(done), Ordering::Release);
            if !self.shared.svc_hot.load(Ordering::Acquire) {
                // The progress thread watches for the answer: from now, not after its nap.
                self.progress.unpark();
            }
            self.counters.packets_sent += 1;
            return Ok(());
        }
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        if self
            .cmds
            .send(Cmd::Send {
                to: i32::from(to.0),
                frame,
            })
            .is_err()
        {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(NetError::PeerLost {
                peer: to,
                reason: "the mpi progress thread has ended".into(),
            });
        }
        self.counters.packets_sent += 1;
        self.progress.unpark();
        Ok(())
    }

    /// The service thread's receive: frames others queued, then whatever MPI holds (if the
    /// MPI lock is free; its holder queues what it receives); probes up to [`INNER_PROBES`]
    /// times while hot and finding nothing. Decides whether the endpoint may probe in a tight
    /// loop until the next call ([`Backend::hot`]).
    fn poll_mpi(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        self.now_seen = now;
        if std::mem::take(&mut self.active) {
            self.last_activity = self.last_activity.max(now);
        }
        let idle_for = now.saturating_duration_since(self.last_activity);
        let hot = idle_for < self.spin.hot_for;
        if hot {
            self.shared
                .svc_seen_ns
                .store(self.shared.nanos(now), Ordering::Release);
            self.shared.svc_hot.store(true, Ordering::Release);
        }
        let mut probes = if hot && idle_for < self.spin.yield_after {
            INNER_PROBES
        } else {
            1
        };
        let mut found = false;
        while probes > 0 && !found {
            found = self.look(now, out, 1);
            probes -= 1;
        }
        let idle_for = self.now_seen.saturating_duration_since(self.last_activity);
        self.hot_probe = self.shutdown_at.is_none()
            && !self.shared.finalized.load(Ordering::Relaxed)
            && idle_for < self.spin.yield_after;
        if !found
            && self.shared.svc_hot.load(Ordering::Relaxed)
            && idle_for >= self.spin.yield_after
        {
            // Spinning: let a thread waiting for this core (an application thread a reply
            // just woke, the peer's threads when nodes share cores) run first.
            std::thread::yield_now();
        }
    }

    /// One look at MPI: under its lock, the frames others queued (they came first) and then at
    /// most one message probed by this thread; if another thread holds the lock, only the
    /// queued frames (the holder queues what it receives, in order). True if anything came.
    /// `tests`: how many times to test the posted receive while nothing has come.
    fn look(&mut self, now: Instant, out: &mut Vec<BackendEvent>, tests: u32) -> bool {
        let mut queued = std::mem::take(&mut self.rx_buf);
        let mut rings = std::mem::take(&mut self.ring_buf);
        let mut probed = None;
        self.looks = self.looks.wrapping_add(1);
        let mpi_due = self.p2p_peers > 0 || self.looks.is_multiple_of(MPI_TEST_EVERY);
        match self.shared.mpi.try_lock() {
            Some(mut st) => {
                // Frames are queued only under the MPI lock: while this thread holds it, the
                // cheap emptiness check is exact.
                if !self.incoming.is_empty() {
                    queued.extend(self.incoming.try_iter());
                }
                let me = self.me();
                // (Taken away before MPI closes, under this lock.)
                if let Some(shm) = st.shm.as_mut() {
                    // The rings (small messages decoded in place), several times over while
                    // nothing comes and MPI is not due: a pass costs a load per ring, so the
                    // endpoint's loop around (and its poll's system call) comes seldom.
                    let passes = if mpi_due || !queued.is_empty() {
                        1
                    } else {
                        RING_PASSES
                    };
                    for _ in 0..passes {
                        if read_rings(&mut shm.rx, &mut |src, tag, m| {
                            rings.push(match m {
                                Msg::Here(d) => decode_slice(me, src, tag, d),
                                Msg::Owned(v) => decode_received(me, src, tag, v, None),
                            })
                        }) {
                            break;
                        }
                    }
                }
                if !st.closed && mpi_due {
                    let mut hit = st.rx.test();
                    for _ in 1..tests {
                        // (Ring messages waiting: they go first, MPI was tested once.)
                        if hit.is_some() || !queued.is_empty() || !rings.is_empty() {
                            break;
                        }
                        hit = st.rx.test();
                    }
                    if let Some((src, tag, len)) = hit {
                        if tag & mpi_tag::HEADERLESS != 0 && self.headerless.is_some() {
                            // Headerless: source, type and length come from the status and
                            // the tag; the payload is read in place (or keeps the buffer).
                            let decoded = if len > COPY_MAX {
                                decode_headerless_owned(me, src, tag, st.rx.take())
                            } else {
                                let d = decode_headerless(me, src, tag, st.rx.data());
                                st.rx.release();
                                d
                            };
                            probed = Some((len > COPY_MAX, decoded));
                        } else if tag != TAG {
                            st.rx.release();
                            probed = Some((false, Err(DropReason::Garbage)));
                        } else if len > COPY_MAX {
                            // A large frame keeps the receive's buffer (reposted with a new
                            // one).
                            let data = st.rx.take();
                            debug_assert_eq!(data.len(), len);
                            probed = Some((
                                true,
                                decode_owned(self.job, self.rank, self.peers.len(), src, data),
                            ));
                        } else {
                            let data = st.rx.data();
                            let body = is_split_header(data)
                                .then(|| receive_body(&SimpleCommunicator::world(), src));
                            // Decoded straight from the posted receive's buffer (posted again
                            // at the next test).
                            probed = Some((
                                body.is_some(),
                                decode_frame(me.1, me.2, me.3, src, data, body),
                            ));
                            st.rx.release();
                        }
                    }
                }
            }
            None => {
                if !self.incoming.is_empty() {
                    queued.extend(self.incoming.try_iter());
                }
            }
        }
        let found = !queued.is_empty() || probed.is_some() || !rings.is_empty();
        if found {
            let large = matches!(probed, Some((true, _)))
                || queued.iter().any(|(_, _, _, body)| body.is_some())
                || rings
                    .iter()
                    .any(|d| d.as_ref().is_ok_and(|(_, p)| p.len() > COPY_MAX));
            // A large receive took a while: the service thread stays hot from its end.
            let now = if large {
                let t = Instant::now();
                self.now_seen = t;
                t
            } else {
                now
            };
            for (src, tag, data, body) in queued.drain(..) {
                self.on_frame(now, src, tag, data, body, out);
            }
            if let Some((_, decoded)) = probed {
                self.accept(now, decoded, out);
            }
            for decoded in rings.drain(..) {
                self.accept(now, decoded, out);
            }
        }
        self.rx_buf = queued;
        self.ring_buf = rings;
        found
    }

    /// Encodes one message: a whole frame, or a header with the payload beside it.
    fn frame(
        &self,
        to: NodeId,
        ty: MsgType,
        flags: Flags,
        request_id: u64,
        payload: &Bytes,
    ) -> Result<Frame, NetError> {
        if u32::try_from(payload.len()).is_err() || payload.len() > i32::MAX as usize - HEADER_LEN {
            return Err(NetError::TooLarge { len: payload.len() });
        }
        if let Some((tag, trailer)) = self.headerless_tag(ty, flags, payload.len()) {
            let mut head = Vec::with_capacity(payload.len() + mpi_tag::REQUEST_ID_LEN);
            head.extend_from_slice(payload);
            if trailer {
                head.extend_from_slice(&request_id.to_le_bytes());
            }
            return Ok(Frame {
                tag,
                head,
                body: None,
            });
        }
        let mut h = Header::new(self.job, ty, self.rank, to);
        h.flags = flags;
        h.request_id = request_id;
        if HEADER_LEN + payload.len() > RX_MAX {
            // Header alone (never empty: see `is_split_header`); the payload is sent from the
            // caller's buffer as it is.
            h.payload_len = payload.len() as u32;
            return Ok(Frame {
                tag: TAG,
                head: h.to_bytes().to_vec(),
                body: Some(payload.clone()),
            });
        }
        Ok(Frame {
            tag: TAG,
            head: squall_wire::encode(&h, payload),
            body: None,
        })
    }

    /// The tag of a headerless message of type `ty` with `flags` and a payload of
    /// `payload_len` bytes, and whether a request-id trailer follows the payload; None if it
    /// must be framed (headerless messages off, flags beyond request/reply, or too large for
    /// the posted receive: bulk data keeps its header and travels as header + body).
    fn headerless_tag(&self, ty: MsgType, flags: Flags, payload_len: usize) -> Option<(i32, bool)> {
        let jb = self.headerless?;
        let (tag, trailer) = mpi_tag::encode(jb, ty, flags)?;
        let len = payload_len + if trailer { mpi_tag::REQUEST_ID_LEN } else { 0 };
        (len <= RX_MAX).then_some((tag, trailer))
    }

    /// Accounts for and delivers one received frame (`data`, with `body` beside a header).
    fn on_frame(
        &mut self,
        now: Instant,
        src: i32,
        tag: i32,
        data: Vec<u8>,
        body: Option<Vec<u8>>,
        out: &mut Vec<BackendEvent>,
    ) {
        let decoded = decode_received(self.me(), src, tag, data, body);
        self.accept(now, decoded, out);
    }

    /// The stateful half of receiving a frame (see [`decode_frame`]): counters, peer state,
    /// goodbyes and heartbeats, delivery.
    fn accept(
        &mut self,
        now: Instant,
        decoded: Result<(Header, Bytes), DropReason>,
        out: &mut Vec<BackendEvent>,
    ) {
        self.counters.packets_received += 1;
        let (h, payload) = match decoded {
            Ok(d) => d,
            Err(reason) => {
                self.counters.drop(reason);
                return;
            }
        };
        let p = &mut self.peers[h.src.index()];
        p.last_heard = now;
        self.last_activity = now;
        self.active = true;
        if p.lost {
            return;
        }
        if h.flags.contains(Flags::BYE) {
            p.bye_received = true;
            out.push(BackendEvent::PeerBye(h.src));
            return;
        }
        if p.bye_received {
            self.counters.drop(DropReason::AfterBye);
            return;
        }
        if h.ty.0 == TY_LINK {
            return;
        }
        out.push(BackendEvent::Deliver(InMsg {
            src: h.src,
            ty: h.ty,
            flags: h.flags,
            request_id: h.request_id,
            payload,
            placed: 0,
        }));
    }

    /// This node as the decoders check messages against: headerless check bits (-1: off),
    /// job, rank, job size.
    fn me(&self) -> (i32, JobId, NodeId, usize) {
        (
            self.headerless.unwrap_or(-1),
            self.job,
            self.rank,
            self.peers.len(),
        )
    }

    /// A send to world rank `to` gave up on its full ring (the ring is unusable from then on):
    /// the next `handle_timeout` reports the peer lost; the error says why.
    fn ring_stuck(&self, to: i32) -> NetError {
        self.shared.note_ring_stuck(to);
        NetError::PeerLost {
            peer: NodeId(u16::try_from(to).unwrap_or(u16::MAX)),
            reason: ring_stuck_reason(self.peer_timeout),
        }
    }

    fn heartbeat_every(&self) -> Duration {
        self.peer_timeout / 3
    }
}

impl Backend for MpiBackend {
    fn register(&mut self, registry: &Registry) -> Result<(), NetError> {
        let w = Waker::new(registry, WAKE_TOKEN)
            .map_err(|e| NetError::io("registering the mpi backend's waker", e))?;
        *self.shared.waker.lock() = Some(Arc::new(w));
        // Frames that arrived before registration are waiting: look at them now.
        self.shared.wake_pending.store(false, Ordering::Release);
        self.shared.wake();
        Ok(())
    }

    fn send(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
        if msg.to == self.rank {
            return Err(NetError::BadDestination {
                peer: msg.to,
                size: self.peers.len() as u16,
            });
        }
        let headerless = self.headerless_tag(msg.ty, msg.flags, msg.payload.len());
        if self.shared.in_flight.load(Ordering::Acquire) == 0 {
            // The latency path: a message this thread sends itself, with no allocation: into
            // the ring of a rank on this machine (any size), or with one blocking (eager)
            // `MPI_Send` (for a whole frame beyond the eager size an `MPI_Isend` completed
            // while receiving).
            let Some(p) = self.peers.get_mut(msg.to.index()) else {
                return Err(NetError::BadDestination {
                    peer: msg.to,
                    size: self.peers.len() as u16,
                });
            };
            if p.lost {
                return Err(NetError::PeerGone { peer: msg.to });
            }
            if let Some(mut st) = self.shared.mpi.try_lock() {
                if st.closed {
                    return Err(NetError::PeerLost {
                        peer: msg.to,
                        reason: "mpi has been finalised on this node".into(),
                    });
                }
                let to = i32::from(msg.to.0);
                let id = msg.request_id.to_le_bytes();
                let header;
                // What goes: a headerless message straight from the caller's payload (a
                // request or reply: its id beside it), or a frame's header and payload.
                let (tag, parts): (i32, [&[u8]; 2]) = match headerless {
                    Some((tag, false)) => (tag, [&msg.payload, &[]]),
                    Some((tag, true)) => (tag, [&msg.payload, &id]),
                    None => {
                        let mut h = Header::new(self.job, msg.ty, self.rank, msg.to);
                        h.flags = msg.flags;
                        h.request_id = msg.request_id;
                        h.payload_len = msg.payload.len() as u32;
                        header = h.to_bytes();
                        (TAG, [&header, &msg.payload])
                    }
                };
                let len = parts[0].len() + parts[1].len();
                let tx = &self.incoming_tx;
                let mut got = false;
                let mut sink = |r: Received| {
                    let _ = tx.send(r);
                };
                let ring = ring_send(
                    &mut st,
                    to,
                    tag,
                    &parts,
                    &mut sink,
                    &mut got,
                    self.peer_timeout,
                );
                let sent = match ring {
                    Some(sent) => Some(sent),
                    None if len > RX_MAX => None,
                    None if len <= BLOCKING_SEND_MAX && parts[1].is_empty() => {
                        mpi_rx::send(parts[0], to, tag);
                        Some(true)
                    }
                    None => {
                        // One buffer for MPI: the parts joined in the reused send buffer.
                        self.tx_buf.clear();
                        self.tx_buf.extend_from_slice(parts[0]);
                        self.tx_buf.extend_from_slice(parts[1]);
                        got |= send_p2p(
                            &SimpleCommunicator::world(),
                            &mut st,
                            to,
                            tag,
                            &self.tx_buf,
                            None,
                            &mut sink,
                        );
                        Some(true)
                    }
                };
                drop(st);
                if got {
                    self.shared.wake();
                }
                if let Some(sent) = sent {
                    if !sent {
                        return Err(self.ring_stuck(to));
                    }
                    self.peers[msg.to.index()].last_sent = now;
                    self.counters.packets_sent += 1;
                    // A large send takes a while: the wait for its answer starts when it is
                    // done.
                    let now = if len > BLOCKING_SEND_MAX {
                        Instant::now()
                    } else {
                        now
                    };
                    self.last_activity = now;
                    self.active = true;
                    if !self.shared.svc_hot.load(Ordering::Acquire) {
                        // The progress thread watches for the answer: from now, not after its
                        // nap. (While the service thread is hot, it watches itself.)
                        self.shared
                            .sent_ns
                            .store(self.shared.nanos(now), Ordering::Release);
                        self.progress.unpark();
                    }
                    return Ok(());
                }
            }
        }
        let frame = self.frame(msg.to, msg.ty, msg.flags, msg.request_id, &msg.payload)?;
        self.send_frame(now, msg.to, frame)
    }

    fn send_clock(&self) -> Option<Instant> {
        // While hot the service thread refreshed `now_seen` a few probes ago.
        self.hot_probe.then_some(self.now_seen)
    }

    fn handle_event(&mut self, now: Instant, event: &Event, out: &mut Vec<BackendEvent>) {
        if event.token() != WAKE_TOKEN {
            return;
        }
        self.now_seen = now;
        self.shared.wake_pending.store(false, Ordering::Release);
        while let Ok((src, tag, data, body)) = self.incoming.try_recv() {
            self.on_frame(now, src, tag, data, body, out);
        }
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
        // Frames queued by others (including those whose wake-up raced with the last drain),
        // then MPI itself.
        self.poll_mpi(now, out);
        if self.shutdown_at.is_some() {
            return;
        }
        // (A flag first: this runs on every pass of the service loop.)
        let stuck = match self.shared.ring_stuck_any.swap(false, Ordering::AcqRel) {
            true => std::mem::take(&mut *self.shared.ring_stuck.lock()),
            false => Vec::new(),
        };
        for to in stuck {
            if let Some(p) = usize::try_from(to).ok().and_then(|i| self.peers.get_mut(i)) {
                if !p.lost {
                    p.lost = true;
                    out.push(BackendEvent::PeerLost {
                        peer: NodeId(to as u16),
                        reason: ring_stuck_reason(self.peer_timeout),
                    });
                }
            }
        }
        let every = self.heartbeat_every();
        let mut beats = Vec::new();
        for (i, p) in self.peers.iter_mut().enumerate() {
            if i == self.rank.index() || p.lost || p.bye_received {
                continue;
            }
            if now.saturating_duration_since(p.last_heard) >= self.peer_timeout {
                p.lost = true;
                out.push(BackendEvent::PeerLost {
                    peer: NodeId(i as u16),
                    reason: format!(
                        "no message or heartbeat over mpi for {} ms",
                        self.peer_timeout.as_millis()
                    ),
                });
                continue;
            }
            if now.saturating_duration_since(p.last_sent) >= every {
                beats.push(NodeId(i as u16));
            }
        }
        for to in beats {
            if let Ok(f) = self.frame(to, MsgType(TY_LINK), Flags::empty(), 0, &Bytes::new()) {
                let _ = self.send_frame(now, to, f);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.shutdown_at.is_some() {
            return Some(Instant::now() + Duration::from_millis(1));
        }
        // The clock of the last `handle_timeout` (no clock read per spin): if it is stale, the
        // service thread just spins once more and looks again with a fresh one.
        if self.now_seen.saturating_duration_since(self.last_activity) < self.spin.hot_for
            && !self.shared.finalized.load(Ordering::Acquire)
        {
            // Hot: come straight back to `handle_timeout`, which probes MPI. An instant in
            // the past, so the poll's timeout is exactly zero (a timeout of a few hundred
            // nanoseconds would be rounded up to a whole millisecond).
            return Some(self.shared.epoch);
        }
        if self.shared.svc_hot.swap(false, Ordering::AcqRel) {
            // The service thread is about to sleep: the progress thread watches MPI.
            self.progress.unpark();
        }
        let every = self.heartbeat_every();
        self.peers
            .iter()
            .enumerate()
            .filter(|(i, p)| *i != self.rank.index() && !p.lost && !p.bye_received)
            .map(|(_, p)| (p.last_sent + every).min(p.last_heard + self.peer_timeout))
            .min()
    }

    fn start_shutdown(&mut self, now: Instant) {
        if self.shutdown_at.is_some() {
            return;
        }
        self.shutdown_at = Some(now);
        for i in 0..self.peers.len() {
            // A peer that already said goodbye still waits for ours before it finalises.
            if i == self.rank.index() || self.peers[i].lost {
                continue;
            }
            let to = NodeId(i as u16);
            if let Ok(f) = self.frame(to, MsgType(TY_BYE), Flags::BYE, 0, &Bytes::new()) {
                let _ = self.send_frame(now, to, f);
            }
        }
    }

    fn is_flushed(&self) -> bool {
        let sent = self.shared.in_flight.load(Ordering::Acquire) == 0;
        let Some(s) = self.shutdown_at else {
            return sent;
        };
        if self.shared.finalized.load(Ordering::Acquire) {
            return true;
        }
        if !sent {
            return false;
        }
        let all_gone = self
            .peers
            .iter()
            .enumerate()
            .all(|(i, p)| i == self.rank.index() || p.lost || p.bye_received);
        if all_gone || Instant::now() >= s + LINGER {
            // `is_flushed` takes `&self`; the finalize command is idempotent on the progress
            // thread (it ends its loop once), so sending it more than once is harmless.
            let _ = self.cmds.send(Cmd::Finalize { all_gone });
            self.progress.unpark();
        }
        false
    }

    fn udp_local_addr(&self) -> Option<SocketAddr> {
        None
    }

    fn counters(&self) -> LinkCounters {
        self.counters.clone()
    }

    fn hot(&self) -> bool {
        self.hot_probe
    }

    fn poll_hot(&mut self, out: &mut Vec<BackendEvent>) {
        let now = self.now_seen;
        self.look(now, out, TESTS_PER_LOOK);
    }

    fn with_own_mpi(&mut self, f: &mut dyn FnMut(&SimpleCommunicator)) -> bool {
        let st = self.shared.mpi.lock();
        let Some(own) = st.own.as_ref().filter(|_| !st.closed) else {
            return false;
        };
        let lent_at = Instant::now();
        self.shared.lent.store(true, Ordering::Release);
        f(&own.0);
        self.shared.lent.store(false, Ordering::Release);
        drop(st);
        let now = Instant::now();
        // Nothing could be heard while MPI was lent: that time is no silence of the peers'
        // (a peer silent before it still is).
        let away = now.saturating_duration_since(lent_at);
        for p in &mut self.peers {
            p.last_heard = (p.last_heard + away).min(now);
        }
        self.now_seen = now;
        true
    }
}

impl Drop for MpiBackend {
    fn drop(&mut self) {
        // Let the progress thread finalise MPI if it has not (bounded: a peer that never
        // finalises must not hang this process).
        let _ = self.cmds.send(Cmd::Finalize { all_gone: false });
        self.progress.unpark();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.shared.finalized.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.shared.finalized.load(Ordering::Acquire) {
            if let Some(j) = self.join.take() {
                let _ = j.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-x"), None);
    }

    fn encoded(payload_len: usize, split: bool) -> Vec<u8> {
        let mut h = Header::new(JobId(7), MsgType(100), NodeId(1), NodeId(0));
        h.request_id = 9;
        if split {
            h.payload_len = payload_len as u32;
            h.to_bytes().to_vec()
        } else {
            squall_wire::encode(&h, &vec![0xabu8; payload_len])
        }
    }

    #[test]
    fn decode_frame_takes_whole_frames_and_split_headers_and_drops_the_rest() {
        let (job, me) = (JobId(7), NodeId(0));
        // A whole frame: payload copied out.
        let f = encoded(8, false);
        let (h, p) = decode_frame(job, me, 2, 1, &f, None).expect("whole frame");
        assert_eq!(
            (h.ty, h.request_id, &p[..]),
            (MsgType(100), 9, &[0xab; 8][..])
        );
        assert!(!is_split_header(&f));
        // An empty whole frame is not a split header.
        assert!(!is_split_header(&encoded(0, false)));
        // A header alone with its body.
        let head = encoded(5000, true);
        assert!(is_split_header(&head));
        let (_, p) =
            decode_frame(job, me, 2, 1, &head, Some(vec![1u8; 5000])).expect("header + body");
        assert_eq!(p.len(), 5000);
        // Wrong body length, truncated frame, foreign job, wrong source or rank, garbage.
        assert_eq!(
            decode_frame(job, me, 2, 1, &head, Some(vec![1u8; 10])).err(),
            Some(DropReason::Truncated)
        );
        assert_eq!(
            decode_frame(job, me, 2, 1, &f[..f.len() - 1], None).err(),
            Some(DropReason::Truncated)
        );
        assert_eq!(
            decode_frame(JobId(8), me, 2, 1, &f, None).err(),
            Some(DropReason::ForeignJob)
        );
        assert_eq!(
            decode_frame(job, me, 3, 2, &f, None).err(),
            Some(DropReason::BadDest)
        );
        assert_eq!(
            decode_frame(job, me, 2, 5, &f, None).err(),
            Some(DropReason::BadDest)
        );
        assert_eq!(
            decode_frame(job, NodeId(1), 2, 1, &f, None).err(),
            Some(DropReason::BadDest)
        );
        assert_eq!(
            decode_frame(job, me, 2, 1, &[0u8; 10], None).err(),
            Some(DropReason::Garbage)
        );
    }

    #[test]
    fn large_frames_keep_their_buffer_and_are_checked_like_copies() {
        let (job, me) = (JobId(7), NodeId(0));
        let f = encoded(4096, false);
        assert!(f.len() > COPY_MAX);
        // As the posted receive hands it over: the whole receive's capacity, the frame's length.
        let mut buf = Vec::with_capacity(RX_MAX);
        buf.extend_from_slice(&f);
        let (h, p) = decode_owned(job, me, 2, 1, buf).expect("whole frame");
        assert_eq!((h.ty, h.request_id, p.len()), (MsgType(100), 9, 4096));
        assert!(p.iter().all(|&b| b == 0xab));
        assert_eq!(
            decode_owned(job, me, 2, 1, f[..f.len() - 3].to_vec()).err(),
            Some(DropReason::Truncated)
        );
        assert_eq!(
            decode_owned(JobId(8), me, 2, 1, f.clone()).err(),
            Some(DropReason::ForeignJob)
        );
        assert_eq!(
            decode_owned(job, me, 2, 0, f).err(),
            Some(DropReason::BadDest)
        );
    }

    #[test]
    fn mpi_lock_is_exclusive_across_threads() {
        let lock = Arc::new(MpiLock::new(0u64));
        {
            let g = lock.try_lock().expect("free");
            assert!(lock.try_lock().is_none(), "held");
            drop(g);
        }
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        // Both ways of taking it, as the backend does.
                        let mut g = if i == 0 {
                            lock.lock()
                        } else {
                            loop {
                                if let Some(g) = lock.try_lock() {
                                    break g;
                                }
                                std::hint::spin_loop();
                            }
                        };
                        // A non-atomic read-modify-write: lost updates if two held it at once.
                        let v = *g;
                        std::hint::black_box(v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("locking thread");
        }
        assert_eq!(*lock.lock(), 60_000);
    }

    #[test]
    fn service_thread_spins_only_when_every_node_has_a_core() {
        let fits = SpinPolicy::for_machine(2, 2);
        assert_eq!(fits.hot_for, SVC_SPIN);
        assert_eq!(fits.yield_after, YIELD_AFTER);
        assert!(fits.yield_after < fits.hot_for);
        let crowded = SpinPolicy::for_machine(4, 2);
        assert_eq!(crowded.hot_for, Duration::ZERO);
        // One node on a big machine spins too.
        assert_eq!(SpinPolicy::for_machine(1, 64), fits);
    }
}
