//! One-way sends: [`Endpoint::send`], [`Endpoint::send_borrowed`] and `send_raw`, the one path
//! every message (requests and replies too) takes to the backend or, to oneself, through the
//! service thread; the per-type send counts. Must not touch the pending table, the handler
//! table or the service loop (a send only lowers the timer thread's deadline, `timer`).
use super::Endpoint;
use crate::backend::{Backend, InMsg, OutMsg};
use crate::error::NetError;
use bytes::Bytes;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::sync::atomic::Ordering;
use std::time::Instant;

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
        self.to_backend(on_service, |b, now| b.send(now, msg))
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
