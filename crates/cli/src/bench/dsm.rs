//! Drivers of the shared-memory benches: `squall bench fault` (remote page fault beside a raw
//! one-page request/reply on the same transport, write faults, diff throughput), `lock`,
//! `barrier` and `thread` (the CableS basic-cost table). Node sides are in `node::dsm`.
//! Owns these drivers only.
use super::report::{emit_json, median, round, run_nodes, Table};
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
    /// Node counts (`barrier` only).
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    pub nodes: Vec<usize>,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

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
    node0(&run_nodes(
        nodes,
        &a.transport,
        None,
        args,
        Duration::from_secs(600),
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

pub fn fault(a: DsmBenchArgs) -> Result<(), String> {
    let load_before = load_avg();
    let v = job(2, &a, "bench-fault", 200)?;
    let load = match (load_before, load_avg()) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let read = median(&nums(&v, "read_fault_us"));
    let raw = median(&nums(&v, "raw_req_us"));
    let twin = median(&nums(&v, "write_fault_twin_us"));
    let miss = median(&nums(&v, "write_miss_us"));
    let mut table = Table::new(
        format!(
            "fault: 2 nodes over {}, pages homed on node 1, medians of {} reps (microseconds); \
             load average {}",
            a.transport,
            a.reps,
            load.map_or("unknown".into(), |l| format!("{l:.2}"))
        ),
        &["operation", "squall_us", "raw_us", "ratio"],
    );
    table.row(vec![
        "remote 4 KiB read fault".into(),
        format!("{read:.1}"),
        format!("{raw:.1}"),
        format!("{:.2}", read / raw),
    ]);
    table.row(vec![
        "write fault on read copy (twin)".into(),
        format!("{twin:.1}"),
        "-".into(),
        "-".into(),
    ]);
    table.row(vec![
        "write miss (fetch + twin)".into(),
        format!("{miss:.1}"),
        format!("{raw:.1}"),
        format!("{:.2}", miss / raw),
    ]);
    let mut rows = vec![
        json!({"op": "read_fault", "size": 4096, "squall_us": round(read, 2), "raw_us": round(raw, 2), "ratio": round(read / raw, 3)}),
        json!({"op": "write_fault_twin", "size": 4096, "squall_us": round(twin, 2)}),
        json!({"op": "write_miss", "size": 4096, "squall_us": round(miss, 2), "raw_us": round(raw, 2), "ratio": round(miss / raw, 3)}),
    ];
    for frac in [0.01, 0.1, 0.5, 1.0] {
        let (mk, ap, size) = diff_throughput(frac, a.reps);
        table.row(vec![
            format!("diff {:.0}% of words: create MiB/s", frac * 100.0),
            format!("{mk:.0}"),
            "-".into(),
            "-".into(),
        ]);
        table.row(vec![
            format!("diff {:.0}% of words: apply MiB/s", frac * 100.0),
            format!("{ap:.0}"),
            "-".into(),
            "-".into(),
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
    let v = job(2, &a, "bench-lock", 500)?;
    let remote = median(&nums(&v, "remote_acquire_us"));
    let rtt = median(&nums(&v, "rtt_us"));
    let msgs = median(&nums(&v, "messages_per_acquire_node0"));
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
        "uncontended remote acquire".into(),
        format!("{remote:.1}"),
        "us".into(),
        format!("{:.2}", remote / rtt),
    ]);
    table.row(vec![
        "messages per remote lock+unlock (node 0)".into(),
        format!("{msgs:.1}"),
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
        json!({"op": "remote_acquire", "squall_us": round(remote, 2), "rtt_us": round(rtt, 2), "ratio": round(remote / rtt, 3), "messages": msgs}),
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
        &["nodes", "barrier_us", "rtt_us", "round_trips"],
    );
    let mut rows = Vec::new();
    for &n in &a.nodes {
        if n < 2 {
            return Err("barrier bench needs at least 2 nodes per row".into());
        }
        let v = job(n, &a, "bench-barrier", 1000)?;
        let b = median(&nums(&v, "barrier_us"));
        let rtt = median(&nums(&v, "rtt_us"));
        table.row(vec![
            n.to_string(),
            format!("{b:.1}"),
            format!("{rtt:.1}"),
            format!("{:.2}", b / rtt),
        ]);
        rows.push(json!({"nodes": n, "squall_us": round(b, 2), "rtt_us": round(rtt, 2), "ratio": round(b / rtt, 3)}));
    }
    finish(
        &a,
        table,
        json!({"bench": "barrier", "transport": a.transport, "rows": rows}),
    )
}

pub fn thread(a: DsmBenchArgs) -> Result<(), String> {
    let v = job(2, &a, "bench-thread", 100)?;
    let remote = median(&nums(&v, "remote_create_join_us"));
    let local = median(&nums(&v, "local_create_join_us"));
    let mut table = Table::new(
        format!(
            "thread: 2 nodes over {}, medians of {} reps",
            a.transport, a.reps
        ),
        &["operation", "squall_us"],
    );
    table.row(vec![
        "remote create + join (node 0 -> node 1)".into(),
        format!("{remote:.1}"),
    ]);
    table.row(vec!["local create + join".into(), format!("{local:.1}")]);
    let rows = vec![
        json!({"op": "remote_create_join", "squall_us": round(remote, 2), "local_us": round(local, 2), "ratio": round(remote / local, 3)}),
    ];
    finish(
        &a,
        table,
        json!({"bench": "thread", "transport": a.transport, "rows": rows}),
    )
}
