//! `hlrc`: home-based lazy release consistency with multiple writers (Cashmere-style homes,
//! twins and diffs, write notices with vector timestamps, home migration to a sole writer,
//! exclusive mode for pages nobody else holds, notice garbage collection).
//!
//! Owns: the per-page protocol state of one node, its write notices and vector time, the
//! `hlrc` message encoding. Must not touch: sockets, clocks, threads; page bytes and access
//! only through the `PageMemory` handle. The message sequences are in this crate's README.

use crate::shared::atomic::{
    check_atomic, decode_call, decode_infos, encode_call, encode_infos, AtomicInfos,
};
use crate::shared::access::set_access_runs;
use crate::shared::codec::{Reader, Writer};
use crate::shared::diff::{apply_diff, diff_payload, for_each_run, make_diff};
use crate::shared::home::{HomeDirectory, HomeRef};
use crate::{Action, AtomicCall, ProtoError, ProtoStats, Protocol};
use squall_core::{
    Access, AllocInfo, Consistency, HeapLayout, NodeId, PageId, PageMemory, PAGE_SIZE,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Consecutive diffs from one sole writer (with no home write in between) after which the home
/// migrates to that writer. 0 disables migration.
pub const DEFAULT_MIGRATE_AFTER: u32 = 2;

/// Notices held before the oldest ones of each node are merged (programs that never reach a
/// barrier keep bounded memory this way).
pub const DEFAULT_NOTICE_BUDGET: usize = 1024;

/// Notices of each node kept individually when compacting.
const KEEP_RECENT: usize = 4;

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

/// `hlrc` messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Who is the home of `page`? (to the page's manager)
    HomeQuery { page: PageId },
    /// The manager's answer; `None`: the page is in no allocation. `more`: the homes of the
    /// pages right after it that are already decided (so a sequential reader asks once).
    HomeReply {
        page: PageId,
        home: Option<HomeRef>,
        more: Vec<HomeRef>,
    },
    /// The old home tells the manager the page moved.
    HomeMoved { page: PageId, home: HomeRef },
    /// Send me the page (`epoch`: the home epoch the requester believes the receiver has),
    /// and the `behind` pages before it and the `ahead` pages after it if you can
    /// (read-ahead: the page comes first, as `PageData`; the others then as `PageRun`s, or
    /// as `NoPage` if this home cannot serve one right now).
    Fetch {
        page: PageId,
        write: bool,
        epoch: u32,
        behind: u16,
        ahead: u16,
    },
    /// A read-ahead page the home does not serve (not home any more, held exclusively...).
    NoPage { page: PageId },
    /// Read-ahead pages served together: plain read copies of `data.len() / PAGE_SIZE`
    /// consecutive pages from `first` (installed with one page-table change per run).
    PageRun { first: PageId, data: Vec<u8> },
    /// The home's copy; `exclusive`: nobody else has a copy, so the receiver writes it
    /// without twin, diff or notice until the home recalls it (Cashmere's exclusive mode).
    PageData {
        page: PageId,
        data: Vec<u8>,
        exclusive: bool,
    },
    /// The home wants the exclusive copy back (another node or the home needs the page).
    Recall { page: PageId },
    /// The exclusive holder's copy (`None`: it never installed the exclusive grant).
    RecallReply { page: PageId, data: Option<Vec<u8>> },
    /// The receiver of a fetch or atomic is no longer the home; retry at `home`.
    Redirect {
        page: PageId,
        atomic_token: Option<u64>,
        home: HomeRef,
    },
    /// A diff for the home (possibly forwarded by an old home; `origin` gets the ack). An
    /// empty diff asks the home to migrate to `origin` (sent at a write fault; it travels
    /// and is acked like a diff, so every race a migration by diff streak handles is
    /// handled the same way).
    Diff {
        page: PageId,
        origin: NodeId,
        id: u64,
        epoch: u32,
        diff: Vec<u8>,
    },
    /// The diff `id` is applied; with `migrate` the receiver becomes the home at that epoch
    /// and gets the home's copy.
    DiffAck {
        page: PageId,
        id: u64,
        migrate: Option<Handover>,
    },
    /// Execute an atomic at the home.
    Atomic {
        page: PageId,
        offset: u16,
        call: AtomicCall,
        token: u64,
        epoch: u32,
    },
    /// The sender invalidated its copies of these pages (homed at the receiver): the home
    /// takes it out of their copysets, so a page nobody else holds stops needing notices.
    Dropped { pages: Vec<PageId> },
    AtomicReply {
        token: u64,
        old: u64,
        infos: Vec<Vec<u8>>,
    },
    /// Update at a barrier: the home's current copies of consecutive pages from `first` that
    /// it wrote since the last barrier, for a node holding copies of them. They contain every
    /// write of the home up to its interval `interval`, so the receiver's notices of the home
    /// up to it need not invalidate them (see `Hlrc::set_push_updates`).
    Push {
        first: PageId,
        interval: u32,
        data: Vec<u8>,
    },
    /// The old home hands over the homes of consecutive pages from `first` at once (after a
    /// granted `want_home` for the page before `first`; see `Hlrc::set_run_handover`).
    Handovers { first: PageId, items: Vec<Handover> },
}

impl Msg {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Msg::HomeQuery { .. } => "home_query",
            Msg::HomeReply { .. } => "home_reply",
            Msg::HomeMoved { .. } => "home_moved",
            Msg::Fetch { .. } => "fetch",
            Msg::NoPage { .. } => "no_page",
            Msg::PageRun { .. } => "page_run",
            Msg::PageData { .. } => "page_data",
            Msg::Recall { .. } => "recall",
            Msg::RecallReply { .. } => "recall_reply",
            Msg::Redirect { .. } => "redirect",
            Msg::Diff { diff, .. } if diff.is_empty() => "want_home",
            Msg::Diff { .. } => "diff",
            Msg::DiffAck { .. } => "diff_ack",
            Msg::Atomic { .. } => "atomic",
            Msg::AtomicReply { .. } => "atomic_reply",
            Msg::Dropped { .. } => "dropped",
            Msg::Handovers { .. } => "handovers",
            Msg::Push { .. } => "push",
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Msg::HomeQuery { page } => Writer::new(1).page(*page).finish(),
            Msg::HomeReply { page, home, more } => {
                let mut w = Writer::new(2);
                w.page(*page);
                match home {
                    Some(h) => w.u8(1).node(h.node).u32(h.epoch),
                    None => w.u8(0),
                };
                w.u16(more.len() as u16);
                for h in more {
                    w.node(h.node).u32(h.epoch);
                }
                w.finish()
            }
            Msg::HomeMoved { page, home } => Writer::new(3)
                .page(*page)
                .node(home.node)
                .u32(home.epoch)
                .finish(),
            Msg::Fetch {
                page,
                write,
                epoch,
                behind,
                ahead,
            } => Writer::new(4)
                .page(*page)
                .u8(u8::from(*write))
                .u32(*epoch)
                .u16(*behind)
                .u16(*ahead)
                .finish(),
            Msg::NoPage { page } => Writer::new(14).page(*page).finish(),
            Msg::PageRun { first, data } => Writer::new(15)
                .page(*first)
                .u16((data.len() / PAGE_SIZE) as u16)
                .bytes(data)
                .finish(),
            Msg::PageData {
                page,
                data,
                exclusive,
            } => Writer::new(5)
                .page(*page)
                .bytes(data)
                .u8(u8::from(*exclusive))
                .finish(),
            Msg::Recall { page } => Writer::new(11).page(*page).finish(),
            Msg::RecallReply { page, data } => {
                let mut w = Writer::new(12);
                w.page(*page);
                match data {
                    Some(d) => w.u8(1).bytes(d),
                    None => w.u8(0),
                };
                w.finish()
            }
            Msg::Redirect {
                page,
                atomic_token,
                home,
            } => {
                let mut w = Writer::new(6);
                w.page(*page);
                match atomic_token {
                    Some(t) => w.u8(1).u64(*t),
                    None => w.u8(0),
                };
                w.node(home.node).u32(home.epoch).finish()
            }
            Msg::Diff {
                page,
                origin,
                id,
                epoch,
                diff,
            } => Writer::new(7)
                .page(*page)
                .node(*origin)
                .u64(*id)
                .u32(*epoch)
                .bytes(diff)
                .finish(),
            Msg::DiffAck { page, id, migrate } => {
                let mut w = Writer::new(8);
                w.page(*page).u64(*id);
                match migrate {
                    Some(h) => {
                        w.u8(1);
                        encode_handover(&mut w, h);
                    }
                    None => {
                        w.u8(0);
                    }
                };
                w.finish()
            }
            Msg::Atomic {
                page,
                offset,
                call,
                token,
                epoch,
            } => {
                let mut w = Writer::new(9);
                w.page(*page).u16(*offset);
                encode_call(&mut w, call);
                w.u64(*token).u32(*epoch).finish()
            }
            Msg::AtomicReply { token, old, infos } => {
                let mut w = Writer::new(10);
                w.u64(*token).u64(*old);
                encode_infos(&mut w, infos);
                w.finish()
            }
            Msg::Dropped { pages } => {
                let mut w = Writer::new(13);
                w.u32(pages.len() as u32);
                for p in pages {
                    w.page(*p);
                }
                w.finish()
            }
            Msg::Push {
                first,
                interval,
                data,
            } => Writer::new(17)
                .page(*first)
                .u32(*interval)
                .u16((data.len() / PAGE_SIZE) as u16)
                .bytes(data)
                .finish(),
            Msg::Handovers { first, items } => {
                let mut w = Writer::new(16);
                w.page(*first).u16(items.len() as u16);
                for h in items {
                    encode_handover(&mut w, h);
                }
                w.finish()
            }
        }
    }

    pub(crate) fn decode(from: NodeId, layout: HeapLayout, b: &[u8]) -> Result<Msg, ProtoError> {
        let mut r = Reader::new(from, b);
        let n = layout.nodes;
        let t = layout.total_pages;
        let m = match r.u8()? {
            1 => Msg::HomeQuery { page: r.page(t)? },
            2 => {
                let page = r.page(t)?;
                let home = if r.bool()? {
                    Some(HomeRef {
                        node: r.node(n)?,
                        epoch: r.u32()?,
                    })
                } else {
                    None
                };
                let k = usize::from(r.u16()?);
                if k > HOME_RUN {
                    return Err(r.err("home run too long"));
                }
                let more = (0..k)
                    .map(|_| {
                        Ok(HomeRef {
                            node: r.node(n)?,
                            epoch: r.u32()?,
                        })
                    })
                    .collect::<Result<Vec<_>, ProtoError>>()?;
                Msg::HomeReply { page, home, more }
            }
            3 => Msg::HomeMoved {
                page: r.page(t)?,
                home: HomeRef {
                    node: r.node(n)?,
                    epoch: r.u32()?,
                },
            },
            4 => {
                let page = r.page(t)?;
                let write = r.bool()?;
                let epoch = r.u32()?;
                let behind = r.u16()?;
                let ahead = r.u16()?;
                if u64::from(behind) > page.0 || page.0 + u64::from(ahead) >= t {
                    return Err(r.err("fetch run outside the heap"));
                }
                Msg::Fetch {
                    page,
                    write,
                    epoch,
                    behind,
                    ahead,
                }
            }
            14 => Msg::NoPage { page: r.page(t)? },
            15 => {
                let first = r.page(t)?;
                let data = decode_run(&mut r, first, t, "bad page run")?.to_vec();
                Msg::PageRun { first, data }
            }
            5 => Msg::PageData {
                page: r.page(t)?,
                data: r.page_data()?.to_vec(),
                exclusive: r.bool()?,
            },
            11 => Msg::Recall { page: r.page(t)? },
            12 => {
                let page = r.page(t)?;
                let data = if r.bool()? {
                    Some(r.page_data()?.to_vec())
                } else {
                    None
                };
                Msg::RecallReply { page, data }
            }
            6 => {
                let page = r.page(t)?;
                let atomic_token = if r.bool()? { Some(r.u64()?) } else { None };
                Msg::Redirect {
                    page,
                    atomic_token,
                    home: HomeRef {
                        node: r.node(n)?,
                        epoch: r.u32()?,
                    },
                }
            }
            7 => Msg::Diff {
                page: r.page(t)?,
                origin: r.node(n)?,
                id: r.u64()?,
                epoch: r.u32()?,
                diff: r.bytes()?.to_vec(),
            },
            8 => {
                let page = r.page(t)?;
                let id = r.u64()?;
                let migrate = if r.bool()? {
                    Some(decode_handover(&mut r, n)?)
                } else {
                    None
                };
                Msg::DiffAck { page, id, migrate }
            }
            9 => Msg::Atomic {
                page: r.page(t)?,
                offset: r.u16()?,
                call: decode_call(&mut r)?,
                token: r.u64()?,
                epoch: r.u32()?,
            },
            10 => Msg::AtomicReply {
                token: r.u64()?,
                old: r.u64()?,
                infos: decode_infos(&mut r, layout.nodes)?,
            },
            13 => {
                let k = u64::from(r.u32()?);
                if k > t {
                    return Err(r.err("more dropped pages than the range holds"));
                }
                Msg::Dropped {
                    pages: (0..k).map(|_| r.page(t)).collect::<Result<Vec<_>, _>>()?,
                }
            }
            17 => {
                let first = r.page(t)?;
                let interval = r.u32()?;
                let data = decode_run(&mut r, first, t, "bad push run")?.to_vec();
                Msg::Push {
                    first,
                    interval,
                    data,
                }
            }
            16 => {
                let first = r.page(t)?;
                let k = usize::from(r.u16()?);
                if k == 0 || k > MAX_RUN || first.0 + k as u64 > t {
                    return Err(r.err("bad handover run"));
                }
                let items = (0..k)
                    .map(|_| decode_handover(&mut r, n))
                    .collect::<Result<Vec<_>, _>>()?;
                Msg::Handovers { first, items }
            }
            tag => return Err(r.err(format!("unknown hlrc message tag {tag}"))),
        };
        r.end()?;
        Ok(m)
    }
}

fn encode_handover(w: &mut Writer, h: &Handover) {
    w.u32(h.epoch).bytes(&h.data);
    match &h.copyset {
        Some(cs) => {
            w.u8(1).u16(cs.len() as u16);
            for n in cs {
                w.node(*n);
            }
        }
        None => {
            w.u8(0);
        }
    }
}

/// The count and pages of a run starting at `first` (`page_run`, `push`): 1 to
/// [`MAX_RUN`] whole pages inside the heap of `total` pages.
fn decode_run<'a>(
    r: &mut Reader<'a>,
    first: PageId,
    total: u64,
    what: &str,
) -> Result<&'a [u8], ProtoError> {
    let count = usize::from(r.u16()?);
    let data = r.bytes()?;
    if count == 0
        || count > MAX_RUN
        || data.len() != count * PAGE_SIZE
        || first.0 + count as u64 > total
    {
        return Err(r.err(what));
    }
    Ok(data)
}

/// A `page_run` message being built in its encoded form: the home reads each page straight
/// into the message buffer (no copy per page and none to encode).
struct RunBuf {
    first: PageId,
    count: usize,
    w: Writer,
}

/// Offsets in an encoded `page_run`: tag (1) and first page (8), then the page count (u16)
/// and the data's length (u32), then the data.
const RUN_COUNT_AT: usize = 9;
const RUN_LEN_AT: usize = 11;

impl RunBuf {
    fn new(first: PageId) -> Self {
        let mut w = Writer::new(15);
        w.page(first).u16(0).u32(0);
        w.buf.reserve(MAX_RUN * PAGE_SIZE);
        RunBuf { first, count: 0, w }
    }

    /// Append `page`'s current contents (the next page of the run).
    fn push(&mut self, mem: &dyn PageMemory, page: PageId) {
        debug_assert_eq!(page.0, self.first.0 + self.count as u64);
        let at = self.w.buf.len();
        self.w.buf.resize(at + PAGE_SIZE, 0);
        mem.read_page(page, &mut self.w.buf[at..]);
        self.count += 1;
    }

    /// The encoded message, byte for byte `Msg::PageRun { first, data }.encode()`.
    fn finish(mut self) -> Vec<u8> {
        // At most `MAX_RUN` pages: both fit.
        let count = self.count as u16;
        let len = (self.count * PAGE_SIZE) as u32;
        self.w.buf[RUN_COUNT_AT..RUN_COUNT_AT + 2].copy_from_slice(&count.to_le_bytes());
        self.w.buf[RUN_LEN_AT..RUN_LEN_AT + 4].copy_from_slice(&len.to_le_bytes());
        self.w.finish()
    }
}

fn decode_handover(r: &mut Reader<'_>, n: u16) -> Result<Handover, ProtoError> {
    let epoch = r.u32()?;
    let data = r.page_data()?.to_vec();
    let copyset = if r.bool()? {
        let k = r.u16()?;
        if k > n {
            return Err(r.err("copyset larger than the job"));
        }
        Some((0..k).map(|_| r.node(n)).collect::<Result<Vec<_>, _>>()?)
    } else {
        None
    };
    Ok(Handover {
        epoch,
        data,
        copyset,
    })
}

/// What an old home hands the new one when the home migrates (Cashmere): the epoch of the new
/// home, the page, and the nodes that may hold a copy (`None`: unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handover {
    epoch: u32,
    data: Vec<u8>,
    copyset: Option<Vec<NodeId>>,
}

/// A non-home page written within this many releases stays writable across a release (its
/// twin refreshed: a write-protect, a compare and an unprotect, a few microseconds) instead of
/// being write-protected (a write fault costs tens of microseconds). Doubled each time the
/// page is written again after being left protected (up to 32 releases).
const KEEP_WRITABLE_IDLE: u8 = 2;

fn keep_limit(refaults: u8) -> u8 {
    KEEP_WRITABLE_IDLE << refaults.min(4)
}

/// A write fault on a copy of a page whose home has moved fewer times than this asks the home
/// to move here (Cashmere: the writer becomes the home if the home is not writing the page).
/// Pages a main thread initialised and workers then own move to their writers at once, even
/// when the writes change nothing; beyond this, migration needs a streak of diffs (no
/// ping-pong of pages that several nodes write in turn).
const WANT_HOME_EPOCHS: u32 = 2;

/// Most pages a fetch asks for beyond the faulting one of a sequential stream, and of pages
/// this node never held (read-ahead); and most homes a home look-up answer carries beyond
/// the page asked about.
const MAX_AHEAD: usize = 15;
/// Most pages a fetch asks for around the faulting one, behind and ahead together, of the
/// copies this node used and lost to notices (see `Hlrc::set_lost_run`): CG at `large` reads
/// the other node's 195 pages of `p` in random order after every barrier, and gets them with
/// one fetch.
pub const DEFAULT_LOST_RUN: usize = 255;
/// Most pages in one `page_run`, `push` or `handovers` message (a longer run is sent as
/// several messages).
const MAX_RUN: usize = 63;
const HOME_RUN: usize = 64;
/// Sequential fetch streams remembered for read-ahead.
const STREAMS: usize = 8;
/// Pushes a copy takes before one is installed as a probe: a reader cannot tell whether it
/// still reads a page that pushes keep valid, so that many pushes after its last fault on the
/// page it installs the next one without access. A fault on it grants the access locally (no
/// message; the run of probed pages around it at once) and the pushes go on; if the next push
/// finds it untouched, the copy is dropped and the home told (no more pushes). 0: every push
/// is a probe (one local fault per run of pushed pages read; a page no longer read costs two
/// pushes, CG's once-per-outer-step vectors six times less than with 2).
const PUSH_PROBE: u8 = 0;
/// Most pages a node fetches at once when a barrier releases (see `Hlrc::set_barrier_fetch`).
pub const DEFAULT_BARRIER_FETCH: usize = 1024;
/// A copy lost to a barrier's notices is fetched at that barrier only if this node got it
/// (or a thread faulted on it) at most this many barriers before: CG gets `p` in its product
/// three barriers before the one that invalidates it.
const BARRIER_FETCH_AGE: u32 = 4;
/// Barrier fetches installed with read access, without a probe, after a thread was seen
/// reading a probed copy of the page: one probe in `BARRIER_FETCH_TRUST + 1` barrier fetches
/// checks that the node still reads it (a page it stopped reading is fetched at most that
/// many times more).
const BARRIER_FETCH_TRUST: u8 = 7;
/// Most probed pages one fault grants on each side of the faulting page (all the probes of a
/// barrier fetch of `DEFAULT_BARRIER_FETCH` pages).
const PROBE_GRANT: u64 = DEFAULT_BARRIER_FETCH as u64;

/// Work waiting for a home look-up.
#[derive(Debug, Clone)]
enum Deferred {
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
struct FetchState {
    write: bool,
    /// Sent to the home; otherwise it waits for this node's own diffs of the page to be
    /// acked (a diff forwarded by an old home could otherwise arrive after the fetch).
    sent: bool,
    /// A write notice arrived while the fetch was out: the reply may predate the diff.
    stale: bool,
    /// A thread waits for the page (false: read-ahead nobody asked for yet).
    demand: bool,
    /// Sent when a barrier released (see `Hlrc::set_barrier_fetch`), as part of a run
    /// installed as probes (`Some(false)`) or readable (`Some(true)`, the run was trusted to
    /// be read).
    barrier: Option<bool>,
}

#[derive(Debug, Default)]
struct PageState {
    twin: Option<Vec<u8>>,
    fetch: Option<FetchState>,
    /// Home side: where the home went when it migrated away from this node.
    forward: Option<HomeRef>,
    /// Home side: consecutive diffs from one writer with no home write in between.
    streak: Option<(NodeId, u32)>,
    /// This node holds the page in exclusive mode.
    exclusive: bool,
    /// Releases in a row at which this node's twin of the page showed no change.
    idle_releases: u8,
    /// Times the page was written again after being write-protected for being idle.
    refaults: u8,
    /// Home side: nodes sent a copy of the page (they may still hold it).
    copyset: BTreeSet<NodeId>,
    /// Home side: the copyset is unknown (the home migrated here): never grant exclusive.
    copyset_all: bool,
    /// Home side: a copy was handed out while this node was writing the page (dirty): the
    /// next release notices the page even if it then equals the snapshot (a later write may
    /// have put back the snapshot's bytes over what the copy holds).
    served_dirty: bool,
    /// Home side: the node holding the page in exclusive mode.
    excl_holder: Option<NodeId>,
    /// Home side: a recall is out.
    recalling: bool,
    /// Home side: work waiting for the recall.
    held: Vec<Held>,
    /// The home epoch at which this node last asked the home to move here.
    want_sent: Option<u32>,
    /// This node's copy was invalidated by a notice after it had used the page (read it
    /// ahead next time).
    lost: bool,
    /// A thread of this node faulted on the page at least once (a copy that only came by
    /// read-ahead may never have been used).
    used: bool,
    /// This node has held a copy of the page at some time.
    had_copy: bool,
    /// This node's copy was updated by a push of the home (node, interval): that home's
    /// notices up to that interval do not invalidate it.
    pushed: Option<(NodeId, u32)>,
    /// Pushes taken into this copy since a thread of this node last faulted on it.
    pushes: u8,
    /// Probe: a pushed copy installed without access to see whether this node still reads
    /// it (a fault grants it locally); a push finding the probe untouched is declined.
    probe: bool,
    /// `Hlrc::barriers` when this node last got a copy of the page or a thread faulted on it.
    got_at: u32,
    /// Barrier fetches of the page still installed readable without a probe.
    trust: u8,
}

/// Home-side work waiting for an exclusive copy to come back.
#[derive(Debug)]
enum Held {
    Remote(NodeId, Msg),
    LocalFault(bool),
    LocalAtomic {
        offset: usize,
        call: AtomicCall,
        token: u64,
    },
}

enum HomeStatus {
    Serve,
    Redirect(HomeRef),
    Park,
}

/// The `hlrc` core of one node.
pub struct Hlrc<M: PageMemory> {
    mem: M,
    me: NodeId,
    layout: HeapLayout,
    dir: HomeDirectory,
    pages: BTreeMap<PageId, PageState>,
    actions: VecDeque<Action>,
    stats: ProtoStats,
    /// Vector time: last interval of each node whose notices this node has applied.
    vt: Vec<u32>,
    /// Known write notices by (node, interval), kept for transitive propagation until a barrier.
    notices: BTreeMap<(u16, u32), Vec<PageId>>,
    /// Pages written in the current interval.
    dirty: BTreeSet<PageId>,
    /// Dirty pages whose writes were already sent to the home by an early flush in this
    /// interval (they need a notice even if the twin made afterwards shows no change).
    flushed: BTreeSet<PageId>,
    next_diff: u64,
    outstanding: BTreeSet<u64>,
    /// Unacked diffs of this node per page.
    page_diffs: BTreeMap<PageId, u32>,
    /// The node this node's unacked diffs of a page were sent to.
    diff_home: BTreeMap<PageId, NodeId>,
    /// Diffs of a page held back (ids, in order) while earlier ones are on their way to
    /// another node (a former home that forwards them): sent once those are acked, so a home
    /// never applies an older diff of one writer over a newer one.
    held_diffs: BTreeMap<PageId, Vec<u64>>,
    /// Copies of unacked diffs: if the home migrates here meanwhile, they come back to this
    /// node and must be merged into the copy the old home sends.
    unacked: BTreeMap<u64, (PageId, Vec<u8>)>,
    /// Releases waiting for acks: (token, diff ids below this must be acked).
    releases: VecDeque<(u64, u64)>,
    /// Last interval this node closed (`vt[me]` is the last one published).
    own_interval: u32,
    /// Closed intervals whose diffs are not all acked yet: (diff ids below this, interval,
    /// pages). Their notices are handed out only once published, or an acquirer could fetch
    /// a page from its home before the diff arrived there and take the notice as seen.
    unpublished: VecDeque<(u64, u32, Vec<PageId>)>,
    resolving: BTreeMap<PageId, Vec<Deferred>>,
    /// Home requests that arrived before this node became the home (migration in flight).
    parked: BTreeMap<PageId, Vec<(NodeId, Msg)>>,
    atomics_out: BTreeMap<u64, (PageId, usize, AtomicCall)>,
    /// Release infos kept at the atomic locations this node is the home of.
    atomic_infos: AtomicInfos,
    migrate_after: u32,
    /// Most notices held before old ones are merged (see `compact_notices`).
    notice_budget: usize,
    /// Vector time of the last barrier (notices up to it go at the next barrier).
    barrier_vt: Vec<u32>,
    /// Grant exclusive mode to a sole writer.
    exclusive_mode: bool,
    /// Copies invalidated while applying notices, by home: sent as `Dropped` batches.
    dropped: BTreeMap<NodeId, Vec<PageId>>,
    /// Sequential fetch streams: (next page expected, fetches in a row), newest first.
    streams: VecDeque<(u64, u32)>,
    /// Fetches bring following pages too (see `read_ahead`).
    read_ahead: bool,
    /// Most lost copies a fetch brings around the faulting page (see `set_lost_run`).
    lost_run: usize,
    /// Home side: a granted `want_home` is followed by the run of pages after it (see
    /// `hand_over_run`).
    run_handover: RunHandover,
    /// Home side: per node, the page after the last one whose home it was handed (a
    /// `want_home` for that page continues a sequential run).
    handed: BTreeMap<NodeId, u64>,
    /// Home side: push updates at barriers (see `set_push_updates`).
    push_updates: bool,
    /// Home side: shared home pages this node wrote since its last barrier.
    push_pending: BTreeSet<PageId>,
    /// Pushes a copy takes before it is probed (see `PUSH_PROBE`).
    push_probe: u8,
    /// Most pages fetched at once when a barrier releases (0: none; see `set_barrier_fetch`).
    barrier_fetch: usize,
    /// Barriers this node applied.
    barriers: u32,
    /// Lock grants applied since the last barrier: a node that synchronizes with locks between
    /// barriers does not fetch at barriers (copies fetched then are often invalidated by a
    /// grant before they are read: Water).
    grants_since_barrier: u32,
    /// The node is ending with no application thread (`Protocol::set_ending`): no barrier
    /// fetches, a peer past the last barrier may have left.
    ending: bool,
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
            vt: vec![0; usize::from(layout.nodes)],
            notices: BTreeMap::new(),
            dirty: BTreeSet::new(),
            flushed: BTreeSet::new(),
            next_diff: 0,
            outstanding: BTreeSet::new(),
            page_diffs: BTreeMap::new(),
            diff_home: BTreeMap::new(),
            held_diffs: BTreeMap::new(),
            unacked: BTreeMap::new(),
            releases: VecDeque::new(),
            own_interval: 0,
            unpublished: VecDeque::new(),
            resolving: BTreeMap::new(),
            parked: BTreeMap::new(),
            atomics_out: BTreeMap::new(),
            atomic_infos: AtomicInfos::default(),
            migrate_after: DEFAULT_MIGRATE_AFTER,
            notice_budget: DEFAULT_NOTICE_BUDGET,
            barrier_vt: vec![0; usize::from(layout.nodes)],
            exclusive_mode: true,
            dropped: BTreeMap::new(),
            streams: VecDeque::new(),
            read_ahead: true,
            lost_run: DEFAULT_LOST_RUN,
            run_handover: RunHandover::Sequential,
            handed: BTreeMap::new(),
            push_updates: false,
            push_pending: BTreeSet::new(),
            push_probe: PUSH_PROBE,
            barrier_fetch: DEFAULT_BARRIER_FETCH,
            barriers: 0,
            grants_since_barrier: 0,
            ending: false,
        }
    }

    /// Set the migration threshold (consecutive sole-writer diffs); 0 disables migration.
    pub fn set_migrate_after(&mut self, n: u32) {
        self.migrate_after = n;
    }

    /// Enable or disable read-ahead (on by default).
    pub fn set_read_ahead(&mut self, on: bool) {
        self.read_ahead = on;
    }

    /// Set how many copies this node used and lost to notices a fetch brings along with the
    /// faulting page, behind and ahead of it together (default [`DEFAULT_LOST_RUN`]; at most
    /// `u16::MAX`; 0 reads no lost copies ahead).
    pub fn set_lost_run(&mut self, n: usize) {
        self.lost_run = n.min(usize::from(u16::MAX));
    }

    /// Set when a home that grants a `want_home` also hands over the following pages the
    /// writer holds copies of (default `RunHandover::Sequential`; see the crate README).
    pub fn set_run_handover(&mut self, mode: RunHandover) {
        self.run_handover = mode;
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
        self.push_updates = on;
    }

    /// Pushes a copy takes after a fault on it before the next one is installed as a probe
    /// (default 0: every push is installed as a probe).
    pub fn set_push_probe(&mut self, n: u8) {
        self.push_probe = n;
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
        self.barrier_fetch = n.min(usize::from(u16::MAX));
    }

    /// Enable or disable exclusive mode (on by default).
    pub fn set_exclusive_mode(&mut self, on: bool) {
        self.exclusive_mode = on;
    }

    /// At the home: if the page is held exclusively elsewhere, keep `item` until the copy is
    /// back (starting the recall); returns whether it was kept.
    fn hold_for_recall(&mut self, page: PageId, item: Held) -> bool {
        let st = self.st(page);
        let Some(holder) = st.excl_holder else {
            return false;
        };
        st.held.push(item);
        if !st.recalling {
            st.recalling = true;
            self.stats.recalls += 1;
            self.send(holder, Msg::Recall { page });
        }
        true
    }

    /// Set how many notices are held before old ones are merged (at least 1).
    pub fn set_notice_budget(&mut self, n: usize) {
        self.notice_budget = n.max(1);
    }

    /// Bound the notice store without barriers: all but the newest few notices of each node
    /// are merged into one notice keyed by the newest merged interval, naming the union of
    /// their pages. An acquirer that lacks any merged interval gets the union: it may
    /// invalidate pages it did not have to (extra misses), never fewer.
    fn compact_notices(&mut self) {
        if self.notices.len() <= self.notice_budget {
            return;
        }
        for n in 0..self.layout.nodes {
            let keys: Vec<(u16, u32)> = self
                .notices
                .range((n, 0)..=(n, u32::MAX))
                .map(|(k, _)| *k)
                .collect();
            if keys.len() <= KEEP_RECENT + 1 {
                continue;
            }
            let old = &keys[..keys.len() - KEEP_RECENT];
            let mut union = BTreeSet::new();
            for k in old {
                if let Some(pages) = self.notices.remove(k) {
                    union.extend(pages);
                }
            }
            if let Some(last) = old.last() {
                self.notices.insert(*last, union.into_iter().collect());
            }
        }
        self.stats.notice_compactions += 1;
    }

    /// Write notices currently held (bounded: cleared at every barrier, compacted beyond the
    /// budget).
    pub fn notices_held(&self) -> usize {
        self.notices.len()
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

    fn check_page(&self, page: PageId) -> Result<(), ProtoError> {
        if page.0 >= self.layout.total_pages {
            return Err(ProtoError::NotAllocated { page });
        }
        Ok(())
    }

    /// Find the home of `page`, or start looking it up (`work` waits for the answer).
    fn resolve(&mut self, page: PageId, work: Deferred) -> Result<Option<HomeRef>, ProtoError> {
        if let Some(h) = self.dir.cached(page) {
            return Ok(Some(h));
        }
        if let Some(list) = self.resolving.get_mut(&page) {
            list.push(work);
            return Ok(None);
        }
        if self.dir.is_manager(page) {
            let h = self
                .dir
                .manager_lookup(page, self.me)
                .ok_or(ProtoError::NotAllocated { page })?;
            self.dir.learn(page, h);
            // Like a `home_reply`'s `more`: the decided homes of the following pages, so the
            // manager reads ahead too (a main thread reading data its workers initialised).
            let more = self.dir.manager_known_run(PageId(page.0 + 1), HOME_RUN);
            for (q, h) in (page.0 + 1..).zip(more) {
                if h.node != self.me {
                    self.dir.learn(PageId(q), h);
                }
            }
            return Ok(self.dir.cached(page));
        }
        self.resolving.insert(page, vec![work]);
        let mgr = self.dir.manager_of(page);
        self.send(mgr, Msg::HomeQuery { page });
        Ok(None)
    }

    fn fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        let acc = self.mem.access(page);
        if acc == Access::ReadWrite || (acc == Access::Read && !write) {
            self.actions.push_back(Action::Resume { page });
            return Ok(());
        }
        if let Some(f) = self.st(page).fetch.as_mut() {
            f.write |= write;
            f.demand = true;
            if f.barrier.is_some() {
                // A page of a barrier fetch is read: so is the rest of its run, probably.
                self.read_probes_around(page);
            }
            return Ok(());
        }
        let st = self.st(page);
        let acc = if acc == Access::None && st.probe {
            // A probed copy (pushed, or from a barrier fetch) is read: it is current, grant it
            // here, with the run of probed pages around it (the node reads the data they
            // hold too, as a rule: one fault per run instead of one per page).
            self.read_probes_around(page);
            self.st(page).used = true;
            self.stats.push_probe_hits += 1;
            if !write {
                self.actions.push_back(Action::Resume { page });
                return Ok(());
            }
            Access::Read
        } else {
            acc
        };
        let Some(home) = self.resolve(page, Deferred::Fault { write })? else {
            return Ok(());
        };
        if home.node == self.me {
            if self.hold_for_recall(page, Held::LocalFault(write)) {
                return Ok(());
            }
            if write {
                let st = self.st(page);
                if st.idle_releases > keep_limit(st.refaults) {
                    st.refaults = st.refaults.saturating_add(1);
                }
                st.idle_releases = 0;
                self.dirty.insert(page);
                self.mem.set_access(page, Access::ReadWrite);
            } else {
                self.mem.set_access(page, Access::Read);
            }
            self.actions.push_back(Action::Resume { page });
        } else if write && acc == Access::Read {
            let twin = self.read(page);
            let st = self.st(page);
            st.twin = Some(twin);
            if st.idle_releases > keep_limit(st.refaults) {
                // Written again after it was left write-protected for being idle: keep it
                // writable longer next time.
                st.refaults = st.refaults.saturating_add(1);
            }
            st.idle_releases = 0;
            st.used = true;
            self.stats.twins += 1;
            self.dirty.insert(page);
            self.mem.set_access(page, Access::ReadWrite);
            self.actions.push_back(Action::Resume { page });
            self.want_home(page);
        } else {
            self.st(page).fetch = Some(FetchState {
                write,
                sent: false,
                stale: false,
                demand: true,
                barrier: None,
            });
            self.stats.page_fetches += 1;
            self.send_fetch(page);
        }
        Ok(())
    }

    /// A thread reads `page`, a probe or a page of a barrier fetch: grant the probes in the
    /// run around it (up to `PROBE_GRANT` pages each side) and let the copies of the run
    /// still being fetched at the barrier come readable; all of them are trusted for the
    /// next barrier fetches (`BARRIER_FETCH_TRUST`).
    fn read_probes_around(&mut self, page: PageId) {
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

    /// Send the page's pending fetch unless own diffs of the page are still unacked.
    fn send_fetch(&mut self, page: PageId) {
        if self.page_diffs.get(&page).is_some_and(|&n| n > 0) {
            return;
        }
        let Some(home) = self.dir.cached(page) else {
            return;
        };
        let Some(f) = self.st(page).fetch.as_mut() else {
            return;
        };
        if f.sent {
            return;
        }
        f.sent = true;
        f.stale = false;
        let write = f.write;
        let (behind, ahead) = self.read_ahead(page, home);
        self.send(
            home.node,
            Msg::Fetch {
                page,
                write,
                epoch: home.epoch,
                behind,
                ahead,
            },
        );
    }

    /// Whether `q` may be fetched along with a page of `home` (a read copy nobody is getting
    /// or writing here); the caller adds why it is worth it.
    fn can_read_ahead(&self, q: PageId, home: HomeRef) -> bool {
        q.0 < self.layout.total_pages
            && self.dir.cached(q) == Some(home)
            && self.mem.access(q) == Access::None
            && !self.page_diffs.contains_key(&q)
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
    fn read_ahead(&mut self, page: PageId, home: HomeRef) -> (u16, u16) {
        if !self.read_ahead {
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
        let cap = self.lost_run.max(seq_limit).max(MAX_AHEAD);
        let lost = |s: &Self, q: PageId| s.pages.get(&q).is_some_and(|st| st.lost);
        // Forward: the lost run, or the sequential / never-held pages.
        let mut ahead = 0usize;
        while ahead < cap {
            let q = PageId(page.0 + 1 + ahead as u64);
            if !self.can_read_ahead(q, home) {
                break;
            }
            let wanted = if lost(self, q) {
                ahead < self.lost_run.max(seq_limit)
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
        let room = self.lost_run.saturating_sub(ahead).max(self.lost_run / 2);
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
    fn barrier_copy_readable(&mut self, page: PageId, f: FetchState) -> bool {
        if f.barrier != Some(false) || f.demand {
            return true;
        }
        self.st(page).probe = true;
        false
    }

    /// A fresh copy of `page` arrived (a thread waits for it if `demand`): its copy state
    /// starts over (not lost, not a probe, no push history, got at this barrier count).
    fn fresh_copy(&mut self, page: PageId, demand: bool) {
        let now = self.barriers;
        let st = self.st(page);
        st.lost = false;
        st.had_copy = true;
        st.used |= demand;
        st.pushed = None;
        st.pushes = 0;
        st.probe = false;
        st.got_at = now;
    }

    /// Fetch, in one message per run of consecutive pages of one home, the copies a barrier's
    /// notices just took from this node that it will likely read again (see
    /// `set_barrier_fetch`; `lost` in ascending order).
    fn barrier_fetch(&mut self, lost: &[PageId]) {
        let mut i = 0;
        let mut budget = self.barrier_fetch;
        while i < lost.len() && budget > 0 {
            let first = lost[i];
            i += 1;
            let Some(home) = self.dir.cached(first) else {
                continue;
            };
            if home.node == self.me || !self.can_read_ahead(first, home) {
                continue;
            }
            let mut n = 1usize;
            while i < lost.len()
                && n < budget
                && lost[i].0 == first.0 + n as u64
                && self.can_read_ahead(lost[i], home)
            {
                n += 1;
                i += 1;
            }
            // The whole run comes readable or as probes (probes in one run are granted
            // together by one fault): readable while any of its pages is still trusted.
            let readable = (first.0..first.0 + n as u64)
                .any(|q| self.pages.get(&PageId(q)).is_some_and(|st| st.trust > 0));
            for q in first.0..first.0 + n as u64 {
                let st = self.st(PageId(q));
                st.trust = st.trust.saturating_sub(1);
                st.fetch = Some(FetchState {
                    write: false,
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

    /// A `page_run` (read-ahead or barrier fetch copies) from `from`: install each page whose
    /// fetch is still current, straight from the received bytes.
    fn on_page_run(&mut self, from: NodeId, first: PageId, data: &[u8]) -> Result<(), ProtoError> {
        let mut grant = Vec::new();
        for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let q = PageId(first.0 + i as u64);
            let Some(f) = self.st(q).fetch.take() else {
                return Err(ProtoError::Unexpected {
                    from,
                    page: q,
                    why: "page data without a fetch".into(),
                });
            };
            if f.stale {
                if f.demand {
                    self.fault(q, f.write)?;
                }
                continue;
            }
            self.fresh_copy(q, f.demand);
            self.mem.write_bytes(q, 0, chunk);
            if f.write {
                self.st(q).twin = Some(chunk.to_vec());
                self.stats.twins += 1;
                self.dirty.insert(q);
                self.mem.set_access(q, Access::ReadWrite);
                self.want_home(q);
            } else if !self.barrier_copy_readable(q, f) {
                // A probe: stays without access until a thread reads it.
            } else {
                grant.push(q);
            }
            if f.demand {
                self.actions.push_back(Action::Resume { page: q });
            }
        }
        set_access_runs(&self.mem, &grant, Access::Read);
        Ok(())
    }

    /// Home side: hand out the home's copy of `page` to `from` (a fetch).
    fn serve_copy(&mut self, from: NodeId, page: PageId, write: bool, again: bool) {
        let (data, exclusive) = self.share_copy(from, page, write, again);
        self.send(
            from,
            Msg::PageData {
                page,
                data,
                exclusive,
            },
        );
    }

    /// Home side: the read-ahead pages `pages` of a fetch by `from` at home epoch `epoch`:
    /// runs of consecutive servable pages as `page_run`s of at most `MAX_RUN` pages, and
    /// `no_page` for each page this node cannot serve now (not its home at that epoch, held
    /// exclusively, recall out).
    fn serve_read_ahead(&mut self, from: NodeId, epoch: u32, pages: std::ops::Range<u64>) {
        let mut run: Option<RunBuf> = None;
        for q in pages {
            let q = PageId(q);
            let servable = q.0 < self.layout.total_pages
                && matches!(self.home_status(q, epoch), HomeStatus::Serve)
                && self
                    .pages
                    .get(&q)
                    .is_none_or(|s| s.excl_holder.is_none() && !s.recalling);
            if !servable {
                if let Some(r) = run.take() {
                    self.send_run(from, r);
                }
                self.send(from, Msg::NoPage { page: q });
                continue;
            }
            if run.as_ref().is_some_and(|r| r.count >= MAX_RUN) {
                if let Some(r) = run.take() {
                    self.send_run(from, r);
                }
            }
            self.share_grant(from, q, false, false);
            run.get_or_insert_with(|| RunBuf::new(q)).push(&self.mem, q);
        }
        if let Some(r) = run {
            self.send_run(from, r);
        }
    }

    fn send_run(&mut self, to: NodeId, run: RunBuf) {
        let bytes = run.finish();
        self.stats.count_send("page_run", bytes.len());
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    /// Home side: record that `from` gets a copy of `page` and return it, with whether it is
    /// granted in exclusive mode.
    fn share_copy(
        &mut self,
        from: NodeId,
        page: PageId,
        write: bool,
        again: bool,
    ) -> (Vec<u8>, bool) {
        let exclusive = self.share_grant(from, page, write, again);
        (self.read(page), exclusive)
    }

    /// Home side: record that `from` gets a copy of `page` (the caller reads it after this:
    /// the page may be write-protected here first); returns whether it is granted in
    /// exclusive mode.
    fn share_grant(&mut self, from: NodeId, page: PageId, write: bool, again: bool) -> bool {
        let dirty = self.dirty.contains(&page);
        let unused_here = self.mem.access(page) == Access::None;
        let enabled = self.exclusive_mode;
        let me = self.me;
        let st = self.st(page);
        let exclusive = again
            || (write
                && enabled
                && !dirty
                && unused_here
                && !st.copyset_all
                && st.copyset.iter().all(|&n| n == from));
        let first_sharer = !st.copyset_all && st.copyset.iter().all(|&n| n == me);
        st.copyset.insert(from);
        st.served_dirty |= dirty;
        if first_sharer
            && !dirty
            && self.is_home(page)
            && self.mem.access(page) == Access::ReadWrite
        {
            // An unshared home page kept writable across releases: from now on
            // its writes must be noticed, so catch the next one.
            self.mem.set_access(page, Access::Read);
        }
        let st = self.st(page);
        if exclusive && !again {
            st.excl_holder = Some(from);
            self.stats.exclusive_grants += 1;
        }
        exclusive
    }

    fn start_atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        let Some(home) = self.resolve(
            page,
            Deferred::Atomic {
                offset,
                call: call.clone(),
                token,
            },
        )?
        else {
            return Ok(());
        };
        if home.node == self.me {
            if self.hold_for_recall(
                page,
                Held::LocalAtomic {
                    offset,
                    call: call.clone(),
                    token,
                },
            ) {
                return Ok(());
            }
            let me = self.me;
            let (old, infos) = self.home_atomic(page, offset, &call, me);
            self.actions
                .push_back(Action::AtomicDone { token, old, infos });
        } else {
            self.atomics_out.insert(token, (page, offset, call.clone()));
            self.send(
                home.node,
                Msg::Atomic {
                    page,
                    offset: offset as u16,
                    call,
                    token,
                    epoch: home.epoch,
                },
            );
        }
        Ok(())
    }

    /// The home executes an atomic for `from`: its own write if the word changed (noticed at
    /// its next release). Returns the old value and, for an acquire, the location's infos.
    fn home_atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: &AtomicCall,
        from: NodeId,
    ) -> (u64, Vec<Vec<u8>>) {
        let (old, changed, infos) = self.atomic_infos.exec(&self.mem, page, offset, call, from);
        if changed {
            self.dirty.insert(page);
            self.st(page).streak = None;
        }
        (old, infos)
    }

    fn home_status(&mut self, page: PageId, epoch: u32) -> HomeStatus {
        if self.is_home(page) {
            return HomeStatus::Serve;
        }
        let fwd = self.pages.get(&page).and_then(|s| s.forward);
        match fwd {
            Some(f) if f.epoch > epoch => HomeStatus::Redirect(f),
            None if epoch == 0 => {
                // The requester learned from the manager that this node is the page's first
                // home; this node just has not looked it up itself yet.
                self.dir.learn(
                    page,
                    HomeRef {
                        node: self.me,
                        epoch: 0,
                    },
                );
                HomeStatus::Serve
            }
            _ => HomeStatus::Park,
        }
    }

    fn park(&mut self, page: PageId, from: NodeId, msg: Msg) {
        self.parked.entry(page).or_default().push((from, msg));
    }

    fn send_diff(&mut self, page: PageId, diff: Vec<u8>) -> Result<(), ProtoError> {
        let home = self.dir.cached(page).ok_or(ProtoError::Unexpected {
            from: self.me,
            page,
            why: "dirty page with unknown home".into(),
        })?;
        let id = self.next_diff;
        self.next_diff += 1;
        self.outstanding.insert(id);
        *self.page_diffs.entry(page).or_default() += 1;
        self.unacked.insert(id, (page, diff.clone()));
        if !diff.is_empty() {
            self.stats.diffs_created += 1;
            self.stats.diff_bytes += diff_payload(&diff).unwrap_or(0) as u64;
        }
        let held = self.held_diffs.get(&page).is_some_and(|v| !v.is_empty());
        if held || self.diff_home.get(&page).is_some_and(|&n| n != home.node) {
            self.held_diffs.entry(page).or_default().push(id);
            return Ok(());
        }
        self.post_diff(page, home, id, diff);
        Ok(())
    }

    /// Send diff `id` of `page` to `home` (noting where this page's unacked diffs went).
    fn post_diff(&mut self, page: PageId, home: HomeRef, id: u64, diff: Vec<u8>) {
        self.diff_home.insert(page, home.node);
        self.send(
            home.node,
            Msg::Diff {
                page,
                origin: self.me,
                id,
                epoch: home.epoch,
                diff,
            },
        );
    }

    /// A write fault made a twin of a copy: ask the home to move here (see
    /// [`WANT_HOME_EPOCHS`]), once per home epoch.
    fn want_home(&mut self, page: PageId) {
        if self.migrate_after == 0 {
            return;
        }
        let Some(home) = self.dir.cached(page) else {
            return;
        };
        if home.node == self.me || home.epoch >= WANT_HOME_EPOCHS {
            return;
        }
        let st = self.st(page);
        if st.want_sent == Some(home.epoch) {
            return;
        }
        st.want_sent = Some(home.epoch);
        // The home is known, so this cannot fail.
        let _ = self.send_diff(page, Vec::new());
    }

    fn check_releases(&mut self) {
        while let Some((below, _, _)) = self.unpublished.front() {
            if self.outstanding.first().is_some_and(|id| id < below) {
                break;
            }
            if let Some((_, interval, pages)) = self.unpublished.pop_front() {
                self.notices.insert((self.me.0, interval), pages);
                self.compact_notices();
                self.vt[self.me.index()] = interval;
            }
        }
        while let Some(&(token, below)) = self.releases.front() {
            if self.outstanding.first().is_some_and(|&id| id < below) {
                break;
            }
            self.releases.pop_front();
            self.actions.push_back(Action::ReleaseDone { token });
        }
    }

    /// A write notice names `page`: drop this node's copy (keeping its own modifications). A
    /// copy with no own writes is only pushed to `unmap` (the caller removes access in runs).
    /// A readable copy this node used lately is also pushed to `refetch` when given (a
    /// barrier: see `set_barrier_fetch`).
    fn invalidate(
        &mut self,
        page: PageId,
        unmap: &mut Vec<PageId>,
        refetch: Option<&mut Vec<PageId>>,
    ) {
        if self.is_home(page) || self.pages.get(&page).is_some_and(|s| s.exclusive) {
            // Home copies are current; an exclusive copy is newer than any notice (nobody else
            // held the page when it was granted).
            return;
        }
        let readable = self.mem.access(page) == Access::Read;
        let now = self.barriers;
        let st = self.st(page);
        if let Some(refetch) = refetch {
            if readable
                && st.used
                && !st.probe
                && st.twin.is_none()
                && st.fetch.is_none()
                && now.saturating_sub(st.got_at) <= BARRIER_FETCH_AGE
            {
                refetch.push(page);
            }
        }
        let st = self.st(page);
        if let Some(f) = st.fetch.as_mut() {
            f.stale = true;
        }
        st.pushed = None;
        let probed = std::mem::take(&mut st.probe);
        let twin = st.twin.take();
        let held = probed || twin.is_some() || self.mem.access(page) != Access::None;
        if held {
            let st = self.st(page);
            st.lost = st.used;
            // Tell the home (batched, after the diff below: FIFO) that this copy is gone.
            if let Some(h) = self.dir.cached(page) {
                self.dropped.entry(h.node).or_default().push(page);
            }
        }
        if let Some(twin) = twin {
            // Own writes of the current interval go to the home first; the next fetch is FIFO
            // behind this diff, so it comes back with them.
            self.mem.set_access(page, Access::None);
            let cur = self.read(page);
            let d = make_diff(&twin, &cur);
            if !d.is_empty() {
                // The home is known for a dirty page, so this cannot fail.
                let _ = self.send_diff(page, d);
                self.flushed.insert(page);
            }
            self.stats.invalidations += 1;
        } else if self.mem.access(page) != Access::None {
            unmap.push(page);
            self.stats.invalidations += 1;
        }
    }

    /// Apply notices; returns the vector time they carried. At a barrier, `refetch` collects
    /// the copies worth fetching again at once (see `invalidate`).
    fn apply_notices(
        &mut self,
        info: &[u8],
        mut refetch: Option<&mut Vec<PageId>>,
    ) -> Option<Vec<u32>> {
        let (their_vt, notices) = decode_sync(self.me, self.layout.nodes, info)?;
        // Page -> whether some notice requires invalidating it (a copy a push of node `n`
        // brought up to interval `i` or later already holds that notice's writes).
        let mut named: BTreeMap<PageId, bool> = BTreeMap::new();
        for ((n, i), pages) in notices {
            if i <= self.vt[usize::from(n)] || self.notices.contains_key(&(n, i)) {
                continue;
            }
            for p in &pages {
                let covered = self
                    .pages
                    .get(p)
                    .and_then(|s| s.pushed)
                    .is_some_and(|(pn, pi)| pn.0 == n && i <= pi);
                *named.entry(*p).or_insert(false) |= !covered;
            }
            self.notices.insert((n, i), pages);
            self.compact_notices();
        }
        let mut unmap = Vec::new();
        for (p, must) in named {
            if must {
                self.invalidate(p, &mut unmap, refetch.as_deref_mut());
            } else {
                self.stats.push_kept += 1;
            }
        }
        set_access_runs(&self.mem, &unmap, Access::None);
        for (home, pages) in std::mem::take(&mut self.dropped) {
            if home != self.me {
                self.send(home, Msg::Dropped { pages });
            }
        }
        Some(their_vt)
    }

    fn on_message(&mut self, from: NodeId, msg: Msg) -> Result<(), ProtoError> {
        match msg {
            Msg::HomeQuery { page } => {
                let home = self.dir.manager_lookup(page, from);
                let more = match home {
                    Some(_) => self.dir.manager_known_run(PageId(page.0 + 1), HOME_RUN),
                    None => Vec::new(),
                };
                self.send(from, Msg::HomeReply { page, home, more });
            }
            Msg::HomeReply { page, home, more } => {
                let work = self.resolving.remove(&page).unwrap_or_default();
                let Some(h) = home else {
                    return Err(ProtoError::NotAllocated { page });
                };
                if h.node == self.me && h.epoch > 0 && !self.is_home(page) {
                    // The home is migrating here and the manager knew before this node did:
                    // the old home's handover is still on its way. Taking the page as home
                    // now would treat its twin as a home snapshot (dropping the writes since
                    // the last release) and serve a copy that lacks the old home's data. The
                    // work waits for the handover (`become_home` runs it).
                    self.resolving.insert(page, work);
                    return Ok(());
                }
                self.dir.learn(page, h);
                for (q, h) in (page.0 + 1..).zip(more) {
                    // Never learn from a third party that this node is a home: a migration
                    // to it may still be in flight (it becomes the home with the handover).
                    if q < self.layout.total_pages && h.node != self.me {
                        self.dir.learn(PageId(q), h);
                    }
                }
                self.run_deferred(page, work)?;
            }
            Msg::HomeMoved { page, home } => self.dir.manager_moved(page, home),
            Msg::Fetch {
                page,
                write,
                epoch,
                behind,
                ahead,
            } => {
                match self.home_status(page, epoch) {
                    HomeStatus::Serve => {
                        let msg = Msg::Fetch {
                            page,
                            write,
                            epoch,
                            behind: 0,
                            ahead: 0,
                        };
                        let st = self.st(page);
                        // The holder dropped its grant as stale and asks again (unless a
                        // recall is out: then the fetch waits for the recall's answer).
                        let again = st.excl_holder == Some(from) && !st.recalling;
                        if again || !self.hold_for_recall(page, Held::Remote(from, msg)) {
                            self.serve_copy(from, page, write, again);
                        }
                    }
                    HomeStatus::Redirect(home) => self.send(
                        from,
                        Msg::Redirect {
                            page,
                            atomic_token: None,
                            home,
                        },
                    ),
                    HomeStatus::Park => {
                        let msg = Msg::Fetch {
                            page,
                            write,
                            epoch,
                            behind: 0,
                            ahead: 0,
                        };
                        self.park(page, from, msg)
                    }
                }
                // Read-ahead pages (after the page itself, so it arrives first): served as
                // plain read copies when this node is their home at the requester's epoch and
                // nobody holds them exclusively; otherwise declined (the requester fetches them
                // on demand).
                let before = page.0 - u64::from(behind)..page.0;
                let after = page.0 + 1..page.0 + 1 + u64::from(ahead);
                self.serve_read_ahead(from, epoch, before);
                self.serve_read_ahead(from, epoch, after);
            }
            Msg::PageRun { first, data } => self.on_page_run(from, first, &data)?,
            Msg::NoPage { page } => {
                if let Some(f) = self.st(page).fetch.take() {
                    if f.demand {
                        self.fault(page, f.write)?;
                    }
                }
            }
            Msg::PageData {
                page,
                data,
                exclusive,
            } => {
                let Some(f) = self.st(page).fetch.take() else {
                    return Err(ProtoError::Unexpected {
                        from,
                        page,
                        why: "page data without a fetch".into(),
                    });
                };
                if f.stale {
                    // A notice overtook this copy: fetch again (FIFO behind the notice's diff)
                    // if a thread waits for it.
                    if f.demand {
                        self.fault(page, f.write)?;
                    }
                    return Ok(());
                }
                self.fresh_copy(page, f.demand);
                self.mem.write_bytes(page, 0, &data);
                if exclusive {
                    // Sole copy: written in place, no twin, no diff, no notice.
                    self.st(page).exclusive = true;
                    self.mem.set_access(page, Access::ReadWrite);
                } else if f.write {
                    self.st(page).twin = Some(data);
                    self.stats.twins += 1;
                    self.dirty.insert(page);
                    self.mem.set_access(page, Access::ReadWrite);
                    self.want_home(page);
                } else if self.barrier_copy_readable(page, f) {
                    self.mem.set_access(page, Access::Read);
                }
                if f.demand {
                    self.actions.push_back(Action::Resume { page });
                }
            }
            Msg::Redirect {
                page,
                atomic_token,
                home,
            } => {
                self.dir.learn(page, home);
                match atomic_token {
                    Some(token) => {
                        let (p, offset, call) =
                            self.atomics_out.remove(&token).ok_or_else(|| {
                                ProtoError::Unexpected {
                                    from,
                                    page,
                                    why: format!("redirect of unknown atomic {token}"),
                                }
                            })?;
                        self.start_atomic(p, offset, call, token)?;
                    }
                    None => {
                        if let Some(f) = self.st(page).fetch.take() {
                            if f.demand {
                                self.fault(page, f.write)?;
                            }
                        }
                    }
                }
            }
            Msg::Diff {
                page,
                origin,
                id,
                epoch,
                diff,
            } => match self.home_status(page, epoch) {
                HomeStatus::Serve => {
                    if self
                        .pages
                        .get(&page)
                        .is_some_and(|s| s.excl_holder.is_some())
                    {
                        let msg = Msg::Diff {
                            page,
                            origin,
                            id,
                            epoch,
                            diff,
                        };
                        self.hold_for_recall(page, Held::Remote(from, msg));
                        return Ok(());
                    }
                    self.home_apply_diff(from, page, origin, id, &diff)?
                }
                HomeStatus::Redirect(home) => {
                    let fwd = Msg::Diff {
                        page,
                        origin,
                        id,
                        epoch: home.epoch,
                        diff,
                    };
                    self.send(home.node, fwd);
                }
                HomeStatus::Park => self.park(
                    page,
                    from,
                    Msg::Diff {
                        page,
                        origin,
                        id,
                        epoch,
                        diff,
                    },
                ),
            },
            Msg::DiffAck { page, id, migrate } => self.on_diff_ack(page, id, migrate)?,
            Msg::Recall { page } => {
                let st = self.st(page);
                let data = if st.exclusive {
                    st.exclusive = false;
                    // Keep a read-only copy; later writes twin as usual.
                    if self.mem.access(page) == Access::ReadWrite {
                        self.mem.set_access(page, Access::Read);
                    }
                    Some(self.read(page))
                } else {
                    None
                };
                self.send(from, Msg::RecallReply { page, data });
            }
            Msg::RecallReply { page, data } => {
                let st = self.st(page);
                if st.excl_holder != Some(from) || !st.recalling {
                    return Err(ProtoError::Unexpected {
                        from,
                        page,
                        why: "recall reply without a recall".into(),
                    });
                }
                st.excl_holder = None;
                st.recalling = false;
                let held = std::mem::take(&mut st.held);
                if let Some(d) = data {
                    self.mem.write_bytes(page, 0, &d);
                }
                for item in held {
                    match item {
                        Held::Remote(f, m) => self.on_message(f, m)?,
                        Held::LocalFault(write) => self.fault(page, write)?,
                        Held::LocalAtomic {
                            offset,
                            call,
                            token,
                        } => self.start_atomic(page, offset, call, token)?,
                    }
                }
            }
            Msg::Atomic {
                page,
                offset,
                call,
                token,
                epoch,
            } => {
                check_atomic(page, usize::from(offset), call.width)?;
                match self.home_status(page, epoch) {
                    HomeStatus::Serve => {
                        let msg = Msg::Atomic {
                            page,
                            offset,
                            call: call.clone(),
                            token,
                            epoch,
                        };
                        if self.hold_for_recall(page, Held::Remote(from, msg)) {
                            return Ok(());
                        }
                        let (old, infos) = self.home_atomic(page, usize::from(offset), &call, from);
                        self.send(from, Msg::AtomicReply { token, old, infos });
                    }
                    HomeStatus::Redirect(home) => self.send(
                        from,
                        Msg::Redirect {
                            page,
                            atomic_token: Some(token),
                            home,
                        },
                    ),
                    HomeStatus::Park => self.park(
                        page,
                        from,
                        Msg::Atomic {
                            page,
                            offset,
                            call,
                            token,
                            epoch,
                        },
                    ),
                }
            }
            Msg::Dropped { pages } => {
                for page in pages {
                    if self.is_home(page) {
                        let st = self.st(page);
                        if !st.copyset_all && st.excl_holder != Some(from) {
                            st.copyset.remove(&from);
                        }
                    }
                }
            }
            Msg::Handovers { first, items } => self.on_handovers(first, items)?,
            Msg::Push {
                first,
                interval,
                data,
            } => self.on_push(from, first, interval, &data),
            Msg::AtomicReply { token, old, infos } => {
                if self.atomics_out.remove(&token).is_none() {
                    return Err(ProtoError::Malformed {
                        from,
                        why: format!("reply to unknown atomic {token}"),
                    });
                }
                self.actions
                    .push_back(Action::AtomicDone { token, old, infos });
            }
        }
        Ok(())
    }

    fn home_apply_diff(
        &mut self,
        from: NodeId,
        page: PageId,
        origin: NodeId,
        id: u64,
        diff: &[u8],
    ) -> Result<(), ProtoError> {
        if origin == self.me {
            // A diff of ours came back through a forwarding chain after the home migrated
            // here: `become_home` already merged it into this copy.
            return self.on_diff_ack(page, id, None);
        }
        // Only the diff's runs are written, in place: this node's own threads may be writing
        // other bytes of the page right now (multiple writers), and a read-modify-write of
        // the whole page would put back the old value of whatever they wrote meanwhile.
        let migrate = if diff.is_empty() {
            // A writer asks for the home: granted unless this node is writing the page
            // (Cashmere: the home migrates if it is not actively modifying the page).
            let epoch = self.dir.cached(page).map_or(0, |h| h.epoch);
            self.migrate_after > 0
                && epoch < WANT_HOME_EPOCHS
                && !self.atomic_infos.holds(page)
                && !self.dirty.contains(&page)
                && self.mem.access(page) != Access::ReadWrite
                && !self.parked.contains_key(&page)
        } else {
            let mem = &self.mem;
            for_each_run(diff, |off, bytes| mem.write_bytes(page, off, bytes)).ok_or_else(
                || ProtoError::Malformed {
                    from,
                    why: format!("bad diff for {page}"),
                },
            )?;
            self.stats.diffs_applied += 1;
            let st = self.st(page);
            if let Some(snapshot) = st.twin.as_mut() {
                // The home's snapshot tells its own writes since the last release from the
                // rest: it takes the other writers' diffs too. Otherwise a home write that
                // put back the snapshot's bytes over a diff applied meanwhile would look like
                // no change and go without a notice (a reader keeps the diff's value).
                // The diff is well formed (applied just above).
                let _ = apply_diff(snapshot, diff);
            }
            let streak = match st.streak {
                Some((n, c)) if n == origin => c + 1,
                _ => 1,
            };
            st.streak = Some((origin, streak));
            self.migrate_after > 0
                && streak >= self.migrate_after
                && !self.atomic_infos.holds(page)
                && !self.dirty.contains(&page)
                && !self.parked.contains_key(&page)
        };
        let want = diff.is_empty();
        let migrate = if migrate {
            Some(self.hand_over(page, origin))
        } else {
            None
        };
        let granted = migrate.is_some();
        self.send(origin, Msg::DiffAck { page, id, migrate });
        if want && granted && self.run_handover != RunHandover::Off {
            self.hand_over_run(page, origin);
        }
        Ok(())
    }

    /// Home side, at a barrier (its release is done): send the shared home pages written since
    /// the last barrier to the nodes that hold copies, in runs of consecutive pages, tagged
    /// with this node's last closed interval (the copies contain all its writes up to it).
    fn send_pushes(&mut self) {
        let pending = std::mem::take(&mut self.push_pending);
        if !self.push_updates {
            return;
        }
        let interval = self.own_interval;
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
    fn on_push(&mut self, from: NodeId, first: PageId, interval: u32, data: &[u8]) {
        let mut probes = Vec::new();
        let mut unused = Vec::new();
        let limit = self.push_probe;
        for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let q = PageId(first.0 + i as u64);
            let acc = self.mem.access(q);
            let fits = self.dir.cached(q).is_some_and(|h| h.node == from)
                && from != self.me
                && !self.dirty.contains(&q)
                && !self.page_diffs.contains_key(&q)
                && self
                    .pages
                    .get(&q)
                    .is_some_and(|st| st.twin.is_none() && st.fetch.is_none() && !st.exclusive);
            if !fits {
                continue;
            }
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

    /// Home side: make `origin` the home of `page` at the next epoch (forwarding pointer, the
    /// manager told) and drop this node's copy; returns what the new home needs.
    fn hand_over(&mut self, page: PageId, origin: NodeId) -> Handover {
        let cur = self.dir.cached(page).map_or(0, |h| h.epoch);
        let new = HomeRef {
            node: origin,
            epoch: cur + 1,
        };
        self.dir.learn(page, new);
        let st = self.st(page);
        st.forward = Some(new);
        st.streak = None;
        self.stats.home_migrations += 1;
        let mgr = self.dir.manager_of(page);
        if mgr == self.me {
            self.dir.manager_moved(page, new);
        } else if mgr != origin {
            self.send(mgr, Msg::HomeMoved { page, home: new });
        }
        // This node drops its copy (its next access fetches from the new home), so the
        // new home knows exactly who may hold one: the nodes this home served.
        let st = self.st(page);
        let copyset = if st.copyset_all {
            None
        } else {
            Some(
                st.copyset
                    .iter()
                    .copied()
                    .filter(|&n| n != origin)
                    .collect(),
            )
        };
        st.copyset.clear();
        st.copyset_all = false;
        // No copy is left here: not even a probe (a pushed copy this node held before it
        // became the home, which a fault would otherwise grant locally, stale).
        st.probe = false;
        st.pushed = None;
        if self.mem.access(page) != Access::None {
            self.mem.set_access(page, Access::None);
            self.stats.invalidations += 1;
        }
        Handover {
            epoch: new.epoch,
            data: self.read(page),
            copyset,
        }
    }

    /// Home side, after granting `origin`'s `want_home` for `page`: if `origin` asked for the
    /// page right before this one too (it is writing through an array this node initialised),
    /// hand over at once the run of following pages that `origin` holds a copy of and nobody
    /// else does, that this node is not writing and that have not moved yet (one
    /// `handovers` message instead of a write fault, a `want_home` and an ack per page).
    fn hand_over_run(&mut self, page: PageId, origin: NodeId) {
        let sequential =
            self.run_handover == RunHandover::Always || self.handed.get(&origin) == Some(&page.0);
        let mut items = Vec::new();
        if sequential {
            while items.len() < MAX_RUN {
                let q = PageId(page.0 + 1 + items.len() as u64);
                if !self.can_hand_over(q, origin) {
                    break;
                }
                items.push(self.hand_over(q, origin));
            }
        }
        let next = page.0 + 1 + items.len() as u64;
        self.handed.insert(origin, next);
        if !items.is_empty() {
            self.send(
                origin,
                Msg::Handovers {
                    first: PageId(page.0 + 1),
                    items,
                },
            );
        }
    }

    /// Whether `q` may go to `origin` in a run handover (see [`Self::hand_over_run`]).
    fn can_hand_over(&self, q: PageId, origin: NodeId) -> bool {
        if q.0 >= self.layout.total_pages
            || !self
                .dir
                .cached(q)
                .is_some_and(|h| h.node == self.me && h.epoch < WANT_HOME_EPOCHS)
            || self.dirty.contains(&q)
            || self.atomic_infos.holds(q)
            || self.mem.access(q) == Access::ReadWrite
            || self.parked.contains_key(&q)
            || self.page_diffs.contains_key(&q)
            || self.resolving.contains_key(&q)
        {
            return false;
        }
        self.pages.get(&q).is_some_and(|st| {
            st.excl_holder.is_none()
                && !st.recalling
                && st.held.is_empty()
                && !st.copyset_all
                && st.copyset.contains(&origin)
                && st.copyset.iter().all(|&n| n == origin || n == self.me)
        })
    }

    /// A run of pages handed over with [`Msg::Handovers`]: become their home; a page nobody
    /// else holds becomes writable at once (an unshared home page needs no write fault: its
    /// writes need no notice).
    fn on_handovers(&mut self, first: PageId, items: Vec<Handover>) -> Result<(), ProtoError> {
        for (i, h) in items.into_iter().enumerate() {
            let q = PageId(first.0 + i as u64);
            let unshared = h.copyset.as_ref().is_some_and(|c| c.is_empty());
            self.become_home(q, h)?;
            let st = self.st(q);
            if unshared && st.fetch.is_none() && st.copyset.is_empty() && !st.copyset_all {
                self.dirty.insert(q);
                if self.mem.access(q) != Access::ReadWrite {
                    self.mem.set_access(q, Access::ReadWrite);
                }
            }
        }
        Ok(())
    }

    fn on_diff_ack(
        &mut self,
        page: PageId,
        id: u64,
        migrate: Option<Handover>,
    ) -> Result<(), ProtoError> {
        self.unacked.remove(&id);
        if self.outstanding.remove(&id) {
            if let Some(n) = self.page_diffs.get_mut(&page) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.page_diffs.remove(&page);
                    self.diff_home.remove(&page);
                }
            }
        }
        if let Some(h) = migrate {
            self.become_home(page, h)?;
        }
        self.send_held_diffs(page)?;
        if !self.page_diffs.contains_key(&page) {
            if self.is_home(page) {
                // A fetch waiting for our diffs: this node became the home meanwhile.
                if let Some(f) = self.st(page).fetch.filter(|f| !f.sent) {
                    self.st(page).fetch = None;
                    self.fault(page, f.write)?;
                }
            } else {
                self.send_fetch(page);
            }
        }
        self.check_releases();
        Ok(())
    }

    /// Send the diffs of `page` held back while earlier ones were on their way to another
    /// node, once all of those are acked (to the current home; if that is this node now,
    /// `become_home` merged them and they are acked here).
    fn send_held_diffs(&mut self, page: PageId) -> Result<(), ProtoError> {
        let held = self.held_diffs.get(&page).map_or(0, |v| v.len() as u32);
        if held == 0 || self.page_diffs.get(&page).copied().unwrap_or(0) > held {
            return Ok(());
        }
        self.diff_home.remove(&page);
        for id in self.held_diffs.remove(&page).unwrap_or_default() {
            let Some((_, diff)) = self.unacked.get(&id).cloned() else {
                continue;
            };
            let home = self.dir.cached(page).ok_or(ProtoError::Unexpected {
                from: self.me,
                page,
                why: "held diff with unknown home".into(),
            })?;
            if home.node == self.me {
                self.on_diff_ack(page, id, None)?;
            } else {
                self.post_diff(page, home, id, diff);
            }
        }
        Ok(())
    }

    /// The old home handed this node the page (Cashmere home migration).
    fn become_home(&mut self, page: PageId, h: Handover) -> Result<(), ProtoError> {
        let Handover {
            epoch,
            mut data,
            copyset,
        } = h;
        // Our diffs still in flight to the old home will come back here: merge them now.
        for (_, (p, d)) in self.unacked.iter() {
            if *p == page {
                // Diffs we made ourselves are well formed.
                let _ = apply_diff(&mut data, d);
            }
        }
        let twin = self.st(page).twin.take();
        if let Some(twin) = twin {
            // Written again since the release: merge our new writes over the home's copy.
            self.mem.set_access(page, Access::Read);
            let cur = self.read(page);
            let local = make_diff(&twin, &cur);
            // A diff we just made is well formed.
            let _ = apply_diff(&mut data, &local);
            self.mem.write_bytes(page, 0, &data);
            self.mem.set_access(page, Access::ReadWrite);
        } else {
            self.mem.write_bytes(page, 0, &data);
        }
        let me = HomeRef {
            node: self.me,
            epoch,
        };
        self.dir.learn(page, me);
        if self.dir.is_manager(page) {
            self.dir.manager_moved(page, me);
        }
        let st = self.st(page);
        st.forward = None;
        st.streak = None;
        st.exclusive = false;
        // The home's copy is current: no push history, no probe.
        st.probe = false;
        st.pushed = None;
        match copyset {
            Some(cs) => {
                st.copyset = cs.into_iter().collect();
                st.copyset_all = false;
            }
            None => st.copyset_all = true,
        }
        if let Some(parked) = self.parked.remove(&page) {
            for (from, msg) in parked {
                self.on_message(from, msg)?;
            }
        }
        // Work that learned from the manager that the home was moving here.
        let work = self.resolving.remove(&page).unwrap_or_default();
        self.run_deferred(page, work)
    }

    /// Run the work that waited for `page`'s home to be known.
    fn run_deferred(&mut self, page: PageId, work: Vec<Deferred>) -> Result<(), ProtoError> {
        for w in work {
            match w {
                Deferred::Fault { write } => self.fault(page, write)?,
                Deferred::Atomic {
                    offset,
                    call,
                    token,
                } => self.start_atomic(page, offset, call, token)?,
            }
        }
        Ok(())
    }
}

/// Sync info: vector time, then notices `(node, interval, pages)`.
type Notices = Vec<((u16, u32), Vec<PageId>)>;

fn encode_sync(vt: &[u32], notices: &[(&(u16, u32), &Vec<PageId>)]) -> Vec<u8> {
    let mut w = Writer::new(0x5a);
    w.u16(vt.len() as u16);
    for &v in vt {
        w.u32(v);
    }
    w.u32(notices.len() as u32);
    for ((n, i), pages) in notices {
        w.u16(*n).u32(*i).u32(pages.len() as u32);
        for p in pages.iter() {
            w.page(*p);
        }
    }
    w.finish()
}

fn decode_sync(me: NodeId, nodes: u16, b: &[u8]) -> Option<(Vec<u32>, Notices)> {
    let mut r = Reader::new(me, b);
    if r.u8().ok()? != 0x5a {
        return None;
    }
    let n = r.u16().ok()?;
    if n != nodes {
        return None;
    }
    let mut vt = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        vt.push(r.u32().ok()?);
    }
    let count = r.u32().ok()?;
    let mut notices = Vec::new();
    for _ in 0..count {
        let node = r.node(nodes).ok()?;
        let i = r.u32().ok()?;
        let np = r.u32().ok()? as usize;
        let mut pages = Vec::with_capacity(np.min(b.len() / 8));
        for _ in 0..np {
            pages.push(PageId(r.u64().ok()?));
        }
        notices.push(((node.0, i), pages));
    }
    r.end().ok()?;
    Some((vt, notices))
}

impl<M: PageMemory> Consistency for Hlrc<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        encode_sync(&self.vt, &[])
    }

    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        let theirs = decode_sync(self.me, self.layout.nodes, acquirer_info)
            .map(|(vt, _)| vt)
            .unwrap_or_else(|| vec![0; self.vt.len()]);
        let lacking: Vec<_> = self
            .notices
            .iter()
            .filter(|((n, i), _)| *i > theirs[usize::from(*n)])
            .collect();
        encode_sync(&self.vt, &lacking)
    }

    fn apply_grant(&mut self, grant_info: &[u8]) {
        self.grants_since_barrier = self.grants_since_barrier.saturating_add(1);
        match self.apply_notices(grant_info, None) {
            Some(theirs) => {
                for (mine, t) in self.vt.iter_mut().zip(theirs) {
                    *mine = (*mine).max(t);
                }
            }
            None => self.stats.malformed_sync_info += 1,
        }
    }

    fn begin_release(&mut self, token: u64) -> bool {
        let dirty = std::mem::take(&mut self.dirty);
        let flushed = std::mem::take(&mut self.flushed);
        let mut written = Vec::new();
        let mut home_written = Vec::new();
        let mut keep = Vec::new();
        for page in dirty {
            if self.is_home(page) {
                let me = self.me;
                let st = self.st(page);
                st.streak = None;
                if !st.copyset_all && st.copyset.iter().all(|&n| n == me) {
                    // No other node holds a copy: nobody needs a notice, and the page stays
                    // writable (no write fault per interval). A later fetch write-protects it
                    // before handing out the current contents (see `Msg::Fetch`). Its old
                    // snapshot (below) would not show the writes made meanwhile: dropped.
                    st.twin = None;
                    continue;
                }
                // A shared home page: its writes need a notice. Written lately, it stays
                // writable with a snapshot (`twin`; a home page never has a diff twin) that
                // the next release compares to, instead of a write fault per interval.
                // Compared in place, and the snapshot refreshed in its own buffer: most
                // kept pages are unchanged in most intervals (CG's vectors: 2 of 3).
                let served = std::mem::take(&mut self.st(page).served_dirty);
                let (changed, cur) = match self.st(page).twin.take() {
                    Some(t) if !served && self.mem.page_equals(page, &t) => (false, t),
                    Some(mut t) => {
                        self.mem.read_page(page, &mut t);
                        (true, t)
                    }
                    None => (true, self.read(page)),
                };
                let st = self.st(page);
                st.idle_releases = if changed {
                    0
                } else {
                    st.idle_releases.saturating_add(1)
                };
                if st.idle_releases <= keep_limit(st.refaults) {
                    st.twin = Some(cur);
                    self.dirty.insert(page);
                } else if self.mem.access(page) == Access::ReadWrite {
                    self.mem.set_access(page, Access::Read);
                }
                if changed {
                    written.push(page);
                    home_written.push(page);
                }
                continue;
            }
            let twin = self.st(page).twin.take();
            // Flushed early by an invalidation during this interval: noticed in any case.
            let mut wrote = flushed.contains(&page);
            match twin {
                Some(twin) => {
                    let st = self.st(page);
                    // Written lately, so likely written again: the page stays writable with a
                    // fresh twin instead of taking a write fault in the next interval. It is
                    // not write-protected while its diff is taken: a byte another thread of
                    // this node writes meanwhile is either in this diff or (differing from
                    // the fresh twin) in the next one; such a write is not ordered by this
                    // release anyway. This keeps a release free of page-table changes.
                    let stays = st.idle_releases.saturating_add(1) <= keep_limit(st.refaults);
                    if !stays {
                        // Write-protect first so no thread writes while the diff is taken.
                        self.mem.set_access(page, Access::Read);
                    }
                    let cur = self.read(page);
                    let d = make_diff(&twin, &cur);
                    let changed = !d.is_empty();
                    if changed {
                        let _ = self.send_diff(page, d);
                        wrote = true;
                    }
                    let st = self.st(page);
                    st.idle_releases = if changed {
                        0
                    } else {
                        st.idle_releases.saturating_add(1)
                    };
                    if st.idle_releases <= keep_limit(st.refaults) {
                        st.twin = Some(cur);
                        if stays {
                            self.dirty.insert(page);
                        } else {
                            keep.push(page);
                        }
                    }
                }
                None => wrote = true,
            }
            if wrote {
                written.push(page);
            }
        }
        if !written.is_empty() {
            self.own_interval += 1;
            self.unpublished
                .push_back((self.next_diff, self.own_interval, written));
        }
        for page in keep {
            self.mem.set_access(page, Access::ReadWrite);
            self.dirty.insert(page);
        }
        self.check_releases();
        if self.push_updates {
            self.push_pending.extend(home_written);
        }
        if self
            .outstanding
            .first()
            .is_some_and(|&id| id < self.next_diff)
        {
            self.releases.push_back((token, self.next_diff));
            false
        } else {
            true
        }
    }

    fn barrier_info(&mut self) -> Vec<u8> {
        self.send_pushes();
        let all: Vec<_> = self.notices.iter().collect();
        encode_sync(&self.vt, &all)
    }

    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        let mut max = self.vt.clone();
        let mut refetch = Vec::new();
        for info in all {
            match self.apply_notices(info, Some(&mut refetch)) {
                Some(theirs) => {
                    for (m, t) in max.iter_mut().zip(theirs) {
                        *m = (*m).max(t);
                    }
                }
                None => self.stats.malformed_sync_info += 1,
            }
        }
        self.vt = max.clone();
        // Every node applied the previous barrier before it sent its info for this one, so
        // every vector time in the job is now at least the previous barrier's: notices up to
        // it are never needed again. (Notices up to this barrier are kept one more episode: a
        // node that has not applied this barrier yet may still be granted a lock meanwhile,
        // and nodes may go on creating intervals while a barrier with a thread count is out.)
        let floor = std::mem::replace(&mut self.barrier_vt, max);
        self.notices
            .retain(|(n, i), _| floor.get(usize::from(*n)).is_none_or(|f| *i > *f));
        // After the `dropped` batches above (FIFO: the home adds this node back to the
        // copysets with these fetches).
        let locks_used = std::mem::take(&mut self.grants_since_barrier) > 0;
        if self.barrier_fetch > 0 && !self.ending && !locks_used && !refetch.is_empty() {
            refetch.sort_unstable();
            refetch.dedup();
            self.barrier_fetch(&refetch);
        }
        self.barriers = self.barriers.wrapping_add(1);
    }
}

impl<M: PageMemory> Protocol for Hlrc<M> {
    fn name(&self) -> &'static str {
        "hlrc"
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        self.check_page(page)?;
        self.stats.count_fault(write);
        self.fault(page, write)
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        if msg.first() == Some(&15) {
            // A page run is installed from the received bytes (no copy of the pages).
            let mut r = Reader::new(from, msg);
            r.u8()?;
            let first = r.page(self.layout.total_pages)?;
            let data = decode_run(&mut r, first, self.layout.total_pages, "bad page run")?;
            r.end()?;
            return self.on_page_run(from, first, data);
        }
        let m = Msg::decode(from, self.layout, msg)?;
        self.on_message(from, m)
    }

    fn register_allocation(&mut self, alloc: AllocInfo) {
        self.dir.register(alloc);
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        self.check_page(page)?;
        check_atomic(page, offset, call.width)?;
        self.stats.atomics += 1;
        self.start_atomic(page, offset, call, token)
    }

    fn observe_atomic(&mut self, page: PageId, offset: usize, value: &[u8]) {
        if page.0 >= self.layout.total_pages
            || offset + value.len() > PAGE_SIZE
            || self.is_home(page)
            || self.mem.access(page) == Access::None
        {
            // The home's copy is the one the atomic changed; without a copy, the next access
            // fetches the current one.
            return;
        }
        // Into the copy and its twin alike: the word is no write of this node, so it must not
        // show in this node's next diff (which would put it back over later atomics).
        self.mem.write_bytes(page, offset, value);
        if let Some(twin) = self.st(page).twin.as_mut() {
            twin[offset..offset + value.len()].copy_from_slice(value);
        }
    }

    fn stats(&self) -> ProtoStats {
        self.stats.clone()
    }

    fn set_ending(&mut self, ending: bool) {
        self.ending = ending;
    }
}

/// A one-line description of an `hlrc` message for traces (the simulator's `--trace`): its
/// kind and fields, page contents shown as their non-zero 8-byte words (`offset=value`).
pub fn describe(from: NodeId, layout: HeapLayout, bytes: &[u8]) -> String {
    fn words(data: &[u8]) -> String {
        let mut out = Vec::new();
        for (p, page) in data.chunks(PAGE_SIZE).enumerate() {
            for (i, w) in page.chunks_exact(8).enumerate() {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                let v = u64::from_le_bytes(b);
                if v != 0 {
                    out.push(format!("{}+{}={v:#x}", p, i * 8));
                }
            }
        }
        format!("[{}]", out.join(" "))
    }
    fn handover(h: &Handover) -> String {
        format!(
            "epoch {} copyset {:?} {}",
            h.epoch,
            h.copyset,
            words(&h.data)
        )
    }
    let msg = match Msg::decode(from, layout, bytes) {
        Ok(m) => m,
        Err(e) => return format!("undecodable: {e}"),
    };
    let kind = msg.kind();
    match msg {
        Msg::PageRun { first, data } => format!("{kind} {first} {}", words(&data)),
        Msg::PageData {
            page,
            data,
            exclusive,
        } => format!("{kind} {page} exclusive={exclusive} {}", words(&data)),
        Msg::RecallReply { page, data } => {
            format!(
                "{kind} {page} {}",
                data.map_or("none".into(), |d| words(&d))
            )
        }
        Msg::Push {
            first,
            interval,
            data,
        } => format!("{kind} {first} interval={interval} {}", words(&data)),
        Msg::Diff {
            page,
            origin,
            id,
            epoch,
            diff,
        } => {
            let mut runs = Vec::new();
            for_each_run(&diff, |off, b| runs.push(format!("{off}:{b:02x?}")));
            format!(
                "{kind} {page} origin={origin} id={id} epoch={epoch} [{}]",
                runs.join(" ")
            )
        }
        Msg::DiffAck { page, id, migrate } => format!(
            "{kind} {page} id={id} migrate={}",
            migrate.map_or("no".into(), |h| handover(&h))
        ),
        Msg::Handovers { first, items } => {
            let items: Vec<String> = items.iter().map(handover).collect();
            format!("{kind} {first} {}", items.join("; "))
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: HeapLayout = HeapLayout {
        nodes: 2,
        total_pages: 600,
    };

    fn fetch(page: u64, behind: u16, ahead: u16) -> Msg {
        Msg::Fetch {
            page: PageId(page),
            write: true,
            epoch: 7,
            behind,
            ahead,
        }
    }

    #[test]
    fn fetches_with_runs_both_ways_round_trip() {
        for m in [
            fetch(300, 255, 0),
            fetch(300, 0, 255),
            fetch(0, 0, 599),
            fetch(599, 599, 0),
        ] {
            let back = Msg::decode(NodeId(1), LAYOUT, &m.encode()).expect("decodes");
            assert_eq!(back, m);
        }
    }

    #[test]
    fn fetch_runs_outside_the_heap_are_rejected() {
        for m in [fetch(3, 4, 0), fetch(599, 0, 1), fetch(500, 0, u16::MAX)] {
            let err = Msg::decode(NodeId(1), LAYOUT, &m.encode()).expect_err("rejected");
            assert!(
                matches!(
                    err,
                    ProtoError::Malformed {
                        from: NodeId(1),
                        ..
                    }
                ),
                "{err:?}"
            );
        }
    }

    #[test]
    fn long_read_ahead_runs_are_split_into_page_runs_that_decode() {
        // A home serving 200 pages behind a fetch sends runs of at most `MAX_RUN` pages,
        // each of which the requester decodes.
        #[derive(Clone)]
        struct Flat;
        impl PageMemory for Flat {
            fn read_page(&self, page: PageId, out: &mut [u8]) {
                out.fill(page.0 as u8);
            }
            fn write_bytes(&self, _: PageId, _: usize, _: &[u8]) {}
            fn set_access(&self, _: PageId, _: Access) {}
            fn access(&self, _: PageId) -> Access {
                Access::Read
            }
        }
        let mut h = Hlrc::new(Flat, NodeId(0), LAYOUT);
        h.register_allocation(AllocInfo {
            first: PageId(0),
            pages: 300,
            placement: squall_core::Placement::Node(NodeId(0)),
        });
        let m = Msg::Fetch {
            page: PageId(250),
            write: false,
            epoch: 0,
            behind: 200,
            ahead: 0,
        };
        h.handle_message(NodeId(1), &m.encode()).expect("served");
        let mut pages = Vec::new();
        let mut first_kind = None;
        while let Some(a) = h.poll_action() {
            let Action::Send { to, msg } = a else {
                continue;
            };
            assert_eq!(to, NodeId(1));
            match Msg::decode(NodeId(0), LAYOUT, &msg).expect("decodes") {
                Msg::PageData { page, .. } => {
                    first_kind.get_or_insert("page_data");
                    assert_eq!(page, PageId(250));
                }
                Msg::PageRun { first, data } => {
                    first_kind.get_or_insert("page_run");
                    assert!(data.len() <= MAX_RUN * PAGE_SIZE);
                    // Built in place by the home, byte for byte the message's encoding.
                    let again = Msg::PageRun {
                        first,
                        data: data.clone(),
                    };
                    assert_eq!(again.encode(), msg);
                    for (i, chunk) in data.chunks_exact(PAGE_SIZE).enumerate() {
                        let q = first.0 + i as u64;
                        assert_eq!(chunk[0], q as u8);
                        pages.push(q);
                    }
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
        assert_eq!(first_kind, Some("page_data"));
        assert_eq!(pages, (50..250).collect::<Vec<u64>>());
    }
}
