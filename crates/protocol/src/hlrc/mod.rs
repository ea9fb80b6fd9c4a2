//! `hlrc`: home-based lazy release consistency with multiple writers (Cashmere-style homes,
//! twins and diffs, write notices with vector timestamps, home migration to a sole writer,
//! exclusive mode for pages nobody else holds, notice garbage collection).
//!
//! One `Hlrc` core per node; its state is one struct (here) and its behaviour is split by
//! concern, each module an `impl Hlrc` block:
//!
//! | module      | concern |
//! |-------------|---------|
//! | `msg`       | message kinds, wire encoding, sync info |
//! | `state`     | per-page state, constants, tuning knobs |
//! | `dispatch`  | the `Protocol`/`Consistency` entry points and the message router |
//! | `fault`     | faults, home look-up, fetches and installing the copies |
//! | `readahead` | what a fetch brings along; barrier fetches; probes |
//! | `serve`     | the home serving copies; exclusive mode and recalls |
//! | `release`   | releases, diffs and their acks |
//! | `notices`   | vector time, write notices, invalidation |
//! | `migrate`   | home migration and run handovers |
//! | `push`      | push updates at barriers |
//! | `atomics`   | home-executed atomics (glue to `shared::atomic`) |
//! | `trace`     | text descriptions of messages for traces |
//! | `unit`      | coherence units of several pages: unit faults, serving, installing |
//!
//! A message enters through `dispatch` (decoded by `msg`) and goes to one `on_*` handler of
//! the concern it belongs to; a handler may call into other concerns' functions (a fetch
//! reply installs a copy and may start a `want_home`), never into their message handling.
//!
//! Owns (this file): the `Hlrc` struct, i.e. the state the concerns share (the page table,
//! the home directory, the memory handle, the action queue, statistics, the pages written in
//! the current interval) and the concern-owned parts (`DiffLog`, `NoticeLog`, `Tuning`, the
//! per-concern fields, each documented with its owner). Must not touch: sockets, clocks,
//! threads; page bytes and access only through the `PageMemory` handle; no other protocol's
//! module (shared helpers come from `crate::shared`). The message sequences are in this
//! crate's README.

mod atomics;
mod dispatch;
mod fault;
mod grantpush;
mod migrate;
mod msg;
mod notices;
mod push;
mod readahead;
mod release;
mod serve;
mod state;
mod trace;
mod unit;

pub use grantpush::GRANT_PUSH_PAGES;
pub use state::{
    RunHandover, Tuning, DEFAULT_BARRIER_FETCH, DEFAULT_LOST_RUN, DEFAULT_MIGRATE_AFTER,
    DEFAULT_NOTICE_BUDGET,
};
pub use trace::describe;

use self::msg::Msg;
use self::notices::NoticeLog;
use self::release::DiffLog;
use self::state::{Deferred, PageState};
use crate::profile::Profiler;
use crate::shared::atomic::AtomicInfos;
use crate::shared::home::{check_page, HomeDirectory};
use crate::{Action, AtomicCall, ProtoError, ProtoStats};
use squall_core::{HeapLayout, NodeId, PageId, PageMemory, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The `hlrc` core of one node.
pub struct Hlrc<M: PageMemory> {
    mem: M,
    me: NodeId,
    layout: HeapLayout,
    /// Homes of pages: looked up by `fault`, changed by `migrate`.
    dir: HomeDirectory,
    /// What this node knows of each page (`state::PageState`).
    pages: BTreeMap<PageId, PageState>,
    /// Outputs, handed out by `Protocol::poll_action`.
    actions: VecDeque<Action>,
    stats: ProtoStats,
    /// This node's diffs in flight and the intervals they close (`release`).
    diffs: DiffLog,
    /// Vector time and write notices (`notices`).
    wn: NoticeLog,
    /// The knobs (`set_*`); read through `tuning_for(page)` for page-scoped ones.
    tuning: Tuning,
    /// Allocations under a policy of their own (`Protocol::apply_policy`): first page →
    /// (one past the last, their knobs); `tuning_for` looks pages up here first.
    page_tuning: BTreeMap<u64, (u64, Tuning)>,
    /// Pages written in the current interval (`release` closes it; writers anywhere add).
    dirty: BTreeSet<PageId>,
    /// Home pages kept writable when another node first took a copy (`serve`), the bytes
    /// handed out kept as the page's snapshot (`twin`): instead of a write-protect and a write
    /// fault at the home's next write, the next release compares the page to the snapshot
    /// (`release`). Not `dirty`: the home is not known to be writing them (migration may
    /// still take them, after `settle_watch`).
    watched: BTreeSet<PageId>,
    /// Dirty pages whose writes were already sent to the home by an early flush in this
    /// interval (they need a notice even if the twin made afterwards shows no change).
    flushed: BTreeSet<PageId>,
    /// Work waiting for a home look-up (`fault`).
    resolving: BTreeMap<PageId, Vec<Deferred>>,
    /// Home requests that arrived before this node became the home (migration in flight;
    /// `serve` parks them, `migrate` replays them).
    parked: BTreeMap<PageId, Vec<(NodeId, Msg)>>,
    /// This node's atomics sent to a home and not answered yet (`atomics`).
    atomics_out: BTreeMap<u64, (PageId, usize, AtomicCall)>,
    /// Release infos kept at the atomic locations this node is the home of (`atomics`).
    atomic_infos: AtomicInfos,
    /// Sequential fetch streams: (next page expected, fetches in a row), newest first
    /// (`readahead`).
    streams: VecDeque<(u64, u32)>,
    /// Home side: per node, the page after the last one whose home it was handed (a
    /// `want_home` for that page continues a sequential run; `migrate`).
    handed: BTreeMap<NodeId, u64>,
    /// Home side: shared home pages this node wrote since its last barrier (`push`).
    push_pending: BTreeSet<PageId>,
    /// Barriers this node applied (`notices`; `readahead` ages copies by it).
    barriers: u32,
    /// Lock grants applied since the last barrier: a node that synchronizes with locks between
    /// barriers does not fetch at barriers (copies fetched then are often invalidated by a
    /// grant before they are read: Water). Acquiring atomics' infos are not counted
    /// (`Protocol::apply_atomic_grant`).
    grants_since_barrier: u32,
    /// The node is ending with no application thread (`Protocol::set_ending`): no barrier
    /// fetches, a peer past the last barrier may have left.
    ending: bool,
    /// The sharing profile (`squall run --profile`), when on (`Protocol::set_profiling`).
    profile: Option<Box<Profiler>>,
    /// Pages a lock grant being applied updated in place (`grantpush`): its notices keep them.
    grant_kept: BTreeSet<PageId>,
}

impl<M: PageMemory> Hlrc<M> {
    pub fn new(mem: M, me: NodeId, layout: HeapLayout) -> Self {
        Hlrc {
            mem,
            me,
            layout,
            dir: HomeDirectory::new(me, layout),
            pages: BTreeMap::new(),
            actions: VecDeque::new(),
            stats: ProtoStats::default(),
            diffs: DiffLog::default(),
            wn: NoticeLog::new(layout.nodes),
            tuning: Tuning::default(),
            page_tuning: BTreeMap::new(),
            dirty: BTreeSet::new(),
            watched: BTreeSet::new(),
            flushed: BTreeSet::new(),
            resolving: BTreeMap::new(),
            parked: BTreeMap::new(),
            atomics_out: BTreeMap::new(),
            atomic_infos: AtomicInfos::default(),
            streams: VecDeque::new(),
            handed: BTreeMap::new(),
            push_pending: BTreeSet::new(),
            barriers: 0,
            grants_since_barrier: 0,
            ending: false,
            profile: None,
            grant_kept: BTreeSet::new(),
        }
    }

    /// The home this node currently believes `page` has.
    pub fn home_of(&self, page: PageId) -> Option<NodeId> {
        self.dir.cached(page).map(|h| h.node)
    }

    fn send(&mut self, to: NodeId, msg: Msg) {
        let bytes = msg.encode();
        self.stats.count_send(msg.kind(), bytes.len());
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    fn st(&mut self, page: PageId) -> &mut PageState {
        self.pages.entry(page).or_default()
    }

    fn is_home(&self, page: PageId) -> bool {
        self.dir.cached(page).is_some_and(|h| h.node == self.me)
    }

    fn read(&self, page: PageId) -> Vec<u8> {
        let mut buf = vec![0u8; PAGE_SIZE];
        self.mem.read_page(page, &mut buf);
        buf
    }

    /// The profiler, when profiling is on (one branch when it is off).
    fn prof(&mut self) -> Option<&mut Profiler> {
        self.profile.as_deref_mut()
    }

    fn check_page(&self, page: PageId) -> Result<(), ProtoError> {
        check_page(&self.layout, page)
    }
}
