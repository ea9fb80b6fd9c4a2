//! The statistics a Squall run reports (`SQUALL_STATS=1` writes `{"nodes": [...], "total":
//! {...}}` to `SQUALL_STATS_FILE`, see crates/runtime/src/stats.rs), reduced to the columns
//! seed 000 Table 2 and Figures 3–4 report: faults, twins, diffs, page transfers, messages,
//! bytes, lock acquires, barriers and the task/sync/data stall/messaging/protocol breakdown.
//! When the app marked its timed phase (`squall_stats_mark()`, the document's `"phase"`), the
//! phase is reduced instead of the whole run, so set-up and the check do not count.
//! Owns that reduction; must not run anything.
use super::error::AppsError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// Time breakdown summed over nodes, in seconds (seed 000 §4.2).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    pub task_s: f64,
    pub sync_s: f64,
    pub data_stall_s: f64,
    pub messaging_s: f64,
    pub protocol_s: f64,
}

impl Breakdown {
    /// The components in plot order, with their names.
    pub fn parts(&self) -> [(&'static str, f64); 5] {
        [
            ("task", self.task_s),
            ("sync", self.sync_s),
            ("data stall", self.data_stall_s),
            ("messaging", self.messaging_s),
            ("protocol", self.protocol_s),
        ]
    }

    pub fn total(&self) -> f64 {
        self.parts().iter().map(|(_, v)| v.max(0.0)).sum()
    }

    /// Each component as a percentage of the sum (all zero when nothing was measured).
    pub fn percent(&self) -> [f64; 5] {
        let t = self.total();
        let p = self.parts();
        let mut out = [0.0; 5];
        if t > 0.0 {
            for (o, (_, v)) in out.iter_mut().zip(p.iter()) {
                *o = v.max(0.0) / t * 100.0;
            }
        }
        out
    }
}

/// One run's statistics, summed over nodes (barriers: episodes, the most any node saw).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsSummary {
    /// read + write faults handled by the protocol.
    pub faults: u64,
    pub read_faults: u64,
    pub write_faults: u64,
    pub twins: u64,
    /// Diffs created.
    pub diffs: u64,
    /// Whole pages fetched from their home (seed 000's "page transfers").
    pub page_fetches: u64,
    /// Copies dropped by write notices (per page).
    #[serde(default)]
    pub invalidations: u64,
    /// Messages sent by all nodes (data, synchronization and protocol).
    pub messages: u64,
    /// Bytes sent by all nodes.
    pub bytes: u64,
    /// Lock acquisitions (local and remote).
    pub lock_acquires: u64,
    /// Barrier episodes.
    pub barriers: u64,
    pub breakdown: Breakdown,
}

fn count(v: &Value, path: &str) -> u64 {
    v.pointer(path).and_then(Value::as_u64).unwrap_or(0)
}

fn secs(v: &Value, path: &str) -> f64 {
    v.pointer(path).and_then(Value::as_f64).unwrap_or(0.0)
}

impl StatsSummary {
    /// Reduce a statistics document: its timed phase if it has one (`"phase"`, the same shape),
    /// else the whole run. Missing counters count as 0 (a layer may not report every one); a
    /// document without `total` is an error.
    pub fn from_doc(doc: &Value) -> Result<StatsSummary, String> {
        let doc = match doc.get("phase") {
            Some(phase) if phase.get("total").is_some_and(Value::is_object) => phase,
            _ => doc,
        };
        let t = doc.get("total").ok_or("no \"total\" object")?;
        if !t.is_object() {
            return Err("\"total\" is not an object".into());
        }
        let read_faults = count(t, "/counts/protocol/read_faults");
        let write_faults = count(t, "/counts/protocol/write_faults");
        let barriers = doc
            .get("nodes")
            .and_then(Value::as_array)
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|n| count(n, "/counts/sync/barrier_episodes"))
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or_else(|| count(t, "/counts/sync/barrier_episodes"));
        Ok(StatsSummary {
            faults: read_faults + write_faults,
            read_faults,
            write_faults,
            twins: count(t, "/counts/protocol/twins"),
            diffs: count(t, "/counts/protocol/diffs_created"),
            page_fetches: count(t, "/counts/protocol/page_fetches"),
            invalidations: count(t, "/counts/protocol/invalidations"),
            messages: count(t, "/counts/net/messages_sent"),
            bytes: count(t, "/counts/net/bytes_sent"),
            lock_acquires: count(t, "/counts/sync/lock_acquires_local")
                + count(t, "/counts/sync/lock_acquires_local_fast")
                + count(t, "/counts/sync/lock_acquires_remote"),
            barriers,
            breakdown: Breakdown {
                task_s: secs(t, "/breakdown/task_s"),
                sync_s: secs(t, "/breakdown/sync_s"),
                data_stall_s: secs(t, "/breakdown/data_stall_s"),
                messaging_s: secs(t, "/breakdown/messaging_s"),
                protocol_s: secs(t, "/breakdown/protocol_s"),
            },
        })
    }

    /// Read and reduce the statistics file a run wrote.
    pub fn read(path: &Path) -> Result<StatsSummary, AppsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AppsError::io("read statistics file", path, e))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| AppsError::BadJson {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        StatsSummary::from_doc(&doc).map_err(|why| AppsError::BadJson {
            path: path.to_path_buf(),
            why,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(barriers: u64) -> Value {
        json!({"counts": {"sync": {"barrier_episodes": barriers}}})
    }

    #[test]
    fn reduces_the_runtime_document() {
        let doc = json!({
            "nodes": [node(20), node(21)],
            "total": {
                "node": null, "protocol": "hlrc",
                "breakdown": {"task_s": 3.0, "sync_s": 0.5, "data_stall_s": 0.25,
                              "messaging_s": 0.15, "protocol_s": 0.1},
                "counts": {
                    "protocol": {"read_faults": 10, "write_faults": 5, "twins": 4,
                                 "diffs_created": 3, "page_fetches": 9,
                                 "sent": {"fetch": {"messages": 1, "bytes": 2}}},
                    "sync": {"lock_acquires_local": 7, "lock_acquires_remote": 2,
                             "barrier_episodes": 41},
                    "net": {"messages_sent": 100, "bytes_sent": 4096},
                    "memory": {"faults": 15}
                }
            }
        });
        let s = StatsSummary::from_doc(&doc).expect("reduces");
        assert_eq!(s.faults, 15);
        assert_eq!((s.read_faults, s.write_faults), (10, 5));
        assert_eq!((s.twins, s.diffs, s.page_fetches), (4, 3, 9));
        assert_eq!((s.messages, s.bytes), (100, 4096));
        assert_eq!(s.lock_acquires, 9);
        assert_eq!(s.barriers, 21);
        let pct = s.breakdown.percent();
        assert!((pct[0] - 75.0).abs() < 1e-9);
        assert!((pct.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        assert!(StatsSummary::from_doc(&json!({"nodes": []})).is_err());
        // A marked timed phase is reduced instead of the whole run.
        let mut marked = doc.clone();
        marked["phase"] = json!({
            "nodes": [node(4), node(4)],
            "total": {"counts": {"protocol": {"read_faults": 1, "write_faults": 1}}}
        });
        let p = StatsSummary::from_doc(&marked).expect("reduces the phase");
        assert_eq!((p.faults, p.barriers, p.messages), (2, 4, 0));
        assert_eq!(Breakdown::default().percent(), [0.0; 5]);
    }
}
