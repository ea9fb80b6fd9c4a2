//! Per-node barriers as a combining tree: arrivals go up a binomial tree rooted at the
//! barrier's manager, merging the nodes' consistency infos on the way; the root sends one
//! departure to every node. ⌈log2 N⌉ hops up plus one down: ⌈log2 N⌉+1 one-way hops on the
//! critical path, N−1 arrivals and N−1 departures (2(N−1) messages), the root receiving
//! ⌈log2 N⌉ of them instead of N−1.
//!
//! Infos: each arrival carries its subtree's infos, tagged with their node, and a node with
//! two or more of them asks the protocol to merge them (`Consistency::merge_barrier_infos`):
//! with a merging protocol (hlrc: vector-time maximum and union of write notices) every
//! message carries one info, so a departure carries what the job wrote, not N copies of it
//! (no O(N²) bytes). A protocol that does not merge gets all N infos in rank order, as before.
//!
//! Owns: the tree shape (`parent`, `children`), arrivals from children and the root's
//! departure in per-node mode (`NodeBarrier::own`, `NodeBarrier::up`). Must not touch:
//! total-count episodes (`barrier.rs`, a flat protocol with its own manager state), locks.
use crate::barrier::Phase;
use crate::core::SyncCore;
use crate::error::SyncError;
use crate::ids::BarrierId;
use crate::message::{Msg, MERGED};
use crate::BarrierCount;
use squall_core::{Consistency, NodeId};

/// An arrival from a child, kept until this node's own info joins it.
#[derive(Debug)]
pub(crate) struct UpArrival {
    epoch: u64,
    from: NodeId,
    hops: u8,
    infos: Vec<(u16, Vec<u8>)>,
}

/// The parent of `me` in the binomial tree of `nodes` nodes rooted at `root` (None: the root).
pub fn parent(me: NodeId, root: NodeId, nodes: u16) -> Option<NodeId> {
    let n = u32::from(nodes.max(1));
    let k = (u32::from(me.0) + n - u32::from(root.0) % n) % n;
    (k != 0).then(|| NodeId((((k & (k - 1)) + u32::from(root.0)) % n) as u16))
}

/// The children of `me` in the same tree, nearest subtree first.
pub fn children(me: NodeId, root: NodeId, nodes: u16) -> Vec<NodeId> {
    let n = u32::from(nodes.max(1));
    let k = (u32::from(me.0) + n - u32::from(root.0) % n) % n;
    let limit = if k == 0 {
        n.next_power_of_two()
    } else {
        k & k.wrapping_neg()
    };
    let mut out = Vec::new();
    let mut step = 1;
    while step < limit {
        if k + step < n {
            out.push(NodeId(((k + step + u32::from(root.0)) % n) as u16));
        }
        step <<= 1;
    }
    out
}

/// Depth of the tree of `nodes` nodes (the one-way hops of the longest chain of arrivals):
/// the most bits set in a relative rank below `nodes`, at most ⌈log2 nodes⌉ (exactly that
/// when `nodes` is a power of two).
pub fn depth(nodes: u16) -> u32 {
    (0..u32::from(nodes.max(1)))
        .map(u32::count_ones)
        .max()
        .unwrap_or(0)
}

impl SyncCore {
    /// Per-node mode: this node's release completed and `info` is its barrier info; it goes
    /// up with its children's arrivals once they are all here.
    pub(crate) fn tree_own_info(
        &mut self,
        cons: &mut dyn Consistency,
        barrier: u64,
        info: Vec<u8>,
    ) {
        let b = self.barriers.entry(barrier).or_default();
        b.phase = Phase::Sent;
        b.own = Some(info);
        self.tree_try_send(cons, barrier);
    }

    /// An arrival from a child (`BarrierArrive`).
    pub(crate) fn on_tree_arrive(
        &mut self,
        cons: &mut dyn Consistency,
        from: NodeId,
        barrier: u64,
        epoch: u64,
        hops: u8,
        infos: Vec<(u16, Vec<u8>)>,
    ) -> Result<(), SyncError> {
        let root = self.manager(barrier);
        let nodes = self.nodes;
        let is_child = children(self.me, root, nodes).contains(&from);
        let b = self.barriers.entry(barrier).or_default();
        let why = if !is_child {
            Some(format!(
                "an arrival from a node that is not a child of this one in the tree rooted at {root}"
            ))
        } else if epoch != b.epoch && epoch != b.epoch.wrapping_add(1) {
            Some(format!(
                "arrival for episode {epoch} while this node is at {}",
                b.epoch
            ))
        } else if epoch == b.epoch && matches!(b.mode, Some(BarrierCount::Total { .. })) {
            Some("a per-node arrival in a total-count episode".to_string())
        } else if b.up.iter().any(|u| u.epoch == epoch && u.from == from) {
            Some(format!("second arrival of the node in episode {epoch}"))
        } else if infos.is_empty() || hops == 0 {
            Some("an arrival without infos or hops".to_string())
        } else if infos.iter().any(|(n, _)| *n != MERGED && *n >= nodes) {
            Some(format!("an info of a node beyond the job's {nodes}"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.unexpected(from, BarrierId(barrier).to_string(), why));
        }
        b.up.push(UpArrival {
            epoch,
            from,
            hops,
            infos,
        });
        self.tree_try_send(cons, barrier);
        Ok(())
    }

    /// When this node's info and all its children's arrivals for the episode are here: send
    /// them up, merged where the protocol merges; at the root, depart.
    fn tree_try_send(&mut self, cons: &mut dyn Consistency, barrier: u64) {
        let root = self.manager(barrier);
        let me = self.me;
        let kids = children(me, root, self.nodes);
        let Some(b) = self.barriers.get_mut(&barrier) else {
            return;
        };
        let epoch = b.epoch;
        let here = b.up.iter().filter(|u| u.epoch == epoch).count();
        if b.own.is_none() || here < kids.len() {
            return;
        }
        let mut parts = vec![(me.0, b.own.take().unwrap_or_default())];
        let mut hops = 0u8;
        let (mine, later): (Vec<UpArrival>, Vec<UpArrival>) = std::mem::take(&mut b.up)
            .into_iter()
            .partition(|u| u.epoch == epoch);
        b.up = later;
        for u in mine {
            hops = hops.max(u.hops);
            parts.extend(u.infos);
        }
        let parts = combine(cons, parts);
        match parent(me, root, self.nodes) {
            Some(p) => self.send(
                p,
                Msg::BarrierArrive {
                    barrier,
                    epoch,
                    hops: hops.saturating_add(1),
                    infos: parts,
                },
            ),
            None => self.tree_depart(cons, barrier, epoch, hops.saturating_add(1), parts),
        }
    }

    /// The root: every node arrived; send the departure (everyone's infos, merged or in rank
    /// order) to every other node and leave the episode here.
    fn tree_depart(
        &mut self,
        cons: &mut dyn Consistency,
        barrier: u64,
        epoch: u64,
        hops: u8,
        mut parts: Vec<(u16, Vec<u8>)>,
    ) {
        let me = self.me;
        let nodes = self.nodes;
        let merged = parts.iter().any(|(n, _)| *n == MERGED);
        if !merged {
            let mut seen: Vec<u16> = parts.iter().map(|(n, _)| *n).collect();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != parts.len() || parts.len() != usize::from(nodes) {
                let why = format!(
                    "the tree gathered {} infos of {} distinct nodes for {nodes} nodes",
                    parts.len(),
                    seen.len()
                );
                let e = self.unexpected(me, BarrierId(barrier).to_string(), why);
                self.internal_error(e);
                return;
            }
        }
        // Rank order for protocols that do not merge (MERGED sorts last).
        parts.sort_by_key(|(n, _)| *n);
        let infos: Vec<Vec<u8>> = parts.into_iter().map(|(_, i)| i).collect();
        let hops = if nodes > 1 { hops } else { 0 };
        self.mgr_tree_departed(barrier, epoch);
        for n in 0..nodes {
            let n = NodeId(n);
            if n != me {
                self.send(
                    n,
                    Msg::BarrierDepart {
                        barrier,
                        epoch,
                        serial: me,
                        counted: 0,
                        hops,
                        infos: infos.clone(),
                    },
                );
            }
        }
        if let Err(e) = self.on_barrier_depart(cons, me, barrier, epoch, me, 0, hops, infos) {
            self.internal_error(e);
        }
    }
}

/// Several nodes' infos as one merged entry when the protocol merges them, else as they are.
fn combine(cons: &mut dyn Consistency, parts: Vec<(u16, Vec<u8>)>) -> Vec<(u16, Vec<u8>)> {
    if parts.len() < 2 {
        return parts;
    }
    let infos: Vec<Vec<u8>> = parts.iter().map(|(_, i)| i.clone()).collect();
    match cons.merge_barrier_infos(&infos) {
        Some(m) => vec![(MERGED, m)],
        None => parts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Waiter};

    /// Infos are sets of node numbers (one byte each); merging is their union.
    struct SetCons {
        me: u8,
        merges: bool,
        applied: Vec<Vec<Vec<u8>>>,
    }

    impl Consistency for SetCons {
        fn acquire_info(&mut self) -> Vec<u8> {
            Vec::new()
        }
        fn grant_info(&mut self, _: &[u8]) -> Vec<u8> {
            Vec::new()
        }
        fn apply_grant(&mut self, _: &[u8]) {}
        fn begin_release(&mut self, _: u64) -> bool {
            true
        }
        fn barrier_info(&mut self) -> Vec<u8> {
            vec![self.me]
        }
        fn apply_barrier(&mut self, all: &[Vec<u8>]) {
            self.applied.push(all.to_vec());
        }
        fn merge_barrier_infos(&mut self, infos: &[Vec<u8>]) -> Option<Vec<u8>> {
            let mut u: Vec<u8> = infos.concat();
            u.sort_unstable();
            u.dedup();
            self.merges.then_some(u)
        }
    }

    /// One per-node episode over `nodes` cores, messages delivered in rounds; returns the
    /// cores, their protocols and (messages, largest departure's infos).
    fn episode(nodes: u16, merges: bool) -> (Vec<SyncCore>, Vec<SetCons>, usize, usize) {
        let mut cores: Vec<SyncCore> = (0..nodes)
            .map(|n| SyncCore::new(NodeId(n), nodes))
            .collect();
        let mut cons: Vec<SetCons> = (0..nodes)
            .map(|n| SetCons {
                me: n as u8,
                merges,
                applied: Vec::new(),
            })
            .collect();
        let (msgs, widest) = run_episode(&mut cores, &mut cons, BarrierCount::PerNode { local: 1 });
        (cores, cons, msgs, widest)
    }

    /// Every core (one thread each) enters barrier 3 (root/manager: node 3 % nodes) with
    /// `count`; messages delivered in rounds until quiet. Returns (messages, largest
    /// departure's infos); every thread must have been woken without error.
    fn run_episode(
        cores: &mut [SyncCore],
        cons: &mut [SetCons],
        count: BarrierCount,
    ) -> (usize, usize) {
        let nodes = cores.len();
        for (n, c) in cores.iter_mut().enumerate() {
            c.barrier(&mut cons[n], BarrierId(3), Waiter(n as u64), count);
        }
        let (mut msgs, mut widest, mut woken) = (0, 0, 0);
        loop {
            let mut sends = Vec::new();
            for (i, core) in cores.iter_mut().enumerate() {
                while let Some(a) = core.poll_action() {
                    match a {
                        Action::Send { to, msg } => sends.push((NodeId(i as u16), to, msg)),
                        Action::Wake { result, .. } => {
                            assert!(result.is_ok());
                            woken += 1;
                        }
                        Action::ProtocolError { error } => panic!("{error}"),
                    }
                }
            }
            if sends.is_empty() {
                break;
            }
            for (from, to, msg) in sends {
                msgs += 1;
                if let Ok(Msg::BarrierDepart { infos, .. }) = Msg::decode(from, &msg) {
                    widest = widest.max(infos.len());
                }
                let t = to.index();
                cores[t]
                    .handle_message(&mut cons[t], from, &msg)
                    .expect("valid");
            }
        }
        assert_eq!(woken, nodes);
        (msgs, widest)
    }

    #[test]
    fn one_barrier_alternates_per_node_and_total_episodes() {
        // An OpenMP team barrier: per-node (tree) while the team spans every node, a total
        // count when it does not; the manager's flat state must follow the tree's episodes.
        for nodes in [2u16, 4] {
            let mut cores: Vec<SyncCore> = (0..nodes)
                .map(|n| SyncCore::new(NodeId(n), nodes))
                .collect();
            let mut cons: Vec<SetCons> = (0..nodes)
                .map(|n| SetCons {
                    me: n as u8,
                    merges: true,
                    applied: Vec::new(),
                })
                .collect();
            let total = BarrierCount::Total {
                total: u32::from(nodes),
            };
            for count in [
                BarrierCount::PerNode { local: 1 },
                BarrierCount::PerNode { local: 1 },
                total,
                BarrierCount::PerNode { local: 1 },
                total,
            ] {
                run_episode(&mut cores, &mut cons, count);
            }
            for p in &cons {
                assert_eq!(p.applied.len(), 5, "{nodes} nodes: every episode applied");
            }
        }
    }

    #[test]
    fn eight_nodes_take_log_hops_and_merged_infos() {
        for nodes in [2u16, 3, 4, 5, 8] {
            let (cores, cons, msgs, widest) = episode(nodes, true);
            assert_eq!(msgs, 2 * (usize::from(nodes) - 1), "{nodes} nodes");
            assert_eq!(widest, 1, "one merged info per departure at {nodes} nodes");
            let all: Vec<u8> = (0..nodes as u8).collect();
            for (c, p) in cores.iter().zip(&cons) {
                assert_eq!(c.stats().barrier_hops, u64::from(depth(nodes)) + 1);
                assert_eq!(p.applied, vec![vec![all.clone()]]);
            }
        }
    }

    #[test]
    fn without_merging_every_node_gets_every_info_in_rank_order() {
        let (_, cons, msgs, widest) = episode(8, false);
        assert_eq!((msgs, widest), (14, 8));
        let ranked: Vec<Vec<u8>> = (0..8u8).map(|n| vec![n]).collect();
        for p in &cons {
            assert_eq!(p.applied, vec![ranked.clone()]);
        }
    }

    #[test]
    fn every_node_reaches_the_root_in_at_most_depth_hops() {
        for nodes in 1u16..=70 {
            for root in [0u16, 1, nodes / 2, nodes - 1] {
                let root = NodeId(root % nodes);
                let mut kids_total = 0;
                for n in 0..nodes {
                    let me = NodeId(n);
                    for c in children(me, root, nodes) {
                        assert_eq!(parent(c, root, nodes), Some(me));
                        kids_total += 1;
                    }
                    let mut at = me;
                    let mut hops = 0;
                    while let Some(p) = parent(at, root, nodes) {
                        at = p;
                        hops += 1;
                    }
                    assert_eq!(at, root);
                    assert!(hops <= depth(nodes), "{nodes} nodes, {me}: {hops} hops");
                    let log2 = u32::from(nodes).next_power_of_two().trailing_zeros();
                    assert!(depth(nodes) <= log2);
                }
                assert_eq!(kids_total, nodes - 1, "a tree of {nodes} nodes");
            }
        }
        assert_eq!((depth(2), depth(4), depth(8), depth(1024)), (1, 2, 3, 10));
    }
}
