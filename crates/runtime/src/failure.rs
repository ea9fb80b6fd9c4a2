//! Job failure: a node that cannot go on (a fatal protocol or synchronization error, a
//! collective that cannot complete) ends the whole job, and every node says why.
//!
//! The failing node prints `squall: node F: CAUSE; ending the job`, sends [`msg::ABORT`] with
//! the cause to every peer, and exits with status [`EXIT_FAILED`] once those peers are gone
//! (at most [`LINGER`]; on the service thread, which cannot watch them go, after
//! [`SERVICE_LINGER`]). A node that receives the notice prints
//! `squall: node R: node F failed: CAUSE; ending the job` and exits with the same status after
//! [`RECEIVER_LINGER`], so that its closing connections are not taken by a third node for the
//! failure before that node has read the same notice (which left the failing node first).
//! Every wait of the job ends this way, within a second, when one node fails: nothing stays
//! parked on a collective, a lock or a barrier that can no longer complete.
//!
//! Owns: the abort notice, its wording and the exits. Must not touch protocol or sync state
//! (it runs from anywhere, with or without the service lock).
use crate::msg;
use parking_lot::{Condvar, Mutex};
use squall_core::NodeId;
use squall_net::Endpoint;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit status of every node of a job ended by a failure (a lost peer is 3, see `squall-net`).
pub const EXIT_FAILED: i32 = 4;
/// Longest a failing node waits for its peers to go after its notice.
pub const LINGER: Duration = Duration::from_millis(500);
/// How long a failing node whose service thread found the failure keeps its connections
/// open after the notice (the writes are in the kernel already; this only avoids resetting
/// the connections while the peers read them).
pub const SERVICE_LINGER: Duration = Duration::from_millis(150);
/// How long a node that received a notice stays before it exits.
pub const RECEIVER_LINGER: Duration = Duration::from_millis(200);

/// Set once the job is ending through a failure (this node's or a peer's).
static ENDING: AtomicBool = AtomicBool::new(false);

/// End the job: `what` went wrong on `me`. Tells every peer (through `ep`, when the node is up)
/// and exits with [`EXIT_FAILED`]. Never returns. A second failure while the job is already
/// ending waits for the first one's exit.
pub fn end_job(ep: Option<&Endpoint>, me: NodeId, what: &str) -> ! {
    if ENDING.swap(true, Ordering::AcqRel) {
        // The first failure (or a peer's notice) is ending the process within its linger.
        let until = Instant::now() + LINGER + RECEIVER_LINGER;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::process::exit(EXIT_FAILED);
    }
    eprintln!("squall: {me}: {what}; ending the job");
    if let Some(ep) = ep {
        notify_peers(ep, me, what);
    }
    std::process::exit(EXIT_FAILED)
}

/// Send the notice to every peer still in the job, then wait (bounded) for them to go.
fn notify_peers(ep: &Endpoint, me: NodeId, what: &str) {
    let gone = Arc::new((Mutex::new(0usize), Condvar::new()));
    let g = gone.clone();
    // The peers leave because of this notice: not a loss to report.
    ep.set_on_peer_lost(move |_, _, _| {
        *g.0.lock() += 1;
        g.1.notify_all();
    });
    let text = what.as_bytes().to_vec();
    let sent = (0..ep.size())
        .filter(|&p| p != me.0)
        .filter(|&p| ep.send(NodeId(p), msg::ABORT, text.clone()).is_ok())
        .count();
    // A failure found while handling a message or routing protocol actions ends the process
    // inside a batch of sends (`Endpoint::batch`), which would otherwise hold the notices.
    ep.flush_batch();
    if ep.is_service_thread() {
        std::thread::sleep(SERVICE_LINGER);
        return;
    }
    let deadline = Instant::now() + LINGER;
    let mut n = gone.0.lock();
    while *n < sent {
        if gone.1.wait_until(&mut n, deadline).timed_out() {
            break;
        }
    }
}

/// A peer's notice arrived (on the service thread): say so and end this node shortly.
pub fn on_notice(ep: &Endpoint, from: NodeId, cause: &[u8]) {
    if ENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let cause = String::from_utf8_lossy(cause);
    eprintln!(
        "squall: {}: {from} failed: {cause}; ending the job",
        ep.rank()
    );
    // The failing node and the others leave now: not losses to report on their own.
    ep.set_on_peer_lost(|_, _, _| {});
    let spawned = std::thread::Builder::new()
        .name("squall-ending".into())
        .spawn(|| {
            std::thread::sleep(RECEIVER_LINGER);
            std::process::exit(EXIT_FAILED)
        });
    if spawned.is_err() {
        std::process::exit(EXIT_FAILED);
    }
}
