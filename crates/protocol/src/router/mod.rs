//! The protocol router: any number of protocol cores side by side in one node, each owning
//! the pages of the allocations made under it, with no split of the address space.
//!
//! **Who follows which protocol.** Every allocation carries a [`Policy`]. The job has a
//! default (`SQUALL_PROTOCOL`, `SQUALL_PUSH_UPDATES`); a page no allocation says otherwise
//! about follows it. An allocation under any other policy is *announced*: the allocating
//! node records the range, sends `Announce` to every other node and completes the
//! allocation (`Action::Announced`) only when every node has acknowledged it. Every other
//! node learns the address only after the allocation returned (through memory, a message or
//! a synchronization that happens after it), so every node knows a page's policy before it
//! touches it, with no look-up on the fault path; allocations under the default policy cost
//! nothing. A page's policy never changes: the heap never hands a page range out twice and
//! keeps size-class pages per policy, so a freed range is never reused under another
//! policy and no node's map goes stale.
//!
//! **Big allocations** come from the global part of the range (`HeapLayout::global_start`),
//! whose pages are managed in stripes by every node: the claimant sends `Claim` (range,
//! policy, placement) to every other node, each registers the allocation with the core of its
//! policy, so it can answer home look-ups for its stripes as the placement says, and acks;
//! the allocation completes (`Action::Announced`) when every node has.
//!
//! **Messages** carry the index of their core in front (the router's own: `0xff`).
//! **Faults and atomics** go to the core of their page. **Synchronization hooks** reach
//! every core engaged on this node (the default core always; another once it has had an
//! allocation, fault, message or synchronization info here): infos are framed one part per core (`wire`), a release completes
//! when every engaged core's has. A core not engaged here has no copies and no writes, so
//! it has nothing to release or to learn; it is engaged by the first info that carries a
//! part for it.
//!
//! Owns: the routing, the page → policy map, announcements and claims, the framing. Must not touch:
//! the cores' state (they are driven only through `Protocol`).

mod policy;
mod wire;

pub use policy::{Coherence, Policy, PolicyMap, MAX_UNIT_PAGES};

use crate::{Action, AtomicCall, ProtoError, ProtoStats, Protocol, ProtocolKind};
use squall_core::{AllocInfo, Consistency, HeapLayout, NodeId, PageId, Placement};
use std::collections::{HashMap, VecDeque};
use wire::{core_index, frame_infos, split_infos, RouterMsg, ROUTER_TAG};

/// The cores of every protocol of a node behind one [`Protocol`].
pub struct Router<P: ?Sized + Protocol = dyn Protocol> {
    me: NodeId,
    layout: HeapLayout,
    /// One core per protocol, at its [`ProtocolKind::index`].
    cores: Vec<Box<P>>,
    engaged: Vec<bool>,
    default: Coherence,
    map: PolicyMap,
    actions: VecDeque<Action>,
    /// Releases in progress: token → cores not done yet.
    releases: HashMap<u64, usize>,
    /// Announcements in progress: token → acks still to come.
    announcing: HashMap<u64, usize>,
    stats: ProtoStats,
}

impl<P: ?Sized + Protocol> Router<P> {
    /// The router of node `me` over `cores`, one per protocol in [`ProtocolKind::ALL`] order;
    /// pages no allocation says otherwise about follow `default`.
    pub fn new(
        me: NodeId,
        layout: HeapLayout,
        default: Coherence,
        cores: Vec<Box<P>>,
    ) -> Result<Self, ProtoError> {
        default.check()?;
        // The built-in cores first; user protocols' cores (`ProtocolKind::User`) after them.
        let names: Vec<&str> = cores.iter().map(|c| c.name()).collect();
        let want: Vec<&str> = ProtocolKind::ALL.iter().map(|k| k.name()).collect();
        if names.get(..want.len()) != Some(&want[..]) || cores.len() >= usize::from(ROUTER_TAG) {
            return Err(ProtoError::BadPolicy {
                why: format!("router cores {names:?}, expected {want:?} and then user protocols"),
            });
        }
        if let ProtocolKind::User(_) = default.protocol {
            return Err(ProtoError::BadPolicy {
                why: "a user protocol cannot be the job's default".into(),
            });
        }
        // The default core is engaged from the start on every node: pages follow it unless
        // told otherwise, so it hears every hook as a lone core would.
        let mut engaged = vec![false; cores.len()];
        engaged[core_index(default.protocol)] = true;
        Ok(Router {
            me,
            layout,
            cores,
            engaged,
            default,
            map: PolicyMap::default(),
            actions: VecDeque::new(),
            releases: HashMap::new(),
            announcing: HashMap::new(),
            stats: ProtoStats::default(),
        })
    }

    /// The policy pages follow unless their allocation says otherwise.
    pub fn default_coherence(&self) -> Coherence {
        self.default
    }

    /// The coherence `page` follows on this node.
    pub fn coherence_of(&self, page: PageId) -> Coherence {
        self.map.get(page).unwrap_or(self.default)
    }

    /// Allocations recorded under a policy other than the default.
    pub fn announced_ranges(&self) -> usize {
        self.map.len()
    }

    fn core_of(&mut self, page: PageId) -> usize {
        let i = core_index(self.coherence_of(page).protocol);
        self.engaged[i] = true;
        i
    }

    fn send(&mut self, to: NodeId, m: RouterMsg) {
        let bytes = m.encode();
        self.stats.count_send(m.name(), bytes.len());
        self.actions.push_back(Action::Send { to, msg: bytes });
    }

    /// `policy`'s coherence and the index of its core, refused when the policy is invalid or
    /// names a protocol that is not registered.
    fn checked_policy(&self, policy: &Policy) -> Result<(Coherence, usize), ProtoError> {
        policy.check()?;
        let c = policy.coherence();
        let i = core_index(c.protocol);
        if i >= self.cores.len() {
            return Err(ProtoError::BadPolicy {
                why: format!("{:?}: no such protocol is registered", c.protocol),
            });
        }
        Ok((c, i))
    }

    /// Sends `msg()` to every other node, expecting an ack from each before
    /// `Action::Announced { token }`. Returns true when there is no other node (nothing to
    /// wait for).
    fn announce(&mut self, token: u64, msg: impl Fn() -> RouterMsg) -> bool {
        let peers: Vec<NodeId> = (0..self.layout.nodes)
            .map(NodeId)
            .filter(|&n| n != self.me)
            .collect();
        if peers.is_empty() {
            return true;
        }
        self.announcing.insert(token, peers.len());
        for to in peers {
            self.send(to, msg());
        }
        false
    }

    /// This node (the manager of `alloc`'s pages) allocated them under `policy`. Returns
    /// `Ok(true)` when every node can touch them now, `Ok(false)` when they were announced:
    /// `Action::Announced { token }` follows once every node has recorded them.
    pub fn register_with(
        &mut self,
        alloc: AllocInfo,
        policy: &Policy,
        token: u64,
    ) -> Result<bool, ProtoError> {
        let (c, i) = self.checked_policy(policy)?;
        self.engaged[i] = true;
        self.cores[i].register_allocation(AllocInfo {
            placement: policy.placement,
            ..alloc
        });
        if c == self.default {
            return Ok(true);
        }
        self.map.insert(alloc.first, alloc.pages, c);
        self.cores[i].apply_policy(alloc.first, alloc.pages, c);
        Ok(self.announce(token, || RouterMsg::Announce {
            token,
            first: alloc.first,
            pages: alloc.pages,
            coherence: c,
        }))
    }

    /// This node claimed `alloc` in the global part of the range under `policy` (node 0
    /// decided the pages). Every node manages its stripes of the claim, so every node
    /// registers it: the claim is sent to every other node (even under the default policy),
    /// and `Action::Announced { token }` follows once every node has recorded it. Returns
    /// `Ok(true)` when there is no other node.
    pub fn register_claim(
        &mut self,
        alloc: AllocInfo,
        policy: &Policy,
        token: u64,
    ) -> Result<bool, ProtoError> {
        let (c, _) = self.checked_policy(policy)?;
        let alloc = AllocInfo {
            placement: policy.placement,
            ..alloc
        };
        self.record_claim(alloc, c);
        Ok(self.announce(token, || RouterMsg::Claim {
            token,
            first: alloc.first,
            pages: alloc.pages,
            coherence: c,
            placement: alloc.placement,
        }))
    }

    /// Register a claim of the global part with its core (and its policy, if not the default).
    fn record_claim(&mut self, alloc: AllocInfo, c: Coherence) {
        let i = core_index(c.protocol);
        self.engaged[i] = true;
        self.cores[i].register_allocation(alloc);
        if c != self.default {
            self.map.insert(alloc.first, alloc.pages, c);
            self.cores[i].apply_policy(alloc.first, alloc.pages, c);
        }
    }

    fn on_router_message(&mut self, from: NodeId, bytes: &[u8]) -> Result<(), ProtoError> {
        match RouterMsg::decode(from, self.layout.total_pages, bytes)? {
            RouterMsg::Announce {
                token,
                first,
                pages,
                coherence,
            } => {
                if self.layout.manager_of(first) != from {
                    return Err(ProtoError::Unexpected {
                        from,
                        page: first,
                        why: "an announcement of pages outside the sender's arena".into(),
                    });
                }
                let i = core_index(coherence.protocol);
                if i >= self.cores.len() {
                    return Err(ProtoError::Unexpected {
                        from,
                        page: first,
                        why: format!(
                            "an allocation under {:?}, not registered here",
                            coherence.protocol
                        ),
                    });
                }
                self.map.insert(first, pages, coherence);
                self.engaged[i] = true;
                self.cores[i].apply_policy(first, pages, coherence);
                self.send(from, RouterMsg::Ack { token });
            }
            RouterMsg::Claim {
                token,
                first,
                pages,
                coherence,
                placement,
            } => {
                if !self.layout.in_global_part(first) {
                    return Err(ProtoError::Unexpected {
                        from,
                        page: first,
                        why: "a claim of pages outside the global part of the range".into(),
                    });
                }
                if core_index(coherence.protocol) >= self.cores.len() {
                    return Err(ProtoError::Unexpected {
                        from,
                        page: first,
                        why: format!(
                            "a claim under {:?}, not registered here",
                            coherence.protocol
                        ),
                    });
                }
                if let Placement::Node(n) = placement {
                    if n.0 >= self.layout.nodes {
                        return Err(ProtoError::Unexpected {
                            from,
                            page: first,
                            why: format!("a claim placed on {n}, not in the job"),
                        });
                    }
                }
                self.record_claim(
                    AllocInfo {
                        first,
                        pages,
                        placement,
                    },
                    coherence,
                );
                self.send(from, RouterMsg::Ack { token });
            }
            RouterMsg::Ack { token } => {
                let Some(left) = self.announcing.get_mut(&token) else {
                    return Err(ProtoError::Malformed {
                        from,
                        why: format!("an ack of announcement {token}, which is not in progress"),
                    });
                };
                *left -= 1;
                if *left == 0 {
                    self.announcing.remove(&token);
                    self.actions.push_back(Action::Announced { token });
                }
            }
        }
        Ok(())
    }

    fn engaged(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.cores.len()).filter(|&i| self.engaged[i])
    }

    /// The engaged cores' infos, framed.
    fn framed(&mut self, info: impl Fn(&mut P) -> Vec<u8>) -> Vec<u8> {
        let parts: Vec<(usize, Vec<u8>)> = (0..self.cores.len())
            .filter(|&i| self.engaged[i])
            .map(|i| (i, info(&mut self.cores[i])))
            .collect();
        frame_infos(parts)
    }

    fn parts<'b>(&mut self, info: &'b [u8]) -> Vec<(usize, &'b [u8])> {
        match split_infos(info, self.cores.len()) {
            Some(p) => p,
            None => {
                self.stats.malformed_sync_info += 1;
                Vec::new()
            }
        }
    }
}

impl<P: ?Sized + Protocol> Consistency for Router<P> {
    fn acquire_info(&mut self) -> Vec<u8> {
        self.framed(|c| c.acquire_info())
    }

    fn grant_info(&mut self, acquirer_info: &[u8]) -> Vec<u8> {
        let theirs = self.parts(acquirer_info);
        let mine: Vec<usize> = self.engaged().collect();
        let parts: Vec<(usize, Vec<u8>)> = mine
            .into_iter()
            .map(|i| {
                let a = theirs
                    .iter()
                    .find(|(c, _)| *c == i)
                    .map_or(&[][..], |(_, b)| *b);
                (i, self.cores[i].grant_info(a))
            })
            .collect();
        frame_infos(parts)
    }

    fn apply_grant(&mut self, grant_info: &[u8]) {
        for (i, b) in self.parts(grant_info) {
            self.engaged[i] = true;
            self.cores[i].apply_grant(b);
        }
    }

    fn begin_release(&mut self, token: u64) -> bool {
        let mine: Vec<usize> = self.engaged().collect();
        let mut waiting = 0;
        for i in mine {
            if !self.cores[i].begin_release(token) {
                waiting += 1;
            }
        }
        if waiting == 0 {
            return true;
        }
        self.releases.insert(token, waiting);
        false
    }

    fn barrier_info(&mut self) -> Vec<u8> {
        self.framed(|c| c.barrier_info())
    }

    fn apply_barrier(&mut self, all: &[Vec<u8>]) {
        let split: Vec<Vec<(usize, Vec<u8>)>> = all
            .iter()
            .map(|info| {
                self.parts(info)
                    .into_iter()
                    .map(|(i, b)| (i, b.to_vec()))
                    .collect()
            })
            .collect();
        for i in 0..self.cores.len() {
            let parts: Vec<Vec<u8>> = split
                .iter()
                .flat_map(|p| p.iter().filter(|(c, _)| *c == i).map(|(_, b)| b.clone()))
                .collect();
            if self.engaged[i] || !parts.is_empty() {
                self.engaged[i] = true;
                self.cores[i].apply_barrier(&parts);
            }
        }
    }

    fn merge_barrier_infos(&mut self, infos: &[Vec<u8>]) -> Option<Vec<u8>> {
        // Per core: its parts of every info, merged by that core (one part passes as is).
        let mut split: Vec<Vec<Vec<u8>>> = vec![Vec::new(); self.cores.len()];
        for info in infos {
            let parts = split_infos(info, self.cores.len())?;
            for (i, b) in parts {
                split[i].push(b.to_vec());
            }
        }
        let mut merged = Vec::new();
        for (i, mut parts) in split.into_iter().enumerate() {
            let one = match parts.len() {
                0 => continue,
                1 => parts.pop()?,
                _ => self.cores[i].merge_barrier_infos(&parts)?,
            };
            merged.push((i, one));
        }
        Some(frame_infos(merged))
    }
}

impl<P: ?Sized + Protocol> Protocol for Router<P> {
    fn name(&self) -> &'static str {
        "router"
    }

    fn handle_fault(&mut self, page: PageId, write: bool) -> Result<(), ProtoError> {
        let i = self.core_of(page);
        self.cores[i].handle_fault(page, write)
    }

    fn handle_message(&mut self, from: NodeId, msg: &[u8]) -> Result<(), ProtoError> {
        match msg.split_first() {
            Some((&ROUTER_TAG, _)) => self.on_router_message(from, msg),
            Some((&t, rest)) if usize::from(t) < self.cores.len() => {
                let i = usize::from(t);
                self.engaged[i] = true;
                self.cores[i].handle_message(from, rest)
            }
            Some((t, _)) => Err(ProtoError::Malformed {
                from,
                why: format!("unknown protocol core {t}"),
            }),
            None => Err(ProtoError::Malformed {
                from,
                why: "empty protocol message".into(),
            }),
        }
    }

    /// Pages allocated under the default policy (with `alloc`'s placement).
    fn register_allocation(&mut self, alloc: AllocInfo) {
        let i = core_index(self.default.protocol);
        self.engaged[i] = true;
        self.cores[i].register_allocation(alloc);
    }

    fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.actions.pop_front() {
            return Some(a);
        }
        for i in 0..self.cores.len() {
            while let Some(a) = self.cores[i].poll_action() {
                match a {
                    Action::Send { to, msg } => {
                        let mut tagged = Vec::with_capacity(msg.len() + 1);
                        tagged.push(i as u8);
                        tagged.extend_from_slice(&msg);
                        return Some(Action::Send { to, msg: tagged });
                    }
                    Action::ReleaseDone { token } => {
                        let Some(left) = self.releases.get_mut(&token) else {
                            // A release this router did not start (none: every release
                            // enters through `begin_release`); pass it on.
                            return Some(Action::ReleaseDone { token });
                        };
                        *left -= 1;
                        if *left == 0 {
                            self.releases.remove(&token);
                            return Some(Action::ReleaseDone { token });
                        }
                    }
                    other => return Some(other),
                }
            }
        }
        None
    }

    fn atomic(
        &mut self,
        page: PageId,
        offset: usize,
        call: AtomicCall,
        token: u64,
    ) -> Result<(), ProtoError> {
        let i = self.core_of(page);
        self.cores[i].atomic(page, offset, call, token)
    }

    fn observe_atomic(&mut self, page: PageId, offset: usize, value: &[u8]) {
        let i = self.core_of(page);
        self.cores[i].observe_atomic(page, offset, value)
    }

    fn holds_writes_for_home(&self, page: PageId) -> bool {
        self.cores[core_index(self.coherence_of(page).protocol)].holds_writes_for_home(page)
    }

    fn apply_atomic_grant(&mut self, info: &[u8]) {
        for (i, b) in self.parts(info) {
            self.engaged[i] = true;
            self.cores[i].apply_atomic_grant(b);
        }
    }

    fn stats(&self) -> ProtoStats {
        let mut s = self.stats.clone();
        for c in &self.cores {
            s.merge(&c.stats());
        }
        s
    }

    fn set_ending(&mut self, ending: bool) {
        for c in &mut self.cores {
            c.set_ending(ending);
        }
    }
    fn set_profiling(&mut self) {
        for c in &mut self.cores {
            c.set_profiling();
        }
    }
    /// The profile of the first core that keeps one (`hlrc`; `sc` keeps none).
    fn sharing_profile(&self) -> Option<crate::SharingProfile> {
        self.cores.iter().find_map(|c| c.sharing_profile())
    }
}

#[cfg(test)]
mod tests;
