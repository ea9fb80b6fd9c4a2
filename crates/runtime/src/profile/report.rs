//! The job's sharing profile, put together on rank 0 from every node's [`NodeProfile`]: pages
//! attributed to allocation sites and global variables, each site classified (false sharing,
//! true sharing, producer/consumer, private) with a one-line diagnosis, the locks and
//! barriers with the longest waits, and the series the HTML report plots (`squall report`).
//!
//! Owns: aggregation, classification, the text table and the JSON document. Must not touch:
//! the recorder or the network.

use super::{NodeProfile, SyncRec, BUCKET_MS};
use crate::stats::Breakdown;
use serde::{Deserialize, Serialize};
use squall_core::PAGE_SIZE;
use squall_protocol::profile::PageCounts;
use std::collections::BTreeMap;

/// How many sites, locks and barriers the text report lists.
pub const WORST: usize = 10;
/// The JSON document's version (its fields: `docs/profile.md`).
pub const VERSION: u32 = 1;
/// Entries of a site's page × node heat list kept (the pages with the most faults).
const HEAT_CAP: usize = 4096;

/// One allocation site (or global variable) over the whole job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteReport {
    /// `file:line (function)`, `symbol+0xoff`, or the variable's name.
    pub site: String,
    /// `alloc` or `global`.
    pub kind: String,
    pub allocations: u64,
    pub bytes: u64,
    /// Pages with any activity.
    pub pages: u64,
    pub read_faults: u64,
    pub write_faults: u64,
    pub fetches: u64,
    pub invalidations: u64,
    pub diffs: u64,
    pub diff_bytes: u64,
    pub home_migrations: u64,
    /// Pages written by two or more nodes (they bounce between them).
    pub bouncing_pages: u64,
    /// Pages whose writers touched disjoint 64-byte blocks (false) or the same ones (true)
    /// between synchronizations, and the events counted.
    pub false_sharing_pages: u64,
    pub true_sharing_pages: u64,
    pub false_sharing_events: u64,
    pub true_sharing_events: u64,
    /// `false sharing`, `true sharing`, `producer/consumer`, `private` or `read-only`.
    pub class: String,
    /// The nodes involved in the class's sharing.
    pub nodes: Vec<u16>,
    pub diagnosis: String,
    /// The schema's names: `false_sharing_pages`, `true_sharing_pages`, `nodes`, and the
    /// class as `false`, `true`, `none` (shared without sharing writes: producer/consumer,
    /// read-only) or `private`.
    #[serde(default)]
    pub false_shared_pages: u64,
    #[serde(default)]
    pub true_shared_pages: u64,
    #[serde(default)]
    pub nodes_involved: Vec<u16>,
    #[serde(default)]
    pub sharing: String,
    /// `[page index in the allocation, node, faults]`, nonzero only, at most `HEAT_CAP`
    /// (the pages with the most faults).
    #[serde(default)]
    pub heat: Vec<[u64; 3]>,
}

impl SiteReport {
    /// The protocol work this site caused (the report's sort key).
    pub fn cost(&self) -> u64 {
        self.read_faults
            + self.write_faults
            + self.fetches
            + self.invalidations
            + self.diffs
            + self.home_migrations
    }
}

/// A lock or barrier over the whole job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncReport {
    /// The lock's allocation site and offset, or its id; `barrier N`.
    pub name: String,
    pub id: u64,
    pub acquires: u64,
    pub transfers: u64,
    pub total_wait_ms: f64,
    pub max_wait_ms: f64,
    pub avg_hold_us: f64,
    /// The lock's or barrier's address (`0x...`: the object's, when its id is derived from
    /// it), else its id.
    #[serde(default)]
    pub addr: String,
    /// Acquisitions whose token came from another node (each one transfer of the token).
    #[serde(default)]
    pub remote_acquires: u64,
    /// `total_wait_ms` in seconds.
    #[serde(default)]
    pub wait_s: f64,
    /// Barriers: episodes completed (a lock: 0).
    #[serde(default)]
    pub episodes: u64,
}

/// One node's time breakdown (seed 000 Figures 3–4), from its statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeBreakdown {
    pub node: u16,
    /// Application threads' time minus synchronization and data stalls.
    pub compute_s: f64,
    /// Application threads blocked on page faults.
    pub data_wait_s: f64,
    /// Application threads inside locks, barriers, conditions, flags.
    pub sync_s: f64,
    /// The service thread in protocol and synchronization processing.
    pub protocol_s: f64,
    /// The service thread in transport sends.
    #[serde(default)]
    pub messaging_s: f64,
}

impl NodeBreakdown {
    fn of(node: u16, b: &Breakdown) -> Self {
        NodeBreakdown {
            node,
            compute_s: b.task_s,
            data_wait_s: b.data_stall_s,
            sync_s: b.sync_s,
            protocol_s: b.protocol_s,
            messaging_s: b.messaging_s,
        }
    }
}

/// Faults of one node in one time bucket (nonzero buckets only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub node: u16,
    /// The bucket's start, seconds since the node started.
    pub t_s: f64,
    pub faults: u32,
}

/// The page × node fault map of the worst site (for the HTML heat map).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeatMap {
    pub site: String,
    /// Page addresses (in order), and per node the faults on each.
    pub pages: Vec<u64>,
    pub faults: Vec<Vec<u32>>,
}

/// The job's profile (the JSON `squall report` renders; its fields are listed in
/// `docs/profile.md`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobProfile {
    #[serde(default)]
    pub version: u32,
    /// The program and its arguments, as rank 0 was started.
    #[serde(default)]
    pub program: String,
    /// Seconds from rank 0's start to its report.
    #[serde(default)]
    pub elapsed_s: f64,
    #[serde(default)]
    pub page_size: u64,
    pub nodes: u16,
    /// Every site with activity, worst first.
    pub sites: Vec<SiteReport>,
    pub locks: Vec<SyncReport>,
    pub barriers: Vec<SyncReport>,
    pub bucket_ms: u64,
    /// Per node, its faults per `bucket_ms`.
    pub faults_over_time: Vec<Vec<u32>>,
    /// Per node, its time breakdown.
    pub breakdown: Vec<NodeBreakdown>,
    /// `faults_over_time` as a list of nonzero (node, time, faults) points.
    #[serde(default)]
    pub timeline: Vec<TimelinePoint>,
    pub heat: HeatMap,
}

/// A named address range: (start, end, label, kind).
type Range = (u64, u64, String, &'static str);

fn bits(mask: u64) -> Vec<u16> {
    (0..64u16).filter(|b| mask & (1 << b) != 0).collect()
}

fn node_list(nodes: &[u16]) -> String {
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    match names.as_slice() {
        [] => "no nodes".into(),
        [one] => format!("node {one}"),
        [init @ .., last] => format!("nodes {} and {last}", init.join(", ")),
    }
}

/// The range overlapping most of the page at address `page` (`ranges` sorted by start).
fn owner(ranges: &[Range], page: u64) -> Option<usize> {
    let lo = page;
    let hi = lo + PAGE_SIZE as u64;
    let first = ranges.partition_point(|r| r.1 <= lo);
    let mut best: Option<(u64, usize)> = None;
    for (i, r) in ranges.iter().enumerate().skip(first) {
        if r.0 >= hi {
            break;
        }
        let overlap = r.1.min(hi) - r.0.max(lo);
        if overlap > 0 && best.is_none_or(|(b, _)| overlap > b) {
            best = Some((overlap, i));
        }
    }
    best.map(|(_, i)| i)
}

/// The globals on the page at `page`: `global a, b, c (+N)` (one page is one unit of
/// coherence, so the variables sharing it are reported together).
fn globals_label(ranges: &[Range], page: u64) -> String {
    let hi = page + PAGE_SIZE as u64;
    let names: Vec<&str> = ranges
        .iter()
        .filter(|r| r.3 == "global" && r.0 < hi && r.1 > page)
        .map(|r| r.2.as_str())
        .collect();
    let shown = names.iter().take(4).copied().collect::<Vec<_>>().join(", ");
    match names.len() {
        0..=4 => format!("global {shown}"),
        n => format!("global {shown} (+{} more)", n - 4),
    }
}

/// The inverse of the pthreads layer's object-id mix (`squall-capi` `pthread::mix`, the
/// splitmix64 finalizer): a mutex or barrier id back to the object's address.
pub fn unmix(mut z: u64) -> u64 {
    z ^= (z >> 31) ^ (z >> 62);
    z = z.wrapping_mul(0x3196_42b2_d24d_8ec3);
    z ^= (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(0x96de_1b17_3f11_9089);
    z ^= (z >> 30) ^ (z >> 60);
    z
}

/// The name of a lock or barrier id: the allocation or variable holding the object (its id
/// is its address, or the pthreads layer's mix of it), else the id; and the object's address
/// (`id` when no allocation or variable holds it).
fn sync_named(ranges: &[Range], id: u64, what: &str) -> (String, u64) {
    for addr in [id, unmix(id)] {
        let i = ranges.partition_point(|x| x.1 <= addr);
        if let Some(x) = ranges.get(i).filter(|x| x.0 <= addr) {
            let name = if x.3 == "global" {
                format!("global {}", x.2)
            } else {
                x.2.clone()
            };
            let name = if addr == x.0 {
                name
            } else {
                format!("{name}+{:#x}", addr - x.0)
            };
            return (name, addr);
        }
    }
    (format!("{what} {id:#x}"), id)
}

/// Put the nodes' profiles together.
pub fn build(profiles: &[NodeProfile]) -> JobProfile {
    let nodes = profiles.iter().map(|p| p.node + 1).max().unwrap_or(0);
    // Named ranges: allocations grouped by site label; globals by name.
    let mut ranges: Vec<Range> = Vec::new();
    let mut sites: BTreeMap<String, SiteReport> = BTreeMap::new();
    for p in profiles {
        for a in &p.allocs {
            let label = a.site.label();
            ranges.push((a.addr, a.addr + a.len, label.clone(), "heap"));
            let s = sites.entry(label.clone()).or_default();
            s.site = label;
            s.kind = "alloc".into();
            s.allocations += 1;
            s.bytes += a.len;
        }
        for g in &p.globals {
            let label = g.site.label();
            ranges.push((g.addr, g.addr + g.len, label.clone(), "global"));
            let s = sites.entry(label.clone()).or_default();
            s.site = label;
            s.kind = "global".into();
            s.allocations += 1;
            s.bytes += g.len;
        }
    }
    ranges.sort_by_key(|r| (r.0, r.1));
    // Every page: the nodes' counts summed, and each node's faults and writes.
    let mut pages: BTreeMap<u64, (PageCounts, Vec<u32>, u64)> = BTreeMap::new();
    for p in profiles {
        for (page, c) in &p.pages {
            let e = pages
                .entry(*page)
                .or_insert_with(|| (PageCounts::default(), vec![0; nodes as usize], 0));
            e.0.merge(c);
            if let Some(f) = e.1.get_mut(p.node as usize) {
                *f += c.read_faults + c.write_faults;
            }
            if c.write_faults > 0 {
                e.2 |= 1u64 << p.node.min(63);
            }
        }
    }
    let mut by_site: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // Per site: (page index in its allocation, node, faults), nonzero only.
    let mut heat_of: BTreeMap<String, Vec<[u64; 3]>> = BTreeMap::new();
    let mut site_nodes: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for (page, (c, _, wrote)) in &pages {
        let (label, kind, base) = match owner(&ranges, *page) {
            Some(i) if ranges[i].3 == "global" => {
                (globals_label(&ranges, *page), "global", ranges[i].0)
            }
            Some(i) => (ranges[i].2.clone(), "alloc", ranges[i].0),
            None => ("(unattributed pages)".to_string(), "alloc", 0),
        };
        let index = (page - (base & !(PAGE_SIZE as u64 - 1))) / PAGE_SIZE as u64;
        let per_node = &pages[page].1;
        heat_of.entry(label.clone()).or_default().extend(
            per_node
                .iter()
                .enumerate()
                .filter(|(_, f)| **f > 0)
                .map(|(n, f)| [index, n as u64, u64::from(*f)]),
        );
        let s = sites.entry(label.clone()).or_insert_with(|| SiteReport {
            site: label.clone(),
            kind: kind.into(),
            ..SiteReport::default()
        });
        s.pages += 1;
        s.read_faults += u64::from(c.read_faults);
        s.write_faults += u64::from(c.write_faults);
        s.fetches += u64::from(c.fetches);
        s.invalidations += u64::from(c.invalidations);
        s.diffs += u64::from(c.diffs);
        s.diff_bytes += c.diff_bytes;
        s.home_migrations += u64::from(c.migrations);
        let writers = c.writers | wrote;
        if writers.count_ones() >= 2 {
            s.bouncing_pages += 1;
        }
        s.false_sharing_events += u64::from(c.false_sharing);
        s.true_sharing_events += u64::from(c.true_sharing);
        let n = site_nodes.entry(label.clone()).or_default();
        n.2 |= writers;
        if c.true_sharing > 0 && c.true_sharing >= c.false_sharing {
            s.true_sharing_pages += 1;
            n.1 |= c.true_nodes;
        } else if c.false_sharing > 0 {
            s.false_sharing_pages += 1;
            n.0 |= c.false_nodes;
        }
        by_site.entry(label).or_default().push(*page);
    }
    let mut list: Vec<SiteReport> = sites
        .into_values()
        .filter(|s| s.pages > 0)
        .map(|mut s| {
            let (fnodes, tnodes, writers) = site_nodes.get(&s.site).copied().unwrap_or_default();
            classify(&mut s, fnodes, tnodes, writers);
            s.false_shared_pages = s.false_sharing_pages;
            s.true_shared_pages = s.true_sharing_pages;
            s.nodes_involved = s.nodes.clone();
            s.sharing = match s.class.as_str() {
                "false sharing" => "false",
                "true sharing" => "true",
                "private" => "private",
                _ => "none",
            }
            .into();
            s.heat = heat_of.remove(&s.site).map(capped).unwrap_or_default();
            s
        })
        .collect();
    list.sort_by(|a, b| b.cost().cmp(&a.cost()).then(a.site.cmp(&b.site)));
    let heat = list
        .first()
        .map(|worst| {
            let ps = by_site.get(&worst.site).cloned().unwrap_or_default();
            let mut faults = vec![Vec::with_capacity(ps.len()); nodes as usize];
            for p in &ps {
                if let Some((_, per, _)) = pages.get(p) {
                    for (n, f) in per.iter().enumerate() {
                        faults[n].push(*f);
                    }
                }
            }
            HeatMap {
                site: worst.site.clone(),
                pages: ps,
                faults,
            }
        })
        .unwrap_or_default();
    let mut timeline = Vec::new();
    for p in profiles {
        for (b, f) in p.faults_over_time.iter().enumerate() {
            if *f > 0 {
                timeline.push(TimelinePoint {
                    node: p.node,
                    t_s: (b as u64 * BUCKET_MS) as f64 / 1e3,
                    faults: *f,
                });
            }
        }
    }
    JobProfile {
        version: VERSION,
        page_size: PAGE_SIZE as u64,
        nodes,
        sites: list,
        locks: locks(profiles, &ranges),
        barriers: barriers(profiles, &ranges),
        bucket_ms: BUCKET_MS,
        faults_over_time: profiles
            .iter()
            .map(|p| p.faults_over_time.clone())
            .collect(),
        breakdown: profiles
            .iter()
            .map(|p| NodeBreakdown::of(p.node, &p.breakdown))
            .collect(),
        timeline,
        heat,
        ..JobProfile::default()
    }
}

/// A site's heat list: the `HEAT_CAP` entries with the most faults, by page and node.
fn capped(mut h: Vec<[u64; 3]>) -> Vec<[u64; 3]> {
    if h.len() > HEAT_CAP {
        h.sort_by(|a, b| b[2].cmp(&a[2]).then(a.cmp(b)));
        h.truncate(HEAT_CAP);
    }
    h.sort();
    h
}

/// Name the site's sharing pattern and say what to do about it.
fn classify(s: &mut SiteReport, fnodes: u64, tnodes: u64, writers: u64) {
    if s.false_sharing_pages > 0 && s.false_sharing_pages >= s.true_sharing_pages {
        s.class = "false sharing".into();
        s.nodes = bits(fnodes);
        s.diagnosis = format!(
            "false sharing between {} on {} page{}: writers touch disjoint 64-byte blocks — \
             pad each node's part to a page ({PAGE_SIZE} B) or use a unit of 64 B",
            node_list(&s.nodes),
            s.false_sharing_pages,
            plural(s.false_sharing_pages)
        );
    } else if s.true_sharing_pages > 0 {
        s.class = "true sharing".into();
        s.nodes = bits(tnodes);
        s.diagnosis = format!(
            "true sharing between {} on {} page{}: writers overlap in the same 64-byte blocks \
             ({} diffs, {} B) — the data really moves; batch the updates per synchronization \
             or keep it on one node",
            node_list(&s.nodes),
            s.true_sharing_pages,
            plural(s.true_sharing_pages),
            s.diffs,
            s.diff_bytes
        );
    } else if writers != 0 && s.fetches > 0 {
        s.class = "producer/consumer".into();
        s.nodes = bits(writers);
        s.diagnosis = format!(
            "written by {}, fetched {} times by readers after {} invalidations — \
             fine if consumed whole; otherwise place its pages at their readers",
            node_list(&s.nodes),
            s.fetches,
            s.invalidations
        );
    } else if s.fetches > 0 {
        s.class = "read-only".into();
        s.diagnosis = format!(
            "read-shared: {} fetches, no writes seen after them — cost is the first touch only",
            s.fetches
        );
    } else {
        s.class = "private".into();
        s.nodes = bits(writers);
        s.diagnosis = "used by one node: no coherence traffic".into();
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn to_report((name, addr): (String, u64), id: u64, r: &SyncRec) -> SyncReport {
    SyncReport {
        name,
        id,
        addr: format!("{addr:#x}"),
        acquires: r.acquires,
        transfers: r.transfers,
        remote_acquires: r.transfers,
        wait_s: r.wait_ns as f64 / 1e9,
        episodes: r.episodes,
        total_wait_ms: ms(r.wait_ns),
        max_wait_ms: ms(r.max_wait_ns),
        avg_hold_us: if r.holds > 0 {
            r.hold_ns as f64 / r.holds as f64 / 1e3
        } else {
            0.0
        },
    }
}

fn locks(profiles: &[NodeProfile], ranges: &[Range]) -> Vec<SyncReport> {
    let mut all: BTreeMap<u64, SyncRec> = BTreeMap::new();
    for p in profiles {
        for (id, r) in &p.locks {
            all.entry(*id).or_default().merge(r);
        }
    }
    let mut out: Vec<SyncReport> = all
        .iter()
        .map(|(id, r)| to_report(sync_named(ranges, *id, "lock"), *id, r))
        .collect();
    out.sort_by(|a, b| b.total_wait_ms.total_cmp(&a.total_wait_ms));
    out
}

fn barriers(profiles: &[NodeProfile], ranges: &[Range]) -> Vec<SyncReport> {
    let mut all: BTreeMap<u64, SyncRec> = BTreeMap::new();
    for p in profiles {
        for (id, r) in &p.barriers {
            all.entry(*id).or_default().merge(r);
        }
    }
    let mut out: Vec<SyncReport> = all
        .iter()
        .map(|(id, r)| to_report(sync_named(ranges, *id, "barrier"), *id, r))
        .collect();
    out.sort_by(|a, b| b.total_wait_ms.total_cmp(&a.total_wait_ms));
    out
}

/// The text report printed at exit: the worst sites with their diagnosis, then the locks
/// and barriers with the longest waits.
pub fn text(job: &JobProfile, file: &str) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "squall profile: {} nodes, {} sites with activity (worst {} shown; JSON in {file})\n",
        job.nodes,
        job.sites.len(),
        WORST.min(job.sites.len())
    ));
    o.push_str(&format!(
        "{:<44} {:>6} {:>8} {:>8} {:>7} {:>7} {:>6} {:>9} {:>5} {:>6}\n",
        "site",
        "pages",
        "rfaults",
        "wfaults",
        "fetch",
        "inval",
        "diffs",
        "diffbytes",
        "migr",
        "bounce"
    ));
    for s in job.sites.iter().take(WORST) {
        let name = if s.site.chars().count() > 44 {
            let tail: String = s
                .site
                .chars()
                .rev()
                .take(43)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("…{tail}")
        } else {
            s.site.clone()
        };
        o.push_str(&format!(
            "{name:<44} {:>6} {:>8} {:>8} {:>7} {:>7} {:>6} {:>9} {:>5} {:>6}\n",
            s.pages,
            s.read_faults,
            s.write_faults,
            s.fetches,
            s.invalidations,
            s.diffs,
            s.diff_bytes,
            s.home_migrations,
            s.bouncing_pages
        ));
        o.push_str(&format!("    {}: {}\n", s.class, s.diagnosis));
    }
    for (title, list) in [("locks", &job.locks), ("barriers", &job.barriers)] {
        if list.is_empty() {
            continue;
        }
        o.push_str(&format!(
            "{title} by total wait:\n{:<44} {:>9} {:>9} {:>12} {:>11} {:>12}\n",
            "name", "acquires", "transfers", "wait ms", "max ms", "avg hold us"
        ));
        for l in list.iter().take(WORST) {
            o.push_str(&format!(
                "{:<44} {:>9} {:>9} {:>12.3} {:>11.3} {:>12.2}\n",
                l.name, l.acquires, l.transfers, l.total_wait_ms, l.max_wait_ms, l.avg_hold_us
            ));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn unmix_inverts_the_object_id_mix() {
        for a in [0u64, 8, 0x7f00_1234_5678, u64::MAX, 0x5555_5555_8040] {
            assert_eq!(unmix(mix(a)), a);
        }
    }

    #[test]
    fn locks_are_named_by_the_allocation_holding_them() {
        let ranges: Vec<Range> = vec![
            (0x1000, 0x1040, "hot".into(), "global"),
            (0x2000, 0x3000, "a.c:7 (main)".into(), "heap"),
        ];
        assert_eq!(
            sync_named(&ranges, mix(0x1000), "lock"),
            ("global hot".to_string(), 0x1000)
        );
        assert_eq!(
            sync_named(&ranges, 0x2010, "lock"),
            ("a.c:7 (main)+0x10".to_string(), 0x2010)
        );
        assert_eq!(
            sync_named(&ranges, 0x9999, "lock"),
            ("lock 0x9999".to_string(), 0x9999)
        );
    }
}
