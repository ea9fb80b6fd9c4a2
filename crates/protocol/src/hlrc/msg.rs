//! `hlrc` messages and their wire encoding: the message kinds, `Msg` with its encoder and
//! decoder (every field checked against the job's layout; a bad message is a typed
//! `ProtoError::Malformed`), the page-run buffer a home fills in place, the handover a
//! migrating home sends, the synchronization info (vector time and write notices) carried by
//! lock grants and barriers, and `describe` for traces.
//!
//! Owns: the bytes on the wire. Must not touch: protocol state (nothing here reads or
//! changes a `Hlrc`).

use super::state::{HOME_RUN, MAX_RUN};
use crate::shared::atomic::decode_call;
use crate::shared::atomic::decode_infos;
use crate::shared::atomic::encode_call;
use crate::shared::atomic::encode_infos;
use crate::shared::codec::Reader;
use crate::shared::codec::Writer;
use crate::shared::diff::for_each_run;
use crate::shared::home::HomeRef;
use crate::AtomicCall;
use crate::ProtoError;
use squall_core::HeapLayout;
use squall_core::NodeId;
use squall_core::PageId;
use squall_core::PageMemory;
use squall_core::PAGE_SIZE;

/// `hlrc` messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Msg {
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

/// A `page_run` message being built in its encoded form: the home reads each page straight
/// into the message buffer (no copy per page and none to encode).
pub(super) struct RunBuf {
    pub(super) first: PageId,
    pub(super) count: usize,
    pub(super) w: Writer,
}

/// Offsets in an encoded `page_run`: tag (1) and first page (8), then the page count (u16)
/// and the data's length (u32), then the data.
pub(super) const RUN_COUNT_AT: usize = 9;
pub(super) const RUN_LEN_AT: usize = 11;

impl RunBuf {
    pub(super) fn new(first: PageId) -> Self {
        let mut w = Writer::new(15);
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

pub(super) fn decode_sync(me: NodeId, nodes: u16, b: &[u8]) -> Option<(Vec<u32>, Notices)> {
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
}
