//! `hlrc` messages and their wire encoding: the message kinds, `Msg` with its encoder and
//! decoder (every field checked against the job's layout; a bad message is a typed
//! `ProtoError::Malformed`), the page-run buffer a home fills in place, the handover a
//! migrating home sends, the synchronization info (vector time and write notices) carried by
//! lock grants and barriers.
//!
//! Owns: the bytes on the wire. Must not touch: protocol state (nothing here reads or
//! changes a `Hlrc`).

use super::state::{HOME_RUN, MAX_RUN};
use crate::shared::atomic::{decode_call, decode_infos, encode_call, encode_infos};
use crate::shared::codec::{Reader, Writer};
use crate::shared::home::HomeRef;
use crate::{AtomicCall, ProtoError};
use squall_core::{AllocInfo, HeapLayout, NodeId, PageId, PageMemory, Placement, PAGE_SIZE};

/// Placements in a `home_reply`'s allocation.
const PLACE_FIRST_TOUCH: u8 = 0;
const PLACE_ROUND_ROBIN: u8 = 1;
const PLACE_BLOCKED: u8 = 2;
const PLACE_NODE: u8 = 3;

/// The kind of an `hlrc` message: its first byte on the wire (the numbers are the format; a
/// new kind takes a new number, an old number is never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    HomeQuery = 1,
    HomeReply = 2,
    HomeMoved = 3,
    Fetch = 4,
    PageData = 5,
    Redirect = 6,
    Diff = 7,
    DiffAck = 8,
    Atomic = 9,
    AtomicReply = 10,
    Recall = 11,
    RecallReply = 12,
    Dropped = 13,
    NoPage = 14,
    PageRun = 15,
    Handovers = 16,
    Push = 17,
}

impl Kind {
    const ALL: [Kind; 17] = [
        Kind::HomeQuery,
        Kind::HomeReply,
        Kind::HomeMoved,
        Kind::Fetch,
        Kind::PageData,
        Kind::Redirect,
        Kind::Diff,
        Kind::DiffAck,
        Kind::Atomic,
        Kind::AtomicReply,
        Kind::Recall,
        Kind::RecallReply,
        Kind::Dropped,
        Kind::NoPage,
        Kind::PageRun,
        Kind::Handovers,
        Kind::Push,
    ];

    /// The byte that starts a message of this kind.
    pub(super) fn tag(self) -> u8 {
        self as u8
    }

    /// The kind a message's first byte names, if any.
    pub(super) fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }

    /// The name statistics and traces count the kind under.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::HomeQuery => "home_query",
            Kind::HomeReply => "home_reply",
            Kind::HomeMoved => "home_moved",
            Kind::Fetch => "fetch",
            Kind::PageData => "page_data",
            Kind::Redirect => "redirect",
            Kind::Diff => "diff",
            Kind::DiffAck => "diff_ack",
            Kind::Atomic => "atomic",
            Kind::AtomicReply => "atomic_reply",
            Kind::Recall => "recall",
            Kind::RecallReply => "recall_reply",
            Kind::Dropped => "dropped",
            Kind::NoPage => "no_page",
            Kind::PageRun => "page_run",
            Kind::Handovers => "handovers",
            Kind::Push => "push",
        }
    }
}

/// The first byte of the synchronization info (`encode_sync`), which travels inside lock
/// grants and barrier messages rather than as an `hlrc` message of its own.
pub(super) const SYNC_TAG: u8 = 0x5a;

/// `hlrc` messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Msg {
    /// Who is the home of `page`? (to the page's manager)
    HomeQuery { page: PageId },
    /// The manager's answer; `None`: the page is in no allocation. `more`: the homes of the
    /// pages right after it that are already decided (so a sequential reader asks once).
    /// `alloc`: the page's allocation when its placement is static (the asker computes the
    /// first homes of its pages from then on, and asks no more about its own).
    HomeReply {
        page: PageId,
        home: Option<HomeRef>,
        more: Vec<HomeRef>,
        alloc: Option<AllocInfo>,
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
    /// The message's kind on the wire.
    pub(super) fn tag(&self) -> Kind {
        match self {
            Msg::HomeQuery { .. } => Kind::HomeQuery,
            Msg::HomeReply { .. } => Kind::HomeReply,
            Msg::HomeMoved { .. } => Kind::HomeMoved,
            Msg::Fetch { .. } => Kind::Fetch,
            Msg::PageData { .. } => Kind::PageData,
            Msg::Redirect { .. } => Kind::Redirect,
            Msg::Diff { .. } => Kind::Diff,
            Msg::DiffAck { .. } => Kind::DiffAck,
            Msg::Atomic { .. } => Kind::Atomic,
            Msg::AtomicReply { .. } => Kind::AtomicReply,
            Msg::Recall { .. } => Kind::Recall,
            Msg::RecallReply { .. } => Kind::RecallReply,
            Msg::Dropped { .. } => Kind::Dropped,
            Msg::NoPage { .. } => Kind::NoPage,
            Msg::PageRun { .. } => Kind::PageRun,
            Msg::Handovers { .. } => Kind::Handovers,
            Msg::Push { .. } => Kind::Push,
        }
    }

    /// The name statistics and traces count the message under: its kind's, except that an
    /// empty diff (a writer asking for the home) is counted as `want_home`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Msg::Diff { diff, .. } if diff.is_empty() => "want_home",
            m => m.tag().name(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Msg::HomeQuery { page } => Writer::new(Kind::HomeQuery.tag()).page(*page).finish(),
            Msg::HomeReply {
                page,
                home,
                more,
                alloc,
            } => {
                let mut w = Writer::new(Kind::HomeReply.tag());
                w.page(*page);
                match home {
                    Some(h) => w.u8(1).home(*h),
                    None => w.u8(0),
                };
                w.u16(more.len() as u16);
                for h in more {
                    w.home(*h);
                }
                match alloc {
                    Some(a) => {
                        let (kind, arg) = match a.placement {
                            Placement::FirstTouch => (PLACE_FIRST_TOUCH, 0),
                            Placement::RoundRobin { block_pages } => {
                                (PLACE_ROUND_ROBIN, block_pages)
                            }
                            Placement::Blocked => (PLACE_BLOCKED, 0),
                            Placement::Node(n) => (PLACE_NODE, u64::from(n.0)),
                        };
                        w.u8(1).page(a.first).u64(a.pages).u8(kind).u64(arg)
                    }
                    None => w.u8(0),
                };
                w.finish()
            }
            Msg::HomeMoved { page, home } => Writer::new(Kind::HomeMoved.tag())
                .page(*page)
                .home(*home)
                .finish(),
            Msg::Fetch {
                page,
                write,
                epoch,
                behind,
                ahead,
            } => Writer::new(Kind::Fetch.tag())
                .page(*page)
                .u8(u8::from(*write))
                .u32(*epoch)
                .u16(*behind)
                .u16(*ahead)
                .finish(),
            Msg::NoPage { page } => Writer::new(Kind::NoPage.tag()).page(*page).finish(),
            Msg::PageRun { first, data } => Writer::new(Kind::PageRun.tag())
                .page(*first)
                .u16((data.len() / PAGE_SIZE) as u16)
                .bytes(data)
                .finish(),
            Msg::PageData {
                page,
                data,
                exclusive,
            } => Writer::new(Kind::PageData.tag())
                .page(*page)
                .bytes(data)
                .u8(u8::from(*exclusive))
                .finish(),
            Msg::Recall { page } => Writer::new(Kind::Recall.tag()).page(*page).finish(),
            Msg::RecallReply { page, data } => {
                let mut w = Writer::new(Kind::RecallReply.tag());
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
                let mut w = Writer::new(Kind::Redirect.tag());
                w.page(*page);
                match atomic_token {
                    Some(t) => w.u8(1).u64(*t),
                    None => w.u8(0),
                };
                w.home(*home).finish()
            }
            Msg::Diff {
                page,
                origin,
                id,
                epoch,
                diff,
            } => Writer::new(Kind::Diff.tag())
                .page(*page)
                .node(*origin)
                .u64(*id)
                .u32(*epoch)
                .bytes(diff)
                .finish(),
            Msg::DiffAck { page, id, migrate } => {
                let mut w = Writer::new(Kind::DiffAck.tag());
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
                let mut w = Writer::new(Kind::Atomic.tag());
                w.page(*page).u16(*offset);
                encode_call(&mut w, call);
                w.u64(*token).u32(*epoch).finish()
            }
            Msg::AtomicReply { token, old, infos } => {
                let mut w = Writer::new(Kind::AtomicReply.tag());
                w.u64(*token).u64(*old);
                encode_infos(&mut w, infos);
                w.finish()
            }
            Msg::Dropped { pages } => {
                let mut w = Writer::new(Kind::Dropped.tag());
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
            } => Writer::new(Kind::Push.tag())
                .page(*first)
                .u32(*interval)
                .u16((data.len() / PAGE_SIZE) as u16)
                .bytes(data)
                .finish(),
            Msg::Handovers { first, items } => {
                let mut w = Writer::new(Kind::Handovers.tag());
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
        let tag = r.u8()?;
        let Some(kind) = Kind::from_tag(tag) else {
            return Err(r.err(format!("unknown hlrc message tag {tag}")));
        };
        let m = match kind {
            Kind::HomeQuery => Msg::HomeQuery { page: r.page(t)? },
            Kind::HomeReply => {
                let page = r.page(t)?;
                let home = if r.bool()? { Some(r.home(n)?) } else { None };
                let k = usize::from(r.u16()?);
                if k > HOME_RUN {
                    return Err(r.err("home run too long"));
                }
                let more = (0..k)
                    .map(|_| r.home(n))
                    .collect::<Result<Vec<_>, ProtoError>>()?;
                let alloc = if r.bool()? {
                    let first = r.page(t)?;
                    let pages = r.u64()?;
                    if pages == 0 || pages > t - first.0 {
                        return Err(r.err("allocation beyond the heap"));
                    }
                    let kind = r.u8()?;
                    let arg = r.u64()?;
                    let placement = match (kind, arg) {
                        (PLACE_FIRST_TOUCH, _) => Placement::FirstTouch,
                        (PLACE_ROUND_ROBIN, b) => Placement::RoundRobin { block_pages: b },
                        (PLACE_BLOCKED, _) => Placement::Blocked,
                        (PLACE_NODE, node) if node < u64::from(n) => {
                            Placement::Node(NodeId(node as u16))
                        }
                        _ => return Err(r.err("bad placement")),
                    };
                    Some(AllocInfo {
                        first,
                        pages,
                        placement,
                    })
                } else {
                    None
                };
                Msg::HomeReply {
                    page,
                    home,
                    more,
                    alloc,
                }
            }
            Kind::HomeMoved => Msg::HomeMoved {
                page: r.page(t)?,
                home: r.home(n)?,
            },
            Kind::Fetch => {
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
            Kind::NoPage => Msg::NoPage { page: r.page(t)? },
            Kind::PageRun => {
                let first = r.page(t)?;
                let data = decode_run(&mut r, first, t, "bad page run")?.to_vec();
                Msg::PageRun { first, data }
            }
            Kind::PageData => Msg::PageData {
                page: r.page(t)?,
                data: r.page_data()?.to_vec(),
                exclusive: r.bool()?,
            },
            Kind::Recall => Msg::Recall { page: r.page(t)? },
            Kind::RecallReply => {
                let page = r.page(t)?;
                let data = if r.bool()? {
                    Some(r.page_data()?.to_vec())
                } else {
                    None
                };
                Msg::RecallReply { page, data }
            }
            Kind::Redirect => {
                let page = r.page(t)?;
                let atomic_token = if r.bool()? { Some(r.u64()?) } else { None };
                Msg::Redirect {
                    page,
                    atomic_token,
                    home: r.home(n)?,
                }
            }
            Kind::Diff => Msg::Diff {
                page: r.page(t)?,
                origin: r.node(n)?,
                id: r.u64()?,
                epoch: r.u32()?,
                diff: r.bytes()?.to_vec(),
            },
            Kind::DiffAck => {
                let page = r.page(t)?;
                let id = r.u64()?;
                let migrate = if r.bool()? {
                    Some(decode_handover(&mut r, n)?)
                } else {
                    None
                };
                Msg::DiffAck { page, id, migrate }
            }
            Kind::Atomic => Msg::Atomic {
                page: r.page(t)?,
                offset: r.u16()?,
                call: decode_call(&mut r)?,
                token: r.u64()?,
                epoch: r.u32()?,
            },
            Kind::AtomicReply => Msg::AtomicReply {
                token: r.u64()?,
                old: r.u64()?,
                infos: decode_infos(&mut r, layout.nodes)?,
            },
            Kind::Dropped => {
                let k = u64::from(r.u32()?);
                if k > t {
                    return Err(r.err("more dropped pages than the range holds"));
                }
                Msg::Dropped {
                    pages: (0..k).map(|_| r.page(t)).collect::<Result<Vec<_>, _>>()?,
                }
            }
            Kind::Push => {
                let first = r.page(t)?;
                let interval = r.u32()?;
                let data = decode_run(&mut r, first, t, "bad push run")?.to_vec();
                Msg::Push {
                    first,
                    interval,
                    data,
                }
            }
            Kind::Handovers => {
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
        };
        r.end()?;
        Ok(m)
    }
}

pub(super) fn encode_handover(w: &mut Writer, h: &Handover) {
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
pub(super) fn decode_run<'a>(
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

/// A received `page_run`'s first page and data, borrowed from the message (a page run is
/// installed from the received bytes, with no copy of the pages).
pub(super) fn decode_page_run(
    from: NodeId,
    layout: HeapLayout,
    msg: &[u8],
) -> Result<(PageId, &[u8]), ProtoError> {
    let mut r = Reader::new(from, msg);
    r.u8()?;
    let first = r.page(layout.total_pages)?;
    let data = decode_run(&mut r, first, layout.total_pages, "bad page run")?;
    r.end()?;
    Ok((first, data))
}

/// A `page_run` message being built in its encoded form: the home reads each page straight
/// into the message buffer (no copy per page and none to encode).
pub(super) struct RunBuf {
    pub(super) first: PageId,
    pub(super) count: usize,
    pub(super) w: Writer,
}

/// Offsets in an encoded `page_run`: tag (1) and first page (8), then the page count (u16)
/// and the data's length (u32), then the data.
const RUN_COUNT_AT: usize = 9;
const RUN_LEN_AT: usize = 11;

impl RunBuf {
    pub(super) fn new(first: PageId) -> Self {
        let mut w = Writer::new(Kind::PageRun.tag());
        w.page(first).u16(0).u32(0);
        w.buf.reserve(MAX_RUN * PAGE_SIZE);
        RunBuf { first, count: 0, w }
    }

    /// Append `page`'s current contents (the next page of the run).
    pub(super) fn push(&mut self, mem: &dyn PageMemory, page: PageId) {
        debug_assert_eq!(page.0, self.first.0 + self.count as u64);
        let at = self.w.buf.len();
        self.w.buf.resize(at + PAGE_SIZE, 0);
        mem.read_page(page, &mut self.w.buf[at..]);
        self.count += 1;
    }

    /// The bytes of the page pushed last (empty before the first).
    pub(super) fn last_page(&self) -> &[u8] {
        let end = self.w.buf.len();
        if self.count == 0 {
            return &[];
        }
        &self.w.buf[end - PAGE_SIZE..end]
    }

    /// The encoded message, byte for byte `Msg::PageRun { first, data }.encode()`.
    pub(super) fn finish(mut self) -> Vec<u8> {
        // At most `MAX_RUN` pages: both fit.
        let count = self.count as u16;
        let len = (self.count * PAGE_SIZE) as u32;
        self.w.buf[RUN_COUNT_AT..RUN_COUNT_AT + 2].copy_from_slice(&count.to_le_bytes());
        self.w.buf[RUN_LEN_AT..RUN_LEN_AT + 4].copy_from_slice(&len.to_le_bytes());
        self.w.finish()
    }
}

pub(super) fn decode_handover(r: &mut Reader<'_>, n: u16) -> Result<Handover, ProtoError> {
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
pub(super) struct Handover {
    pub(super) epoch: u32,
    pub(super) data: Vec<u8>,
    pub(super) copyset: Option<Vec<NodeId>>,
}

/// Sync info: vector time, then notices `(node, interval, pages)`.
pub(super) type Notices = Vec<((u16, u32), Vec<PageId>)>;

pub(super) fn encode_sync(vt: &[u32], notices: &[(&(u16, u32), &Vec<PageId>)]) -> Vec<u8> {
    let mut w = Writer::new(SYNC_TAG);
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

pub(super) fn decode_sync(me: NodeId, nodes: u16, b: &[u8]) -> Option<(Vec<u32>, Notices)> {
    let mut r = Reader::new(me, b);
    if r.u8().ok()? != SYNC_TAG {
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
    fn every_kind_is_its_wire_tag_and_messages_start_with_it() {
        let mut names = std::collections::BTreeSet::new();
        for k in Kind::ALL {
            assert_eq!(Kind::from_tag(k.tag()), Some(k));
            assert!(names.insert(k.name()), "{} named twice", k.name());
        }
        assert_eq!(Kind::from_tag(0), None);
        assert_eq!(Kind::from_tag(Kind::ALL.len() as u8 + 1), None);
        assert_eq!(Kind::from_tag(SYNC_TAG), None);
        let home = HomeRef {
            node: NodeId(1),
            epoch: 3,
        };
        for m in [
            Msg::HomeQuery { page: PageId(9) },
            Msg::HomeReply {
                page: PageId(9),
                home: Some(home),
                more: vec![home, home],
                alloc: None,
            },
            Msg::HomeReply {
                page: PageId(9),
                home: Some(home),
                more: vec![],
                alloc: Some(AllocInfo {
                    first: PageId(8),
                    pages: 4,
                    placement: Placement::RoundRobin { block_pages: 2 },
                }),
            },
            Msg::HomeReply {
                page: PageId(9),
                home: None,
                more: vec![],
                alloc: Some(AllocInfo {
                    first: PageId(2),
                    pages: 10,
                    placement: Placement::Node(NodeId(1)),
                }),
            },
            Msg::HomeMoved {
                page: PageId(9),
                home,
            },
            fetch(300, 2, 3),
            Msg::NoPage { page: PageId(4) },
            Msg::Recall { page: PageId(4) },
            Msg::Redirect {
                page: PageId(4),
                atomic_token: Some(77),
                home,
            },
            Msg::Dropped {
                pages: vec![PageId(1), PageId(5)],
            },
        ] {
            let bytes = m.encode();
            assert_eq!(bytes[0], m.tag().tag(), "{m:?}");
            assert_eq!(m.kind(), m.tag().name());
            let back = Msg::decode(NodeId(0), LAYOUT, &bytes).expect("decodes");
            assert_eq!(back, m);
        }
        let err = Msg::decode(NodeId(1), LAYOUT, &[99]).expect_err("unknown kind");
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
