//! Scale on paper: the costs of a read fault, a lock acquire and a barrier at large node
//! counts, counted from the statistics of simulated runs (real `hlrc` cores behind the
//! runtime's router and real `SyncCore`s over the virtual network), checked against the
//! sequential reference like every simulated run.
//!
//! Three programs per node count, one thread per node, each node owning one page (homed on
//! it): `base` (every node writes its own word, barrier), `fault` (base, then every node
//! reads its neighbour's word — one remote read fault each — and a barrier) and `lock` (base,
//! then every node adds to node 0's word under one lock, and a barrier). Per read fault:
//! the protocol messages `fault` sent beyond `base`, over its extra read faults. Per acquire:
//! the lock messages of `lock` over its remote acquires (the queue lock's request, forward
//! and grant), and the protocol messages beyond `base` (the protected page and its diffs).
//! Per barrier: the barrier messages of `base` over its episodes, and the hops of the
//! longest causal chain of an episode (the barrier's depth).
//!
//! Owns: these programs and the table. Must not touch: the world's event loop.
use crate::program::{Check, Op, Program, Var};
use crate::world::{SimConfig, SimError, SimReport, World};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use squall_core::{AllocInfo, HeapLayout, NodeId, Placement};
use squall_protocol::ProtocolKind;
use squall_sync::SyncStats;

/// What one node count costs.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleRow {
    pub nodes: u16,
    /// Remote read faults measured (one per node).
    pub read_faults: u64,
    pub msgs_per_read_fault: f64,
    /// Remote lock acquires measured.
    pub acquires: u64,
    /// Sync messages (request, forward, grant) per remote acquire.
    pub lock_msgs_per_acquire: f64,
    /// Protocol messages per acquire (the protected data).
    pub data_msgs_per_acquire: f64,
    /// Barrier messages per episode, all nodes.
    pub msgs_per_barrier: f64,
    /// Sync bytes of barrier messages per episode, all nodes.
    pub bytes_per_barrier: f64,
    /// One-way hops on the longest causal chain of an episode.
    pub barrier_depth: f64,
}

enum Kind {
    Base,
    Fault,
    Lock,
}

fn program(nodes: u16, kind: &Kind) -> Program {
    let layout = HeapLayout {
        nodes,
        total_pages: u64::from(nodes),
    };
    let allocs: Vec<(NodeId, AllocInfo)> = (0..nodes)
        .map(|n| {
            let node = NodeId(n);
            let info = AllocInfo {
                first: layout.arena_start(node),
                pages: 1,
                placement: Placement::Node(node),
            };
            (node, info)
        })
        .collect();
    let vars: Vec<Var> = allocs
        .iter()
        .map(|(_, a)| Var {
            page: a.first,
            offset: 0,
        })
        .collect();
    let n = usize::from(nodes);
    let ops = (0..n)
        .map(|i| {
            let mut ops = vec![Op::Write(i, i as u64 + 1), Op::Barrier];
            match kind {
                Kind::Base => {}
                Kind::Fault => ops.extend([Op::Read((i + 1) % n), Op::Barrier]),
                Kind::Lock => ops.extend([Op::Lock(0), Op::Add(0, 1), Op::Unlock(0), Op::Barrier]),
            }
            ops
        })
        .collect();
    Program {
        layout,
        policies: vec![None; allocs.len()],
        allocs,
        vars,
        threads: (0..nodes).map(NodeId).collect(),
        ops,
        check: Check::Reference,
    }
}

fn run(nodes: u16, kind: Kind, seed: u64) -> Result<SimReport, SimError> {
    let cfg = SimConfig {
        protocol: ProtocolKind::Hlrc,
        mixed: false,
        seed,
        trace: false,
        max_events: 200_000_000,
        sync_cores: true,
        lossy: None,
        barrier_total: false,
        barrier_eager_cap: None,
        lock_cache: false,
        runtime_tuning: false,
        late_stores: false,
    };
    World::new(cfg, program(nodes, &kind), ChaCha8Rng::seed_from_u64(seed))?.run()
}

fn sum(stats: &[SyncStats], f: impl Fn(&SyncStats) -> u64) -> u64 {
    stats.iter().map(f).sum()
}

fn barrier_msgs(s: &SyncStats) -> u64 {
    [
        "barrier_arrive",
        "barrier_count",
        "barrier_collect",
        "barrier_info",
        "barrier_depart",
        "barrier_eager",
    ]
    .iter()
    .map(|k| s.messages_of(k))
    .sum()
}

fn lock_msgs(s: &SyncStats) -> u64 {
    ["lock_request", "lock_forward", "lock_grant"]
        .iter()
        .map(|k| s.messages_of(k))
        .sum()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// Measure one node count (seeded: the network delays and the protocol's knobs).
pub fn measure(nodes: u16, seed: u64) -> Result<ScaleRow, SimError> {
    let base = run(nodes, Kind::Base, seed)?;
    let fault = run(nodes, Kind::Fault, seed)?;
    let lock = run(nodes, Kind::Lock, seed)?;
    let read_faults = fault
        .stats
        .read_faults
        .saturating_sub(base.stats.read_faults);
    let fault_msgs = fault.stats.messages().saturating_sub(base.stats.messages());
    let acquires = sum(&lock.sync_stats, |s| s.lock_acquires_remote);
    let lock_sync = sum(&lock.sync_stats, lock_msgs);
    let lock_data = lock.stats.messages().saturating_sub(base.stats.messages());
    let episodes = base.sync_stats.first().map_or(0, |s| s.barrier_episodes);
    let bar_msgs = sum(&base.sync_stats, barrier_msgs);
    // Barrier bytes: the run's only sync messages are barrier ones.
    let bar_bytes = sum(&base.sync_stats, |s| s.bytes_sent);
    let hops = base.sync_stats.first().map_or(0, |s| s.barrier_hops);
    Ok(ScaleRow {
        nodes,
        read_faults,
        msgs_per_read_fault: ratio(fault_msgs, read_faults),
        acquires,
        lock_msgs_per_acquire: ratio(lock_sync, acquires),
        data_msgs_per_acquire: ratio(lock_data, acquires),
        msgs_per_barrier: ratio(bar_msgs, episodes),
        bytes_per_barrier: ratio(bar_bytes, episodes),
        barrier_depth: ratio(hops, episodes),
    })
}

/// The rows as a table (Markdown) and as JSON.
pub fn render(rows: &[ScaleRow]) -> (String, Value) {
    let mut t = String::from(
        "| nodes | msgs / read fault | lock msgs / acquire | data msgs / acquire | msgs / barrier | bytes / barrier | barrier depth (hops) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut js = Vec::new();
    for r in rows {
        t.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} |\n",
            r.nodes,
            r.msgs_per_read_fault,
            r.lock_msgs_per_acquire,
            r.data_msgs_per_acquire,
            r.msgs_per_barrier,
            r.bytes_per_barrier,
            r.barrier_depth
        ));
        js.push(json!({"nodes": r.nodes, "read_faults": r.read_faults,
            "messages_per_read_fault": r.msgs_per_read_fault, "remote_acquires": r.acquires,
            "lock_messages_per_acquire": r.lock_msgs_per_acquire,
            "data_messages_per_acquire": r.data_msgs_per_acquire,
            "messages_per_barrier": r.msgs_per_barrier, "bytes_per_barrier": r.bytes_per_barrier,
            "barrier_depth_hops": r.barrier_depth}));
    }
    (t, json!({"scale": js}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_at_16_nodes_are_constant_per_operation_and_log_deep() {
        let r = measure(16, 1).expect("the runs pass their checks");
        assert_eq!(r.read_faults, 16);
        assert!(
            r.acquires >= 15,
            "every node but maybe the first holder: {r:?}"
        );
        assert!(r.lock_msgs_per_acquire <= 3.0, "{r:?}");
        assert_eq!(r.msgs_per_barrier, 30.0, "2(N−1): {r:?}");
        assert_eq!(r.barrier_depth, 5.0, "⌈log2 16⌉+1: {r:?}");
    }
}
