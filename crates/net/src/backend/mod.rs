//! The backend boundary: what the endpoint needs from a transport. Owns the `Backend` trait and
//! the message/event types crossing it; must not touch handlers, requests or statistics by type.
//!
//! A backend owns its sockets, registers them with the service thread's `mio` poll (tokens ≥ 1;
//! token 0 is the endpoint's waker), and turns readiness events and timeouts into
//! [`BackendEvent`]s. The endpoint holds the backend under one lock: sends from any thread call
//! [`Backend::send`] directly (writing to the socket when possible); the service thread calls
//! `handle_event`/`handle_timeout` and then runs handlers with the lock released.
//! A third backend (e.g. MPI behind the `mpi` feature) implements this trait and is chosen in
//! `bootstrap`; nothing in `endpoint` changes.
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
#[cfg(feature = "mpi")]
mod mpi_rx;
#[cfg(feature = "mpi")]
mod mpi_shm;
// Pure memory logic: its tests run without the feature too.
#[cfg(any(test, feature = "mpi"))]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod mpi_ring;
// Pure logic: its tests run without the feature too.
#[cfg(any(test, feature = "mpi"))]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod mpi_tag;
pub(crate) mod tcp;
mod tcp_land;
pub(crate) mod udp;

use crate::error::NetError;
use crate::stats::LinkCounters;
use bytes::Bytes;
use mio::event::Event;
use mio::Registry;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::net::SocketAddr;
use std::time::Instant;

/// One message handed to a backend.
#[derive(Debug, Clone)]
pub(crate) struct OutMsg {
    pub to: NodeId,
    pub ty: MsgType,
    pub flags: Flags,
    pub request_id: u64,
    pub payload: Bytes,
}

/// One whole message received (reassembled, deduplicated, in order).
#[derive(Debug, Clone)]
pub(crate) struct InMsg {
    pub src: NodeId,
    pub ty: MsgType,
    pub flags: Flags,
    pub request_id: u64,
    pub payload: Bytes,
    /// Bytes of the payload that follow `payload` but were read straight into a lent buffer
    /// ([`Backend::expect_into`]); 0 usually.
    pub placed: usize,
}

/// What a backend reports to the endpoint, in order.
#[derive(Debug)]
pub(crate) enum BackendEvent {
    Deliver(InMsg),
    /// The peer said goodbye; nothing more will come from it.
    PeerBye(NodeId),
    /// The peer died or went silent.
    PeerLost {
        peer: NodeId,
        reason: String,
    },
}

pub(crate) trait Backend: Send {
    /// Registers the sockets with the service thread's poll; keeps a clone of the registry to
    /// change interest later from any thread.
    fn register(&mut self, registry: &Registry) -> Result<(), NetError>;
    /// Sends (or queues) one message. Called from any thread under the endpoint's lock.
    fn send(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError>;
    /// Sends one message whose payload is `msg.payload` followed by `body`, borrowed from the
    /// caller. Default: the two joined into one buffer (one copy), then [`Backend::send`]; a
    /// backend that can write the parts straight to the wire overrides it.
    fn send_split(&mut self, now: Instant, msg: OutMsg, body: &[u8]) -> Result<(), NetError> {
        let mut msg = msg;
        msg.payload = join(&msg.payload, body);
        self.send(now, msg)
    }
    /// Sends one message of a batch ([`crate::Endpoint::batch`]): like [`Backend::send`], but
    /// the backend may hold it until [`Backend::flush_batched`]. Default: sent at once.
    fn send_batched(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
        self.send(now, msg)
    }
    /// Writes what [`Backend::send_batched`] held. A write that fails is found by the read
    /// side, which reports the peer lost. Default: nothing held.
    fn flush_batched(&mut self) {}
    /// An instant the backend accepts as "now" for a send from the service thread instead of
    /// a clock read (its clock of the current service-loop pass). Default: none (the endpoint
    /// reads the clock).
    fn send_clock(&self) -> Option<Instant> {
        None
    }
    /// Handles one readiness event for a backend token.
    fn handle_event(&mut self, now: Instant, event: &Event, out: &mut Vec<BackendEvent>);
    /// Reads what has arrived, without a readiness event, for an application thread that
    /// waits for a reply from `from` ([`crate::Endpoint::request`]); what it read goes to `out`
    /// like `handle_event`'s events. Called from any thread under the endpoint's lock; it must
    /// leave the sockets as `handle_event` would (edge-triggered readiness: a reader drains
    /// what it starts on). False if this backend cannot be read this way (the waiter then
    /// leaves its input to the service thread). Default: false.
    fn poll_input(&mut self, _now: Instant, _from: NodeId, _out: &mut Vec<BackendEvent>) -> bool {
        false
    }
    /// Expects a message from `from` of type `ty` whose payload is `head` followed by exactly
    /// `dest.len()` bytes: a backend that can reads those bytes from the wire straight into
    /// `dest` and delivers the message with `payload` = `head` and `placed` = their number.
    /// Called under the endpoint's lock; `id` names it for [`Backend::forget_expect`], which
    /// always follows. Default: nothing (the message arrives whole as usual).
    fn expect_into(
        &mut self,
        _id: u64,
        _from: NodeId,
        _ty: MsgType,
        _head: &[u8],
        _dest: crate::landing::Dest,
    ) {
    }
    /// Drops expectation `id` and its buffer (never to be touched again); a message partly
    /// read into it continues in the backend's own buffer and arrives whole. Default: nothing.
    fn forget_expect(&mut self, _id: u64) {}
    /// Handles timers (retransmission, heartbeats, delayed packets, peer timeouts).
    fn handle_timeout(&mut self, now: Instant, out: &mut Vec<BackendEvent>);
    /// The earliest instant `handle_timeout` has work.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Begins an orderly goodbye to every peer still present.
    fn start_shutdown(&mut self, now: Instant);
    /// True once everything sent (including goodbyes) has left or been acknowledged.
    fn is_flushed(&self) -> bool;
    /// The local udp socket address, for tests that inject datagrams.
    fn udp_local_addr(&self) -> Option<SocketAddr>;
    /// Transport counters.
    fn counters(&self) -> LinkCounters;
    /// True while the backend wants the service thread to look for input in a tight loop of
    /// [`Backend::poll_hot`] calls instead of through the readiness poll: input that is not a
    /// file descriptor (MPI) with traffic a moment ago. The endpoint then polls its other
    /// sources (waker, extra sources, timers) only every few dozen calls. Default: never.
    fn hot(&self) -> bool {
        false
    }
    /// One cheap look for input while [`Backend::hot`]: no clock read, no system call; what
    /// arrived goes to `out` like `handle_timeout`'s events (the clock of the last
    /// `handle_timeout` stands for now).
    fn poll_hot(&mut self, _out: &mut Vec<BackendEvent>) {}
    /// Runs `f` with a communicator of MPI's own (a duplicate of the world's) while no
    /// Squall message moves on this node; false (without running `f`) if this backend has no
    /// MPI or it is finalised. Default: none.
    #[cfg(feature = "mpi")]
    fn with_own_mpi(&mut self, _f: &mut dyn FnMut(&::mpi::topology::SimpleCommunicator)) -> bool {
        false
    }
}

/// `head` followed by `body` in one buffer.
pub(crate) fn join(head: &[u8], body: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(head.len() + body.len());
    v.extend_from_slice(head);
    v.extend_from_slice(body);
    Bytes::from(v)
}
