//! One-way sends: [`Endpoint::send`], [`Endpoint::send_borrowed`] and `send_raw`, the one path
//! every message (requests and replies too) takes to the backend or, to oneself, through the
//! service thread; the per-type send counts; batches of sends ([`Endpoint::batch`]). Must not
//! touch the pending table, the handler table or the service loop (a send only lowers the
//! timer thread's deadline, `timer`).
use super::Endpoint;
use crate::backend::{Backend, InMsg, OutMsg};
use crate::error::NetError;
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// This thread's [`Endpoint::batch`]: of which endpoint (its id; 0: none), how deeply batches
/// nest, and whether it sent anything the backend may hold.
#[derive(Clone, Copy)]
struct BatchState {
    ep: usize,
    depth: u32,
    held: bool,
}

const NO_BATCH: BatchState = BatchState {
    ep: 0,
    depth: 0,
    held: false,
};

thread_local! {
    static BATCH: Cell<BatchState> = const { Cell::new(NO_BATCH) };
}

/// Ends a batch (also when its closure unwinds): the outermost one writes what it held (a
/// batch that sent nothing costs no look at the backend).
struct BatchGuard<'a> {
    ep: &'a Endpoint,
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        let b = BATCH.get();
        if b.depth > 1 {
            BATCH.set(BatchState {
                depth: b.depth - 1,
                ..b
            });
            return;
        }
        BATCH.set(NO_BATCH);
        if b.held {
            self.ep.flush_batch();
        }
    }
}

impl Endpoint {
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
        self.check_peer(to)?;
        let on_service = self.is_service_thread();
        self.count_sent(ty, head.len() + body.len(), on_service);
        let msg = OutMsg {
            to,
            ty,
            flags: Flags::empty(),
            request_id: 0,
            payload: Bytes::copy_from_slice(head),
        };
        self.to_backend(on_service, |b, now| b.send_split(now, msg, body))
    }

    /// Runs `f`; the messages this thread sends meanwhile are held by the backend and written
    /// together when `f` returns (tcp: one write per peer instead of one per message, so the
    /// receiver reads them in one pass too). For bursts: a release's diffs, a barrier's
    /// fetches, the replies to what one pass of the service thread read. Order is kept (a send
    /// of another thread to the same peer writes what is held first). Batches nest (the
    /// outermost one writes); a blocking [`Endpoint::request`] inside one writes what is held
    /// before it waits. Batches of one endpoint do not hold another's sends.
    pub fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        let me = self.id();
        let b = BATCH.get();
        if b.depth > 0 && b.ep != me {
            // Inside another endpoint's batch: this one's sends are not held.
            return f();
        }
        BATCH.set(BatchState {
            ep: me,
            depth: b.depth + 1,
            held: b.held,
        });
        let _guard = BatchGuard { ep: self };
        f()
    }

    /// True while this thread is in a batch of this endpoint.
    pub(super) fn in_batch(&self) -> bool {
        let b = BATCH.get();
        b.depth > 0 && b.ep == self.id()
    }

    /// This thread's batch sent a message the backend may hold (its end writes them).
    fn mark_held() {
        BATCH.set(BatchState {
            held: true,
            ..BATCH.get()
        });
    }

    /// Writes now what the backend holds for batches (this thread's included): for a thread
    /// that is about to end the process inside a batch (whose end would never come).
    pub fn flush_batch(&self) {
        if self.shared.stopped.load(Ordering::Acquire) {
            return;
        }
        self.shared.driver.lock().backend.flush_batched();
    }

    fn count_sent(&self, ty: MsgType, len: usize, on_service: bool) {
        if on_service {
            self.shared.by_type.sent_owned(ty.0, len);
        } else {
            self.shared.by_type.sent(ty.0, len);
        }
    }

    pub(super) fn send_raw(
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
        self.check_peer(to)?;
        let msg = OutMsg {
            to,
            ty,
            flags,
            request_id,
            payload,
        };
        if self.in_batch() {
            Self::mark_held();
            self.to_backend(on_service, |b, now| b.send_batched(now, msg))
        } else {
            self.to_backend(on_service, |b, now| b.send(now, msg))
        }
    }

    /// Hands one message to the backend with `send` under the driver lock, then lets the timer
    /// thread take any timer the send created while the service thread sleeps.
    fn to_backend(
        &self,
        on_service: bool,
        send: impl FnOnce(&mut dyn Backend, Instant) -> Result<(), NetError>,
    ) -> Result<(), NetError> {
        let timer = {
            let mut d = self.shared.driver.lock();
            // The service thread may send with the backend's own recent clock (no clock read
            // per message on the latency path).
            let now = match on_service {
                true => d.backend.send_clock(),
                false => None,
            };
            send(&mut *d.backend, now.unwrap_or_else(Instant::now))?;
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
}
