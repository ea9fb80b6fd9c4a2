//! `hlrc` push updates: at a barrier a home sends the shared pages it wrote since the last
//! barrier to the nodes holding copies; a receiver updates its unmodified copies and keeps
//! them through the home's notices, probing whether it still reads them.
//!
//! Owns: `push_pending` and the `pushed`/`pushes` fields of `PageState`. Must not touch:
//! fetches, diffs.

use super::msg::Msg;
use super::state::MAX_RUN;
use super::Hlrc;
use crate::shared::access::set_access_runs;
use squall_core::{Access, NodeId, PageId, PageMemory, PAGE_SIZE};
use std::collections::BTreeMap;

impl<M: PageMemory> Hlrc<M> {
    /// Home side, at a barrier (its release is done): send the shared home pages written since
    /// the last barrier to the nodes that hold copies, in runs of consecutive pages, tagged
    /// with this node's last closed interval (the copies contain all its writes up to it).
    pub(super) fn send_pushes(&mut self) {
        let mut pending = std::mem::take(&mut self.push_pending);
        pending.retain(|&p| self.tuning_for(p).push_updates);
        let interval = self.diffs.own_interval;
        let mut runs: BTreeMap<NodeId, (PageId, Vec<u8>)> = BTreeMap::new();
        let mut last: Option<PageId> = None;
        for page in pending {
            let contiguous = last.is_some_and(|l| l.0 + 1 == page.0);
            last = Some(page);
            let targets: Vec<NodeId> = match self.pages.get(&page) {
                Some(st)
                    if self.is_home(page)
                        && !st.copyset_all
                        && st.excl_holder.is_none()
                        && !st.recalling =>
                {
                    st.copyset
                        .iter()
                        .copied()
                        .filter(|&n| n != self.me)
                        .collect()
                }
                _ => Vec::new(),
            };
            // Close the runs this page does not continue.
            let ended: Vec<NodeId> = runs
                .iter()
                .filter(|(n, (first, data))| {
                    !contiguous
                        || !targets.contains(n)
                        || data.len() / PAGE_SIZE >= MAX_RUN
                        || first.0 + (data.len() / PAGE_SIZE) as u64 != page.0
                })
                .map(|(n, _)| *n)
                .collect();
            for n in ended {
                if let Some((first, data)) = runs.remove(&n) {
                    self.send(
                        n,
                        Msg::Push {
                            first,
                            interval,
                            data,
                        },
                    );
                }
            }
            if targets.is_empty() {
                continue;
            }
            let data = self.read(page);
            for n in targets {
                runs.entry(n)
                    .or_insert_with(|| (page, Vec::new()))
                    .1
                    .extend_from_slice(&data);
            }
        }
        for (n, (first, data)) in runs {
            self.send(
                n,
                Msg::Push {
                    first,
                    interval,
                    data,
                },
            );
        }
    }

    /// A home's push: update each copy this node holds unmodified (read access, no twin, no
    /// fetch or own diff in flight, not exclusive) with the home's newer contents and
    /// remember that it holds the home's writes up to `interval`. Any other copy ignores it
    /// (a copy invalidated meanwhile is fetched on demand as usual).
    pub(super) fn on_push(&mut self, from: NodeId, first: PageId, interval: u32, data: &[u8]) {
        let mut probes = Vec::new();
        let mut unused = Vec::new();
        for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let q = PageId(first.0 + i as u64);
            let acc = self.mem.access(q);
            let fits = self.dir.cached(q).is_some_and(|h| h.node == from)
                && from != self.me
                && !self.dirty.contains(&q)
                && !self.diffs.per_page.contains_key(&q)
                && self.pages.get(&q).is_some_and(|st| {
                    st.twin.is_none() && st.fetch.is_none() && !st.exclusive && !st.granted
                });
            if !fits {
                continue;
            }
            let limit = self.tuning_for(q).push_probe;
            let st = self.st(q);
            if acc == Access::None && st.probe {
                // Not read since the probe: stop the pushes.
                st.probe = false;
                st.pushed = None;
                st.pushes = 0;
                st.lost = st.used;
                unused.push(q);
                continue;
            }
            if acc != Access::Read {
                continue;
            }
            st.pushed = Some((from, interval));
            st.pushes = st.pushes.saturating_add(1);
            if st.pushes > limit {
                st.probe = true;
                probes.push(q);
            }
            self.mem.write_bytes(q, 0, chunk);
            self.stats.pushes_taken += 1;
        }
        set_access_runs(&self.mem, &probes, Access::None);
        if !unused.is_empty() {
            self.send(from, Msg::Dropped { pages: unused });
        }
    }
}
