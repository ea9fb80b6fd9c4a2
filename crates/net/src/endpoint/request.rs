//! Request/reply bookkeeping: the pending table's entries (a blocking waiter's slot or an
//! asynchronous callback), the per-thread reply slot, [`Endpoint::request`],
//! [`Endpoint::request_async`], [`Endpoint::reply`], and failing what is pending when a peer
//! goes or the endpoint stops. Must not touch the backend (requests leave through `send`, and
//! a blocking request's wait is `waiting`'s) nor the handler table.
use super::{Endpoint, Incoming, ReplyFn};
use crate::error::NetError;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(super) enum Pending {
    Blocking(Arc<ReplySlot>),
    Async(ReplyFn),
}

/// Where the service thread leaves the outcome of a blocking [`Endpoint::request`]: one per
/// application thread, reused (a request costs no channel allocation). Tagged with the request
/// id so a late outcome of an earlier, abandoned request is never taken for the current one.
pub(super) struct ReplySlot {
    pub(super) value: Mutex<Option<(u64, Result<Incoming, NetError>)>>,
    pub(super) cv: Condvar,
}

impl ReplySlot {
    pub(super) fn put(&self, id: u64, r: Result<Incoming, NetError>) {
        *self.value.lock() = Some((id, r));
        self.cv.notify_one();
    }

    /// The outcome of request `id` if it is here (an earlier request's is dropped).
    pub(super) fn try_take(&self, id: u64) -> Option<Result<Incoming, NetError>> {
        let mut v = self.value.lock();
        match v.take() {
            Some((rid, r)) if rid == id => Some(r),
            _ => None,
        }
    }

    /// Blocks until the outcome of request `id` is here.
    pub(super) fn take(&self, id: u64) -> Result<Incoming, NetError> {
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
    pub(super) static REPLY_SLOT: Arc<ReplySlot> = Arc::new(ReplySlot {
        value: Mutex::new(None),
        cv: Condvar::new(),
    });
}

impl Endpoint {
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
        if self.in_batch() {
            // Nothing held may wait behind this thread's wait (the reply could depend on it).
            self.flush_batch();
        }
        self.wait_reply(&slot, id, to).map(|inc| inc.payload)
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

    pub(super) fn fail_pending(&self, peer: Option<NodeId>, err: impl Fn() -> NetError) {
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
}
