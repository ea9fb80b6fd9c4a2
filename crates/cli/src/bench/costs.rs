//! `squall bench costs`: the README's basic-costs table, regenerated. Runs the benches that
//! measure each basic cost (`pingpong`, `fault` over tcp and udp, `lock`, `barrier`, `thread`)
//! as child processes of this binary with `--json`, and prints their figures as one Markdown
//! table with the machine it ran on. Every child checks from the statistics that the
//! operation it names happened and fails otherwise; this driver fails if any child does.
//! Owns only the table; must not measure anything itself.
use super::report::round;
use clap::Args;
use serde_json::{json, Value};
use std::process::Command;

#[derive(Args, Debug)]
pub struct CostsArgs {
    /// Repetitions of each bench (their medians and p99 are what the table shows).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Operations per repetition of each bench (its own default when not given).
    #[arg(long)]
    pub iters: Option<usize>,
    /// Node counts of the barrier row.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    pub barrier_nodes: Vec<usize>,
    /// End the output with one JSON line: the machine and every child bench's JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Run `squall bench <args> --json` and return its last stdout line as JSON.
fn child(args: &[String]) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| format!("costs: own binary: {e}"))?;
    let shown = format!("squall bench {} --json", args.join(" "));
    eprintln!("costs: {shown}");
    let out = Command::new(exe)
        .arg("bench")
        .args(args)
        .arg("--json")
        .output()
        .map_err(|e| format!("costs: cannot start `{shown}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "costs: `{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(last).map_err(|e| format!("costs: `{shown}` printed no JSON line: {e}"))
}

/// The rows of a bench's JSON.
fn rows(v: &Value) -> &[Value] {
    v.get("rows")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The first row whose `key` equals `want`.
fn row<'a>(v: &'a Value, key: &str, want: &Value) -> Option<&'a Value> {
    rows(v).iter().find(|r| r.get(key) == Some(want))
}

fn num(r: Option<&Value>, key: &str) -> f64 {
    r.and_then(|r| r.get(key))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

/// A number for the table: `—` when missing, else 3 significant figures or so.
fn f(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The machine: CPU model, CPUs, memory, kernel and the load average.
fn machine() -> Value {
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| round(kb / (1 << 20) as f64, 1));
    json!({
        "cpu": model,
        "cpus": cpus,
        "mem_gib": mem_gib,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "load_avg_1m": load(),
    })
}

fn load() -> f64 {
    read("/proc/loadavg")
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `a / b` cells of two transports.
fn pair(a: f64, b: f64) -> String {
    format!("{} / {}", f(a), f(b))
}

pub fn main(a: CostsArgs) -> Result<(), String> {
    let reps = a.reps.max(1).to_string();
    let iters = a.iters.map(|i| i.to_string());
    let s = |v: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        if let Some(i) = &iters {
            args.extend(["--iters".to_string(), i.clone()]);
        }
        args
    };
    let load_before = load();
    let ping = child(&s(&[
        "pingpong",
        "--transport",
        "all",
        "--sizes",
        "64,4096",
        "--reps",
        &reps,
    ]))?;
    let fault_tcp = child(&s(&[
        "fault",
        "--transport",
        "tcp",
        "--reps",
        &reps,
        "--faults",
        "both",
    ]))?;
    let fault_udp = child(&s(&["fault", "--transport", "udp", "--reps", &reps]))?;
    let lock = child(&s(&["lock", "--reps", &reps]))?;
    let nodes: Vec<String> = a.barrier_nodes.iter().map(|n| n.to_string()).collect();
    let barrier = child(&s(&[
        "barrier",
        "--nodes",
        &nodes.join(","),
        "--reps",
        &reps,
    ]))?;
    let thread = child(&s(&["thread", "--reps", &reps]))?;
    let mut m = machine();
    m["load_avg_1m"] = json!(load_before.max(load()));

    let mut t = String::new();
    t.push_str(&format!(
        "Machine: {}, {} CPUs, {} GiB, Linux {}; all nodes on this machine; load average up to {}.\n\n",
        m["cpu"].as_str().unwrap_or("?"),
        m["cpus"],
        m["mem_gib"],
        m["kernel"].as_str().unwrap_or("?"),
        f(m["load_avg_1m"].as_f64().unwrap_or(f64::NAN)),
    ));
    t.push_str("| operation | p50 | p99 | baseline in the same run (p50) |\n|---|---|---|---|\n");
    for size in [64u64, 4096] {
        let pr = |tr: &str| {
            rows(&ping)
                .iter()
                .find(|r| r["transport"] == tr && r["size"] == size)
        };
        let (tc, ud) = (pr("tcp"), pr("udp"));
        let spin = if num(tc, "raw_spin_rtt_us").is_nan() {
            String::new()
        } else {
            format!(
                "; busy-polling raw socket {} µs (ratio {})",
                pair(num(tc, "raw_spin_rtt_us"), num(ud, "raw_spin_rtt_us")),
                pair(num(tc, "ratio_spin"), num(ud, "ratio_spin"))
            )
        };
        t.push_str(&format!(
            "| active-message round trip, {} (tcp / udp) | {} µs | {} µs | blocking raw socket {} µs (ratio {}){spin} |\n",
            if size == 64 { "64 B" } else { "4 KiB" },
            pair(num(tc, "squall_rtt_us"), num(ud, "squall_rtt_us")),
            pair(num(tc, "squall_p99_us"), num(ud, "squall_p99_us")),
            pair(num(tc, "raw_rtt_us"), num(ud, "raw_rtt_us")),
            pair(num(tc, "ratio"), num(ud, "ratio")),
        ));
    }
    let op = |v: &Value, name: &str| row(v, "op", &json!(name)).cloned();
    // The same operation with faults served by the faulting thread (`--faults both`).
    let by_signal = |v: &Value, name: &str| {
        rows(v)
            .iter()
            .find(|r| r["op"] == name && r["faults"] == "signal")
            .cloned()
    };
    let (rt, ru) = (op(&fault_tcp, "read_fault"), op(&fault_udp, "read_fault"));
    let (qt, qu) = (
        op(&fault_tcp, "request_reply"),
        op(&fault_udp, "request_reply"),
    );
    t.push_str(&format!(
        "| cold remote 4 KiB read fault, scattered pages, no read-ahead (tcp / udp) | {} µs | {} µs | raw socket 8 B request / 4 KiB reply {} µs (ratio {}, p99 ratio {}); Squall's own request/reply {} µs |\n",
        pair(num(rt.as_ref(), "squall_us"), num(ru.as_ref(), "squall_us")),
        pair(num(rt.as_ref(), "squall_p99_us"), num(ru.as_ref(), "squall_p99_us")),
        pair(num(rt.as_ref(), "raw_us"), num(ru.as_ref(), "raw_us")),
        pair(num(rt.as_ref(), "ratio"), num(ru.as_ref(), "ratio")),
        pair(num(rt.as_ref(), "ratio_p99"), num(ru.as_ref(), "ratio_p99")),
        pair(num(qt.as_ref(), "squall_us"), num(qu.as_ref(), "squall_us")),
    ));
    let twin = op(&fault_tcp, "write_fault_twin");
    t.push_str(&format!(
        "| write fault on a read copy (twin, no message) | {} µs | {} µs | — |\n",
        f(num(twin.as_ref(), "squall_us")),
        f(num(twin.as_ref(), "squall_p99_us")),
    ));
    let (rs, ts) = (
        by_signal(&fault_tcp, "read_fault"),
        by_signal(&fault_tcp, "write_fault_twin"),
    );
    t.push_str(&format!(
        "| the same two, faults served by the faulting thread (`SQUALL_FAULTS=signal`), tcp | {} / {} µs | {} / {} µs | raw 4 KiB request/reply {} µs (read fault ratio {}) |\n",
        f(num(rs.as_ref(), "squall_us")),
        f(num(ts.as_ref(), "squall_us")),
        f(num(rs.as_ref(), "squall_p99_us")),
        f(num(ts.as_ref(), "squall_p99_us")),
        f(num(rs.as_ref(), "raw_us")),
        f(num(rs.as_ref(), "ratio")),
    ));
    let miss = op(&fault_tcp, "write_miss");
    t.push_str(&format!(
        "| write miss (fetch + twin), tcp | {} µs | {} µs | raw 4 KiB request/reply {} µs (ratio {}) |\n",
        f(num(miss.as_ref(), "squall_us")),
        f(num(miss.as_ref(), "squall_p99_us")),
        f(num(miss.as_ref(), "raw_us")),
        f(num(miss.as_ref(), "ratio")),
    ));
    let scan = op(&fault_tcp, "sequential_scan");
    t.push_str(&format!(
        "| sequential scan with read-ahead, tcp | {} MiB/s ({} pages per fetch) | — | raw TCP bulk {} MiB/s |\n",
        f(num(scan.as_ref(), "squall_mib_s")),
        f(num(scan.as_ref(), "pages_per_fetch")),
        f(num(scan.as_ref(), "raw_bulk_mib_s")),
    ));
    let remote = op(&lock, "remote_acquire");
    t.push_str(&format!(
        "| uncontended remote lock acquire | {} µs, {} lock messages | {} µs | {} Squall request/reply round trips ({} µs) |\n",
        f(num(remote.as_ref(), "squall_us")),
        f(num(remote.as_ref(), "messages")),
        f(num(remote.as_ref(), "squall_p99_us")),
        f(num(remote.as_ref(), "ratio")),
        f(num(remote.as_ref(), "rtt_us")),
    ));
    let local = op(&lock, "local_uncontended_lock_unlock");
    t.push_str(&format!(
        "| local uncontended lock + unlock (the lock cache), Rust API | {} ns per pair | {} ns | futex mutex {} ns (ratio {}) |\n",
        f(num(local.as_ref(), "squall_pair_ns_p50")),
        f(num(local.as_ref(), "squall_pair_ns_p99")),
        f(num(local.as_ref(), "native_pair_ns_p50")),
        f(num(local.as_ref(), "ratio")),
    ));
    let b: Vec<&Value> = rows(&barrier).iter().collect();
    let join = |key: &str| -> String {
        b.iter()
            .map(|r| f(num(Some(r), key)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    t.push_str(&format!(
        "| barrier, {} nodes | {} µs | {} µs | {} round trips; {} messages, {} hops per barrier |\n",
        b.iter()
            .map(|r| r["nodes"].to_string())
            .collect::<Vec<_>>()
            .join(" / "),
        join("squall_us"),
        join("squall_p99_us"),
        join("ratio"),
        join("messages_per_barrier"),
        join("hops_per_barrier"),
    ));
    let th = op(&thread, "remote_create_join");
    t.push_str(&format!(
        "| thread create + join, remote / local | {} µs | {} µs | — |\n",
        pair(num(th.as_ref(), "squall_us"), num(th.as_ref(), "local_us")),
        pair(
            num(th.as_ref(), "squall_p99_us"),
            num(th.as_ref(), "local_p99_us")
        ),
    ));
    print!("{t}");
    if a.json {
        let all = json!({
            "bench": "costs",
            "machine": m,
            "benches": {
                "pingpong": ping, "fault_tcp": fault_tcp, "fault_udp": fault_udp,
                "lock": lock, "barrier": barrier, "thread": thread,
            },
        });
        println!("{all}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_and_print() {
        let v = json!({"rows": [{"op": "x", "squall_us": 12.345}, {"op": "y"}]});
        let r = row(&v, "op", &json!("x"));
        assert_eq!(f(num(r, "squall_us")), "12.3");
        assert_eq!(f(num(row(&v, "op", &json!("y")), "squall_us")), "—");
        assert_eq!(f(0.5), "0.50");
        assert_eq!(f(1234.0), "1234");
        assert_eq!(pair(1.0, f64::NAN), "1.00 / —");
    }
}
