//! Per-run statistics: counts from every layer (faults, twins, diffs, messages, bytes, lock
//! acquires, barriers) and the time breakdown the seeds report (task, synchronization, data
//! stall, messaging, protocol). Owns collection into one serialisable record per node, the
//! sum over nodes, the difference of two snapshots (the timed phase between stats marks), and
//! the stderr table; must not touch protocol state (it reads snapshots).
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// Time the service thread spent per category, and the data stall it observed.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct ServiceTimes {
    /// In protocol and sync cores (handling faults, messages, releases).
    pub protocol_ns: u64,
    /// In transport sends issued by the cores.
    pub messaging_ns: u64,
    /// Sum over faults of fault-to-resume time (application threads waiting for data).
    pub stall_ns: u64,
}

/// Time breakdown of one node, in seconds.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct Breakdown {
    /// Application threads' time minus sync and stall.
    pub task_s: f64,
    /// Application threads inside locks, barriers, conditions, flags.
    pub sync_s: f64,
    /// Application threads blocked on page faults.
    pub data_stall_s: f64,
    /// Service thread in transport sends.
    pub messaging_s: f64,
    /// Service thread in protocol and synchronization processing.
    pub protocol_s: f64,
}

/// Statistics of one node (or the sum over nodes, with `node = None`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStats {
    pub node: Option<u16>,
    pub protocol: String,
    pub breakdown: Breakdown,
    /// Counters by layer: `protocol`, `sync`, `net`, `memory`; each an object of numbers (or of
    /// objects of numbers, e.g. messages per type).
    pub counts: Map<String, Value>,
}

/// What a node reports to rank 0 at finalize: its whole run, and its timed phase (from its
/// first stats mark to its second, or to the end) if the program marked one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    pub run: NodeStats,
    #[serde(default)]
    pub phase: Option<NodeStats>,
}

/// `later - earlier`, counter by counter (for two snapshots of one node; counters only grow,
/// so a difference below zero, from a counter that is not one, is clamped to 0).
pub fn diff(later: &NodeStats, earlier: &NodeStats) -> NodeStats {
    let (l, e) = (&later.breakdown, &earlier.breakdown);
    let mut counts = Value::Object(later.counts.clone());
    sub_values(&mut counts, &Value::Object(earlier.counts.clone()));
    NodeStats {
        node: later.node,
        protocol: later.protocol.clone(),
        breakdown: Breakdown {
            task_s: (l.task_s - e.task_s).max(0.0),
            sync_s: (l.sync_s - e.sync_s).max(0.0),
            data_stall_s: (l.data_stall_s - e.data_stall_s).max(0.0),
            messaging_s: (l.messaging_s - e.messaging_s).max(0.0),
            protocol_s: (l.protocol_s - e.protocol_s).max(0.0),
        },
        counts: match counts {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

fn sub_values(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Number(a), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = x.saturating_sub(y).into();
            } else if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
                if let Some(n) = serde_json::Number::from_f64((x - y).max(0.0)) {
                    *a = n;
                }
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if let Some(slot) = a.get_mut(k) {
                    sub_values(slot, v);
                }
            }
        }
        _ => {}
    }
}

fn add_values(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Number(a), Value::Number(b)) => {
            if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = (x + y).into();
            } else if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
                if let Some(n) = serde_json::Number::from_f64(x + y) {
                    *a = n;
                }
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(slot) => add_values(slot, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => {}
    }
}

/// Sum the nodes' statistics.
pub fn total(nodes: &[NodeStats]) -> NodeStats {
    let mut counts = Value::Object(Map::new());
    let mut b = Breakdown::default();
    for n in nodes {
        add_values(&mut counts, &Value::Object(n.counts.clone()));
        b.task_s += n.breakdown.task_s;
        b.sync_s += n.breakdown.sync_s;
        b.data_stall_s += n.breakdown.data_stall_s;
        b.messaging_s += n.breakdown.messaging_s;
        b.protocol_s += n.breakdown.protocol_s;
    }
    NodeStats {
        node: None,
        protocol: nodes
            .first()
            .map(|n| n.protocol.clone())
            .unwrap_or_default(),
        breakdown: b,
        counts: match counts {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

/// Flatten the counters to `layer.name` → number, for the table.
fn flat(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => out.push((prefix.to_string(), n.as_f64().unwrap_or(0.0))),
        Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flat(&p, v, out);
            }
        }
        _ => {}
    }
}

/// The table printed on stderr at exit: one column per node and a total column.
pub fn table(nodes: &[NodeStats]) -> String {
    table_titled(nodes, "")
}

/// [`table`] with `what` after the protocol in the title (e.g. "timed phase").
pub fn table_titled(nodes: &[NodeStats], what: &str) -> String {
    let tot = total(nodes);
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    let mut all = nodes.to_vec();
    all.push(tot);
    for (col, n) in all.iter().enumerate() {
        let mut f = vec![
            ("time.task_s".to_string(), n.breakdown.task_s),
            ("time.sync_s".to_string(), n.breakdown.sync_s),
            ("time.data_stall_s".to_string(), n.breakdown.data_stall_s),
            ("time.messaging_s".to_string(), n.breakdown.messaging_s),
            ("time.protocol_s".to_string(), n.breakdown.protocol_s),
        ];
        flat("", &Value::Object(n.counts.clone()), &mut f);
        for (k, v) in f {
            match rows.iter_mut().find(|(name, _)| *name == k) {
                Some((_, vals)) => vals[col] = v,
                None => {
                    let mut vals = vec![0.0; all.len()];
                    vals[col] = v;
                    rows.push((k, vals));
                }
            }
        }
    }
    let mut s = String::new();
    let title = if what.is_empty() {
        all[0].protocol.clone()
    } else {
        format!("{}, {what}", all[0].protocol)
    };
    let _ = write!(s, "squall statistics ({title})\n{:<40}", "");
    for n in nodes {
        let _ = write!(s, "{:>14}", format!("node {}", n.node.unwrap_or(0)));
    }
    let _ = writeln!(s, "{:>14}", "total");
    for (k, vals) in rows {
        if vals.iter().all(|v| *v == 0.0) {
            continue;
        }
        let _ = write!(s, "{k:<40}");
        for v in vals {
            if k.starts_with("time.") {
                let _ = write!(s, "{v:>14.4}");
            } else {
                let _ = write!(s, "{v:>14}");
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: u16, faults: u64) -> NodeStats {
        let mut counts = Map::new();
        counts.insert(
            "protocol".into(),
            serde_json::json!({"read_faults": faults, "per_type": {"fetch": 2}}),
        );
        NodeStats {
            node: Some(n),
            protocol: "hlrc".into(),
            breakdown: Breakdown {
                task_s: 1.0,
                ..Default::default()
            },
            counts,
        }
    }

    #[test]
    fn totals_sum_nested_counts() {
        let t = total(&[node(0, 3), node(1, 4)]);
        assert_eq!(t.counts["protocol"]["read_faults"], 7);
        assert_eq!(t.counts["protocol"]["per_type"]["fetch"], 4);
        assert!((t.breakdown.task_s - 2.0).abs() < 1e-9);
        let tab = table(&[node(0, 3), node(1, 4)]);
        assert!(tab.contains("protocol.read_faults"));
    }

    #[test]
    fn diff_subtracts_nested_counts_and_times() {
        let d = diff(&node(0, 10), &node(0, 4));
        assert_eq!(d.counts["protocol"]["read_faults"], 6);
        assert_eq!(d.counts["protocol"]["per_type"]["fetch"], 0);
        assert_eq!(d.breakdown.task_s, 0.0);
        let mut later = node(1, 4);
        later.breakdown.sync_s = 2.5;
        later
            .counts
            .insert("sync".into(), serde_json::json!({"barrier_episodes": 3}));
        let d = diff(&later, &node(1, 4));
        assert!((d.breakdown.sync_s - 2.5).abs() < 1e-9);
        // A counter the earlier snapshot did not have yet counts in full.
        assert_eq!(d.counts["sync"]["barrier_episodes"], 3);
        let tab = table_titled(&[d], "timed phase");
        assert!(tab.starts_with("squall statistics (hlrc, timed phase)"));
        assert!(tab.contains("sync.barrier_episodes"));
    }
}
