//! A migratory single-writer protocol: each page has exactly one valid copy, on its owner,
//! with read-write access; every other node has no access. A node that touches a page it
//! does not own asks the page's home (the node that allocated it), which moves the page from
//! its owner to the requester, one move at a time per page.
//!
//! Messages: `Request{page}` requester → home; `Fetch{page, to}` home → owner;
//! `Grant{page, bytes}` owner → requester; `Installed{page}` requester → home (the home
//! starts the next queued move only then, so a `Fetch` always finds the page installed).
//!
//! Since there is one copy, every read sees the last write: the protocol is sequentially
//! consistent, and has nothing to do at acquire, release or barrier.

use squall_protocol::user::{
    Access, Mechanisms, MsgReader, MsgWriter, NodeId, PageId, ProtoError, UserProtocol, PAGE_SIZE,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const REQUEST: u8 = 1;
const FETCH: u8 = 2;
const GRANT: u8 = 3;
const INSTALLED: u8 = 4;

/// The home's record of one page.
#[derive(Debug)]
struct Entry {
    owner: NodeId,
    /// A move is in flight (to `owner`); further requests wait in `queue`.
    moving: bool,
    queue: VecDeque<NodeId>,
}

/// One node's instance of the migratory protocol.
#[derive(Debug, Default)]
pub struct Migratory {
    /// Pages of other homes this node owns.
    owned: BTreeSet<PageId>,
    /// Pages this node asked for and has not received yet.
    requested: BTreeSet<PageId>,
    /// Home side: pages of this node's arena that moved at least once (absent: owned by the
    /// home, not moving).
    dir: BTreeMap<PageId, Entry>,
    /// Pages moved to this node (statistics for tests).
    pub moves_in: u64,
}

impl Migratory {
    pub fn new() -> Self {
        Self::default()
    }

    fn owns(&self, m: &Mechanisms<'_>, page: PageId) -> bool {
        if m.manager_of(page) == m.me() {
            self.dir
                .get(&page)
                .is_none_or(|e| e.owner == m.me() && !e.moving)
        } else {
            self.owned.contains(&page)
        }
    }

    /// At the home: `to` wants `page`.
    fn request(
        &mut self,
        m: &mut Mechanisms<'_>,
        to: NodeId,
        page: PageId,
    ) -> Result<(), ProtoError> {
        let me = m.me();
        let e = self.dir.entry(page).or_insert_with(|| Entry {
            owner: me,
            moving: false,
            queue: VecDeque::new(),
        });
        if e.moving {
            e.queue.push_back(to);
            return Ok(());
        }
        if e.owner == to {
            return Err(ProtoError::Unexpected {
                from: to,
                page,
                why: "a request for a page the requester owns".into(),
            });
        }
        let from = e.owner;
        e.owner = to;
        e.moving = true;
        if from == me {
            self.give(m, page, to);
        } else {
            m.send(from, MsgWriter::new(FETCH).page(page).node(to).finish());
        }
        Ok(())
    }

    /// At the owner: hand `page` to `to` (never this node).
    fn give(&mut self, m: &mut Mechanisms<'_>, page: PageId, to: NodeId) {
        // Revoke first: from here no thread of this node changes the page.
        m.set_access(page, Access::None);
        let bytes = m.read_page(page);
        self.owned.remove(&page);
        m.count_page_fetch();
        m.send(to, MsgWriter::new(GRANT).page(page).bytes(&bytes).finish());
    }

    /// At the home: the move of `page` finished; start the next one.
    fn installed(&mut self, m: &mut Mechanisms<'_>, page: PageId) -> Result<(), ProtoError> {
        let Some(e) = self.dir.get_mut(&page) else {
            return Err(ProtoError::Unexpected {
                from: m.me(),
                page,
                why: "an install report for a page that never moved".into(),
            });
        };
        e.moving = false;
        if let Some(next) = e.queue.pop_front() {
            self.request(m, next, page)?;
        }
        Ok(())
    }
}

impl UserProtocol for Migratory {
    fn name(&self) -> &'static str {
        "migratory"
    }

    fn fault(
        &mut self,
        m: &mut Mechanisms<'_>,
        page: PageId,
        _write: bool,
    ) -> Result<(), ProtoError> {
        if self.owns(m, page) {
            // The owner's first touch (the home owns a fresh page with no access yet).
            m.set_access(page, Access::ReadWrite);
            m.resume(page);
            return Ok(());
        }
        if !self.requested.insert(page) {
            return Ok(()); // already asked; the grant resumes every waiting thread
        }
        let home = m.manager_of(page);
        if home == m.me() {
            self.request(m, home, page)
        } else {
            m.send(home, MsgWriter::new(REQUEST).page(page).finish());
            Ok(())
        }
    }

    fn message(
        &mut self,
        m: &mut Mechanisms<'_>,
        from: NodeId,
        msg: &[u8],
    ) -> Result<(), ProtoError> {
        let mut r = MsgReader::new(from, msg);
        match r.u8()? {
            REQUEST => {
                let page = r.home_page(m, "a request for")?;
                r.end()?;
                self.request(m, from, page)
            }
            FETCH => {
                let page = r.page(m)?;
                let to = r.node(m)?;
                r.end()?;
                if !self.owned.contains(&page) || to == m.me() {
                    return Err(r.err(format!(
                        "a fetch of {page} for {to}, which this node cannot give"
                    )));
                }
                self.give(m, page, to);
                Ok(())
            }
            GRANT => {
                let page = r.page(m)?;
                let bytes = r.bytes()?;
                r.end()?;
                if bytes.len() != PAGE_SIZE {
                    return Err(r.err(format!("a grant of {} bytes", bytes.len())));
                }
                if !self.requested.remove(&page) {
                    return Err(r.err(format!(
                        "a grant of {page}, which this node did not ask for"
                    )));
                }
                m.write_page(page, 0, bytes)?;
                m.set_access(page, Access::ReadWrite);
                self.moves_in += 1;
                m.resume(page);
                let home = m.manager_of(page);
                if home == m.me() {
                    self.installed(m, page)
                } else {
                    self.owned.insert(page);
                    m.send(home, MsgWriter::new(INSTALLED).page(page).finish());
                    Ok(())
                }
            }
            INSTALLED => {
                let page = r.page(m)?;
                r.end()?;
                if self
                    .dir
                    .get(&page)
                    .is_none_or(|e| e.owner != from || !e.moving)
                {
                    return Err(r.err(format!(
                        "an install report of {page} not expected from {from}"
                    )));
                }
                self.installed(m, page)
            }
            k => Err(r.err(format!("unknown migratory message kind {k}"))),
        }
    }
}
