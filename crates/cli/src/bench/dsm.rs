//! Drivers of the shared-memory benches: `squall bench fault` (remote page fault beside a raw
//! one-page request/reply on the same transport, write faults, diff throughput), `lock`,
//! `barrier` and `thread` (the CableS basic-cost table). Node sides are in `node::dsm`.
//! Owns these drivers only.
use super::raw;
use super::report::{emit_json, median, round, run_nodes, run_nodes_env, Table};
use clap::Args;
use serde_json::{json, Value};
use squall_protocol::diff::{apply_diff, make_diff};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct DsmBenchArgs {
    /// tcp or udp.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// Operations per repetition (pages for `fault`).
    #[arg(long)]
    pub iters: Option<usize>,
    /// Repetitions; medians over them are reported.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Node counts (`barrier` and `lock --contended` only).
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    pub nodes: Vec<usize>,
    /// `lock` only: one lock taken in a loop by every node (hand-offs under contention, and
    /// the third-node acquire at 3 nodes or more) instead of the uncontended costs.
    #[arg(long)]
    pub contended: bool,
    /// `lock --contended` only: threads per node taking the lock.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// `lock --contended` only: microseconds each thread works (busy) outside the lock
    /// between two acquires. With 0 a node re-acquires the lock at once, so a node whose
    /// re-acquires stay local may finish its loop before another node's request arrives
    /// (few hand-offs: see `remote_share`). A think time longer than a hand-off lets the
    /// other nodes' requests in (2 nodes, 200: about half the acquires are hand-offs); the
    /// per-acquire and hand-off times then include it.
    #[arg(long, default_value_t = 0)]
    pub think_us: u64,
    /// `fault` only: also time the service thread's share of each fault (the statistics'
    /// data stall around it). The waiting this takes after each fault disturbs the timing of
    /// the next one: the fault latencies of such a run run higher than a plain run's.
    #[arg(long)]
    pub breakdown: bool,
    /// `fault` only: who serves the faults (`SQUALL_FAULTS`): `thread` (the service thread,
    /// the default), `signal` (the faulting thread itself), or `both`, alternating the two in
    /// every repetition.
    #[arg(long, default_value = "thread", value_parser = ["thread", "signal", "both"])]
    pub faults: String,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

const PAGE: usize = 4096;
const MIB: f64 = (1 << 20) as f64;
/// Message size of the raw bulk baseline of the sequential scan.
const BULK_MSG: usize = 64 << 10;

fn nums(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// The `q` quantile (0..=1) of `values` (nearest rank); NaN if empty.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn node0(results: &[(u16, Value)]) -> Result<Value, String> {
    results
        .iter()
        .find(|(r, _)| *r == 0)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| "node 0 printed no result".into())
}

fn job(nodes: usize, a: &DsmBenchArgs, kind: &str, default_iters: usize) -> Result<Value, String> {
    job_env(nodes, a, kind, default_iters, &[])
}

fn job_env(
    nodes: usize,
    a: &DsmBenchArgs,
    kind: &str,
    default_iters: usize,
    env: &[(&str, &str)],
) -> Result<Value, String> {
    let args = vec![
        kind.to_string(),
        if kind == "bench-fault" {
            "--pages".into()
        } else {
            "--iters".into()
        },
        a.iters.unwrap_or(default_iters).to_string(),
        "--reps".into(),
        a.reps.to_string(),
    ];
    let mut args = args;
    if kind == "bench-fault" && a.breakdown {
        args.push("--breakdown".into());
    }
    node0(&run_nodes_env(
        nodes,
        &a.transport,
        args,
        Duration::from_secs(600),
        env,
    )?)
}

fn finish(a: &DsmBenchArgs, table: Table, obj: Value) -> Result<(), String> {
    table.print();
    if a.json {
        emit_json(&obj);
    }
    Ok(())
}

/// Diff creation and application throughput in MiB/s of page processed, for a page with
/// `frac` of its 8-byte words changed.
fn diff_throughput(frac: f64, reps: usize) -> (f64, f64, usize) {
    const PAGES: usize = 256;
    let twin = vec![0u8; 4096 * PAGES];
    let mut cur = twin.clone();
    let words = 4096 / 8;
    let step = ((1.0 / frac.max(1e-6)) as usize).max(1);
    for p in 0..PAGES {
        for w in (0..words).step_by(step) {
            cur[p * 4096 + w * 8] = 1;
        }
    }
    let (mut mk, mut ap) = (Vec::new(), Vec::new());
    let mut size = 0;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let diffs: Vec<Vec<u8>> = (0..PAGES)
            .map(|p| {
                make_diff(
                    &twin[p * 4096..(p + 1) * 4096],
                    &cur[p * 4096..(p + 1) * 4096],
                )
            })
            .collect();
        mk.push((PAGES * 4096) as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64);
        size = diffs[0].len();
        let mut target = twin.clone();
        let t = Instant::now();
        for (p, d) in diffs.iter().enumerate() {
            if apply_diff(&mut target[p * 4096..(p + 1) * 4096], d).is_none() {
                return (f64::NAN, f64::NAN, size);
            }
        }
        ap.push((PAGES * 4096) as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64);
        if target != cur {
            return (f64::NAN, f64::NAN, size);
        }
    }
    (median(&mk), median(&ap), size)
}

/// The 1-minute load average (Linux `/proc/loadavg`), if readable: fault latencies are made of
/// thread wake-ups, whose cost depends on how busy the machine is, so reports carry it.
fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(super) fn p50_p99(v: &[f64]) -> (f64, f64) {
    (quantile(v, 0.5), quantile(v, 0.99))
}

/// The raw-socket request/reply of `req` bytes answered by `reply` bytes on `transport`.
fn raw_request_reply(
    transport: &str,
    req: usize,
    reply: usize,
    n: usize,
) -> Result<Vec<f64>, String> {
    match transport {
        "udp" => raw::udp_request_reply(req, reply, n, 20),
        _ => raw::tcp_request_reply(req, reply, n, 20),
    }
}

/// One fault mode's latencies in microseconds (`squall bench fault`).
#[derive(Default)]
struct FaultSamples {
    read: Vec<f64>,
    twin: Vec<f64>,
    miss: Vec<f64>,
    req: Vec<f64>,
    /// Per fault: the service thread's time (taking the fault to resuming the thread).
    read_svc: Vec<f64>,
    twin_svc: Vec<f64>,
    miss_svc: Vec<f64>,
}

impl FaultSamples {
    fn add(&mut self, v: &Value) {
        self.read.extend(nums(v, "read_fault_us"));
        self.twin.extend(nums(v, "write_fault_twin_us"));
        self.miss.extend(nums(v, "write_miss_us"));
        self.req.extend(nums(v, "squall_req_us"));
        self.read_svc.extend(nums(v, "read_fault_service_us"));
        self.twin_svc.extend(nums(v, "write_fault_twin_service_us"));
        self.miss_svc.extend(nums(v, "write_miss_service_us"));
    }
}

pub fn fault(a: DsmBenchArgs) -> Result<(), String> {
    let load_before = load_avg();
    let pages = a.iters.unwrap_or(200);
    let modes: &[&str] = match a.faults.as_str() {
        "both" => &["thread", "signal"],
        "signal" => &["signal"],
        _ => &["thread"],
    };
    let mut samples: Vec<FaultSamples> = modes.iter().map(|_| FaultSamples::default()).collect();
    let mut raw = Vec::new();
    let (mut scan_mib_s, mut bulk_mib_s, mut per_fetch) = (Vec::new(), Vec::new(), Vec::new());
    // One job per rep (and mode), each followed by the raw baselines: a shared machine's
    // speed drifts over seconds, so Squall's reps, its modes and the raw ones alternate.
    for _ in 0..a.reps {
        let one = DsmBenchArgs {
            transport: a.transport.clone(),
            iters: Some(pages),
            reps: 1,
            nodes: a.nodes.clone(),
            contended: false,
            threads: 1,
            think_us: 0,
            breakdown: a.breakdown,
            faults: a.faults.clone(),
            json: a.json,
        };
        let mut first = None;
        for (mode, s) in modes.iter().zip(samples.iter_mut()) {
            let v = job_env(2, &one, "bench-fault", pages, &[("SQUALL_FAULTS", mode)])?;
            s.add(&v);
            first.get_or_insert(v);
        }
        let v = first.unwrap_or_default();
        let scan_pages = v
            .get("scan_pages")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN);
        let fetches = v
            .get("scan_fetches")
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN);
        let bytes = scan_pages * PAGE as f64;
        for s in nums(&v, "scan_s") {
            scan_mib_s.push(bytes / s / MIB);
        }
        per_fetch.push(scan_pages / fetches);
        raw.extend(raw_request_reply(&a.transport, 8, PAGE, pages)?);
        // Raw bulk: the same bytes as the scan, streamed in 64 KiB writes over TCP.
        let count = (bytes as usize).div_ceil(BULK_MSG).max(1);
        for s in raw::tcp_bulk(BULK_MSG, count, 1)? {
            bulk_mib_s.push((count * BULK_MSG) as f64 / s / MIB);
        }
    }
    if samples.iter().any(|s| s.read.is_empty()) || raw.is_empty() {
        return Err("fault: node 0 reported no read faults".into());
    }
    let load = match (load_before, load_avg()) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let (w50, w99) = p50_p99(&raw);
    let scan = median(&scan_mib_s);
    let bulk = median(&bulk_mib_s);
    let ppf = median(&per_fetch);
    let mut table = Table::new(
        format!(
            "fault: 2 nodes over {}, {} reps x {pages} pages homed on node 1, touched in a \
             scattered order (each fault checked to be one 4 KiB fetch, nothing read ahead); \
             faults served by: {}; baseline: raw {} socket 8 B request / 4 KiB reply in the \
             same run; load average {}",
            a.transport,
            a.reps,
            modes.join(" and "),
            a.transport,
            load.map_or("unknown".into(), |l| format!("{l:.2}"))
        ),
        &[
            "operation",
            "p50",
            "p99",
            "raw_p50",
            "raw_p99",
            "ratio_p50",
            "ratio_p99",
            "unit",
        ],
    );
    let us_row = |t: &mut Table, name: &str, (p50, p99): (f64, f64), base: Option<(f64, f64)>| {
        let (b50, b99) = base.unwrap_or((f64::NAN, f64::NAN));
        let cell = |x: f64, d: usize| {
            if x.is_nan() {
                "-".to_string()
            } else {
                format!("{x:.d$}")
            }
        };
        t.row(vec![
            name.into(),
            cell(p50, 1),
            cell(p99, 1),
            cell(b50, 1),
            cell(b99, 1),
            cell(p50 / b50, 2),
            cell(p99 / b99, 2),
            "us".into(),
        ]);
    };
    let mut rows = Vec::new();
    for (mode, s) in modes.iter().zip(&samples) {
        // Rows of the default mode keep their names; the other mode's say which it is.
        let tag = if *mode == "thread" {
            String::new()
        } else {
            format!(" [{mode}]")
        };
        let (r, q) = (p50_p99(&s.read), p50_p99(&s.req));
        let (t, m) = (p50_p99(&s.twin), p50_p99(&s.miss));
        let (rs, ts, ms) = (
            p50_p99(&s.read_svc),
            p50_p99(&s.twin_svc),
            p50_p99(&s.miss_svc),
        );
        let w = Some((w50, w99));
        us_row(
            &mut table,
            &format!("cold remote 4 KiB read fault{tag}"),
            r,
            w,
        );
        us_row(
            &mut table,
            &format!("squall request/reply (8 B / 4 KiB){tag}"),
            q,
            w,
        );
        us_row(
            &mut table,
            &format!("write fault on read copy (twin){tag}"),
            t,
            None,
        );
        us_row(&mut table, &format!("write miss (fetch + twin){tag}"), m, w);
        if a.breakdown {
            for (name, v) in [
                ("service thread per cold read fault", rs),
                ("service thread per twin write fault", ts),
                ("service thread per write miss", ms),
            ] {
                // From the statistics' data stall around each fault: the rest of a fault's
                // latency is its capture and the thread wake-ups.
                us_row(&mut table, &format!("{name}{tag}"), v, None);
            }
        }
        rows.extend([
            json!({"op": "read_fault", "faults": mode, "size": PAGE, "squall_us": round(r.0, 2), "squall_p99_us": round(r.1, 2),
                   "raw_us": round(w50, 2), "raw_p99_us": round(w99, 2),
                   "ratio": round(r.0 / w50, 3), "ratio_p99": round(r.1 / w99, 3), "samples": s.read.len(),
                   "service_us": round(rs.0, 2), "service_p99_us": round(rs.1, 2)}),
            json!({"op": "request_reply", "faults": mode, "size": PAGE, "squall_us": round(q.0, 2), "squall_p99_us": round(q.1, 2),
                   "raw_us": round(w50, 2), "ratio": round(q.0 / w50, 3)}),
            json!({"op": "write_fault_twin", "faults": mode, "size": PAGE, "squall_us": round(t.0, 2), "squall_p99_us": round(t.1, 2),
                   "service_us": round(ts.0, 2), "service_p99_us": round(ts.1, 2)}),
            json!({"op": "write_miss", "faults": mode, "size": PAGE, "squall_us": round(m.0, 2), "squall_p99_us": round(m.1, 2),
                   "raw_us": round(w50, 2), "ratio": round(m.0 / w50, 3), "service_us": round(ms.0, 2), "service_p99_us": round(ms.1, 2)}),
        ]);
    }
    table.row(vec![
        format!("sequential scan, read-ahead ({ppf:.1} pages per fetch)"),
        format!("{scan:.0}"),
        "-".into(),
        format!("{bulk:.0}"),
        "-".into(),
        format!("{:.2}", scan / bulk),
        "-".into(),
        "MiB/s (raw: TCP bulk)".into(),
    ]);
    rows.push(
        json!({"op": "sequential_scan", "squall_mib_s": round(scan, 1), "raw_bulk_mib_s": round(bulk, 1),
               "ratio": round(scan / bulk, 3), "pages_per_fetch": round(ppf, 2)}),
    );
    for frac in [0.01, 0.1, 0.5, 1.0] {
        let (mk, ap, size) = diff_throughput(frac, a.reps);
        table.row(vec![
            format!("diff {:.0}% of words: create", frac * 100.0),
            format!("{mk:.0}"),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "MiB/s".into(),
        ]);
        table.row(vec![
            format!("diff {:.0}% of words: apply", frac * 100.0),
            format!("{ap:.0}"),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "MiB/s".into(),
        ]);
        rows.push(
            json!({"op": "diff", "changed_fraction": frac, "diff_bytes": size,
                         "create_mib_s": round(mk, 1), "apply_mib_s": round(ap, 1)}),
        );
    }
    finish(
        &a,
        table,
        json!({"bench": "fault", "transport": a.transport, "load_avg_1m": load, "rows": rows}),
    )
}

pub fn lock(a: DsmBenchArgs) -> Result<(), String> {
    if a.contended {
        return super::lockbench::contended(a);
    }
    let v = job(2, &a, "bench-lock", 500)?;
    let remote_all = nums(&v, "remote_acquire_us");
    let (remote, remote99) = p50_p99(&remote_all);
    let rtt = median(&nums(&v, "rtt_us"));
    let msg_all = nums(&v, "messages_per_acquire");
    let msgs = median(&msg_all);
    let remote_checked = v
        .get("remote_acquires_checked")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if remote_all.is_empty() || remote_checked != remote_all.len() as u64 {
        return Err(format!(
            "lock: {} remote acquires timed, {remote_checked} counted remote by the statistics",
            remote_all.len()
        ));
    }
    let fast = nums(&v, "local_fast_pair_ns");
    let native = nums(&v, "native_pair_ns");
    let checked = v
        .get("local_fast_pairs_checked")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if fast.is_empty() || native.len() != fast.len() || checked == 0 {
        return Err("node 0 reported no local uncontended lock blocks".into());
    }
    let (f50, f99) = (quantile(&fast, 0.5), quantile(&fast, 0.99));
    let (n50, n99) = (quantile(&native, 0.5), quantile(&native, 0.99));
    let mut table = Table::new(
        format!(
            "lock: 2 nodes over {}, medians of {} reps",
            a.transport, a.reps
        ),
        &["operation", "value", "unit", "round_trips"],
    );
    table.row(vec![
        format!(
            "uncontended remote acquire, p50 ({} acquires)",
            remote_all.len()
        ),
        format!("{remote:.1}"),
        "us".into(),
        format!("{:.2}", remote / rtt),
    ]);
    table.row(vec![
        "uncontended remote acquire, p99".into(),
        format!("{remote99:.1}"),
        "us".into(),
        format!("{:.2}", remote99 / rtt),
    ]);
    table.row(vec![
        "lock messages per remote acquire (both nodes, statistics)".into(),
        format!("{msgs:.2}"),
        "msgs".into(),
        "-".into(),
    ]);
    table.row(vec![
        format!("local uncontended lock+unlock, p50 ({} blocks)", fast.len()),
        format!("{f50:.1}"),
        "ns".into(),
        "-".into(),
    ]);
    table.row(vec![
        "local uncontended lock+unlock, p99".into(),
        format!("{f99:.1}"),
        "ns".into(),
        "-".into(),
    ]);
    table.row(vec![
        "futex mutex lock+unlock, p50 / p99 (same run)".into(),
        format!("{n50:.1} / {n99:.1}"),
        "ns".into(),
        "-".into(),
    ]);
    table.row(vec![
        "local lock / futex mutex (p50)".into(),
        format!("{:.2}", f50 / n50),
        "x".into(),
        "-".into(),
    ]);
    table.row(vec![
        "request/reply round trip".into(),
        format!("{rtt:.1}"),
        "us".into(),
        "1.00".into(),
    ]);
    let rows = vec![
        json!({"op": "remote_acquire", "squall_us": round(remote, 2), "squall_p99_us": round(remote99, 2),
               "rtt_us": round(rtt, 2), "ratio": round(remote / rtt, 3), "messages": msgs,
               "acquires": remote_all.len()}),
        json!({"op": "local_uncontended_lock_unlock", "squall_pair_ns_p50": round(f50, 1),
               "squall_pair_ns_p99": round(f99, 1), "squall_op_ns_p50": round(f50 / 2.0, 1),
               "native_pair_ns_p50": round(n50, 1), "native_pair_ns_p99": round(n99, 1),
               "native": "std::sync::Mutex (futex)", "ratio": round(f50 / n50, 3),
               "blocks": fast.len(), "fast_acquires_checked": checked}),
    ];
    finish(
        &a,
        table,
        json!({"bench": "lock", "transport": a.transport, "rows": rows}),
    )
}

pub fn barrier(a: DsmBenchArgs) -> Result<(), String> {
    let mut table = Table::new(
        format!("barrier over {}, medians of {} reps", a.transport, a.reps),
        &[
            "nodes",
            "barrier_us_p50",
            "barrier_us_p99",
            "rtt_us",
            "round_trips_p50",
            "msgs_per_barrier",
            "hops_per_barrier",
        ],
    );
    let mut rows = Vec::new();
    for &n in &a.nodes {
        if n < 2 {
            return Err("barrier bench needs at least 2 nodes per row".into());
        }
        let args = vec![
            "bench-barrier".to_string(),
            "--iters".into(),
            a.iters.unwrap_or(1000).to_string(),
            "--reps".into(),
            a.reps.to_string(),
        ];
        let results = run_nodes(n, &a.transport, None, args, Duration::from_secs(600))?;
        let v = node0(&results)?;
        let all = nums(&v, "barrier_us");
        // Statistics of every node: barrier messages sent, and hops (each node counts every
        // episode's hops; node 0's are the job's).
        let total_msgs: u64 = results
            .iter()
            .filter_map(|(_, r)| r.get("barrier_msgs").and_then(Value::as_u64))
            .sum();
        let hops = v.get("barrier_hops").and_then(Value::as_u64).unwrap_or(0);
        if results.len() != n || total_msgs == 0 {
            return Err(format!(
                "barrier at {n} nodes: {} nodes reported, {total_msgs} barrier messages counted",
                results.len()
            ));
        }
        let checked = v
            .get("episodes_checked")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if all.is_empty() || checked < all.len() as u64 {
            return Err(format!(
                "barrier at {n} nodes: {} barriers timed, {checked} episodes counted",
                all.len()
            ));
        }
        let (b, b99) = p50_p99(&all);
        let rtt = median(&nums(&v, "rtt_us"));
        let per_msgs = total_msgs as f64 / checked as f64;
        let per_hops = hops as f64 / checked as f64;
        table.row(vec![
            n.to_string(),
            format!("{b:.1}"),
            format!("{b99:.1}"),
            format!("{rtt:.1}"),
            format!("{:.2}", b / rtt),
            format!("{per_msgs:.2}"),
            format!("{per_hops:.2}"),
        ]);
        rows.push(json!({"nodes": n, "squall_us": round(b, 2), "squall_p99_us": round(b99, 2), "rtt_us": round(rtt, 2), "ratio": round(b / rtt, 3),
                         "messages_per_barrier": round(per_msgs, 3), "hops_per_barrier": round(per_hops, 3)}));
    }
    finish(
        &a,
        table,
        json!({"bench": "barrier", "transport": a.transport, "rows": rows}),
    )
}

pub fn thread(a: DsmBenchArgs) -> Result<(), String> {
    let v = job(2, &a, "bench-thread", 100)?;
    let (remote, remote99) = p50_p99(&nums(&v, "remote_create_join_us"));
    let (local, local99) = p50_p99(&nums(&v, "local_create_join_us"));
    if remote.is_nan() || local.is_nan() {
        return Err("thread: node 0 reported no create + join".into());
    }
    let mut table = Table::new(
        format!(
            "thread: 2 nodes over {}, medians of {} reps",
            a.transport, a.reps
        ),
        &["operation", "p50_us", "p99_us"],
    );
    table.row(vec![
        "remote create + join (node 0 -> node 1)".into(),
        format!("{remote:.1}"),
        format!("{remote99:.1}"),
    ]);
    table.row(vec![
        "local create + join".into(),
        format!("{local:.1}"),
        format!("{local99:.1}"),
    ]);
    let rows = vec![
        json!({"op": "remote_create_join", "squall_us": round(remote, 2), "squall_p99_us": round(remote99, 2),
               "local_us": round(local, 2), "local_p99_us": round(local99, 2), "ratio": round(remote / local, 3)}),
    ];
    finish(
        &a,
        table,
        json!({"bench": "thread", "transport": a.transport, "rows": rows}),
    )
}
