//! Application threads that read the network themselves while they wait, so what they wait
//! for is read and handled with no thread wake-up: a blocking request's reply spin
//! ([`Endpoint::wait_reply`]), the runtime's waits for grants and releases
//! ([`Endpoint::wait_polling`], [`Endpoint::poll_once`], FIFO with the service thread kept by
//! the dispatch lock and the inbox), and the buffer lent for one expected message
//! ([`Endpoint::receive_into`]). Must not run the service thread's handler table or touch
//! the poll; what such a thread reads and may not take goes to the service thread's inbox.
use super::request::{Pending, ReplySlot};
use super::{Endpoint, Incoming, TY_LOST_NOTICE};
use crate::backend::BackendEvent;
use crate::error::NetError;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Endpoint {
    /// Waits for the outcome of blocking request `id` to `to`. For `reply_spin` this thread
    /// (idle anyway) polls the backend itself between looks at its slot, yielding the CPU
    /// after each so it never keeps a runnable thread (the service thread, a peer's) off it:
    /// the reply is then read and taken with no thread wake-up. After that, or if the backend
    /// cannot be polled from here, it sleeps until the service thread hands the outcome over.
    pub(super) fn wait_reply(
        &self,
        slot: &ReplySlot,
        id: u64,
        to: NodeId,
    ) -> Result<Incoming, NetError> {
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
        let id = m.request_id;
        Ok(Some((id, slot, Incoming::from(m))))
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
                            mine.push(Local::Claimed(Incoming::from(m)));
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
}
