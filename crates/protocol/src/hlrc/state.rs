//! `hlrc` page state and tuning: what one node knows about each page (`PageState`, the
//! fetch in flight, work waiting for a home look-up or a recall), the protocol's constants,
//! and the settable knobs.
//!
//! Owns: the per-page record and the defaults. Must not touch: messages, page contents or
//! access (the concern modules do that through `Hlrc`).

use super::msg::Msg;
use super::Hlrc;
use crate::shared::home::HomeRef;
use crate::{AtomicCall, Coherence};
use squall_core::{NodeId, PageId, PageMemory};
use std::collections::BTreeSet;

/// Consecutive diffs from one sole writer (with no home write in between) after which the home
/// migrates to that writer. 0 disables migration.
pub const DEFAULT_MIGRATE_AFTER: u32 = 2;

/// Notices held before the oldest ones of each node are merged (programs that never reach a
/// barrier keep bounded memory this way).
pub const DEFAULT_NOTICE_BUDGET: usize = 1024;

/// Notices of each node kept individually when compacting.
pub(super) const KEEP_RECENT: usize = 4;

/// When a home that grants a `want_home` hands over the following pages at once (see
/// `Hlrc::set_run_handover`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunHandover {
    /// Never: every page moves by its own `want_home`.
    Off,
    /// When the writer's `want_home`s come in page order (it writes through an array another
    /// node initialised): the default.
    Sequential,
    /// After every granted `want_home` (more migrations; the simulator uses it to exercise
    /// run handovers often).
    Always,
}

/// A non-home page written within this many releases stays writable across a release (its
/// twin refreshed: a write-protect, a compare and an unprotect, a few microseconds) instead of
/// being write-protected (a write fault costs tens of microseconds). Doubled each time the
/// page is written again after being left protected (up to 32 releases).
pub(super) const KEEP_WRITABLE_IDLE: u8 = 2;

pub(super) fn keep_limit(refaults: u8) -> u8 {
    KEEP_WRITABLE_IDLE << refaults.min(4)
}

/// A write fault on a copy of a page whose home has moved fewer times than this asks the home
/// to move here (Cashmere: the writer becomes the home if the home is not writing the page).
/// Pages a main thread initialised and workers then own move to their writers at once, even
/// when the writes change nothing; beyond this, migration needs a streak of diffs (no
/// ping-pong of pages that several nodes write in turn).
pub(super) const WANT_HOME_EPOCHS: u32 = 2;

/// Most pages a fetch asks for beyond the faulting one of a sequential stream, and of pages
/// this node never held (read-ahead); and most homes a home look-up answer carries beyond
/// the page asked about.
pub(super) const MAX_AHEAD: usize = 15;
/// Most pages a fetch asks for around the faulting one, behind and ahead together, of the
/// copies this node used and lost to notices (see `Hlrc::set_lost_run`): CG at `large` reads
/// the other node's 195 pages of `p` in random order after every barrier, and gets them with
/// one fetch.
pub const DEFAULT_LOST_RUN: usize = 255;
/// Most pages in one `page_run`, `push` or `handovers` message (a longer run is sent as
/// several messages).
pub(super) const MAX_RUN: usize = 63;
pub(super) const HOME_RUN: usize = 64;
/// Sequential fetch streams remembered for read-ahead.
pub(super) const STREAMS: usize = 8;
/// Pushes a copy takes before one is installed as a probe: a reader cannot tell whether it
/// still reads a page that pushes keep valid, so that many pushes after its last fault on the
/// page it installs the next one without access. A fault on it grants the access locally (no
/// message; the run of probed pages around it at once) and the pushes go on; if the next push
/// finds it untouched, the copy is dropped and the home told (no more pushes). 0: every push
/// is a probe (one local fault per run of pushed pages read; a page no longer read costs two
/// pushes, CG's once-per-outer-step vectors six times less than with 2).
pub(super) const PUSH_PROBE: u8 = 0;
/// Most pages a node fetches at once when a barrier releases (see `Hlrc::set_barrier_fetch`).
pub const DEFAULT_BARRIER_FETCH: usize = 1024;
/// A copy lost to a barrier's notices is fetched at that barrier only if this node got it
/// (or a thread faulted on it) at most this many barriers before: CG gets `p` in its product
/// three barriers before the one that invalidates it.
pub(super) const BARRIER_FETCH_AGE: u32 = 4;
/// Barrier fetches installed with read access, without a probe, after a thread was seen
/// reading a probed copy of the page: one probe in `BARRIER_FETCH_TRUST + 1` barrier fetches
/// checks that the node still reads it (a page it stopped reading is fetched at most that
/// many times more).
pub(super) const BARRIER_FETCH_TRUST: u8 = 7;
/// Most probed pages one fault grants on each side of the faulting page (all the probes of a
/// barrier fetch of `DEFAULT_BARRIER_FETCH` pages).
pub(super) const PROBE_GRANT: u64 = DEFAULT_BARRIER_FETCH as u64;

/// Work waiting for a home look-up.
#[derive(Debug, Clone)]
pub(super) enum Deferred {
    Fault {
        write: bool,
    },
    Atomic {
        offset: usize,
        call: AtomicCall,
        token: u64,
    },
}

#[derive(Debug, Clone, Copy)]
pub(super) struct FetchState {
    pub(super) write: bool,
    /// Sent to the home; otherwise it waits for this node's own diffs of the page to be
    /// acked (a diff forwarded by an old home could otherwise arrive after the fetch).
    pub(super) sent: bool,
    /// A write notice arrived while the fetch was out: the reply may predate the diff.
    pub(super) stale: bool,
    /// A thread waits for the page (false: read-ahead nobody asked for yet).
    pub(super) demand: bool,
    /// Sent when a barrier released (see `Hlrc::set_barrier_fetch`), as part of a run
    /// installed as probes (`Some(false)`) or readable (`Some(true)`, the run was trusted to
    /// be read).
    pub(super) barrier: Option<bool>,
}

/// What one node knows of one page. The fields by the concern that keeps them: the copy
/// (`twin`, `fetch`, `exclusive`, `want_sent`, `lost`, `used`, `had_copy`: `fault`,
/// `release`, `notices`), the release heuristics (`idle_releases`, `refaults`: `release`,
/// `fault`), the home side (`copyset`, `copyset_all`, `served_dirty`, `excl_holder`,
/// `recalling`, `held`: `serve`; `forward`, `streak`: `migrate`), pushes and probes
/// (`pushed`, `pushes`, `probe`: `push`; `got_at`, `trust`: `readahead`). Where a copy
/// changes hands (`fresh_copy`, `invalidate`, `hand_over`, `become_home`) that function
/// resets every field the change invalidates, whichever concern keeps it.
#[derive(Debug, Default)]
pub(super) struct PageState {
    pub(super) twin: Option<Vec<u8>>,
    pub(super) fetch: Option<FetchState>,
    /// Home side: where the home went when it migrated away from this node.
    pub(super) forward: Option<HomeRef>,
    /// Home side: consecutive diffs from one writer with no home write in between.
    pub(super) streak: Option<(NodeId, u32)>,
    /// This node holds the page in exclusive mode.
    pub(super) exclusive: bool,
    /// Releases in a row at which this node's twin of the page showed no change.
    pub(super) idle_releases: u8,
    /// Times the page was written again after being write-protected for being idle.
    pub(super) refaults: u8,
    /// Home side: nodes sent a copy of the page (they may still hold it).
    pub(super) copyset: BTreeSet<NodeId>,
    /// Home side: the copyset is unknown (the home migrated here): never grant exclusive.
    pub(super) copyset_all: bool,
    /// Home side: a copy was handed out while this node was writing the page (dirty): the
    /// next release notices the page even if it then equals the snapshot (a later write may
    /// have put back the snapshot's bytes over what the copy holds).
    pub(super) served_dirty: bool,
    /// Home side: the node holding the page in exclusive mode.
    pub(super) excl_holder: Option<NodeId>,
    /// Home side: a recall is out.
    pub(super) recalling: bool,
    /// Home side: work waiting for the recall.
    pub(super) held: Vec<Held>,
    /// The home epoch at which this node last asked the home to move here.
    pub(super) want_sent: Option<u32>,
    /// This node's copy was invalidated by a notice after it had used the page (read it
    /// ahead next time).
    pub(super) lost: bool,
    /// A thread of this node faulted on the page at least once (a copy that only came by
    /// read-ahead may never have been used).
    pub(super) used: bool,
    /// This node has held a copy of the page at some time.
    pub(super) had_copy: bool,
    /// This node's copy was updated by a push of the home (node, interval): that home's
    /// notices up to that interval do not invalidate it.
    pub(super) pushed: Option<(NodeId, u32)>,
    /// Pushes taken into this copy since a thread of this node last faulted on it.
    pub(super) pushes: u8,
    /// Probe: a pushed copy installed without access to see whether this node still reads
    /// it (a fault grants it locally); a push finding the probe untouched is declined.
    pub(super) probe: bool,
    /// This node's copy was updated by pages pushed with a lock grant (`grantpush`): a home's
    /// push still in flight (another channel than the grant's, even from the same home) may
    /// be older than it, so home pushes are declined until the copy is invalidated.
    pub(super) granted: bool,
    /// `Hlrc::barriers` when this node last got a copy of the page or a thread faulted on it.
    pub(super) got_at: u32,
    /// Barrier fetches of the page still installed readable without a probe.
    pub(super) trust: u8,
}

/// Home-side work waiting for an exclusive copy to come back.
#[derive(Debug)]
pub(super) enum Held {
    Remote(NodeId, Msg),
    LocalFault(bool),
    LocalAtomic {
        offset: usize,
        call: AtomicCall,
        token: u64,
    },
}

pub(super) enum HomeStatus {
    Serve,
    Redirect(HomeRef),
    Park,
}

/// The knobs of an `hlrc` core (set with `Hlrc::set_*`; defaults in [`Tuning::default`]).
///
/// Page-scoped knobs (everything but `notice_budget` and `barrier_fetch`, which bound what
/// one node holds or sends at once) are read through `Hlrc::tuning_for(page)`: today every
/// page gets the node's `Tuning`; a per-allocation policy (issue 22) carries its own `Tuning`
/// and `tuning_for` looks it up by the page's allocation, with no change to the concern
/// modules that read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Consecutive sole-writer diffs after which the home migrates; 0: never.
    pub migrate_after: u32,
    /// Grant exclusive mode to a sole writer.
    pub exclusive_mode: bool,
    /// Fetches bring following pages too (see `Hlrc::set_read_ahead`).
    pub read_ahead: bool,
    /// Most lost copies a fetch brings around the faulting page (see `Hlrc::set_lost_run`).
    pub lost_run: usize,
    /// Home side: whether a granted `want_home` is followed by the run of pages after it.
    pub run_handover: RunHandover,
    /// Home side: push updates at barriers (see `Hlrc::set_push_updates`).
    pub push_updates: bool,
    /// Home side: a home page kept writable stays writable when first shared, with a
    /// snapshot (see `Hlrc::set_watch_shared`).
    pub watch_shared: bool,
    /// Pushes a copy takes before it is probed (see `PUSH_PROBE`).
    pub push_probe: u8,
    /// Node-wide: most notices held before old ones are merged.
    pub notice_budget: usize,
    /// Node-wide: most pages fetched at once when a barrier releases (0: none).
    pub barrier_fetch: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            migrate_after: DEFAULT_MIGRATE_AFTER,
            exclusive_mode: true,
            read_ahead: true,
            lost_run: DEFAULT_LOST_RUN,
            run_handover: RunHandover::Sequential,
            push_updates: false,
            watch_shared: true,
            push_probe: PUSH_PROBE,
            notice_budget: DEFAULT_NOTICE_BUDGET,
            barrier_fetch: DEFAULT_BARRIER_FETCH,
        }
    }
}

impl<M: PageMemory> Hlrc<M> {
    /// The knobs that apply to `page` (see [`Tuning`]): its allocation's if it was made under
    /// a policy of its own (`Protocol::apply_policy`), else the node's.
    pub(super) fn tuning_for(&self, page: PageId) -> &Tuning {
        self.page_tuning
            .range(..=page.0)
            .next_back()
            .filter(|(_, (end, _))| page.0 < *end)
            .map_or(&self.tuning, |(_, (_, t))| t)
    }

    /// Pages `first .. first + pages` follow `coherence`: the node's knobs with the
    /// allocation's choice of updates or invalidation, and its coherence unit (`unit`).
    pub(super) fn set_page_policy(&mut self, first: PageId, pages: u64, coherence: Coherence) {
        let mut t = Tuning {
            push_updates: coherence.updates,
            ..self.tuning.clone()
        };
        if coherence.unit_pages > 1 {
            // A unit is fetched, installed and invalidated whole, at one home: its pages
            // never migrate, are never held exclusively, and are read ahead only as the unit.
            t.migrate_after = 0;
            t.exclusive_mode = false;
            t.read_ahead = false;
            t.run_handover = RunHandover::Off;
            t.push_updates = false;
            t.watch_shared = false;
            self.dir.set_unit(first, pages, coherence.unit_pages);
        }
        self.page_tuning
            .insert(first.0, (first.0.saturating_add(pages), t));
    }

    /// This core's knobs.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// Set the migration threshold (consecutive sole-writer diffs); 0 disables migration.
    pub fn set_migrate_after(&mut self, n: u32) {
        self.tuning.migrate_after = n;
    }

    /// Enable or disable read-ahead (on by default).
    pub fn set_read_ahead(&mut self, on: bool) {
        self.tuning.read_ahead = on;
    }

    /// Set how many copies this node used and lost to notices a fetch brings along with the
    /// faulting page, behind and ahead of it together (default [`DEFAULT_LOST_RUN`]; at most
    /// `u16::MAX`; 0 reads no lost copies ahead).
    pub fn set_lost_run(&mut self, n: usize) {
        self.tuning.lost_run = n.min(usize::from(u16::MAX));
    }

    /// Set when a home that grants a `want_home` also hands over the following pages the
    /// writer holds copies of (default `RunHandover::Sequential`; see the crate README).
    pub fn set_run_handover(&mut self, mode: RunHandover) {
        self.tuning.run_handover = mode;
    }

    /// Enable or disable push updates (off by default: on 2 nodes sharing 2 cores CG and
    /// Em3d at medium sent 3-8x fewer fetches and half the messages with them, but ran
    /// 10-35% slower on a loaded machine: the pushes sit on the barrier's critical path while
    /// fetches overlap computation; to be re-measured on a quiet machine or real network).
    /// At a barrier a home sends the pages it
    /// wrote since the last barrier to the nodes holding copies of them, which then keep
    /// their copies through the home's notices instead of faulting and fetching them again
    /// (producer/consumer sharing repeated every barrier interval; see the crate README).
    pub fn set_push_updates(&mut self, on: bool) {
        self.tuning.push_updates = on;
    }

    /// Whether a home page that is writable here (written lately, nobody else holding a
    /// copy) stays writable when another node first takes a copy, the bytes handed out kept
    /// as its snapshot for the next releases to compare to (on by default), or is
    /// write-protected so the home's next write faults. Watched pages that stay unchanged for
    /// a few releases are write-protected then (as idle written pages are).
    pub fn set_watch_shared(&mut self, on: bool) {
        self.tuning.watch_shared = on;
    }

    /// Pushes a copy takes after a fault on it before the next one is installed as a probe
    /// (default 0: every push is installed as a probe).
    pub fn set_push_probe(&mut self, n: u8) {
        self.tuning.push_probe = n;
    }

    /// Set how many pages this node fetches at once when a barrier releases (default
    /// [`DEFAULT_BARRIER_FETCH`]; 0 turns barrier fetches off): the copies this barrier's
    /// notices invalidated that this node held readable, had used, and got (or faulted on)
    /// in the last few barrier intervals, in one fetch per run of consecutive pages of one
    /// home, sent while both nodes' service threads are awake with the barrier instead of at
    /// the first fault of the next phase. A thread faulting on a page being fetched waits
    /// for it. The copies come as probes (no access; a fault grants the run of probes around
    /// it locally), except after a probe showed the node reads the page: then the next
    /// `BARRIER_FETCH_TRUST` come readable. A probe nobody touched is not fetched at the next
    /// barrier again. A node that applied a lock grant since its previous barrier fetches
    /// nothing at the next one.
    pub fn set_barrier_fetch(&mut self, n: usize) {
        self.tuning.barrier_fetch = n.min(usize::from(u16::MAX));
    }

    /// Enable or disable exclusive mode (on by default).
    pub fn set_exclusive_mode(&mut self, on: bool) {
        self.tuning.exclusive_mode = on;
    }

    /// Set how many notices are held before old ones are merged (at least 1).
    pub fn set_notice_budget(&mut self, n: usize) {
        self.tuning.notice_budget = n.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squall_core::{Access, HeapLayout};

    #[derive(Clone)]
    struct NoMemory;
    impl PageMemory for NoMemory {
        fn read_page(&self, _: PageId, out: &mut [u8]) {
            out.fill(0);
        }
        fn write_bytes(&self, _: PageId, _: usize, _: &[u8]) {}
        fn set_access(&self, _: PageId, _: Access) {}
        fn access(&self, _: PageId) -> Access {
            Access::None
        }
    }

    #[test]
    fn setters_land_in_the_tuning_every_page_reads() {
        let layout = HeapLayout {
            nodes: 2,
            total_pages: 64,
        };
        let mut h = Hlrc::new(NoMemory, squall_core::NodeId(0), layout);
        assert_eq!(h.tuning(), &Tuning::default());
        assert_eq!(h.tuning().lost_run, DEFAULT_LOST_RUN);
        h.set_migrate_after(0);
        h.set_exclusive_mode(false);
        h.set_read_ahead(false);
        h.set_lost_run(usize::MAX);
        h.set_run_handover(RunHandover::Always);
        h.set_push_updates(true);
        h.set_watch_shared(false);
        h.set_push_probe(3);
        h.set_notice_budget(0);
        h.set_barrier_fetch(usize::MAX);
        let want = Tuning {
            migrate_after: 0,
            exclusive_mode: false,
            read_ahead: false,
            // Clamped: read-ahead counts travel as u16, a notice budget is at least 1.
            lost_run: usize::from(u16::MAX),
            run_handover: RunHandover::Always,
            push_updates: true,
            watch_shared: false,
            push_probe: 3,
            notice_budget: 1,
            barrier_fetch: usize::from(u16::MAX),
        };
        assert_eq!(h.tuning(), &want);
        for page in [PageId(0), PageId(63)] {
            assert_eq!(h.tuning_for(page), &want);
        }
    }
}
