//! The MPI backend (feature `mpi`): a plain message, request or reply of up to [`RX_MAX`]
//! bytes travels *headerless*: one MPI point-to-point message on `MPI_COMM_WORLD` holding just
//! its payload (a request or reply: plus its 8-byte request id), sent straight from the
//! caller's buffer, with the message type, the kind and 10 job-check bits in the MPI tag
//! ([`super::mpi_tag`]); MPI supplies the rest of what the wire header carries elsewhere (source
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
//! the machine, a hot look tests MPI only every `MPI_TEST_EVERY` looks. `SQUALL_MPI_SHM=0`
//! (on any rank) turns the rings off.
//!
//! Who calls MPI: MPI is initialised with `MPI_THREAD_SERIALIZED` and every MPI call is made
//! under one lock ([`Shared::mpi`]), by whichever thread needs it, so no message crosses a
//! thread to be sent or received on the latency path:
//! - **Sends** are posted by the sending thread itself ([`Backend::send`], already under the
//!   endpoint's lock): a headerless message straight from its payload (a request or reply
//!   with its id, or a whole frame, from a reused buffer), with one blocking
//!   `MPI_Send` up to `BLOCKING_SEND_MAX` (eager: it never waits for the receiver), else with
//!   `MPI_Isend` (a header and body: two), then `MPI_Test` while receiving (so two large sends
//!   crossing each other cannot deadlock). Only when earlier
//!   sends are still queued for the progress thread, or the MPI lock is busy, does a send join
//!   that queue, behind them.
//! - **Receives** go through one receive kept posted for [`TAG`] from any source
//!   ([`super::mpi_rx::PostedRecv`]): a message is matched to it as MPI pulls it in, and one
//!   `MPI_Test` finds it, as `MPI_Recv` does in a raw MPI program. The endpoint's service
//!   thread tests it itself while *hot* (a message came or went within `SVC_SPIN`): in the
//!   endpoint's tight loop ([`Backend::hot`], [`Backend::poll_hot`]: no poll system call, no
//!   clock read) while the last message is less than `YIELD_AFTER` old, then in
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
//!   for `SPIN` after its last piece of work, then naps with a timeout growing from 2 µs to
//!   `MAX_NAP`. It also initialises and finalises MPI and posts sends queued behind it.
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
//! Goodbye: a `BYE` frame to every peer; once all peers said goodbye (or `LINGER` passed)
//! the progress thread withdraws the posted receive and calls `MPI_Finalize`, and the backend
//! reports itself flushed. A dead peer normally makes mpirun end the whole job; in case it
//! does not, heartbeats (`TY_LINK`, every third of the peer timeout when nothing else was
//! sent) and a silence limit of `SQUALL_PEER_TIMEOUT_MS` report the peer lost by name instead
//! of hanging.
//!
//! The files of this folder, one concern each: `init` (the progress thread's MPI start-up and
//! the bootstrap collectives, the spin policy, [`start`]), `progress` (the progress thread's
//! loop and MPI's end), `send` (the send path: headerless or framed, eager, ring or
//! `MPI_Isend`, or queued for the progress thread), `recv` (the receive path: the posted
//! receive and the rings, drained by whichever thread holds the MPI lock, and accepting what
//! came), `decode` (pure checks and decoding of received bytes), `peers` (heartbeats, peer
//! timeouts, full rings, goodbye and flush). The unsafe MPI calls stay in [`super::mpi_rx`],
//! [`super::mpi_shm`] and [`super::mpi_ring`]; nothing in this folder is unsafe.
mod decode;
mod init;
mod peers;
mod progress;
mod recv;
mod send;
#[cfg(test)]
mod tests;

pub(crate) use init::start;

use super::mpi_rx::{MpiLock, OwnComm, PostedRecv};
use super::mpi_shm::Shm;
use super::{Backend, BackendEvent, OutMsg};
use crate::error::NetError;
use crate::stats::{DropReason, LinkCounters};
use ::mpi::topology::SimpleCommunicator;
use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use init::SpinPolicy;
use mio::event::Event;
use mio::{Registry, Token, Waker};
use parking_lot::Mutex;
use progress::Cmd;
use recv::TESTS_PER_LOOK;
use squall_core::{JobId, NodeId};
use squall_wire::{Header, HEADER_LEN};
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

/// Received whole frames up to this size have their payload copied out of the posted receive's
/// buffer; larger ones take the buffer itself (no copy; the next post allocates a new one, after
/// the handler ran).
const COPY_MAX: usize = HEADER_LEN + 1024;

/// This backend's token in the service thread's poll (the waker).
const WAKE_TOKEN: Token = Token(1);

/// A hot service thread that has not probed for this long is stuck in a handler: the progress
/// thread probes meanwhile (so a peer's large send to this node is not held up).
const STALL: Duration = Duration::from_millis(2);

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
        self.send_msg(now, msg)
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
        self.check_peers(now, out);
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
        self.say_goodbye(now);
    }

    fn is_flushed(&self) -> bool {
        self.flushed()
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
