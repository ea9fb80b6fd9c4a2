//! Statistics of this node: time accounting (running threads, sync calls in progress), the
//! counters snapshot, the job-wide stats marks and the timed phase. Must not touch the cores
//! beyond reading their counters.

use super::Node;
use crate::error::Result;
use crate::msg;
use crate::stats::{self, Breakdown, NodeStats};
use serde_json::{Map, Value};
use squall_core::NodeId;
use squall_net::Endpoint;
use squall_protocol::Protocol;
use std::sync::atomic::{AtomicU64, Ordering};
/// Timed activities in progress (running threads, waiting sync calls): how many, and the sum of
/// their start times in ns since the node started, so their time so far is `count * now - sum`
/// (read at a stats mark; a begin or end racing with the read skews it by that one activity).
#[derive(Default)]
pub(super) struct Live {
    count: AtomicU64,
    start_sum: AtomicU64,
}

impl Live {
    pub(super) fn begin(&self, at: u64) {
        self.start_sum.fetch_add(at, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn end(&self, at: u64) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.start_sum.fetch_sub(at, Ordering::Relaxed);
    }

    pub(super) fn so_far(&self, now: u64) -> u64 {
        let n = self.count.load(Ordering::Relaxed);
        let sum = self.start_sum.load(Ordering::Relaxed);
        n.saturating_mul(now).saturating_sub(sum)
    }
}

impl Node {
    /// Nanoseconds since this node started (the clock of the time accounting).
    pub(super) fn now_ns(&self) -> u64 {
        self.inner.started.elapsed().as_nanos() as u64
    }

    /// This node's statistics so far.
    pub fn stats(&self) -> NodeStats {
        // Application time: the main thread's (where it runs application code) plus every
        // ended thread this node ran for the job.
        let main = if self.inner.main_is_app.load(Ordering::Relaxed) {
            self.inner.started.elapsed().as_secs_f64()
        } else {
            0.0
        };
        let now = self.now_ns();
        let threads =
            self.inner.thread_ns.load(Ordering::Relaxed) + self.inner.live_threads.so_far(now);
        let wall = main + threads as f64 / 1e9;
        let sync = self.inner.sync_ns.load(Ordering::Relaxed) + self.inner.live_sync.so_far(now);
        let sync_s = sync as f64 / 1e9;
        let s = self.inner.svc.lock();
        let stall_s = s.times.stall_ns as f64 / 1e9;
        let mut counts = Map::new();
        counts.insert(
            "protocol".into(),
            serde_json::to_value(s.protocol.stats()).unwrap_or(Value::Null),
        );
        counts.insert(
            "sync".into(),
            serde_json::to_value(s.sync.stats_now()).unwrap_or(Value::Null),
        );
        drop(s);
        counts.insert(
            "regions".into(),
            serde_json::to_value(self.inner.regions.stats()).unwrap_or(Value::Null),
        );
        counts.insert("net".into(), net_counts(&self.inner.ep));
        if let Some(g) = crate::gptr::started() {
            counts.insert("gptr".into(), g.stats_json());
        }
        let sp = self.inner.space.stats();
        counts.insert(
            "memory".into(),
            serde_json::json!({"faults": sp.faults, "write_faults": sp.write_faults, "transitions": sp.transitions}),
        );
        let s = self.inner.svc.lock();
        NodeStats {
            node: Some(self.rank().0),
            protocol: self.inner.cfg.protocol.name().into(),
            breakdown: Breakdown {
                task_s: (wall - sync_s - stall_s).max(0.0),
                sync_s,
                data_stall_s: stall_s,
                messaging_s: s.times.messaging_ns as f64 / 1e9,
                protocol_s: s.times.protocol_ns as f64 / 1e9,
            },
            counts,
        }
    }

    /// This node's data stall so far: how many faults were resumed, and the sum over them
    /// of the time from the service thread taking a fault to resuming the faulting thread in
    /// nanoseconds (`data_stall_s` of [`Node::stats`], without the service lock or the rest
    /// of the statistics). Read before and after one fault (once its count has moved: the
    /// thread may run again before the service thread has counted the fault), it gives the
    /// service thread's share of that fault's latency; the rest is the fault's capture and
    /// the thread wake-ups.
    pub fn data_stall(&self) -> (u64, u64) {
        let c = &self.inner.stall;
        let faults = c.faults.load(Ordering::Acquire);
        (faults, c.ns.load(Ordering::Relaxed))
    }

    /// Mark the statistics of the whole job (any one thread calls it; e.g. the first thread
    /// right after the barrier that starts the timed phase, and again right after the one that
    /// ends it). Every node snapshots its counters: this node at once, the others when the
    /// mark's message reaches them (microseconds later). The report at finalize
    /// (`SQUALL_STATS=1`, `SQUALL_STATS_FILE`) then also shows the timed phase: from each
    /// node's first mark to its second, or to the end. Later marks are ignored.
    pub fn stats_mark(&self) -> Result<()> {
        self.record_mark();
        for n in 0..self.size() {
            let to = NodeId(n);
            if to != self.rank() {
                self.inner.ep.send(to, msg::STATS_MARK, Vec::new())?;
            }
        }
        Ok(())
    }

    /// Snapshot this node's statistics for a stats mark (only the first two are kept).
    pub(super) fn record_mark(&self) {
        if self.inner.marks.lock().len() < 2 {
            let st = self.stats();
            let mut marks = self.inner.marks.lock();
            if marks.len() < 2 {
                marks.push(st);
            }
        }
    }

    /// This node's statistics of the timed phase: from its first stats mark to its second, or
    /// to now; `None` before the first mark reached this node.
    pub fn stats_phase(&self) -> Option<NodeStats> {
        if self.inner.marks.lock().is_empty() {
            return None;
        }
        self.phase(&self.stats())
    }

    /// The timed phase of this node (first mark to second mark, or to `now`), if marked.
    pub(super) fn phase(&self, now: &NodeStats) -> Option<NodeStats> {
        let marks = self.inner.marks.lock();
        let start = marks.first()?;
        Some(stats::diff(marks.get(1).unwrap_or(now), start))
    }
}

pub(super) fn net_counts(ep: &Endpoint) -> Value {
    let st = ep.stats();
    let mut by_type = Map::new();
    for (ty, c) in &st.by_type {
        let name = msg::name(*ty);
        by_type.insert(
            name,
            serde_json::json!({"sent": c.sent, "sent_bytes": c.sent_bytes,
                               "received": c.received, "received_bytes": c.received_bytes}),
        );
    }
    let drops: u64 = st.drops.values().sum();
    serde_json::json!({
        "messages_sent": st.messages_sent(),
        "messages_received": st.messages_received(),
        "bytes_sent": st.by_type.values().map(|c| c.sent_bytes).sum::<u64>(),
        "packets_sent": st.packets_sent,
        "frames_batched": st.frames_batched,
        "retransmissions": st.retransmissions,
        "dropped": drops,
        "per_type": by_type,
    })
}
