//! The end of a node's part of the job: `finalize` (the last barriers, the statistics report,
//! the goodbye, giving the fault stream and the program's globals back). Must not touch the
//! heap or threads.

use super::faults::FaultServing;
use super::Node;
use crate::error::Result;
use crate::msg;
use crate::stats::{self, NodeReport, NodeStats};
use squall_core::NodeId;
use std::sync::atomic::Ordering;

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
        if self.inner.cfg.stats {
            let run = self.stats();
            let mine = NodeReport {
                phase: self.phase(&run),
                run,
            };
            if self.rank() == NodeId(0) {
                let mut all = vec![mine];
                for n in 1..self.size() {
                    all.push(self.inner.stats_in.take(u64::from(n)));
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
        self.inner.ep.shutdown()?;
        // Give the fault stream back; nothing may touch shared memory after this.
        match self.inner.faults.lock().take() {
            Some(FaultServing::Poll(id)) => {
                self.inner.ep.remove_source(id);
            }
            Some(FaultServing::Thread(ft)) => drop(ft),
            None => {}
        }
        // The program's globals and stacks stay usable by what runs after this (exit handlers,
        // destructors): plain memory from now on (node 0, their home, has the final values).
        if let Err(e) = self.inner.space.detach() {
            eprintln!("squall: {}: {e}", self.rank());
        }
        Ok(())
    }
}
