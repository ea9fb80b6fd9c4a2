//! The sharing profile at finalize (`SQUALL_PROFILE`): every node collects its own (its
//! addresses symbolized where they were recorded) and sends it to rank 0, which puts the job's
//! together, prints the worst sites, locks and barriers, and writes the JSON
//! (`SQUALL_PROFILE_FILE`), the way the statistics are gathered. Must not touch the cores
//! beyond reading their profile.

use super::lifecycle::departure_wait;
use super::Node;
use crate::error::Result;
use crate::msg;
use crate::profile::report;
use squall_core::{NodeId, PageId};
use squall_protocol::Protocol;
use std::time::Instant;

impl Node {
    /// Collective (inside `finalize`, after its first barrier): gather and report the profile.
    pub(super) fn gather_profile(&self) -> Result<()> {
        if !self.profiling() {
            return Ok(());
        }
        let pages = self
            .inner
            .svc
            .lock()
            .protocol
            .sharing_profile()
            .unwrap_or_default();
        let space = &self.inner.space;
        let mine = self.inner.prof.collect(
            self.rank().0,
            pages,
            |p| space.addr_of(PageId(p)) as u64,
            self.stats().breakdown,
        );
        if self.rank() != NodeId(0) {
            let j = serde_json::to_vec(&mine).unwrap_or_default();
            self.inner.ep.send(NodeId(0), msg::PROFILE, j)?;
            return Ok(());
        }
        let mut all = vec![mine];
        let wait = departure_wait(self.inner.ep.peer_timeout());
        let deadline = Instant::now() + wait;
        for n in 1..self.size() {
            match self.inner.profile_in.take_until(u64::from(n), deadline) {
                Some(p) => all.push(p),
                None => eprintln!(
                    "squall: {}: no profile from {} within {} s; the report leaves it out",
                    self.rank(),
                    NodeId(n),
                    wait.as_secs()
                ),
            }
        }
        let mut job = report::build(&all);
        job.program = std::env::args().collect::<Vec<_>>().join(" ");
        job.elapsed_s = self.inner.prof.now_ns() as f64 / 1e9;
        let file = &self.inner.cfg.profile_file;
        eprint!("{}", report::text(&job, file));
        match serde_json::to_string_pretty(&job) {
            Ok(doc) => {
                if let Err(e) = std::fs::write(file, doc) {
                    eprintln!("squall: could not write {file}: {e}");
                }
            }
            Err(e) => eprintln!("squall: could not encode the profile: {e}"),
        }
        Ok(())
    }
}
