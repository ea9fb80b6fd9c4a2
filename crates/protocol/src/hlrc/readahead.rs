//! `hlrc` read-ahead: which pages a fetch brings along with the faulting one (sequential
//! streams, never-held pages, copies lost to notices), the fetches a node sends when a
//! barrier releases, and the probes (copies installed without access to learn whether the
//! node still reads them).
//!
//! Owns: the stream table and the probe/trust bookkeeping of `PageState`. Must not touch:
//! the home side (`serve`), the invalidations that make a copy lost (`notices`).

use super::msg::Msg;
use super::state::{FetchState, BARRIER_FETCH_TRUST, MAX_AHEAD, PROBE_GRANT, STREAMS};
use super::Hlrc;
use crate::shared::access::set_access_runs;
use crate::shared::home::HomeRef;
use squall_core::{Access, PageId, PageMemory};

impl<M: PageMemory> Hlrc<M> {
    /// A thread reads `page`, a probe or a page of a barrier fetch: grant the probes in the
    /// run around it (up to `PROBE_GRANT` pages each side) and let the copies of the run
    /// still being fetched at the barrier come readable; all of them are trusted for the
    /// next barrier fetches (`BARRIER_FETCH_TRUST`).
    pub(super) fn read_probes_around(&mut self, page: PageId) {
        let in_run = |s: &Self, q: u64| {
            s.pages.get(&PageId(q)).is_some_and(|st| match st.fetch {
                Some(f) => f.barrier.is_some(),
                None => st.probe && s.mem.access(PageId(q)) == Access::None,
            })
        };
        let mut lo = page.0;
        while lo > 0 && page.0 - lo < PROBE_GRANT && in_run(self, lo - 1) {
            lo -= 1;
        }
        let mut hi = page.0 + 1;
        while hi < self.layout.total_pages && hi - page.0 < PROBE_GRANT && in_run(self, hi) {
            hi += 1;
        }
        let now = self.barriers;
        let mut grant = Vec::new();
        for q in lo..hi {
            let st = self.st(PageId(q));
            st.trust = BARRIER_FETCH_TRUST;
            if let Some(f) = st.fetch.as_mut() {
                if f.barrier.is_some() {
                    f.barrier = Some(true);
                }
                continue;
            }
            if st.probe {
                st.probe = false;
                st.pushes = 0;
                st.got_at = now;
                grant.push(PageId(q));
            }
        }
        set_access_runs(&self.mem, &grant, Access::Read);
    }

    /// Whether `q` may be fetched along with a page of `home` (a read copy nobody is getting
    /// or writing here); the caller adds why it is worth it.
    pub(super) fn can_read_ahead(&self, q: PageId, home: HomeRef) -> bool {
        q.0 < self.layout.total_pages
            && !self.dir.in_unit(q)
            && self.dir.cached(q) == Some(home)
            && self.mem.access(q) == Access::None
            && !self.diffs.per_page.contains_key(&q)
            && !self.resolving.contains_key(&q)
            && self.pages.get(&q).is_none_or(|st| {
                st.fetch.is_none() && st.twin.is_none() && !st.exclusive && !st.probe
            })
    }

    /// Pick the pages to fetch along with `page` from `home`, and mark them being fetched
    /// (returns how many before and after it). Around it, up to `lost_run` pages together:
    /// the copies of the same home this node used and held until a notice took them (they
    /// will likely be read again; one fault brings the whole run back even when the node
    /// reads them in random order, as CG's product gathers `p`). After it, also: pages this
    /// node reads sequentially (a stream of fetches reached `page`: 1, 2, 4, 8 then
    /// `MAX_AHEAD` pages as the stream goes on), or that it never held (up to `MAX_AHEAD`:
    /// the first reading of data another node initialised). Pages whose home is not decided
    /// yet are never read ahead (their first touch decides it).
    pub(super) fn read_ahead(&mut self, page: PageId, home: HomeRef) -> (u16, u16) {
        let tuning = self.tuning_for(page);
        let (enabled, lost_run) = (tuning.read_ahead, tuning.lost_run);
        if !enabled {
            return (0, 0);
        }
        let run = match self.streams.iter().position(|&(next, _)| next == page.0) {
            Some(i) => self.streams.remove(i).map_or(0, |(_, r)| r + 1),
            None => 0,
        };
        let seq_limit = if run == 0 {
            0
        } else {
            (1usize << (run - 1).min(4)).min(MAX_AHEAD)
        };
        let cap = lost_run.max(seq_limit).max(MAX_AHEAD);
        let lost = |s: &Self, q: PageId| s.pages.get(&q).is_some_and(|st| st.lost);
        // Forward: the lost run, or the sequential / never-held pages.
        let mut ahead = 0usize;
        while ahead < cap {
            let q = PageId(page.0 + 1 + ahead as u64);
            if !self.can_read_ahead(q, home) {
                break;
            }
            let wanted = if lost(self, q) {
                ahead < lost_run.max(seq_limit)
            } else {
                ahead < seq_limit
                    || (ahead < MAX_AHEAD && !self.pages.get(&q).is_some_and(|st| st.had_copy))
            };
            if !wanted {
                break;
            }
            ahead += 1;
        }
        // Backward: lost copies only, in what the forward run left of `lost_run` (half of
        // it at least when the lost run goes on both ways: the next fault is as likely
        // before the page as after it).
        let room = lost_run.saturating_sub(ahead).max(lost_run / 2);
        let mut behind = 0usize;
        while behind < room && (behind as u64) < page.0 {
            let q = PageId(page.0 - 1 - behind as u64);
            if !self.can_read_ahead(q, home) || !lost(self, q) {
                break;
            }
            behind += 1;
        }
        if behind + ahead > cap {
            ahead = cap - behind;
        }
        let first = page.0 - behind as u64;
        for q in (first..page.0).chain(page.0 + 1..=page.0 + ahead as u64) {
            self.st(PageId(q)).fetch = Some(FetchState {
                write: false,
                sent: true,
                stale: false,
                demand: false,
                barrier: None,
            });
        }
        self.stats.pages_prefetched += (behind + ahead) as u64;
        self.stats.pages_prefetched_behind += behind as u64;
        self.streams.push_front((page.0 + 1 + ahead as u64, run));
        self.streams.truncate(STREAMS);
        // Both fit: `cap` is at most `u16::MAX`.
        (behind as u16, ahead as u16)
    }

    /// A read copy `f` brought is installed readable, or (a barrier fetch no thread asked for
    /// yet, of a page not trusted to be read) left as a probe without access.
    pub(super) fn barrier_copy_readable(&mut self, page: PageId, f: FetchState) -> bool {
        if f.barrier != Some(false) || f.demand {
            return true;
        }
        self.st(page).probe = true;
        false
    }

    /// Fetch, in one message per run of consecutive pages of one home, the copies a barrier's
    /// notices just took from this node that it will likely read again (see
    /// `set_barrier_fetch`; `lost` in ascending order of page). A page marked `true` was
    /// writable with a twin: it comes back writable with a fresh twin (`on_page_run`), no
    /// twin fault.
    pub(super) fn barrier_fetch(&mut self, lost: &[(PageId, bool)]) {
        let mut i = 0;
        let mut budget = self.tuning.barrier_fetch;
        while i < lost.len() && budget > 0 {
            let (first, _) = lost[i];
            i += 1;
            let Some(home) = self.dir.cached(first) else {
                continue;
            };
            if home.node == self.me || !self.can_read_ahead(first, home) {
                continue;
            }
            let start = i - 1;
            let mut n = 1usize;
            while i < lost.len()
                && n < budget
                && lost[i].0 .0 == first.0 + n as u64
                && self.can_read_ahead(lost[i].0, home)
            {
                n += 1;
                i += 1;
            }
            // The whole run comes readable or as probes (probes in one run are granted
            // together by one fault): readable while any of its pages is still trusted.
            let readable = (first.0..first.0 + n as u64)
                .any(|q| self.pages.get(&PageId(q)).is_some_and(|st| st.trust > 0));
            for &(q, write) in &lost[start..i] {
                let st = self.st(q);
                st.trust = st.trust.saturating_sub(1);
                st.fetch = Some(FetchState {
                    write,
                    sent: true,
                    stale: false,
                    demand: false,
                    barrier: Some(readable),
                });
            }
            budget -= n;
            self.stats.barrier_fetches += 1;
            self.stats.pages_barrier_fetched += n as u64;
            self.send(
                home.node,
                Msg::Fetch {
                    page: first,
                    write: false,
                    epoch: home.epoch,
                    behind: 0,
                    // `n` is at most `barrier_fetch`, which is at most `u16::MAX`.
                    ahead: (n - 1) as u16,
                },
            );
        }
    }
}
