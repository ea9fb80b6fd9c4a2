//! `squall bench pingpong --auth` and `squall bench bandwidth --auth`: the cost of packet
//! authentication. Each rep runs two 2-node jobs back to back, one without authentication and
//! one with it (the launcher makes the key), so both see the same machine; the table gives the
//! medians of the per-rep figures and the cost in percent. Every authenticated job must report
//! authenticated packets in its statistics, and every plain one none. Owns these two drivers;
//! the node programs are the ordinary `bench-pingpong` and `bench-bandwidth`.
use super::bandwidth::{count_for, BandwidthArgs};
use super::pingpong::PingpongArgs;
use super::report::{
    emit_json, median, round, run_nodes_auth, set_transports, tag_transport, Table,
};
use serde_json::{json, Value};
use squall_launch::AuthSetting;
use std::time::Duration;

const MIB: f64 = 1024.0 * 1024.0;

/// One 2-node job over `t` with authentication `auth`: node 0's rows and the packets both
/// nodes accepted after checking them (from their statistics).
fn node0(t: &str, args: Vec<String>, auth: AuthSetting) -> Result<(Vec<Value>, u64), String> {
    let results = run_nodes_auth(2, t, None, args, Duration::from_secs(600), auth, &[])?;
    let v = results
        .iter()
        .find(|(r, _)| *r == 0)
        .map(|(_, v)| v)
        .ok_or_else(|| format!("{t}: node 0 printed no result"))?;
    let rows = v
        .get("rows")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let n: u64 = results
        .iter()
        .filter_map(|(_, v)| v.get("authenticated").and_then(Value::as_u64))
        .sum();
    match auth {
        AuthSetting::On | AuthSetting::Encrypt if n == 0 => Err(format!(
            "{t}: the job with authentication reports no authenticated packet"
        )),
        AuthSetting::Off if n != 0 => Err(format!(
            "{t}: the job without authentication reports {n} authenticated packets"
        )),
        _ => Ok((rows, n)),
    }
}

fn values(rows: &[Value], size: usize, key: &str) -> Result<Vec<f64>, String> {
    rows.iter()
        .find(|r| r.get("size").and_then(Value::as_u64) == Some(size as u64))
        .and_then(|r| r.get(key))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .ok_or_else(|| format!("node 0 reported no {key} for size {size}"))
}

/// Cost in percent of `with` over `without` (times: larger is slower).
fn cost_pct(with: f64, without: f64) -> f64 {
    (with / without - 1.0) * 100.0
}

/// `reps` pairs of jobs over `t`, without then with authentication back to back (so load
/// drifts hit both alike), each pair's node-0 rows handed to `take`; returns the packets the
/// authenticated jobs counted.
fn alternate(
    t: &str,
    args: &[String],
    setting: AuthSetting,
    reps: usize,
    mut take: impl FnMut(&[Value], &[Value]) -> Result<(), String>,
) -> Result<u64, String> {
    let mut packets = 0u64;
    for _ in 0..reps {
        let (off_rows, _) = node0(t, args.to_vec(), AuthSetting::Off)?;
        let (on_rows, k) = node0(t, args.to_vec(), setting)?;
        packets += k;
        take(&off_rows, &on_rows)?;
    }
    Ok(packets)
}

/// Print the table and, with `--json`, the bench's one JSON object.
fn finish(
    table: &Table,
    json: bool,
    bench: &str,
    encrypt: bool,
    rows: Vec<Value>,
    transports: &[&str],
) {
    table.print();
    if json {
        let mut obj = json!({"bench": bench, "encrypt": encrypt, "rows": rows});
        set_transports(&mut obj, transports);
        emit_json(&obj);
    }
}

fn check_transports(names: &[&str]) -> Result<(), String> {
    if names.contains(&"mpi") {
        return Err(
            "--auth measures the tcp and udp transports (the mpi transport does not seal packets)"
                .into(),
        );
    }
    Ok(())
}

/// The setting of the measured jobs, and its name in titles.
fn measured(encrypt: bool) -> (AuthSetting, &'static str) {
    if encrypt {
        (AuthSetting::Encrypt, "--auth --encrypt")
    } else {
        (AuthSetting::On, "--auth")
    }
}

pub fn pingpong(a: &PingpongArgs) -> Result<(), String> {
    let (setting, name) = measured(a.encrypt);
    let transports = a.transport.names();
    check_transports(&transports)?;
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    let warmup = (a.iters / 10).clamp(1, 100);
    let args = vec![
        "bench-pingpong".to_string(),
        "--sizes".into(),
        sizes.join(","),
        "--iters".into(),
        a.iters.to_string(),
        "--reps".into(),
        "1".into(),
        "--warmup".into(),
        warmup.to_string(),
    ];
    let mut table = Table::new(
        format!(
            "pingpong {name}: 2 nodes, {} round trips, {} reps of (without, with) \
             authentication, median round trip in microseconds",
            a.iters, a.reps
        ),
        &[
            "transport",
            "size",
            "plain_rtt_us",
            "auth_rtt_us",
            "cost_pct",
            "plain_req_us",
            "auth_req_us",
            "req_cost_pct",
            "auth_packets",
        ],
    );
    let mut rows_json = Vec::new();
    for t in &transports {
        let n = a.sizes.len();
        let (mut plain, mut auth) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        let (mut plain_req, mut auth_req) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        let packets = alternate(t, &args, setting, a.reps, |off_rows, on_rows| {
            for (i, &size) in a.sizes.iter().enumerate() {
                plain[i].extend(values(off_rows, size, "am_rtt_us")?);
                auth[i].extend(values(on_rows, size, "am_rtt_us")?);
                plain_req[i].extend(values(off_rows, size, "req_rtt_us")?);
                auth_req[i].extend(values(on_rows, size, "req_rtt_us")?);
            }
            Ok(())
        })?;
        for (i, &size) in a.sizes.iter().enumerate() {
            let (p, q) = (median(&plain[i]), median(&auth[i]));
            let (pr, qr) = (median(&plain_req[i]), median(&auth_req[i]));
            let (c, cr) = (cost_pct(q, p), cost_pct(qr, pr));
            table.row(vec![
                t.to_string(),
                size.to_string(),
                format!("{p:.1}"),
                format!("{q:.1}"),
                format!("{c:+.1}"),
                format!("{pr:.1}"),
                format!("{qr:.1}"),
                format!("{cr:+.1}"),
                packets.to_string(),
            ]);
            let mut row = json!({
                "size": size,
                "plain_rtt_us": round(p, 2),
                "auth_rtt_us": round(q, 2),
                "cost_pct": round(c, 2),
                "plain_req_rtt_us": round(pr, 2),
                "auth_req_rtt_us": round(qr, 2),
                "req_cost_pct": round(cr, 2),
                "auth_packets": packets,
            });
            tag_transport(&mut row, &transports, t);
            rows_json.push(row);
        }
    }
    finish(
        &table,
        a.json,
        "pingpong-auth",
        a.encrypt,
        rows_json,
        &transports,
    );
    Ok(())
}

pub fn bandwidth(a: &BandwidthArgs) -> Result<(), String> {
    let (setting, name) = measured(a.encrypt);
    let transports = a.transport.names();
    check_transports(&transports)?;
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    let args = vec![
        "bench-bandwidth".to_string(),
        "--sizes".into(),
        sizes.join(","),
        "--bytes".into(),
        a.bytes.to_string(),
        "--reps".into(),
        "1".into(),
    ];
    let mut table = Table::new(
        format!(
            "bandwidth {name}: 2 nodes, {} reps of (without, with) authentication, median MiB/s",
            a.reps
        ),
        &[
            "transport",
            "size",
            "count",
            "plain_mib_s",
            "auth_mib_s",
            "cost_pct",
            "auth_packets",
        ],
    );
    let mut rows_json = Vec::new();
    for t in &transports {
        let n = a.sizes.len();
        let (mut plain, mut auth) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        let packets = alternate(t, &args, setting, a.reps, |off_rows, on_rows| {
            for (i, &size) in a.sizes.iter().enumerate() {
                let mb = (size * count_for(size, a.bytes)) as f64 / MIB;
                plain[i].extend(values(off_rows, size, "secs")?.iter().map(|s| mb / s));
                auth[i].extend(values(on_rows, size, "secs")?.iter().map(|s| mb / s));
            }
            Ok(())
        })?;
        for (i, &size) in a.sizes.iter().enumerate() {
            let (p, q) = (median(&plain[i]), median(&auth[i]));
            // Throughput: the cost is the time taken, so the inverse ratio.
            let c = cost_pct(p, q);
            table.row(vec![
                t.to_string(),
                size.to_string(),
                count_for(size, a.bytes).to_string(),
                format!("{p:.1}"),
                format!("{q:.1}"),
                format!("{c:+.1}"),
                packets.to_string(),
            ]);
            let mut row = json!({
                "size": size,
                "count": count_for(size, a.bytes),
                "plain_mib_s": round(p, 2),
                "auth_mib_s": round(q, 2),
                "cost_pct": round(c, 2),
                "auth_packets": packets,
            });
            tag_transport(&mut row, &transports, t);
            rows_json.push(row);
        }
    }
    finish(
        &table,
        a.json,
        "bandwidth-auth",
        a.encrypt,
        rows_json,
        &transports,
    );
    Ok(())
}
