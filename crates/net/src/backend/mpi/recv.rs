//! The receive path: the posted receive and the rings from this machine, drained under the
//! MPI lock by whichever thread holds it (others' frames queued for the service thread, in
//! order), the service thread's looks while hot ([`MpiBackend::poll_mpi`],
//! [`MpiBackend::look`]), the body behind a split header, and accepting a decoded message
//! (counters, peer state, goodbyes, heartbeats, delivery). Must not send (bar nothing) nor
//! decide when a peer is lost (that is `peers`).
use super::decode::{
    decode_frame, decode_headerless, decode_headerless_owned, decode_owned, decode_received,
    decode_slice,
};
use super::{MpiBackend, MpiState, Received, COPY_MAX, TAG, TAG_BODY};
use crate::backend::mpi_ring::{Msg, Reader};
use crate::backend::mpi_rx::PostedRecv;
use crate::backend::mpi_tag;
use crate::backend::{BackendEvent, InMsg};
use crate::endpoint::TY_LINK;
use crate::stats::DropReason;
use ::mpi::point_to_point::{MatchedReceiveVec, Source};
use ::mpi::topology::{Communicator, SimpleCommunicator};
use bytes::Bytes;
use squall_core::{JobId, NodeId};
use squall_wire::{Flags, Header, HEADER_LEN};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// While hot, one look at MPI tests the posted receive up to this many times under one
/// acquisition of the locks (the empty probe is then little more than `MPI_Test`, as in the
/// `MPI_Recv` loop of a raw program).
pub(super) const TESTS_PER_LOOK: u32 = 4;

/// With every peer on this machine (all reached through rings), the hot service thread tests
/// the posted MPI receive only once per this many looks at the rings.
const MPI_TEST_EVERY: u32 = 16;
/// Passes over the rings in one look while MPI is not due and nothing has come.
const RING_PASSES: u32 = 16;

/// A hot service thread that finds nothing in `handle_timeout` probes up to this many times
/// before it returns to the endpoint's loop (which mostly probes through [`Backend::poll_hot`],
/// without its poll's system call and clock read).
const INNER_PROBES: u32 = 4;

/// Receives every message already arrived into `sink` (copied out of the posted receive or
/// the rings); true if there was one. Caller holds the MPI lock.
pub(super) fn receive_all(st: &mut MpiState, sink: &mut dyn FnMut(Received)) -> bool {
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
pub(super) fn drain(
    rx: &mut PostedRecv,
    rings: &mut [Reader],
    sink: &mut dyn FnMut(Received),
) -> bool {
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

/// True if `frame` is a header alone whose payload follows as a [`TAG_BODY`] message.
pub(super) fn is_split_header(frame: &[u8]) -> bool {
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
    /// The service thread's receive: frames others queued, then whatever MPI holds (if the
    /// MPI lock is free; its holder queues what it receives); probes up to [`INNER_PROBES`]
    /// times while hot and finding nothing. Decides whether the endpoint may probe in a tight
    /// loop until the next call ([`Backend::hot`]).
    pub(super) fn poll_mpi(&mut self, now: Instant, out: &mut Vec<BackendEvent>) {
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
    pub(super) fn look(&mut self, now: Instant, out: &mut Vec<BackendEvent>, tests: u32) -> bool {
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

    /// Accounts for and delivers one received frame (`data`, with `body` beside a header).
    pub(super) fn on_frame(
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
}
