//! `squall bench ...` end to end at tiny sizes: each runs its 2+ node processes, prints a
//! table, and with `--json` ends stdout with one JSON object of the documented shape.
use serde_json::Value;
use std::process::{Command, Stdio};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

fn bench_json(args: &[&str]) -> Value {
    let out = Command::new(SQUALL)
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run squall bench");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench {args:?} failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = so.lines().last().expect("no output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

fn positive(row: &Value, key: &str) -> f64 {
    let v = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"));
    assert!(v > 0.0 && v.is_finite(), "{key} = {v} in {row}");
    v
}

#[test]
fn pingpong_json_has_the_documented_shape() {
    let v = bench_json(&[
        "pingpong",
        "--transport",
        "tcp",
        "--sizes",
        "8,4096",
        "--iters",
        "20",
        "--reps",
        "3",
    ]);
    let obj = v.as_object().expect("object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["bench", "rows", "transport"]);
    assert_eq!(v["bench"], "pingpong");
    assert_eq!(v["transport"], "tcp");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["size"], 8);
    assert_eq!(rows[1]["size"], 4096);
    for r in rows {
        let s = positive(r, "squall_rtt_us");
        let raw = positive(r, "raw_rtt_us");
        positive(r, "squall_req_rtt_us");
        let ratio = positive(r, "ratio");
        assert!(
            (ratio - s / raw).abs() / ratio < 0.05,
            "ratio {ratio} vs {s}/{raw}"
        );
    }
}

#[test]
fn pingpong_all_transports_tags_rows() {
    let v = bench_json(&[
        "pingpong",
        "--transport",
        "all",
        "--sizes",
        "64",
        "--iters",
        "10",
        "--reps",
        "1",
    ]);
    assert_eq!(v["bench"], "pingpong");
    let rows = v["rows"].as_array().expect("rows");
    let tags: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["transport"].as_str())
        .collect();
    assert_eq!(tags, ["tcp", "udp"]);
}

#[test]
fn bandwidth_json_reports_both_rates() {
    let v = bench_json(&[
        "bandwidth",
        "--sizes",
        "4k,64k",
        "--bytes",
        "256k",
        "--reps",
        "2",
    ]);
    assert_eq!(v["bench"], "bandwidth");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["count"], 64);
    for r in rows {
        positive(r, "squall_mib_s");
        positive(r, "raw_mib_s");
        positive(r, "ratio");
    }
}

#[test]
fn pingpong_auth_reports_the_cost_and_the_authenticated_packets() {
    let v = bench_json(&[
        "pingpong",
        "--auth",
        "--transport",
        "all",
        "--sizes",
        "64,4k",
        "--iters",
        "20",
        "--reps",
        "2",
    ]);
    assert_eq!(v["bench"], "pingpong-auth");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4);
    for r in rows {
        let plain = positive(r, "plain_rtt_us");
        let auth = positive(r, "auth_rtt_us");
        let cost = r["cost_pct"].as_f64().expect("cost_pct");
        assert!(
            (cost - (auth / plain - 1.0) * 100.0).abs() < 0.5,
            "cost {cost} vs {auth}/{plain}"
        );
        positive(r, "plain_req_rtt_us");
        positive(r, "auth_req_rtt_us");
        // At least the 2 x 2 x (20 + warm-up) pongs and echo replies node 0 checked.
        let n = r["auth_packets"].as_u64().expect("auth_packets");
        assert!(n >= 160, "{n} authenticated packets in {r}");
    }
}

#[test]
fn bandwidth_auth_reports_both_rates_and_the_authenticated_packets() {
    let v = bench_json(&[
        "bandwidth",
        "--auth",
        "--transport",
        "udp",
        "--sizes",
        "4k,64k",
        "--bytes",
        "256k",
        "--reps",
        "2",
    ]);
    assert_eq!(v["bench"], "bandwidth-auth");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    for r in rows {
        positive(r, "plain_mib_s");
        positive(r, "auth_mib_s");
        // Node 1 checked every datagram of the 2 reps x 2 runs x 256 KiB per size.
        let n = r["auth_packets"].as_u64().expect("auth_packets");
        assert!(n >= 2 * 2 * 64, "{n} authenticated packets in {r}");
    }
    let e = Command::new(SQUALL)
        .args(["bench", "pingpong", "--auth", "--transport", "mpi"])
        .output()
        .expect("squall");
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("mpi transport does not seal"));
}

#[test]
fn message_test_checks_every_message() {
    let v = bench_json(&[
        "message",
        "-n",
        "3",
        "--transport",
        "udp",
        "--messages",
        "2000",
        "--reps",
        "2",
    ]);
    assert_eq!(v["bench"], "message");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "3 nodes and a total");
    for r in &rows[..3] {
        assert_eq!(r["received"], 4000);
        assert_eq!(r["in_order"], true);
        positive(r, "recv_msgs_s");
    }
    assert_eq!(rows[3]["node"], "total");
}

#[test]
fn lock_json_reports_the_local_uncontended_lock_checked_by_the_statistics() {
    let v = bench_json(&["lock", "--iters", "10", "--reps", "1"]);
    assert_eq!(v["bench"], "lock");
    let rows = v["rows"].as_array().expect("rows");
    let local = rows
        .iter()
        .find(|r| r["op"] == "local_uncontended_lock_unlock")
        .unwrap_or_else(|| panic!("no local lock row in {v}"));
    let p50 = positive(local, "squall_pair_ns_p50");
    assert!(positive(local, "squall_pair_ns_p99") >= p50);
    let native = positive(local, "native_pair_ns_p50");
    let ratio = positive(local, "ratio");
    assert!(
        (ratio - p50 / native).abs() / ratio < 0.05,
        "ratio {ratio} vs {p50}/{native}"
    );
    // Every timed pair took the lock cache (the node checks it against its statistics).
    let blocks = local["blocks"].as_u64().expect("blocks");
    assert_eq!(blocks, 20);
    assert_eq!(
        local["fast_acquires_checked"].as_u64(),
        Some(blocks * 100_000)
    );
    let remote = rows
        .iter()
        .find(|r| r["op"] == "remote_acquire")
        .unwrap_or_else(|| panic!("no remote acquire row in {v}"));
    let p50 = positive(remote, "squall_us");
    assert!(positive(remote, "squall_p99_us") >= p50);
    // Node 0 takes the lock on every other of the 10 turns; the node checked each acquire
    // was remote. On 2 nodes a remote acquire is a request and a grant (or less: a token
    // lent along with another grant needs no request).
    assert_eq!(remote["acquires"].as_u64(), Some(5));
    let msgs = positive(remote, "messages");
    assert!(msgs > 1.0 && msgs <= 2.0, "{remote}");
}

#[test]
fn fault_json_times_real_remote_faults_beside_the_raw_request_reply() {
    let v = bench_json(&["fault", "--iters", "20", "--reps", "2", "--breakdown"]);
    assert_eq!(v["bench"], "fault");
    let rows = v["rows"].as_array().expect("rows");
    let row = |op: &str| {
        rows.iter()
            .find(|r| r["op"] == op)
            .unwrap_or_else(|| panic!("no {op} row in {v}"))
    };
    // The node fails the job unless each timed read was one fault and one 4 KiB fetch with
    // nothing read ahead; here every sample of both reps made it into the quantiles.
    let read = row("read_fault");
    assert_eq!(read["samples"].as_u64(), Some(40));
    let p50 = positive(read, "squall_us");
    assert!(positive(read, "squall_p99_us") >= p50);
    positive(read, "raw_us");
    positive(read, "ratio");
    positive(row("write_miss"), "squall_us");
    // The service thread's share of each kind of fault, from the statistics' data stall.
    positive(read, "service_us");
    positive(row("write_fault_twin"), "service_us");
    positive(row("write_miss"), "service_us");
    let scan = row("sequential_scan");
    positive(scan, "squall_mib_s");
    positive(scan, "raw_bulk_mib_s");
    assert!(
        positive(scan, "pages_per_fetch") > 1.0,
        "read-ahead brought pages along with the scan's fetches: {scan}"
    );
}

#[test]
fn fault_both_times_faults_served_by_the_service_thread_and_by_signal() {
    let v = bench_json(&["fault", "--iters", "20", "--reps", "1", "--faults", "both"]);
    let rows = v["rows"].as_array().expect("rows");
    for mode in ["thread", "signal"] {
        let row = |op: &str| {
            rows.iter()
                .find(|r| r["op"] == op && r["faults"] == mode)
                .unwrap_or_else(|| panic!("no {op} row for {mode} in {v}"))
        };
        // Each node checks from its statistics that every timed read was one fault and one
        // 4 KiB fetch, in either mode.
        let read = row("read_fault");
        assert_eq!(read["samples"].as_u64(), Some(20), "{read}");
        positive(read, "squall_us");
        positive(read, "ratio");
        positive(row("write_fault_twin"), "squall_us");
        positive(row("write_miss"), "squall_us");
    }
}

#[test]
fn regions_json_reports_misses_checked_by_the_statistics() {
    let v = bench_json(&[
        "regions", "--sizes", "64,8k", "--iters", "20", "--reps", "2",
    ]);
    assert_eq!(v["bench"], "regions");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    for (r, size) in rows.iter().zip([64, 8192]) {
        assert_eq!(r["size"], size);
        // Every timed read was a miss (the node side checks its statistics and says so).
        assert_eq!(r["misses"], 40);
        for k in [
            "miss_p50_us",
            "miss_p99_us",
            "raw_p50_us",
            "raw_p99_us",
            "ratio_p50",
        ] {
            positive(r, k);
        }
    }
}

#[test]
fn barrier_json_reports_tree_hops_and_messages_from_the_statistics() {
    let v = bench_json(&["barrier", "--nodes", "2,4", "--iters", "20", "--reps", "1"]);
    assert_eq!(v["bench"], "barrier");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    // A binomial tree rooted at the manager: ⌈log2 N⌉ hops up, one down; 2(N−1) messages.
    for (row, nodes, hops) in [(&rows[0], 2.0, 2.0), (&rows[1], 4.0, 3.0)] {
        assert_eq!(row["nodes"].as_f64(), Some(nodes));
        assert_eq!(row["hops_per_barrier"].as_f64(), Some(hops), "{row}");
        assert_eq!(
            row["messages_per_barrier"].as_f64(),
            Some(2.0 * (nodes - 1.0)),
            "{row}"
        );
    }
}

#[test]
fn contended_lock_json_counts_hand_offs_and_the_third_node_acquire() {
    let v = bench_json(&[
        "lock",
        "--contended",
        "--nodes",
        "3",
        "--iters",
        "20",
        "--reps",
        "1",
    ]);
    assert_eq!(v["bench"], "lock_contended");
    let row = &v["rows"][0];
    // Every node's 20 increments under the lock (node 0 checks the counter).
    assert_eq!(row["acquires"].as_u64(), Some(60), "{row}");
    assert!(row["remote_acquires"].as_u64().unwrap_or(0) > 0, "{row}");
    let per = positive(row, "lock_messages_per_remote_acquire");
    assert!(per <= 3.0, "request, forward, grant at most: {row}");
    let third = positive(row, "third_node_messages");
    assert!(third <= 3.0, "{row}");
    // The hand-off in round trips measured in the same job, and fairness between the home
    // (node 0) and the other nodes, from each node's own loop time.
    positive(row, "rtt_us");
    positive(row, "handoff_round_trips");
    positive(row, "remote_over_home_time");
    assert!(row["page_fetches_per_handoff"].as_f64().is_some(), "{row}");
    assert!(row["diffs_per_handoff"].as_f64().is_some(), "{row}");
}

#[test]
fn costs_prints_the_basic_costs_table_from_every_bench() {
    let out = Command::new(SQUALL)
        .args(["bench", "costs", "--iters", "20", "--reps", "1", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("run squall bench costs");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench costs failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The Markdown table: one row per basic cost, each with a measured p50.
    for op in [
        "active-message round trip, 64 B",
        "cold remote 4 KiB read fault",
        "write fault on a read copy",
        "the same two, faults served by the faulting thread",
        "uncontended remote lock acquire",
        "barrier, 2 / 4 nodes",
        "thread create + join",
    ] {
        let line = so
            .lines()
            .find(|l| l.starts_with(&format!("| {op}")))
            .unwrap_or_else(|| panic!("no row {op:?} in:\n{so}"));
        let p50 = line.split('|').nth(2).unwrap_or("");
        assert!(
            p50.chars().any(|c| c.is_ascii_digit()),
            "row {op:?} has no p50: {line}"
        );
    }
    assert!(
        so.contains("Machine: "),
        "the table names the machine:\n{so}"
    );
    let v: Value = serde_json::from_str(so.lines().last().expect("output")).expect("JSON");
    assert_eq!(v["bench"], "costs");
    for b in [
        "pingpong",
        "fault_tcp",
        "fault_udp",
        "lock",
        "barrier",
        "thread",
    ] {
        assert!(
            v["benches"][b]["rows"]
                .as_array()
                .is_some_and(|r| !r.is_empty()),
            "{b} rows missing in {v}"
        );
    }
    assert!(v["machine"]["cpus"].as_u64().is_some_and(|n| n > 0));
}
