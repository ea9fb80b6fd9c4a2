//! `sc`: sequentially consistent single-writer/multiple-reader invalidation (IVY/MSI) with the
//! directory at each page's home.
//!
//! Owns: the requester side (one outstanding request per page) and the home directory
//! (owner, sharers, one transaction at a time per page with a FIFO of waiting requests); the
//! message encoding is in `msg`. Must not touch: sockets, clocks, threads; no other
//! protocol's module (shared helpers come from `crate::shared`).
//!
//! Races (DSM/IP §3.2.3, Figure 7) and how they are handled:
//! * A write fault and a write by another node's thread cannot interleave with an access check:
//!   the MMU checks access and performs the store atomically, and a thread resumed after a grant
//!   retries its access; if an invalidation took the page in between, it simply faults again.
//!   So a write happens exactly once and only while the node holds the page in M.
//! * Upgrade crossing an invalidation: a sharer asks to write while the home is invalidating it
//!   for another writer. The home serves one transaction per page at a time; the sharer drops its
//!   copy and acks; when the home reaches the upgrade the sharer is no longer in the sharer set,
//!   so the grant carries the page data.
//! * Requests racing with an ownership transfer: requests that arrive while a transaction is in
//!   progress are queued at the home. A recall is only ever sent after the grant that made the
//!   node owner, on the same FIFO home→owner channel, so the owner always knows it owns the page
//!   when the recall arrives.
//! * Duplicate faults on a page with a request outstanding send nothing.

mod msg;

use crate::shared::atomic::{check_atomic, AtomicInfos};
use crate::shared::home::{check_page, HomeDirectory, HomeRef, Lookup};
use crate::{Action, AtomicCall, ProtoError, ProtoStats, Protocol};
use msg::Msg;
use squall_core::{
    Access, AllocInfo, Consistency, HeapLayout, NodeId, PageId, PageMemory, PAGE_SIZE,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A request the home directory serves.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Read(NodeId),
    Write(NodeId),
    Atomic {
        from: NodeId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    },
}

#[derive(Debug, Default)]
struct DirEntry {
    /// The node holding the page in M (may be the home itself).
    owner: Option<NodeId>,
    /// Remote nodes holding a read-only copy (the home's own copy is tracked by its access).
    sharers: BTreeSet<NodeId>,
    /// The transaction in progress and the acks it still waits for.
    busy: Option<(Req, u32)>,
    queue: VecDeque<Req>,
}

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

/// The `sc` core of one node.
pub struct Sc<M: PageMemory> {
    mem: M,
    me: NodeId,
    layout: HeapLayout,
    dir: HomeDirectory,
    actions: VecDeque<Action>,
    stats: ProtoStats,
    /// Requester side: the page has a request outstanding.
    pending: BTreeSet<PageId>,
    resolving: BTreeMap<PageId, Vec<Deferred>>,
    /// Home side.
    entries: BTreeMap<PageId, DirEntry>,
    atomics_out: BTreeSet<u64>,
    /// Release infos kept at the atomic locations this node is the home of.
    atomic_infos: AtomicInfos,
}

impl<M: PageMemory> Sc<M> {
    pub fn new(mem: M, me: NodeId, layout: HeapLayout) -> Self {
        Sc {
            mem,
            me,
            layout,
            dir: HomeDirectory::new(me, layout),
            actions: VecDeque::new(),
            stats: ProtoStats::default(),
            pending: BTreeSet::new(),
            resolving: BTreeMap::new(),
            entries: BTreeMap::new(),
            atomics_out: BTreeSet::new(),
            atomic_infos: AtomicInfos::default(),
        }
    }

    fn send(&mut self, to: NodeId, msg: Msg) {
        let bytes = msg.encode();
        self.stats.count_send(msg.kind(), bytes.len());
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    fn read(&self, page: PageId) -> Vec<u8> {
        let mut buf = vec![0u8; PAGE_SIZE];
        self.mem.read_page(page, &mut buf);
        buf
    }

    fn resolve(&mut self, page: PageId, work: Deferred) -> Result<Option<NodeId>, ProtoError> {
        match self.dir.resolve(&mut self.resolving, page, work)? {
            Lookup::Known(h) | Lookup::Managed(h) => Ok(Some(h.node)),
            Lookup::Waiting => Ok(None),
            Lookup::Ask(mgr) => {
                self.send(mgr, Msg::HomeQuery { page });
                Ok(None)
            }
        }
    }

    fn fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        let acc = self.mem.access(page);
        if acc == Access::ReadWrite || (acc == Access::Read && !write) {
            self.actions.push_back(Action::Resume { page });
            return Ok(());
        }
        if self.pending.contains(&page) {
            // The thread re-faults after the outstanding request's Resume if it needs more.
            return Ok(());
        }
        let Some(home) = self.resolve(page, Deferred::Fault { write })? else {
            return Ok(());
        };
        self.pending.insert(page);
        if home != self.me {
            self.stats.page_fetches += 1;
        }
        if home == self.me {
            let req = if write {
                Req::Write(self.me)
            } else {
                Req::Read(self.me)
            };
            self.submit(page, req);
        } else {
            self.send(home, Msg::Req { page, write });
        }
        Ok(())
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
        if home == self.me {
            self.submit(
                page,
                Req::Atomic {
                    from: self.me,
                    offset,
                    call,
                    token,
                },
            );
        } else {
            self.atomics_out.insert(token);
            self.send(
                home,
                Msg::Atomic {
                    page,
                    offset: offset as u16,
                    call,
                    token,
                },
            );
        }
        Ok(())
    }

    /// Home side: queue a request and serve it when the page's directory entry is free.
    fn submit(&mut self, page: PageId, req: Req) {
        if self.dir.cached(page).is_none() {
            // Requests reach only the page's home: this node is it.
            self.dir.learn(
                page,
                HomeRef {
                    node: self.me,
                    epoch: 0,
                },
            );
        }
        self.entries.entry(page).or_default().queue.push_back(req);
        self.process(page);
    }

    fn process(&mut self, page: PageId) {
        loop {
            let e = self.entries.entry(page).or_default();
            if e.busy.is_some() {
                return;
            }
            let Some(req) = e.queue.pop_front() else {
                return;
            };
            let acks = self.start(page, &req);
            if acks == 0 {
                self.finish(page, req);
            } else {
                self.entries.entry(page).or_default().busy = Some((req, acks));
            }
        }
    }

    /// Begin a transaction: send recalls/invalidations; returns how many answers it awaits.
    fn start(&mut self, page: PageId, req: &Req) -> u32 {
        let me = self.me;
        let (owner, sharers) = {
            let e = self.entries.entry(page).or_default();
            (e.owner, e.sharers.clone())
        };
        match *req {
            Req::Read(x) => match owner {
                Some(o) if o == x => 0,
                Some(o) if o == me => {
                    self.mem.set_access(page, Access::Read);
                    self.entries.entry(page).or_default().owner = None;
                    0
                }
                Some(o) => {
                    self.send(
                        o,
                        Msg::Recall {
                            page,
                            invalidate: false,
                        },
                    );
                    1
                }
                None => 0,
            },
            Req::Write(_) | Req::Atomic { .. } => {
                let x = match *req {
                    Req::Write(x) => Some(x),
                    _ => None,
                };
                let mut acks = 0;
                match owner {
                    Some(o) if Some(o) == x => {}
                    Some(o) if o == me => {
                        let acc = if x.is_some() {
                            Access::None
                        } else {
                            Access::Read
                        };
                        self.mem.set_access(page, acc);
                        self.entries.entry(page).or_default().owner = None;
                    }
                    Some(o) => {
                        self.send(
                            o,
                            Msg::Recall {
                                page,
                                invalidate: true,
                            },
                        );
                        acks += 1;
                    }
                    None => {}
                }
                for s in sharers {
                    if Some(s) != x {
                        self.send(s, Msg::Inv { page });
                        acks += 1;
                    }
                }
                if x.is_some_and(|x| x != me) && self.mem.access(page) != Access::None {
                    // The home's own copy goes stale once x writes.
                    self.mem.set_access(page, Access::None);
                    self.stats.invalidations += 1;
                }
                acks
            }
        }
    }

    fn finish(&mut self, page: PageId, req: Req) {
        let me = self.me;
        match req {
            Req::Read(x) => {
                if x == me {
                    if self.mem.access(page) == Access::None {
                        self.mem.set_access(page, Access::Read);
                    }
                    self.pending.remove(&page);
                    self.actions.push_back(Action::Resume { page });
                } else {
                    let data = self.read(page);
                    self.entries.entry(page).or_default().sharers.insert(x);
                    self.send(
                        x,
                        Msg::Grant {
                            page,
                            write: false,
                            data: Some(data),
                        },
                    );
                }
            }
            Req::Write(x) => {
                let e = self.entries.entry(page).or_default();
                let had_copy = e.sharers.contains(&x) || e.owner == Some(x);
                e.sharers.clear();
                e.owner = Some(x);
                if x == me {
                    self.mem.set_access(page, Access::ReadWrite);
                    self.pending.remove(&page);
                    self.actions.push_back(Action::Resume { page });
                } else {
                    let data = if had_copy {
                        None
                    } else {
                        Some(self.read(page))
                    };
                    self.send(
                        x,
                        Msg::Grant {
                            page,
                            write: true,
                            data,
                        },
                    );
                }
            }
            Req::Atomic {
                from,
                offset,
                call,
                token,
            } => {
                let (old, _, infos) = self.atomic_infos.exec(&self.mem, page, offset, &call, from);
                let e = self.entries.entry(page).or_default();
                e.sharers.clear();
                e.owner = None;
                if from == me {
                    self.actions
                        .push_back(Action::AtomicDone { token, old, infos });
                } else {
                    self.send(from, Msg::AtomicReply { token, old, infos });
                }
            }
        }
        self.entries.entry(page).or_default().busy = None;
    }

    fn answer(
        &mut self,
        from: NodeId,
        page: PageId,
        data: Option<Vec<u8>>,
    ) -> Result<(), ProtoError> {
        let e = self.entries.entry(page).or_default();
        let Some((req, acks)) = e.busy.clone() else {
            return Err(ProtoError::Unexpected {
                from,
                page,
                why: "answer without a transaction in progress".into(),
            });
        };
        if let Some(d) = data {
            // A recalled owner's copy: the home's copy is current again.
            if e.owner != Some(from) {
                return Err(ProtoError::Unexpected {
                    from,
                    page,
                    why: "recall answer from a node that is not the owner".into(),
                });
            }
            e.owner = None;
            if matches!(req, Req::Read(_)) {
                e.sharers.insert(from);
            }
            self.mem.write_bytes(page, 0, &d);
        }
        let left = acks - 1;
        if left == 0 {
            self.finish(page, req);
            self.process(page);
        } else {
            self.entries.entry(page).or_default().busy = Some((req, left));
        }
        Ok(())
    }

    fn on_message(&mut self, from: NodeId, msg: Msg) -> Result<(), ProtoError> {
        match msg {
            Msg::HomeQuery { page } => {
                let home = self.dir.manager_lookup(page, from).map(|h| h.node);
                self.send(from, Msg::HomeReply { page, home });
            }
            Msg::HomeReply { page, home } => {
                let work = self.resolving.remove(&page).unwrap_or_default();
                let Some(h) = home else {
                    return Err(ProtoError::NotAllocated { page });
                };
                self.dir.learn(page, HomeRef { node: h, epoch: 0 });
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
            }
            Msg::Req { page, write } => {
                let req = if write {
                    Req::Write(from)
                } else {
                    Req::Read(from)
                };
                self.submit(page, req);
            }
            Msg::Grant { page, write, data } => {
                if !self.pending.remove(&page) {
                    return Err(ProtoError::Unexpected {
                        from,
                        page,
                        why: "grant without a request".into(),
                    });
                }
                if let Some(d) = data {
                    self.mem.write_bytes(page, 0, &d);
                } else if self.mem.access(page) == Access::None {
                    return Err(ProtoError::Unexpected {
                        from,
                        page,
                        why: "write grant without data for an invalid copy".into(),
                    });
                }
                let acc = if write {
                    Access::ReadWrite
                } else {
                    Access::Read
                };
                self.mem.set_access(page, acc);
                self.actions.push_back(Action::Resume { page });
            }
            Msg::Inv { page } => {
                self.mem.set_access(page, Access::None);
                self.stats.invalidations += 1;
                self.send(from, Msg::InvAck { page });
            }
            Msg::InvAck { page } => self.answer(from, page, None)?,
            Msg::Recall { page, invalidate } => {
                let acc = if invalidate {
                    Access::None
                } else {
                    Access::Read
                };
                // Take the access away first so no thread writes after the copy is taken.
                self.mem.set_access(page, acc);
                let data = self.read(page);
                if invalidate {
                    self.stats.invalidations += 1;
                }
                self.send(from, Msg::RecallAck { page, data });
            }
            Msg::RecallAck { page, data } => self.answer(from, page, Some(data))?,
            Msg::Atomic {
                page,
                offset,
                call,
                token,
            } => {
                check_atomic(page, usize::from(offset), call.width)?;
                self.submit(
                    page,
                    Req::Atomic {
                        from,
                        offset: usize::from(offset),
                        call,
                        token,
                    },
                );
            }
            Msg::AtomicReply { token, old, infos } => {
                if !self.atomics_out.remove(&token) {
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
}

impl<M: PageMemory> Consistency for Sc<M> {
    fn acquire_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn grant_info(&mut self, _acquirer_info: &[u8]) -> Vec<u8> {
        Vec::new()
    }
    fn apply_grant(&mut self, _grant_info: &[u8]) {}
    fn begin_release(&mut self, _token: u64) -> bool {
        // Every write is already visible: the single writer's copy is the only copy.
        true
    }
    fn barrier_info(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn apply_barrier(&mut self, _all: &[Vec<u8>]) {}
    fn merge_barrier_infos(&mut self, _infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        // Nothing travels with an sc barrier.
        Some(Vec::new())
    }
}

impl<M: PageMemory> Protocol for Sc<M> {
    fn name(&self) -> &'static str {
        "sc"
    }

    fn holds_writes_for_home(&self, _page: PageId) -> bool {
        // A single writer writes in place; its copy goes back whole when recalled.
        false
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        check_page(&self.layout, page)?;
        self.stats.count_fault(write);
        self.fault(page, write)
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
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
        check_page(&self.layout, page)?;
        check_atomic(page, offset, call.width)?;
        self.stats.atomics += 1;
        self.start_atomic(page, offset, call, token)
    }

    fn stats(&self) -> ProtoStats {
        self.stats.clone()
    }
}
