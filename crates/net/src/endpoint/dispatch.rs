//! Delivery on the service thread: its handler table (registered from any thread, owned by
//! the service thread, indexed by type: dispatch takes no lock), a delivered message's way to
//! its waiter (a reply), its handler, or the held queue of its type until one is registered.
//! Must not touch the backend or the poll (it runs what `service` and `waiting` took out).
use super::request::Pending;
use super::TY_LOST_NOTICE;
use super::{Endpoint, Incoming};
use crate::backend::InMsg;
use squall_core::NodeId;
use squall_wire::{Flags, MsgType};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// A handler. Registered from any thread into [`Shared::handler_changes`]; the service thread
/// moves it into its own table ([`SvcHandlers`]) and owns it from then on, so dispatch takes no
/// lock and touches no shared cache line.
pub(super) type Handler = Box<dyn FnMut(&Endpoint, Incoming) + Send + 'static>;

thread_local! {
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

impl Endpoint {
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
        super::tests::widen_hold_race();
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

    pub(super) fn deliver(&self, msg: InMsg) {
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
        let inc = Incoming::from(msg);
        if inc.flags.contains(Flags::REPLY) {
            let pending = self.shared.pending.lock().remove(&inc.request_id);
            match pending {
                Some((_, Pending::Blocking(slot))) => slot.put(inc.request_id, Ok(inc)),
                Some((_, Pending::Async(f))) => f(self, Ok(inc)),
                None => {} // a reply nobody waits for any more
            }
            return;
        }
        // Earlier messages of this type still held: queue behind them (FIFO).
        let must_hold = self.shared.held_len.load(Ordering::Acquire) > 0 && {
            let held = self.shared.held.lock();
            held.get(&inc.ty.0).is_some_and(|q| !q.is_empty())
        };
        if must_hold {
            self.hold(inc, false);
            return;
        }
        if let Err(inc) = self.run_handler(inc) {
            self.hold(inc, false);
        }
    }

    /// Drops the service thread's handler table (and what the handlers hold): at its end.
    pub(super) fn drop_handlers(&self) {
        let table = SVC_HANDLERS.with(|t| std::mem::take(&mut t.borrow_mut().table));
        drop(table);
    }
}
