//! The service thread's loop: sleep in the poll until readiness, a wake-up or the backend's
//! next short timer; readiness events to the backend and the extra sources; the handlers of
//! what arrived; the backend's timers. Also its tight loop while the backend is hot, posted
//! closures, lingering after served input ([`Linger`]) and spinning on request
//! ([`Endpoint::spin_until`]), and the orderly stop. Must not decide what a message means
//! (that is `dispatch`) nor keep timers further than [`SHORT_TIMER`] (that is `timer`).
use super::peers::{PEER_BYE, PEER_UP};
use super::{Driver, Endpoint};
use crate::backend::BackendEvent;
use crate::error::NetError;
use mio::{Events, Poll, Token};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) const WAKER: Token = Token(0);
/// Tokens of extra sources ([`Endpoint::add_source`]) start here, far above the backends'
/// (which use small tokens from 1: one per peer at most).
pub(super) const SOURCE_TOKEN_BASE: usize = usize::MAX / 2;

/// Timers at most this far away are the poll's own timeout; later ones (retransmission,
/// heartbeats, peer timeouts) are left to the timer thread, so the poll usually sleeps without
/// a timeout: arming a kernel timer on every sleep cost about 0.35 us per message on the
/// measuring machine (a virtual machine, where programming the timer is expensive).
const SHORT_TIMER: Duration = Duration::from_millis(2);
/// While the backend is hot ([`Backend::hot`]), the service thread makes up to this many
/// [`Backend::poll_hot`] calls between two passes through its poll (waker, extra sources,
/// timers, the clock): the per-message path then has no system call and no clock read, and an
/// extra source (a page fault) waits at most this many probes (a few microseconds).
const HOT_BATCH: u32 = 32;

/// Most lingers a run of empty ones makes the service thread skip (see [`Linger`]).
const MAX_LINGER_SKIP: u32 = 64;

/// When the service thread lingers: after a pass that served input (a message, a fault, a
/// posted closure) it keeps polling without sleeping for `window`, since the answer to what
/// it just sent usually comes within microseconds and is then read without a thread
/// wake-up (on a loaded virtual machine a wake-up costs more than the whole window). A
/// linger that ends empty makes the next 1, 3, 7, ... (at most [`MAX_LINGER_SKIP`]) be
/// skipped; one that catches input resets that, so a slow or idle peer costs almost no CPU.
/// Pure logic: the caller passes the time.
#[derive(Debug)]
pub(super) struct Linger {
    window: Option<Duration>,
    misses: u32,
    skip: u32,
}

impl Linger {
    pub(super) fn new(window: Option<Duration>) -> Linger {
        Linger {
            window,
            misses: 0,
            skip: 0,
        }
    }

    /// Input was served at `now`: the instant to keep polling until, if lingering.
    pub(super) fn start(&mut self, now: Instant) -> Option<Instant> {
        let w = self.window?;
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        Some(now + w)
    }

    /// The linger caught input.
    pub(super) fn hit(&mut self) {
        self.misses = 0;
        self.skip = 0;
    }

    /// The linger ended empty.
    pub(super) fn miss(&mut self) {
        self.misses = (self.misses + 1).min(MAX_LINGER_SKIP.trailing_zeros());
        self.skip = (1 << self.misses) - 1;
    }
}

impl Endpoint {
    /// Runs a closure on the service thread (after the handlers already queued).
    pub fn post(&self, f: impl FnOnce(&Endpoint) + Send + 'static) {
        {
            let mut q = self.shared.posted.lock();
            q.push_back(Box::new(f));
            self.shared.posted_len.store(q.len(), Ordering::Release);
        }
        if !self.is_service_thread() {
            let _ = self.shared.waker.wake();
        }
    }

    /// Until `until` (or [`Endpoint::stop_spin`]), the service thread polls the network and
    /// the sources without sleeping, so input is read the moment it arrives instead of after a
    /// thread wake-up. For short, bounded waits on the critical path (a page fetch whose reply
    /// is due within microseconds); it costs a CPU while it lasts. A later call replaces the
    /// deadline. From another thread it takes effect at the service thread's next wake-up.
    pub fn spin_until(&self, until: Instant) {
        self.shared.driver.lock().spin_until = Some(until);
    }

    /// Ends a spin started with [`Endpoint::spin_until`]: the service thread sleeps again when
    /// it has nothing to do.
    pub fn stop_spin(&self) {
        self.shared.driver.lock().spin_until = None;
    }

    /// Moves what waiting threads read for the service thread ahead of what it reads now
    /// (service thread, under the driver lock; `out` is empty between dispatches).
    fn take_inbox(d: &mut Driver, out: &mut Vec<BackendEvent>) {
        if !d.inbox.is_empty() {
            out.append(&mut d.inbox);
        }
    }

    /// The service thread took `out` from the backend (under the driver lock): until it has
    /// dispatched them, waiting threads leave replies they read to it.
    fn mark_busy(&self, out: &[BackendEvent]) {
        if !out.is_empty() {
            self.shared.svc_busy.store(true, Ordering::Release);
        }
    }

    /// Dispatches `out` (under the dispatch lock: after a waiting thread's dispatch of what
    /// it read earlier) and ends the busy mark. Not under the driver lock.
    fn dispatch_out(&self, out: &mut Vec<BackendEvent>) {
        if !out.is_empty() {
            let _order = self.shared.dispatch.lock();
            // The replies to what one pass read leave together (one write per peer).
            self.batch(|| self.handle_events(out));
            self.shared.svc_busy.store(false, Ordering::Release);
        }
    }

    fn handle_events(&self, events: &mut Vec<BackendEvent>) {
        // Drained in place: the vector keeps its capacity from one iteration to the next.
        for ev in events.drain(..) {
            match ev {
                BackendEvent::Deliver(m) => self.deliver(m),
                BackendEvent::PeerBye(p) => {
                    if let Some(s) = self.shared.peer_state.get(p.index()) {
                        let _ = s.compare_exchange(
                            PEER_UP,
                            PEER_BYE,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                    }
                    self.fail_pending(Some(p), || NetError::PeerGone { peer: p });
                }
                BackendEvent::PeerLost { peer, reason } => self.peer_lost(peer, reason),
            }
        }
    }

    /// Runs the posted closures (they may send or post more).
    fn run_posted(&self) {
        while self.shared.posted_len.load(Ordering::Acquire) > 0 {
            let next = {
                let mut q = self.shared.posted.lock();
                let f = q.pop_front();
                self.shared.posted_len.store(q.len(), Ordering::Release);
                f
            };
            match next {
                Some(f) => f(self),
                None => break,
            }
        }
    }

    /// While the backend is hot, looks for its input [`HOT_BATCH`] times in a tight loop and
    /// runs the handlers of what arrives, without the poll or the clock; returns at once when
    /// it is not, and early when closures are posted or shutdown begins.
    fn run_hot(&self, out: &mut Vec<BackendEvent>) {
        for _ in 0..HOT_BATCH {
            {
                let mut d = self.shared.driver.lock();
                if !d.backend.hot() {
                    return;
                }
                Self::take_inbox(&mut d, out);
                d.backend.poll_hot(out);
                self.mark_busy(out);
            }
            self.dispatch_out(out);
            if self.shared.posted_len.load(Ordering::Acquire) > 0
                || self.shared.shutting_down.load(Ordering::Acquire)
            {
                return;
            }
        }
    }

    /// One iteration: posted closures, sleep in the poll until readiness, a wake-up or the
    /// backend's next timer, then readiness events and their handlers, then timers.
    /// Timers run after the handlers of what just arrived, so a backend may leave a socket's
    /// remaining reads (the udp driver's final, usually empty, `recvfrom`) to `handle_timeout`:
    /// the reply a handler sends leaves before that syscall instead of after it.
    pub(super) fn service_loop(&self, mut poll: Poll) {
        let mut events = Events::with_capacity(256);
        let mut out = Vec::new();
        let mut ready: Vec<usize> = Vec::new();
        let mut shutdown_started: Option<Instant> = None;
        let mut linger = Linger::new(self.shared.poll_spin);
        // While Some: polling without sleeping until then (see `Linger`).
        let mut linger_until: Option<Instant> = None;
        loop {
            self.run_hot(&mut out);
            self.run_posted();
            let now = Instant::now();
            if self.shared.shutting_down.load(Ordering::Acquire) {
                if shutdown_started.is_none() {
                    // Goodbyes go out before "flushed" can mean anything: a loop that saw the
                    // flag but not yet the goodbyes would stop with nothing queued, and the
                    // peers would take the closed connections for a failure.
                    self.shared.driver.lock().backend.start_shutdown(now);
                }
                let started = *shutdown_started.get_or_insert(now);
                let flushed = self.shared.driver.lock().backend.is_flushed();
                if flushed || now >= started + self.shared.peer_timeout {
                    break;
                }
            }
            let (timeout, later, spinning, skip_poll) = {
                let mut d = self.shared.driver.lock();
                let spinning = d.spin_until.is_some_and(|u| u > now);
                if !spinning {
                    d.spin_until = None;
                }
                let lingering = linger_until.is_some_and(|u| u > now);
                let t = if spinning
                    || lingering
                    || !d.inbox.is_empty()
                    || self.shared.posted_len.load(Ordering::Acquire) > 0
                {
                    Some(now)
                } else {
                    d.backend.poll_timeout()
                };
                let (poll_until, later) = match t {
                    Some(t) if t > now + SHORT_TIMER => (None, Some(t)),
                    t => (t, None),
                };
                d.sleeping_until = Some(poll_until);
                // A deadline a hair ahead of `now` is due: the poll would round any non-zero
                // wait up to a whole millisecond.
                let wait = poll_until.map(|t| match t.saturating_duration_since(now) {
                    d if d < Duration::from_micros(1) => Duration::ZERO,
                    d => d,
                });
                // A hot backend whose input is not a file descriptor (MPI), with no extra
                // sources: a poll that must not wait could only report the endpoint's or the
                // backend's waker, whose work (posted closures, input queued by other threads)
                // the loop looks at anyway. Its system call is skipped.
                let skip_poll = wait == Some(Duration::ZERO)
                    && d.backend.hot()
                    && self.shared.sources_len.load(Ordering::Acquire) == 0;
                (wait, later, spinning, skip_poll)
            };
            if let Some(t) = later {
                self.arm_timer(t);
            }
            let res = if skip_poll {
                events.clear();
                Ok(())
            } else {
                poll.poll(&mut events, timeout)
            };
            let now = Instant::now();
            if let Some(u) = linger_until {
                if !events.is_empty() {
                    linger.hit();
                    linger_until = None;
                    self.shared.poll_spin_hits.fetch_add(1, Ordering::Relaxed);
                } else if now >= u {
                    linger.miss();
                    linger_until = None;
                }
            }
            if spinning && events.is_empty() && linger_until.is_none() {
                // Nothing yet: let another runnable thread of this CPU (the peer we wait for,
                // on a machine with few cores) go first.
                std::thread::yield_now();
            }
            {
                let mut d = self.shared.driver.lock();
                d.sleeping_until = None;
                if let Err(e) = res {
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        eprintln!("squall: node {}: poll failed: {e}", self.shared.rank.0);
                    }
                }
                Self::take_inbox(&mut d, &mut out);
                for ev in events.iter() {
                    if ev.token().0 >= SOURCE_TOKEN_BASE {
                        ready.push(ev.token().0);
                    } else if ev.token() != WAKER {
                        d.backend.handle_event(now, ev, &mut out);
                    }
                }
                self.mark_busy(&out);
            }
            // Input served in this pass (not a bare wake-up): its answer may come soon.
            let served = !ready.is_empty() || !out.is_empty();
            if served && linger_until.is_none() {
                linger_until = linger.start(now);
                if linger_until.is_some() {
                    self.shared.poll_spins.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Extra sources first: a fault's page request leaves before the handlers of what
            // arrived meanwhile run.
            for token in ready.drain(..) {
                let f = self
                    .shared
                    .sources
                    .lock()
                    .get(&token)
                    .map(|(_, f)| f.clone());
                if let Some(f) = f {
                    (f.lock())(self);
                }
            }
            self.dispatch_out(&mut out);
            {
                let mut d = self.shared.driver.lock();
                Self::take_inbox(&mut d, &mut out);
                d.backend.handle_timeout(Instant::now(), &mut out);
                self.mark_busy(&out);
            }
            self.dispatch_out(&mut out);
        }
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.timer.lock().stop = true;
        self.shared.timer_cv.notify_one();
        self.fail_pending(None, || NetError::Shutdown);
        // The handlers (and what they hold) go with the service thread.
        self.drop_handlers();
    }
}
