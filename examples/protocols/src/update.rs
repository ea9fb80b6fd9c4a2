//! A home-based write-update protocol with multiple writers (release consistency): a node
//! fetches a page once from its home (the node that allocated it) and keeps the copy valid
//! forever. Writing a page makes a twin; a release sends the bytes that differ from the twin
//! (the diff) to the page's home, which applies them to its master copy and forwards them to
//! every other copy holder; the release completes when every holder has applied them. So
//! after a lock or barrier a node's copies already hold every write released before it:
//! consumers never fault again for data producers update (Tempest §4's update protocols).
//!
//! Messages: `Fetch{page}` → home; `Copy{page, bytes}` home → fetcher (the fetcher joins the
//! copy set); `Diff{token, page, runs}` releaser → home; `Update{id, page, runs}` home →
//! holder; `UpdateAck{id}` holder → home; `Done{token}` home → releaser.
//!
//! Correct for data-race-free programs: two nodes write the same bytes only with a
//! synchronization in between, which orders their releases at the home. An update is applied
//! to a holder's twin too, so its next diff carries only its own writes.

use squall_protocol::user::{
    Access, Mechanisms, MsgReader, MsgWriter, NodeId, PageId, ProtoError, UserProtocol, PAGE_SIZE,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const FETCH: u8 = 1;
const COPY: u8 = 2;
const DIFF: u8 = 3;
const UPDATE: u8 = 4;
const UPDATE_ACK: u8 = 5;
const DONE: u8 = 6;

/// Runs of changed bytes: `(offset, bytes)`.
type Runs = Vec<(usize, Vec<u8>)>;

/// One node's instance of the write-update protocol.
#[derive(Debug, Default)]
pub struct WriteUpdate {
    /// Pages of other homes this node holds a (valid) copy of.
    copies: BTreeSet<PageId>,
    fetching: BTreeSet<PageId>,
    /// Pages written since the last release, with their contents before the first write.
    twins: BTreeMap<PageId, Vec<u8>>,
    /// Home side: the nodes holding a copy of each page of this arena.
    copyset: BTreeMap<PageId, BTreeSet<NodeId>>,
    /// Home side: updates waiting for acks: id → (releaser, its token, acks left).
    updating: BTreeMap<u64, (NodeId, u64, usize)>,
    next_update: u64,
    /// Releases of this node in progress, oldest first: (token, pages not confirmed yet). A
    /// release completes only after the ones before it: another thread's release may have
    /// taken this thread's writes along (the twins are the node's, not the thread's).
    releases: VecDeque<(u64, usize)>,
    /// Updates this node applied to its copies (statistics for tests).
    pub updates_applied: u64,
}

fn diff(twin: &[u8], now: &[u8]) -> Runs {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < now.len() {
        if twin[i] == now[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < now.len() && twin[i] != now[i] {
            i += 1;
        }
        runs.push((start, now[start..i].to_vec()));
    }
    runs
}

fn encode_runs(mut w: MsgWriter, runs: &Runs) -> Vec<u8> {
    w = w.u64(runs.len() as u64);
    for (off, b) in runs {
        w = w.u64(*off as u64).bytes(b);
    }
    w.finish()
}

fn decode_runs(r: &mut MsgReader<'_>) -> Result<Runs, ProtoError> {
    let n = r.u64()?;
    if n > PAGE_SIZE as u64 {
        return Err(r.err(format!("{n} runs in one page")));
    }
    let mut runs = Vec::new();
    for _ in 0..n {
        let off = r.u64()? as usize;
        let b = r.bytes()?;
        if off.checked_add(b.len()).is_none_or(|e| e > PAGE_SIZE) {
            return Err(r.err(format!(
                "a run of {} bytes at {off} leaves the page",
                b.len()
            )));
        }
        runs.push((off, b.to_vec()));
    }
    r.end()?;
    Ok(runs)
}

impl WriteUpdate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Put `runs` into this node's copy of `page` and into its twin, if any.
    fn apply(
        &mut self,
        m: &mut Mechanisms<'_>,
        page: PageId,
        runs: &Runs,
    ) -> Result<(), ProtoError> {
        for (off, b) in runs {
            m.write_page(page, *off, b)?;
            if let Some(t) = self.twins.get_mut(&page) {
                t[*off..*off + b.len()].copy_from_slice(b);
            }
        }
        Ok(())
    }

    /// At the home of `page`: `runs` of `origin`'s release `token` are in the master copy;
    /// forward them to the other holders, or confirm at once if there are none.
    fn forward(
        &mut self,
        m: &mut Mechanisms<'_>,
        origin: NodeId,
        token: u64,
        page: PageId,
        runs: &Runs,
    ) {
        let holders: Vec<NodeId> = self
            .copyset
            .get(&page)
            .map(|s| s.iter().copied().filter(|&n| n != origin).collect())
            .unwrap_or_default();
        if holders.is_empty() {
            self.confirm(m, origin, token);
            return;
        }
        let id = self.next_update;
        self.next_update += 1;
        self.updating.insert(id, (origin, token, holders.len()));
        for h in holders {
            m.send(
                h,
                encode_runs(MsgWriter::new(UPDATE).u64(id).page(page), runs),
            );
        }
    }

    /// One page of `origin`'s release `token` reached every copy.
    fn confirm(&mut self, m: &mut Mechanisms<'_>, origin: NodeId, token: u64) {
        if origin != m.me() {
            m.send(origin, MsgWriter::new(DONE).u64(token).finish());
            return;
        }
        if let Some((_, left)) = self.releases.iter_mut().find(|(t, _)| *t == token) {
            *left -= 1;
        }
        self.complete(m, None);
    }

    /// Complete the releases at the front that are confirmed; `Some(current)`: the release
    /// being started, which is reported by returning `true` rather than by `release_done`.
    fn complete(&mut self, m: &mut Mechanisms<'_>, current: Option<u64>) -> bool {
        let mut current_done = false;
        while let Some(&(token, 0)) = self.releases.front() {
            self.releases.pop_front();
            if Some(token) == current {
                current_done = true;
            } else {
                m.release_done(token);
            }
        }
        current_done
    }
}

impl UserProtocol for WriteUpdate {
    fn name(&self) -> &'static str {
        "write-update"
    }

    fn fault(
        &mut self,
        m: &mut Mechanisms<'_>,
        page: PageId,
        write: bool,
    ) -> Result<(), ProtoError> {
        let home = m.manager_of(page) == m.me();
        if !home && !self.copies.contains(&page) {
            if self.fetching.insert(page) {
                m.send(
                    m.manager_of(page),
                    MsgWriter::new(FETCH).page(page).finish(),
                );
            }
            return Ok(()); // the copy resumes the thread; a write faults again for its twin
        }
        if write {
            if m.access(page) != Access::ReadWrite {
                let twin = m.read_page(page);
                self.twins.insert(page, twin);
                m.set_access(page, Access::ReadWrite);
            }
        } else if m.access(page) == Access::None {
            m.set_access(page, Access::Read);
        }
        m.resume(page);
        Ok(())
    }

    fn message(
        &mut self,
        m: &mut Mechanisms<'_>,
        from: NodeId,
        msg: &[u8],
    ) -> Result<(), ProtoError> {
        let mut r = MsgReader::new(from, msg);
        match r.u8()? {
            FETCH => {
                let page = r.home_page(m, "a fetch of")?;
                r.end()?;
                self.copyset.entry(page).or_default().insert(from);
                // Released contents only: while the home writes the page, its twin (which
                // every diff applied here also went into) is the page without the home's
                // unreleased writes. Those reach the copy with the home's next release; sent
                // now, a later write of the old value back would be missing from that diff.
                let bytes = match self.twins.get(&page) {
                    Some(twin) => twin.clone(),
                    None => m.read_page(page),
                };
                m.count_page_fetch();
                m.send(from, MsgWriter::new(COPY).page(page).bytes(&bytes).finish());
                Ok(())
            }
            COPY => {
                let page = r.page(m)?;
                let bytes = r.bytes()?;
                r.end()?;
                if bytes.len() != PAGE_SIZE || !self.fetching.remove(&page) {
                    return Err(r.err(format!("a copy of {page} not asked for")));
                }
                m.write_page(page, 0, bytes)?;
                m.set_access(page, Access::Read);
                self.copies.insert(page);
                m.resume(page);
                Ok(())
            }
            DIFF => {
                let token = r.u64()?;
                let page = r.home_page(m, "a diff of")?;
                let runs = decode_runs(&mut r)?;
                self.apply(m, page, &runs)?;
                self.forward(m, from, token, page, &runs);
                Ok(())
            }
            UPDATE => {
                let id = r.u64()?;
                let page = r.page(m)?;
                let runs = decode_runs(&mut r)?;
                if !self.copies.contains(&page) {
                    return Err(r.err(format!(
                        "an update of {page}, which this node holds no copy of"
                    )));
                }
                self.apply(m, page, &runs)?;
                self.updates_applied += 1;
                m.send(from, MsgWriter::new(UPDATE_ACK).u64(id).finish());
                Ok(())
            }
            UPDATE_ACK => {
                let id = r.u64()?;
                r.end()?;
                let Some(u) = self.updating.get_mut(&id) else {
                    return Err(r.err(format!("an ack of update {id}, which is not in progress")));
                };
                u.2 -= 1;
                if u.2 == 0 {
                    let (origin, token, _) = *u;
                    self.updating.remove(&id);
                    self.confirm(m, origin, token);
                }
                Ok(())
            }
            DONE => {
                let token = r.u64()?;
                r.end()?;
                if !self.releases.iter().any(|(t, _)| *t == token) {
                    return Err(r.err(format!(
                        "a confirmation of release {token}, not in progress"
                    )));
                }
                let me = m.me();
                self.confirm(m, me, token);
                Ok(())
            }
            k => Err(r.err(format!("unknown write-update message kind {k}"))),
        }
    }

    fn release(&mut self, m: &mut Mechanisms<'_>, token: u64) -> bool {
        let twins = std::mem::take(&mut self.twins);
        let mut out = Vec::new();
        for (page, twin) in twins {
            // Revoke writing first, so no thread of this node changes the page while it is
            // compared (a later write faults and makes a new twin).
            m.set_access(page, Access::Read);
            let runs = diff(&twin, &m.read_page(page));
            if !runs.is_empty() {
                out.push((page, runs));
            }
        }
        if out.is_empty() && self.releases.is_empty() {
            return true;
        }
        // One count per page plus a guard, so no page confirmed here completes it early.
        self.releases.push_back((token, out.len() + 1));
        let me = m.me();
        for (page, runs) in out {
            let home = m.manager_of(page);
            if home == me {
                self.forward(m, me, token, page, &runs);
            } else {
                m.send(
                    home,
                    encode_runs(MsgWriter::new(DIFF).u64(token).page(page), &runs),
                );
            }
        }
        // Drop the guard: every page may have been confirmed here (no other holders).
        if let Some((_, left)) = self.releases.back_mut() {
            *left -= 1;
        }
        self.complete(m, Some(token))
    }
}
