//! The progress thread: after [`init_mpi`] it posts the sends queued behind it and receives
//! while the service thread does not (cold, or stalled in a long handler), spinning a while
//! after work and then napping; at the end it withdraws the posted receive, frees the rings'
//! window when every peer said goodbye, and finalises MPI. Must not decode or deliver
//! messages (it hands what it receives to the service thread's queue).
use super::init::{init_mpi, Started};
use super::recv::receive_all;
use super::send::send_one;
use super::{Frame, Received, Shared, STALL};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use squall_core::JobId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the progress thread keeps probing after its last piece of work before napping.
const SPIN: Duration = Duration::from_micros(50);
/// Longest nap of an idle progress thread.
const MAX_NAP: Duration = Duration::from_micros(50);

/// Work for the progress thread.
pub(super) enum Cmd {
    Send {
        to: i32,
        frame: Frame,
    },
    /// `all_gone`: every peer said goodbye, so every rank of this machine frees the shared
    /// window (a collective call) too.
    Finalize {
        all_gone: bool,
    },
}

/// The progress thread: initialise, report, then post queued sends and receive (while the
/// service thread does not) until told to finalise.
pub(super) fn progress_main(
    job_hint: Option<JobId>,
    peer_timeout: Duration,
    cmds: Receiver<Cmd>,
    incoming: Sender<Received>,
    ready: Sender<Result<Started, String>>,
    shared: Arc<Shared>,
) {
    // Naps shorter than the default 50 µs timer slack only help if the slack is small.
    let _ = nix::sys::prctl::set_timerslack(1_000);
    let Some((universe, world)) = init_mpi(job_hint, &ready, &shared) else {
        return;
    };
    let mut push = |r: Received| {
        // The backend is gone only when the endpoint is; then nobody wants the frame.
        let _ = incoming.send(r);
    };
    let mut last_work = Instant::now();
    let mut nap = Duration::from_micros(2);
    let mut free_window = false;
    loop {
        let mut worked = false;
        let mut finalize = false;
        loop {
            match cmds.try_recv() {
                Ok(Cmd::Send { to, frame }) => {
                    worked = true;
                    let mut st = shared.mpi.lock();
                    if !st.closed {
                        let (got, sent) = send_one(
                            &world,
                            &mut st,
                            to,
                            frame.tag,
                            &frame.head,
                            frame.body.as_ref(),
                            &mut push,
                            peer_timeout,
                        );
                        if !sent {
                            shared.note_ring_stuck(to);
                        }
                        if got || !sent {
                            shared.wake();
                        }
                    }
                    // Still under the lock: a sender that sees nothing in flight may post
                    // its own send, which then follows this one.
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                }
                Ok(Cmd::Finalize { all_gone }) => {
                    finalize = true;
                    free_window |= all_gone;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    finalize = true;
                    break;
                }
            }
        }
        if finalize {
            break;
        }
        let now = Instant::now();
        if shared.service_polling(now) || shared.lent.load(Ordering::Acquire) {
            // The service thread receives itself; it (or a queued send) unparks this thread
            // when it stops.
            std::thread::park_timeout(STALL);
            last_work = now;
            continue;
        }
        if let Some(mut st) = shared.mpi.try_lock() {
            if !st.closed && receive_all(&mut st, &mut push) {
                worked = true;
                shared.wake();
            }
        }
        let sent = shared.sent_ns.load(Ordering::Acquire);
        if sent > shared.nanos(last_work) {
            // A send posted by another thread counts as work: its answer is due soon.
            last_work = shared.epoch + Duration::from_nanos(sent);
            nap = Duration::from_micros(2);
        }
        if worked {
            last_work = Instant::now();
            nap = Duration::from_micros(2);
        } else if last_work.elapsed() < SPIN {
            // Yield rather than burn: on a machine with fewer cores than busy threads, the
            // service and application threads must get the core to answer at all.
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
    // Nobody calls MPI once the flag is set (every caller checks it under the lock); the
    // posted receive is withdrawn before MPI_Finalize.
    {
        let mut st = shared.mpi.lock();
        st.rx.cancel();
        drop(st.own.take()); // MPI_Comm_free, before MPI_Finalize
        if let Some(shm) = st.shm.take() {
            // Collective over this machine's ranks: only when all said goodbye (then all
            // get here); otherwise the window is left to MPI_Finalize.
            if free_window {
                shm.free();
            }
        }
        st.closed = true;
    }
    drop(world);
    drop(universe); // MPI_Finalize
    shared.finalized.store(true, Ordering::Release);
    shared.wake_pending.store(false, Ordering::Release);
    shared.wake();
}
