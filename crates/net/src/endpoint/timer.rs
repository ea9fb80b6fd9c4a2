//! The timer thread: it keeps the backend's timers further away than the poll's own timeout
//! (retransmission, heartbeats, peer timeouts) and wakes the service thread through the waker
//! when one is due, so the poll sleeps with no kernel timer armed. Must not touch the backend
//! beyond reading its next timer under the driver lock the caller holds.
use super::{Driver, Endpoint};
use std::time::{Duration, Instant};

/// How late a timer set by a send from another thread may fire before that send wakes the
/// service thread.
const WAKE_SLACK: Duration = Duration::from_millis(5);

impl Endpoint {
    /// After another thread used the backend: the backend's next timer if the service thread
    /// sleeps past it (then the caller arms the timer thread); None while it is awake (it
    /// computes its next sleep afterwards) or already wakes in time.
    pub(super) fn timer_for_sleeper(d: &mut Driver) -> Option<Instant> {
        match d.sleeping_until {
            None => None,
            Some(deadline) => match (d.backend.poll_timeout(), deadline) {
                (Some(t), Some(dl)) if t + WAKE_SLACK >= dl => None,
                (t, _) => t,
            },
        }
    }

    /// Makes the timer thread wake the service thread by `t` (give or take [`WAKE_SLACK`]:
    /// timers may run a little late rather than cost a wake-up per send; they only matter
    /// when something was lost).
    pub(super) fn arm_timer(&self, t: Instant) {
        let mut st = self.shared.timer.lock();
        if st.deadline.is_none_or(|d| t + WAKE_SLACK < d) {
            st.deadline = Some(t);
            self.shared.timer_cv.notify_one();
        }
    }

    /// The timer thread: sleeps until the deadline, then wakes the service thread.
    pub(super) fn timer_loop(&self) {
        let mut st = self.shared.timer.lock();
        while !st.stop {
            match st.deadline {
                None => self.shared.timer_cv.wait(&mut st),
                Some(d) if d > Instant::now() => {
                    let _ = self.shared.timer_cv.wait_until(&mut st, d);
                }
                Some(_) => {
                    st.deadline = None;
                    let _ = self.shared.waker.wake();
                }
            }
        }
    }
}
