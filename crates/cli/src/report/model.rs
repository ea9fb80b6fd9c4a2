//! The profile JSON as `squall report` reads it (the format is /work/profile-schema.md's,
//! written by `squall run --profile`). Every field has a default and unknown fields are
//! ignored, so a newer writer's document (more fields) or a partial one still renders.
//!
//! Owns: the reader's view of the document and the choices made from it (the worst
//! allocation for the heat map, the sorting of locks and barriers). Must not touch: the
//! writer (the runtime's profile module) or the drawing.
use serde::Deserialize;

/// The whole document.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Profile {
    pub version: u32,
    pub program: String,
    pub nodes: u32,
    pub elapsed_s: f64,
    pub page_size: u64,
    /// Worst first (as written).
    pub sites: Vec<Site>,
    pub locks: Vec<Lock>,
    pub barriers: Vec<Barrier>,
    pub timeline: Vec<TimePoint>,
    pub breakdown: Vec<NodeTime>,
}

/// One allocation site or global variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Site {
    pub site: String,
    /// `alloc` or `global`.
    pub kind: String,
    pub bytes: u64,
    pub pages: u64,
    pub read_faults: u64,
    pub write_faults: u64,
    pub fetches: u64,
    pub invalidations: u64,
    pub diffs: u64,
    pub diff_bytes: u64,
    pub home_migrations: u64,
    pub false_shared_pages: u64,
    pub true_shared_pages: u64,
    pub nodes_involved: Vec<u32>,
    /// `false`, `true`, `none` or `private`.
    pub sharing: String,
    pub diagnosis: String,
    /// `[page index in the allocation, node, faults]`, nonzero cells only.
    pub heat: Vec<[u64; 3]>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Lock {
    pub name: String,
    pub addr: String,
    pub acquires: u64,
    pub remote_acquires: u64,
    pub transfers: u64,
    pub wait_s: f64,
    pub avg_hold_us: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Barrier {
    pub name: String,
    pub addr: String,
    pub episodes: u64,
    pub wait_s: f64,
}

/// Faults of one node in one time bucket ending at `t_s`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TimePoint {
    pub node: u32,
    pub t_s: f64,
    pub faults: u64,
}

/// Where one node's time went (seconds).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NodeTime {
    pub node: u32,
    pub compute_s: f64,
    pub data_wait_s: f64,
    pub sync_s: f64,
    pub protocol_s: f64,
    /// The service thread's time in transport sends, when the writer gives it (beyond the
    /// schema's four parts; 0 when absent).
    pub messaging_s: f64,
}

impl NodeTime {
    /// The parts in the order the stacked bars draw them, with their names.
    pub fn parts(&self) -> [(&'static str, f64); 5] {
        [
            ("compute", self.compute_s),
            ("data wait", self.data_wait_s),
            ("synchronization", self.sync_s),
            ("protocol", self.protocol_s),
            ("messaging", self.messaging_s),
        ]
    }
}

impl Profile {
    /// The site the heat map shows: the worst allocation (the first `alloc` site with
    /// heat; sites are written worst first), else the first site with heat at all.
    pub fn heat_site(&self) -> Option<&Site> {
        self.sites
            .iter()
            .find(|s| s.kind == "alloc" && !s.heat.is_empty())
            .or_else(|| self.sites.iter().find(|s| !s.heat.is_empty()))
    }

    /// The node count: the document's, or the most any series names.
    pub fn node_count(&self) -> u32 {
        let seen = self
            .timeline
            .iter()
            .map(|t| t.node + 1)
            .chain(self.breakdown.iter().map(|b| b.node + 1))
            .max()
            .unwrap_or(0);
        self.nodes.max(seen)
    }

    /// Node `n`'s faults over time, in time order, with the buckets a sparse timeline leaves
    /// out (writers may list nonzero buckets only) put back as zeros: the bucket width is the
    /// smallest gap between any two time points of the document.
    pub fn node_series(&self, n: u32) -> Vec<(f64, f64)> {
        let mut ts: Vec<f64> = self.timeline.iter().map(|t| t.t_s).collect();
        ts.sort_by(f64::total_cmp);
        let bucket = ts
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|d| *d > 1e-9)
            .fold(f64::INFINITY, f64::min);
        let mut pts: Vec<(f64, f64)> = self
            .timeline
            .iter()
            .filter(|t| t.node == n)
            .map(|t| (t.t_s, t.faults as f64))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !bucket.is_finite() {
            return pts;
        }
        let mut out = Vec::with_capacity(pts.len() * 2);
        let mut prev: Option<f64> = None;
        for (t, f) in pts {
            let last = prev.unwrap_or(0.0);
            if t - last > 1.5 * bucket {
                // Zero from the bucket after the previous point to the one before this.
                if prev.is_some() {
                    out.push((last + bucket, 0.0));
                }
                out.push((t - bucket, 0.0));
            }
            out.push((t, f));
            prev = Some(t);
        }
        out
    }

    /// Locks by total wait, longest first.
    pub fn locks_by_wait(&self) -> Vec<&Lock> {
        let mut v: Vec<&Lock> = self.locks.iter().collect();
        v.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s));
        v
    }

    /// Barriers by total wait, longest first.
    pub fn barriers_by_wait(&self) -> Vec<&Barrier> {
        let mut v: Vec<&Barrier> = self.barriers.iter().collect();
        v.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s));
        v
    }
}
