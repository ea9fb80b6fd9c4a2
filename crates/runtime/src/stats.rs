//! Per-run statistics: counts from every layer (faults, twins, diffs, messages, bytes, lock
//! acquires, barriers) and the time breakdown the seeds report (task, synchronization, data
//! stall, messaging, protocol). Owns collection into one serialisable record per node, the
//! sum over nodes, and the stderr table; must not touch protocol state (it reads snapshots).
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
    let _ = write!(s, "squall statistics ({})\n{:<40}", all[0].protocol, "");
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
}
