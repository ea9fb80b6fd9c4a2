//! The send path: a message goes headerless (payload and any request id, the rest in the
//! tag) or framed (whole, or header + body for bulk), into the ring of a rank on this machine
//! or by MPI point-to-point (one eager `MPI_Send`, else `MPI_Isend` tested while receiving),
//! posted by the sending thread itself under the MPI lock, or queued for the progress thread
//! behind earlier sends (per-pair FIFO). Must not decode or deliver what it receives while it
//! waits (it hands that to the queue, `recv` accepts it).
use super::progress::Cmd;
use super::recv::{drain, receive_all};
use super::{Frame, MpiBackend, MpiState, PeerState, Received, RX_MAX, TAG, TAG_BODY};
use crate::backend::mpi_rx;
use crate::backend::mpi_tag;
use crate::backend::OutMsg;
use crate::error::NetError;
use ::mpi::point_to_point::Destination;
use ::mpi::topology::{Communicator, SimpleCommunicator};
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{Flags, Header, MsgType, HEADER_LEN};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Whole frames up to this size are sent with a blocking `MPI_Send`: well under Open MPI's
/// shared-memory eager limit (4 KiB including its own header), so the call never waits for the
/// receiver to match it (two nodes sending to each other cannot deadlock). Larger whole frames
/// go with `MPI_Isend` and a test loop that keeps receiving.
const BLOCKING_SEND_MAX: usize = 2048;

/// Posts one send and completes it, receiving whatever arrives meanwhile into `sink`:
/// (something was received, the send went out). A send to a rank of this machine goes
/// through its ring ([`ring_send`]); it fails only if that ring stays full for `limit`.
/// Caller holds the MPI lock.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_one(
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

/// Why a send to `to` fails once MPI is finalised on this node.
fn finalised(to: NodeId) -> NetError {
    NetError::PeerLost {
        peer: to,
        reason: "mpi has been finalised on this node".into(),
    }
}

impl MpiBackend {
    /// The state of peer `to` if a send to it may go (it exists and is not lost).
    fn open_peer(&mut self, to: NodeId) -> Result<&mut PeerState, NetError> {
        let size = self.peers.len() as u16;
        let Some(p) = self.peers.get_mut(to.index()) else {
            return Err(NetError::BadDestination { peer: to, size });
        };
        if p.lost {
            return Err(NetError::PeerGone { peer: to });
        }
        Ok(p)
    }

    /// [`Backend::send`](crate::backend::Backend::send): the sending thread posts the message
    /// itself when nothing is queued and the MPI lock is free, else it is framed and queued.
    pub(super) fn send_msg(&mut self, now: Instant, msg: OutMsg) -> Result<(), NetError> {
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
            self.open_peer(msg.to)?;
            if let Some(mut st) = self.shared.mpi.try_lock() {
                if st.closed {
                    return Err(finalised(msg.to));
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
    /// Sends one frame: posted by this thread when nothing is queued for the progress thread,
    /// else queued behind what is (per-pair FIFO).
    pub(super) fn send_frame(
        &mut self,
        now: Instant,
        to: NodeId,
        frame: Frame,
    ) -> Result<(), NetError> {
        self.open_peer(to)?.last_sent = now;
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
                return Err(finalised(to));
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

    /// Encodes one message: a whole frame, or a header with the payload beside it.
    pub(super) fn frame(
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
}
