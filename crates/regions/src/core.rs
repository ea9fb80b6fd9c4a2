//! One node's region state: the directories of the regions it is home of, its cached copies
//! with their brackets, and the protocol between them (see the crate doc). Owns every state
//! transition; must not touch I/O (messages leave as actions, bytes go through
//! `RegionMemory`).

use crate::msg::{Kind, Msg};
use crate::{Action, RegionError, RegionId, RegionMemory, RegionStats, Waiter};
use squall_core::NodeId;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// A read or a write (bracket or request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Read,
    Write,
}

/// A cached copy's state on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Invalid,
    Shared,
    Exclusive,
}

/// This node's view of a region it mapped.
#[derive(Debug)]
struct Cached {
    size: u64,
    state: St,
    readers: u32,
    writer: bool,
    mapped: u32,
    /// The request this node has outstanding at the home (one at a time).
    pending: Option<Want>,
    /// Brackets waiting to start, in order (with whether they waited for a fetch).
    queue: VecDeque<(Want, Waiter, bool)>,
    /// Invalidations and recalls waiting for the brackets in progress to end.
    deferred: VecDeque<(Kind, u64)>,
}

/// The home's record of a region.
#[derive(Debug)]
struct Dir {
    /// The home copy (current while nobody owns the region and `stale` is false).
    data: Vec<u8>,
    /// The home node's own cached copy (Shared) holds the current bytes and `data` is behind:
    /// set when the home's written copy is downgraded for a reader, so the read reply is
    /// built straight from that copy (one pass instead of two); `data` is brought up to
    /// date before the home's copy stops being Shared.
    stale: bool,
    sharers: BTreeSet<NodeId>,
    owner: Option<NodeId>,
    /// Requests waiting for the one in progress.
    queue: VecDeque<(NodeId, Want)>,
    txn: Option<Txn>,
}

/// The request a home is serving: who asked, and what it still waits for.
#[derive(Debug)]
struct Txn {
    req: NodeId,
    want: Want,
    acks: BTreeSet<NodeId>,
    recall: Option<NodeId>,
    /// The requester of a write holds a current read copy: grant without data.
    had_copy: bool,
}

/// One node's region protocol core.
#[derive(Debug)]
pub struct Regions {
    me: NodeId,
    nodes: u16,
    next_seq: u64,
    dirs: HashMap<RegionId, Dir>,
    cache: HashMap<RegionId, Cached>,
    map_waiters: HashMap<RegionId, Vec<Waiter>>,
    actions: VecDeque<Action>,
    stats: RegionStats,
}

impl Regions {
    pub fn new(me: NodeId, nodes: u16) -> Regions {
        Regions {
            me,
            nodes,
            next_seq: 1,
            dirs: HashMap::new(),
            cache: HashMap::new(),
            map_waiters: HashMap::new(),
            actions: VecDeque::new(),
            stats: RegionStats::default(),
        }
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    pub fn stats(&self) -> &RegionStats {
        &self.stats
    }

    /// The size of a region mapped (or cached) here.
    pub fn size_of(&self, rid: RegionId) -> Option<u64> {
        self.cache.get(&rid).map(|c| c.size)
    }

    /// Whether this node's copy of `rid` is valid (read or exclusive): a bracket would hit.
    pub fn is_cached(&self, rid: RegionId) -> bool {
        self.cache.get(&rid).is_some_and(|c| c.state != St::Invalid)
    }

    /// Create a region of `size` bytes homed on this node (zero-filled); not mapped yet.
    pub fn create(&mut self, size: usize) -> RegionId {
        let rid = RegionId::new(self.me, self.next_seq);
        self.next_seq += 1;
        self.stats.created += 1;
        self.dirs.insert(
            rid,
            Dir {
                data: vec![0; size],
                stale: false,
                sharers: BTreeSet::new(),
                owner: None,
                queue: VecDeque::new(),
                txn: None,
            },
        );
        rid
    }

    /// Map `rid`: completes with its size once this node knows it (one message to the home
    /// the first time; a mapped or cached region completes at once).
    pub fn map(&mut self, w: Waiter, rid: RegionId, mem: &mut dyn RegionMemory) {
        if rid.home().0 >= self.nodes {
            self.complete(w, Err(RegionError::BadHome(rid, rid.home())));
            return;
        }
        self.stats.maps += 1;
        // An unmapped copy that is not valid any more is dropped: the home says afresh
        // whether the region still exists.
        if self.cache.get(&rid).is_some_and(|c| {
            c.mapped == 0 && c.state == St::Invalid && c.pending.is_none() && c.queue.is_empty()
        }) {
            self.cache.remove(&rid);
            mem.forget(rid);
        }
        if let Some(c) = self.cache.get_mut(&rid) {
            c.mapped += 1;
            let size = c.size;
            self.complete(w, Ok(size));
            return;
        }
        if rid.home() == self.me {
            let Some(size) = self.dirs.get(&rid).map(|d| d.data.len() as u64) else {
                self.complete(w, Err(RegionError::Unknown(rid)));
                return;
            };
            self.new_entry(rid, size, mem);
            self.complete(w, Ok(size));
            return;
        }
        let waiters = self.map_waiters.entry(rid).or_default();
        waiters.push(w);
        if waiters.len() == 1 {
            self.send(rid.home(), Msg::new(Kind::MapReq, rid));
        }
    }

    fn new_entry(&mut self, rid: RegionId, size: u64, mem: &mut dyn RegionMemory) {
        mem.ensure(rid, size as usize);
        self.cache.insert(
            rid,
            Cached {
                size,
                state: St::Invalid,
                readers: 0,
                writer: false,
                mapped: 1,
                pending: None,
                queue: VecDeque::new(),
                deferred: VecDeque::new(),
            },
        );
    }

    /// Unmap once: the copy stays cached (a later map is local).
    pub fn unmap(&mut self, rid: RegionId) -> Result<(), RegionError> {
        match self.cache.get_mut(&rid) {
            Some(c) if c.mapped > 0 => {
                c.mapped -= 1;
                Ok(())
            }
            _ => Err(RegionError::NotMapped(rid)),
        }
    }

    /// Start a read bracket: completes when this node has a valid copy and no writer.
    pub fn start_read(&mut self, w: Waiter, rid: RegionId, mem: &mut dyn RegionMemory) {
        self.start(w, rid, Want::Read, mem);
    }

    /// Start a write bracket: completes when this node owns the region and nobody here reads
    /// or writes it.
    pub fn start_write(&mut self, w: Waiter, rid: RegionId, mem: &mut dyn RegionMemory) {
        self.start(w, rid, Want::Write, mem);
    }

    fn start(&mut self, w: Waiter, rid: RegionId, want: Want, mem: &mut dyn RegionMemory) {
        match self.cache.get_mut(&rid) {
            Some(c) if c.mapped > 0 => c.queue.push_back((want, w, false)),
            _ => {
                self.complete(w, Err(RegionError::NotMapped(rid)));
                return;
            }
        }
        self.pump(rid, mem);
    }

    pub fn end_read(
        &mut self,
        rid: RegionId,
        mem: &mut dyn RegionMemory,
    ) -> Result<(), RegionError> {
        let c = self
            .cache
            .get_mut(&rid)
            .ok_or(RegionError::NotMapped(rid))?;
        if c.readers == 0 {
            return Err(RegionError::NotInBracket {
                rid,
                what: "end_read",
            });
        }
        c.readers -= 1;
        self.after_bracket(rid, mem);
        Ok(())
    }

    pub fn end_write(
        &mut self,
        rid: RegionId,
        mem: &mut dyn RegionMemory,
    ) -> Result<(), RegionError> {
        let c = self
            .cache
            .get_mut(&rid)
            .ok_or(RegionError::NotMapped(rid))?;
        if !c.writer {
            return Err(RegionError::NotInBracket {
                rid,
                what: "end_write",
            });
        }
        c.writer = false;
        self.after_bracket(rid, mem);
        Ok(())
    }

    /// Send this node's copy home and drop it (no bracket may be open or waiting).
    pub fn flush(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) -> Result<(), RegionError> {
        let c = self
            .cache
            .get_mut(&rid)
            .ok_or(RegionError::NotMapped(rid))?;
        if c.readers > 0 || c.writer || c.pending.is_some() || !c.queue.is_empty() {
            return Err(RegionError::Busy(rid));
        }
        let was = c.state;
        c.state = St::Invalid;
        self.stats.flushes += 1;
        if was == St::Shared {
            if let Some(d) = self.dirs.get_mut(&rid) {
                catch_up(d, rid, mem);
            }
        }
        match was {
            St::Exclusive => {
                let size = c.size as usize;
                let msg =
                    Msg::encode_from(Kind::Flush, rid, size, |out| mem.append_to(rid, size, out));
                self.push_send(rid.home(), Kind::Flush, msg);
            }
            St::Shared => self.send(rid.home(), Msg::new(Kind::Drop, rid)),
            St::Invalid => {}
        }
        Ok(())
    }

    /// Delete `rid` (the caller makes sure nobody uses it any more): its home drops the
    /// directory and tells the nodes holding copies.
    pub fn delete(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) -> Result<(), RegionError> {
        if rid.home().0 >= self.nodes {
            return Err(RegionError::BadHome(rid, rid.home()));
        }
        self.stats.deletes += 1;
        self.drop_entry(rid, mem);
        if rid.home() == self.me {
            self.delete_home(rid)
        } else {
            self.send(rid.home(), Msg::new(Kind::Delete, rid));
            Ok(())
        }
    }

    fn delete_home(&mut self, rid: RegionId) -> Result<(), RegionError> {
        let d = self.dirs.remove(&rid).ok_or(RegionError::Unknown(rid))?;
        let mut told: BTreeSet<NodeId> = d.sharers;
        told.extend(d.owner);
        for n in told {
            if n != self.me {
                self.send(n, Msg::new(Kind::Gone, rid));
            }
        }
        let waiting = d.txn.map(|t| (t.req, t.want)).into_iter().chain(d.queue);
        for (n, want) in waiting.collect::<Vec<_>>() {
            let mut m = Msg::new(Kind::Unknown, rid);
            m.arg = kind_of(want) as u64;
            self.send(n, m);
        }
        Ok(())
    }

    /// Drop this node's entry of `rid`, failing the calls that wait on it.
    fn drop_entry(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) {
        if let Some(c) = self.cache.remove(&rid) {
            mem.forget(rid);
            for (_, w, _) in c.queue {
                self.complete(w, Err(RegionError::Unknown(rid)));
            }
        }
    }

    /// Handle one incoming message.
    pub fn on_message(
        &mut self,
        from: NodeId,
        bytes: &[u8],
        mem: &mut dyn RegionMemory,
    ) -> Result<(), RegionError> {
        if from.0 >= self.nodes {
            return Err(RegionError::Malformed {
                from,
                what: "sender outside the job",
            });
        }
        let m = Msg::decode(from, bytes)?;
        self.stats.messages_received += 1;
        let rid = m.rid;
        let home_side = matches!(
            m.kind,
            Kind::MapReq
                | Kind::ReadReq
                | Kind::WriteReq
                | Kind::InvAck
                | Kind::RecallData
                | Kind::Flush
                | Kind::Drop
                | Kind::Delete
        );
        if home_side && rid.home() != self.me {
            return Err(RegionError::Unexpected {
                from,
                rid,
                kind: m.kind.name(),
            });
        }
        match m.kind {
            Kind::MapReq => {
                let reply = match self.dirs.get(&rid) {
                    Some(d) => {
                        let mut r = Msg::new(Kind::MapInfo, rid);
                        r.arg = d.data.len() as u64;
                        r
                    }
                    None => {
                        let mut r = Msg::new(Kind::Unknown, rid);
                        r.arg = Kind::MapReq as u64;
                        r
                    }
                };
                self.send(from, reply);
            }
            Kind::ReadReq | Kind::WriteReq => {
                let want = if m.kind == Kind::ReadReq {
                    Want::Read
                } else {
                    Want::Write
                };
                match self.dirs.get_mut(&rid) {
                    None => {
                        let mut r = Msg::new(Kind::Unknown, rid);
                        r.arg = m.kind as u64;
                        self.send(from, r);
                    }
                    Some(d) => {
                        d.queue.push_back((from, want));
                        self.serve(rid, mem);
                    }
                }
            }
            Kind::InvAck => {
                if let Some(t) = self.dirs.get_mut(&rid).and_then(|d| d.txn.as_mut()) {
                    t.acks.remove(&from);
                }
                self.serve(rid, mem);
            }
            Kind::RecallData => {
                if let Some(d) = self.dirs.get_mut(&rid) {
                    let had = m.data.is_some();
                    if let Some(data) = m.data {
                        check_len(from, data, d.data.len())?;
                        d.data.copy_from_slice(data);
                        d.stale = false;
                    }
                    if d.owner == Some(from) {
                        d.owner = None;
                    }
                    if let Some(t) = d.txn.as_mut().filter(|t| t.recall == Some(from)) {
                        t.recall = None;
                        if t.want == Want::Read && had {
                            d.sharers.insert(from);
                        }
                    }
                }
                self.serve(rid, mem);
            }
            Kind::Flush => {
                if let (Some(d), Some(data)) = (self.dirs.get_mut(&rid), m.data) {
                    if d.owner == Some(from) {
                        check_len(from, data, d.data.len())?;
                        d.data.copy_from_slice(data);
                        d.stale = false;
                        d.owner = None;
                    }
                }
            }
            Kind::Drop => {
                if let Some(d) = self.dirs.get_mut(&rid) {
                    d.sharers.remove(&from);
                }
            }
            Kind::Delete => {
                // Deleting an unknown region (twice, or never created) is a no-op here.
                let _ = self.delete_home(rid);
            }
            Kind::MapInfo => {
                let waiters = self.map_waiters.remove(&rid).unwrap_or_default();
                if waiters.is_empty() {
                    return Ok(());
                }
                let n = waiters.len() as u32;
                match self.cache.get_mut(&rid) {
                    Some(c) => c.mapped += n,
                    None => {
                        self.new_entry(rid, m.arg, mem);
                        if let Some(c) = self.cache.get_mut(&rid) {
                            c.mapped = n;
                        }
                    }
                }
                for w in waiters {
                    self.complete(w, Ok(m.arg));
                }
            }
            Kind::ReadData | Kind::WriteGrant => self.on_grant(from, m, mem)?,
            Kind::Inv | Kind::Recall => match self.cache.get_mut(&rid) {
                Some(c) => {
                    c.deferred.push_back((m.kind, m.arg));
                    self.answer_deferred(rid, mem);
                    self.pump(rid, mem);
                }
                None if m.kind == Kind::Inv => self.send(from, Msg::new(Kind::InvAck, rid)),
                None => self.send(from, Msg::new(Kind::RecallData, rid)),
            },
            Kind::Gone => self.drop_entry(rid, mem),
            Kind::Unknown => {
                if m.arg == Kind::MapReq as u64 {
                    for w in self.map_waiters.remove(&rid).unwrap_or_default() {
                        self.complete(w, Err(RegionError::Unknown(rid)));
                    }
                } else {
                    self.drop_entry(rid, mem);
                }
            }
        }
        Ok(())
    }

    /// A read copy or the exclusive copy arrived.
    fn on_grant(
        &mut self,
        from: NodeId,
        m: Msg,
        mem: &mut dyn RegionMemory,
    ) -> Result<(), RegionError> {
        let rid = m.rid;
        let unexpected = RegionError::Unexpected {
            from,
            rid,
            kind: m.kind.name(),
        };
        let Some(c) = self.cache.get_mut(&rid) else {
            return Ok(()); // deleted here meanwhile
        };
        let want = if m.kind == Kind::ReadData {
            Want::Read
        } else {
            Want::Write
        };
        if c.pending != Some(want) {
            return Err(unexpected);
        }
        if let Some(data) = m.data {
            check_len(from, data, c.size as usize)?;
            mem.install(rid, data);
        } else if want == Want::Read || c.state == St::Invalid {
            return Err(unexpected);
        }
        c.pending = None;
        c.state = if want == Want::Read {
            St::Shared
        } else {
            St::Exclusive
        };
        self.pump(rid, mem);
        Ok(())
    }

    /// Called when a bracket ended: answer what waited for it, then start waiting brackets.
    fn after_bracket(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) {
        self.answer_deferred(rid, mem);
        self.pump(rid, mem);
    }

    /// Answer the invalidations and recalls the brackets in progress allow.
    fn answer_deferred(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) {
        loop {
            let Some(c) = self.cache.get_mut(&rid) else {
                return;
            };
            let Some(&(kind, arg)) = c.deferred.front() else {
                return;
            };
            let home = rid.home();
            if kind == Kind::Inv {
                if c.readers > 0 || c.writer {
                    return;
                }
                c.deferred.pop_front();
                if c.state == St::Shared {
                    c.state = St::Invalid;
                    self.stats.invalidations += 1;
                    if let Some(d) = self.dirs.get_mut(&rid) {
                        catch_up(d, rid, mem);
                    }
                }
                self.send(home, Msg::new(Kind::InvAck, rid));
            } else {
                let for_write = arg == 1;
                if c.state != St::Exclusive {
                    c.deferred.pop_front();
                    self.send(home, Msg::new(Kind::RecallData, rid));
                    continue;
                }
                if c.writer || (for_write && c.readers > 0) {
                    return;
                }
                c.deferred.pop_front();
                c.state = if for_write { St::Invalid } else { St::Shared };
                self.stats.recalls += 1;
                let size = c.size as usize;
                let msg = Msg::encode_from(Kind::RecallData, rid, size, |out| {
                    mem.append_to(rid, size, out)
                });
                self.push_send(home, Kind::RecallData, msg);
            }
        }
    }

    /// Start the waiting brackets that can start, in order; ask the home for what is missing.
    fn pump(&mut self, rid: RegionId, _mem: &mut dyn RegionMemory) {
        loop {
            let Some(c) = self.cache.get_mut(&rid) else {
                return;
            };
            // Remote requests waiting for our brackets go first (no starvation).
            if !c.deferred.is_empty() {
                return;
            }
            let Some(&(want, w, waited)) = c.queue.front() else {
                return;
            };
            let hit = !waited;
            match want {
                Want::Read => {
                    if c.writer {
                        return;
                    }
                    if c.state == St::Invalid {
                        if c.pending.is_none() {
                            c.pending = Some(Want::Read);
                            c.queue.iter_mut().for_each(|q| q.2 = true);
                            self.stats.read_misses += 1;
                            self.send(rid.home(), Msg::new(Kind::ReadReq, rid));
                        }
                        return;
                    }
                    c.readers += 1;
                    c.queue.pop_front();
                    if hit {
                        self.stats.read_hits += 1;
                    }
                }
                Want::Write => {
                    if c.writer || c.readers > 0 {
                        return;
                    }
                    if c.state != St::Exclusive {
                        if c.pending.is_none() {
                            c.pending = Some(Want::Write);
                            c.queue.iter_mut().for_each(|q| q.2 = true);
                            self.stats.write_misses += 1;
                            self.send(rid.home(), Msg::new(Kind::WriteReq, rid));
                        }
                        return;
                    }
                    c.writer = true;
                    c.queue.pop_front();
                    if hit {
                        self.stats.write_hits += 1;
                    }
                }
            }
            self.complete(w, Ok(0));
        }
    }

    /// The home serves its waiting requests for `rid`, one at a time.
    fn serve(&mut self, rid: RegionId, mem: &mut dyn RegionMemory) {
        loop {
            let Some(d) = self.dirs.get_mut(&rid) else {
                return;
            };
            if let Some(t) = &d.txn {
                if !t.acks.is_empty() || t.recall.is_some() {
                    return;
                }
                // Every answer is in: grant.
                let Some(t) = d.txn.take() else { return };
                let (kind, with_data) = match t.want {
                    Want::Read => {
                        d.sharers.insert(t.req);
                        (Kind::ReadData, true)
                    }
                    Want::Write => {
                        d.sharers.clear();
                        d.owner = Some(t.req);
                        (Kind::WriteGrant, !t.had_copy)
                    }
                };
                let bytes = if with_data && d.stale {
                    // The home's own Shared copy is current: one copy into the message.
                    let len = d.data.len();
                    Msg::encode_from(kind, rid, len, |out| mem.append_to(rid, len, out))
                } else {
                    let mut m = Msg::new(kind, rid);
                    if with_data {
                        m.data = Some(&d.data);
                    }
                    m.encode()
                };
                self.push_send(t.req, kind, bytes);
                continue;
            }
            let Some((req, want)) = d.queue.pop_front() else {
                return;
            };
            let mut t = Txn {
                req,
                want,
                acks: BTreeSet::new(),
                recall: None,
                had_copy: d.owner.is_none() && d.sharers.contains(&req),
            };
            let mut out = Vec::new();
            let for_write = want == Want::Write;
            // The home's own copy answers at once when no bracket or message of it is in the
            // way (no message to itself).
            let local = self.cache.get_mut(&rid).filter(|c| {
                c.pending.is_none()
                    && c.deferred.is_empty()
                    && !c.writer
                    && (c.readers == 0 || !for_write)
            });
            if let Some(c) = local {
                if d.owner == Some(self.me) && req != self.me && c.state == St::Exclusive {
                    d.owner = None;
                    self.stats.recalls += 1;
                    if for_write {
                        mem.read_into(rid, &mut d.data);
                        d.stale = false;
                        c.state = St::Invalid;
                    } else {
                        // The home's copy stays (Shared) and current: no copy into `data`.
                        d.stale = true;
                        c.state = St::Shared;
                        d.sharers.insert(self.me);
                    }
                } else if for_write
                    && req != self.me
                    && d.owner.is_none()
                    && c.state == St::Shared
                    && d.sharers.remove(&self.me)
                {
                    catch_up(d, rid, mem);
                    c.state = St::Invalid;
                    self.stats.invalidations += 1;
                }
            }
            if let Some(o) = d.owner.filter(|o| *o != req) {
                t.recall = Some(o);
                let mut m = Msg::new(Kind::Recall, rid);
                m.arg = u64::from(want == Want::Write);
                out.push((o, m));
            }
            if want == Want::Write {
                for &s in d.sharers.iter().filter(|s| **s != req) {
                    t.acks.insert(s);
                    out.push((s, Msg::new(Kind::Inv, rid)));
                }
            }
            d.txn = Some(t);
            for (to, m) in out {
                if m.kind == Kind::Inv {
                    self.stats.home_invalidations_sent += 1;
                } else {
                    self.stats.home_recalls_sent += 1;
                }
                self.send(to, m);
            }
        }
    }

    fn send(&mut self, to: NodeId, m: Msg) {
        let msg = m.encode();
        self.push_send(to, m.kind, msg);
    }

    fn push_send(&mut self, to: NodeId, kind: Kind, msg: Vec<u8>) {
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += msg.len() as u64;
        *self.stats.sent.entry(kind.name()).or_default() += 1;
        self.actions.push_back(Action::Send { to, msg });
    }

    fn complete(&mut self, waiter: Waiter, result: Result<u64, RegionError>) {
        self.actions.push_back(Action::Complete { waiter, result });
    }
}

fn kind_of(w: Want) -> Kind {
    match w {
        Want::Read => Kind::ReadReq,
        Want::Write => Kind::WriteReq,
    }
}

/// Bring the home copy up to date from the home node's own (Shared, so unwritten) copy
/// before that copy stops being Shared.
fn catch_up(d: &mut Dir, rid: RegionId, mem: &dyn RegionMemory) {
    if d.stale {
        mem.read_into(rid, &mut d.data);
        d.stale = false;
    }
}

fn check_len(from: NodeId, data: &[u8], size: usize) -> Result<(), RegionError> {
    if data.len() == size {
        Ok(())
    } else {
        Err(RegionError::Malformed {
            from,
            what: "region data of the wrong size",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain per-node copies (what the runtime's buffers are).
    #[derive(Default)]
    struct Mem(HashMap<RegionId, Vec<u8>>);

    impl RegionMemory for Mem {
        fn ensure(&mut self, rid: RegionId, size: usize) {
            self.0.entry(rid).or_insert_with(|| vec![0; size]);
        }
        fn install(&mut self, rid: RegionId, data: &[u8]) {
            if let Some(c) = self.0.get_mut(&rid) {
                c.copy_from_slice(data);
            }
        }
        fn read_into(&self, rid: RegionId, out: &mut [u8]) {
            if let Some(c) = self.0.get(&rid) {
                out.copy_from_slice(c);
            }
        }
        fn forget(&mut self, rid: RegionId) {
            self.0.remove(&rid);
        }
    }

    /// Deliver every message until the two nodes are quiet; the completed waiters.
    fn run(nodes: &mut [(Regions, Mem)]) -> Vec<(Waiter, Result<u64, RegionError>)> {
        let mut done = Vec::new();
        loop {
            let mut sends = Vec::new();
            for (i, (r, _)) in nodes.iter_mut().enumerate() {
                while let Some(a) = r.poll_action() {
                    match a {
                        Action::Send { to, msg } => sends.push((NodeId(i as u16), to, msg)),
                        Action::Complete { waiter, result } => done.push((waiter, result)),
                    }
                }
            }
            if sends.is_empty() {
                return done;
            }
            for (from, to, msg) in sends {
                let (r, m) = &mut nodes[to.0 as usize];
                r.on_message(from, &msg, m).expect("well-formed message");
            }
        }
    }

    #[test]
    fn read_reply_from_the_homes_written_copy_and_catch_up() {
        let mut n: Vec<(Regions, Mem)> = (0..2)
            .map(|i| (Regions::new(NodeId(i), 2), Mem::default()))
            .collect();
        let rid = n[0].0.create(4);
        for (i, (r, m)) in n.iter_mut().enumerate() {
            r.map(i as Waiter, rid, m);
        }
        run(&mut n);
        // The home writes its copy.
        let (r, m) = &mut n[0];
        r.start_write(10, rid, m);
        assert!(run(&mut n).contains(&(10, Ok(0))));
        n[0].1 .0.insert(rid, vec![1, 2, 3, 4]);
        let (r, m) = &mut n[0];
        r.end_write(rid, m).expect("in a write bracket");
        // A remote read gets the written bytes straight from the home's copy.
        let (r, m) = &mut n[1];
        r.start_read(11, rid, m);
        assert!(run(&mut n).contains(&(11, Ok(0))));
        assert_eq!(n[1].1 .0[&rid], [1, 2, 3, 4]);
        assert!(n[0].0.dirs[&rid].stale);
        let (r, m) = &mut n[1];
        r.end_read(rid, m).expect("in a read bracket");
        r.flush(rid, m).expect("no bracket open");
        run(&mut n);
        n[1].1 .0.insert(rid, vec![0; 4]);
        // A remote write invalidates the home's copy: the home copy catches up first and the
        // grant carries the written bytes.
        let (r, m) = &mut n[1];
        r.start_write(12, rid, m);
        assert!(run(&mut n).contains(&(12, Ok(0))));
        assert_eq!(n[1].1 .0[&rid], [1, 2, 3, 4]);
        assert!(!n[0].0.dirs[&rid].stale);
        assert_eq!(n[0].0.dirs[&rid].data, [1, 2, 3, 4]);
    }
}
