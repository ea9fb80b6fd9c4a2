//! The report of one `squall bench apps` run: repetitions of each (app, mode, nodes) reduced
//! to medians, and the rows apps.json/csv/md and the plots show (speedup over the sequential
//! build, ratio to native pthreads at the same thread count, statistics of the median
//! repetition). Owns that data model and its arithmetic; must not run or write anything.
use super::results_doc::Machine;
use super::stats::StatsSummary;
use crate::bench::report::{median, round};
use serde::{Deserialize, Serialize};

/// Every repetition of one configuration (none yet counts as verified).
#[derive(Debug, Clone)]
pub struct Reps {
    /// RESULT time_s of each repetition that printed one.
    pub times: Vec<f64>,
    /// Every repetition printed verified=1 and exited 0.
    pub verified: bool,
    /// Why repetitions did not count.
    pub problems: Vec<String>,
    /// Statistics per repetition that produced them, with that repetition's time.
    pub stats: Vec<(f64, StatsSummary)>,
}

impl Default for Reps {
    fn default() -> Reps {
        Reps {
            times: Vec::new(),
            verified: true,
            problems: Vec::new(),
            stats: Vec::new(),
        }
    }
}

impl Reps {
    pub fn new() -> Reps {
        Reps::default()
    }

    /// Record one repetition.
    pub fn push(&mut self, time: Option<f64>, verified: bool, problem: Option<String>) {
        if let Some(t) = time {
            self.times.push(t);
        }
        self.verified &= verified;
        if let Some(p) = problem {
            self.problems.push(p);
        }
    }

    /// Median time, if any repetition printed one.
    pub fn median(&self) -> Option<f64> {
        let m = median(&self.times);
        m.is_finite().then_some(round(m, 6))
    }

    /// The statistics of the repetition whose time is closest to the median.
    pub fn median_stats(&self) -> Option<StatsSummary> {
        let m = self.median()?;
        self.stats
            .iter()
            .min_by(|a, b| (a.0 - m).abs().total_cmp(&(b.0 - m).abs()))
            .map(|(_, s)| s.clone())
    }
}

/// A baseline measurement: the sequential build, or native pthreads at some thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub app: String,
    /// `seq` or `native`.
    pub mode: String,
    pub threads: usize,
    /// Median over repetitions (null when no repetition printed a time).
    pub time_s: Option<f64>,
    pub times_s: Vec<f64>,
    pub verified: bool,
}

/// One Squall configuration of one app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppRow {
    pub app: String,
    pub nodes: usize,
    /// Application threads in total (nodes × threads per node).
    pub threads: usize,
    /// Coherence unit of the Squall runs, in pages (`--unit`).
    #[serde(default = "one_page")]
    pub unit_pages: u32,
    /// Median parallel-phase time on Squall.
    pub squall_time_s: Option<f64>,
    /// Median time of the sequential build.
    pub seq_time_s: Option<f64>,
    /// Median time of native pthreads with the same thread count.
    pub native_time_s: Option<f64>,
    /// squall / seq.
    pub ratio: Option<f64>,
    /// seq / squall.
    pub speedup: Option<f64>,
    /// squall / native (same threads).
    pub native_ratio: Option<f64>,
    /// Every repetition printed verified=1 and exited 0.
    pub verified: bool,
    pub squall_times_s: Vec<f64>,
    /// Why repetitions failed, if any did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Statistics of the median repetition (null when the runtime wrote none).
    pub stats: Option<StatsSummary>,
}

/// The whole run: what apps.json holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppsReport {
    /// Always `apps`.
    pub bench: String,
    pub size: String,
    pub protocol: String,
    pub transport: String,
    pub threads_per_node: usize,
    pub reps: usize,
    /// The command line that measured it.
    #[serde(default)]
    pub command: String,
    /// The machine it was measured on.
    #[serde(default)]
    pub machine: Option<Machine>,
    pub rows: Vec<AppRow>,
    /// Sequential and native medians the rows compare against.
    pub baselines: Vec<Baseline>,
    /// The apps in other sharing styles (`--style crl,splitc`), beside the page-based rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub styles: Vec<StyleRow>,
}

/// One app in one non-page sharing style (an SPMD program, one process per node) on one node
/// count, beside the page-based row of the same app and node count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StyleRow {
    pub app: String,
    /// `crl` or `splitc`.
    pub style: String,
    pub nodes: usize,
    /// Median parallel-phase time.
    pub time_s: Option<f64>,
    pub times_s: Vec<f64>,
    /// Median time of the page-based version on the same nodes (null when not run).
    pub pages_time_s: Option<f64>,
    /// time / pages time.
    pub pages_ratio: Option<f64>,
    /// Median time of the sequential build.
    pub seq_time_s: Option<f64>,
    /// seq / time.
    pub speedup: Option<f64>,
    /// Every repetition printed verified=1 and exited 0.
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Statistics of the median repetition (messages and bytes of every model are counted).
    pub stats: Option<StatsSummary>,
}

impl StyleRow {
    pub fn build(
        app: &str,
        style: &str,
        nodes: usize,
        reps: &Reps,
        pages: Option<f64>,
        seq: Option<f64>,
    ) -> StyleRow {
        let t = reps.median();
        StyleRow {
            app: app.to_string(),
            style: style.to_string(),
            nodes,
            time_s: t,
            times_s: reps.times.clone(),
            pages_time_s: pages,
            pages_ratio: ratio(t, pages),
            seq_time_s: seq,
            speedup: ratio(seq, t),
            verified: reps.verified,
            problems: reps.problems.clone(),
            stats: reps.median_stats(),
        }
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) if y > 0.0 && x.is_finite() => Some(round(x / y, 4)),
        _ => None,
    }
}

impl Baseline {
    pub fn from_reps(app: &str, mode: &str, threads: usize, reps: &Reps) -> Baseline {
        Baseline {
            app: app.to_string(),
            mode: mode.to_string(),
            threads,
            time_s: reps.median(),
            times_s: reps.times.clone(),
            verified: reps.verified,
        }
    }
}

fn one_page() -> u32 {
    1
}

impl AppRow {
    /// The row for `app` on `nodes` nodes from its Squall repetitions and the baselines.
    pub fn build(
        app: &str,
        nodes: usize,
        threads: usize,
        squall: &Reps,
        seq: Option<f64>,
        native: Option<f64>,
    ) -> AppRow {
        let t = squall.median();
        AppRow {
            app: app.to_string(),
            nodes,
            threads,
            unit_pages: 1,
            squall_time_s: t,
            seq_time_s: seq,
            native_time_s: native,
            ratio: ratio(t, seq),
            speedup: ratio(seq, t),
            native_ratio: ratio(t, native),
            verified: squall.verified,
            squall_times_s: squall.times.clone(),
            problems: squall.problems.clone(),
            stats: squall.median_stats(),
        }
    }
}

impl AppsReport {
    /// Apps in row order, each once.
    pub fn apps(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rows {
            if !out.contains(&r.app) {
                out.push(r.app.clone());
            }
        }
        out
    }

    /// Every row and baseline verified.
    pub fn all_verified(&self) -> bool {
        self.rows.iter().all(|r| r.verified)
            && self.baselines.iter().all(|b| b.verified)
            && self.styles.iter().all(|s| s.verified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_medians_and_ratios() {
        let mut s = Reps::new();
        for (t, st) in [(2.0, 20), (1.0, 10), (4.0, 40)] {
            s.push(Some(t), true, None);
            s.stats.push((
                t,
                StatsSummary {
                    faults: st,
                    ..Default::default()
                },
            ));
        }
        let row = AppRow::build("sor", 2, 2, &s, Some(3.0), Some(1.0));
        assert_eq!(row.squall_time_s, Some(2.0));
        assert_eq!(row.ratio, Some(0.6667));
        assert_eq!(row.speedup, Some(1.5));
        assert_eq!(row.native_ratio, Some(2.0));
        assert!(row.verified);
        assert_eq!(row.stats.map(|s| s.faults), Some(20));
    }

    #[test]
    fn one_bad_rep_unverifies_and_missing_times_give_null() {
        let mut s = Reps::new();
        s.push(Some(1.0), true, None);
        s.push(
            None,
            false,
            Some("node 1 was killed by signal SIGSEGV".into()),
        );
        let row = AppRow::build("lu", 4, 4, &s, None, Some(0.5));
        assert!(!row.verified);
        assert_eq!(row.problems.len(), 1);
        assert_eq!(row.speedup, None);
        assert_eq!(row.native_ratio, Some(2.0));
        let empty = AppRow::build("lu", 1, 1, &Reps::new(), Some(1.0), None);
        assert_eq!(empty.squall_time_s, None);
        assert_eq!(empty.ratio, None);
        let v = serde_json::to_value(&empty).expect("serializes");
        assert!(v["squall_time_s"].is_null());
        assert!(v.get("problems").is_none());
    }
}
