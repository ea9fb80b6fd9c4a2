//! The end of a node's part of the job: `finalize` (the last barriers, the statistics report,
//! the departure round, the goodbye, giving the fault stream and the program's globals back).
//! Must not touch the heap or threads.
//!
//! Departure is a protocol of its own, so that no node leaves while another may still send it
//! something. The job's last barrier is not enough: its departure reaches the nodes one by
//! one (the manager sends them in rank order), and applying it makes a node send one-way
//! traffic nobody waits for: `hlrc` tells the homes of the copies the barrier's write notices
//! invalidated which copies it dropped (`Dropped`). Such notices do come at the last barrier:
//! a node's barrier fetch after the program's last barrier reaches a home after its release
//! for finalize's first barrier; a home page served while kept dirty counts as written at the
//! next release, so finalize's second barrier carries a notice for it, and the prefetching
//! node drops its copy and tells the home while applying that barrier. The home, having got
//! its departure first, used to say goodbye at once, and the `Dropped` batch then failed with
//! `node 3: sending to node 1: node 1 has left the job (said goodbye)`, ending a correct
//! program (about 2 runs in 1,000 of `dsm` `threads/hlrc/4 nodes`; always a 1 to 3 page
//! `Dropped` batch). Now, after the last barrier, every node sends a done notice (`msg::DONE`) to every
//! peer under the service lock — so behind everything the barrier made it send (the barrier's
//! departure is applied inside a drain, which holds that lock; per-pair FIFO) — and says
//! goodbye only once it has every peer's. A node therefore leaves only when every message
//! caused by the last barrier has reached it. What a node may still send after its done
//! notice (only answers to such late messages) goes to a peer that needs nothing more: a send
//! to a peer that said goodbye is dropped by design while departing (`Service::send`).

use super::faults::FaultServing;
use super::Node;
use crate::error::{Result, SquallError};
use crate::msg;
use crate::stats::{self, NodeReport, NodeStats};
use squall_core::NodeId;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a node waits for the departure notices (and rank 0 for the statistics) of nodes
/// that have all passed the last barrier: a backstop only, since a peer that dies or goes
/// silent ends the job after the peer timeout anyway.
pub(super) fn departure_wait(peer_timeout: Duration) -> Duration {
    Duration::from_secs(10) + 2 * peer_timeout
}

impl Node {
    /// Collective: end this node's part of the job. Waits for every node, prints and writes
    /// the statistics if asked (`SQUALL_STATS=1`), says goodbye to the peers.
    pub fn finalize(&self) -> Result<()> {
        if self.inner.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // No barrier fetch at the last barriers (a peer past them may have left already), as
        // soon as no thread runs here either.
        self.inner.svc.lock().finalizing();
        self.end_barrier()?;
        self.gather_profile()?;
        if self.inner.cfg.stats {
            let run = self.stats();
            let mine = NodeReport {
                phase: self.phase(&run),
                run,
            };
            if self.rank() == NodeId(0) {
                let mut all = vec![mine];
                let wait = departure_wait(self.inner.ep.peer_timeout());
                let deadline = Instant::now() + wait;
                for n in 1..self.size() {
                    match self.inner.stats_in.take_until(u64::from(n), deadline) {
                        Some(r) => all.push(r),
                        None => eprintln!(
                            "squall: {}: no statistics from {} within {} s; the report leaves it out",
                            self.rank(),
                            NodeId(n),
                            wait.as_secs()
                        ),
                    }
                }
                let runs: Vec<NodeStats> = all.iter().map(|r| r.run.clone()).collect();
                eprint!("{}", stats::table(&runs));
                let mut doc = serde_json::json!({"nodes": runs, "total": stats::total(&runs)});
                // The timed phase, if every node marked one (a node the mark never reached
                // would make the sum meaningless).
                let phases: Option<Vec<NodeStats>> = all.iter().map(|r| r.phase.clone()).collect();
                if let Some(phases) = phases {
                    eprint!(
                        "{}",
                        stats::table_titled(&phases, "timed phase: stats marks")
                    );
                    doc["phase"] = serde_json::json!({
                        "nodes": phases,
                        "total": stats::total(&phases),
                    });
                }
                if let Err(e) = std::fs::write(&self.inner.cfg.stats_file, doc.to_string()) {
                    eprintln!("squall: could not write {}: {e}", self.inner.cfg.stats_file);
                }
            } else {
                let j = serde_json::to_vec(&mine).unwrap_or_default();
                self.inner.ep.send(NodeId(0), msg::STATS, j)?;
            }
        }
        self.end_barrier()?;
        self.depart()?;
        self.inner.ep.shutdown()?;
        // Give the fault stream back; nothing may touch shared memory after this.
        let signal = match self.inner.faults.lock().take() {
            Some(FaultServing::Poll(id)) => {
                self.inner.ep.remove_source(id);
                None
            }
            Some(FaultServing::Thread(ft)) => {
                drop(ft);
                None
            }
            Some(FaultServing::Signal(s)) => Some(s),
            None => None,
        };
        // The program's globals and stacks stay usable by what runs after this (exit handlers,
        // destructors): plain memory from now on (node 0, their home, has the final values).
        if let Err(e) = self.inner.space.detach() {
            eprintln!("squall: {}: {e}", self.rank());
        }
        // Signal mode: no fault comes from the detached range any more.
        drop(signal);
        Ok(())
    }

    /// The departure round (see the module doc): tell every peer this node is done, behind
    /// everything the last barrier made it send, then wait for every peer's notice.
    fn depart(&self) -> Result<()> {
        let me = self.rank();
        {
            let mut s = self.inner.svc.lock();
            s.departing = true;
            for n in (0..self.size()).map(NodeId).filter(|n| *n != me) {
                self.inner.ep.send(n, msg::DONE, Vec::new())?;
            }
        }
        let wait = departure_wait(self.inner.ep.peer_timeout());
        let deadline = Instant::now() + wait;
        let missing: Vec<String> = (0..self.size())
            .map(NodeId)
            .filter(|n| *n != me)
            .filter(|n| {
                self.inner
                    .done
                    .take_until(u64::from(n.0), deadline)
                    .is_none()
            })
            .map(|n| n.to_string())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SquallError::Departure {
                missing: missing.join(", "),
                secs: wait.as_secs(),
            })
        }
    }
}
