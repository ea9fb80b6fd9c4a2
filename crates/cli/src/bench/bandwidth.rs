//! `squall bench bandwidth`: bulk throughput between 2 nodes. Node 0 sends COUNT one-way
//! messages of SIZE bytes to node 1, whose handler acknowledges the last one; the time to that
//! acknowledgement gives MiB/s. The baseline streams the same bytes over a raw TCP_NODELAY
//! loopback connection. Owns this driver only.
use super::raw;
use super::report::{emit_json, median, round, run_nodes, set_transports, tag_transport, Table};
use super::{parse_size, TransportChoice};
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Args, Debug)]
pub struct BandwidthArgs {
    /// tcp, udp or all.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: TransportChoice,
    /// Message sizes in bytes (k/m suffixes allowed).
    #[arg(long, value_delimiter = ',', default_value = "4k,64k,1m,16m", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Bytes moved per rep and size (messages per rep = bytes / size, between 1 and 1024).
    #[arg(long, default_value = "16m", value_parser = parse_size)]
    pub bytes: usize,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Measure the cost of packet authentication instead: each rep runs a job without and a
    /// job with it (tcp, udp), and the table gives both and the cost in percent.
    #[arg(long)]
    pub auth: bool,
    /// With --auth: the authenticated jobs encrypt payloads too (ChaCha20-Poly1305).
    #[arg(long, requires = "auth")]
    pub encrypt: bool,
}

/// Messages per rep for `size`.
pub fn count_for(size: usize, bytes: usize) -> usize {
    (bytes / size.max(1)).clamp(1, 1024)
}

pub fn main(a: BandwidthArgs) -> Result<(), String> {
    if a.reps == 0 || a.sizes.is_empty() || a.sizes.contains(&0) {
        return Err("--reps must be positive and --sizes non-empty and non-zero".into());
    }
    if a.auth {
        return super::auth::bandwidth(&a);
    }
    let transports = a.transport.names();
    let mut table = Table::new(
        format!("bandwidth: 2 nodes, median of {} reps, MiB/s", a.reps),
        &[
            "transport",
            "size",
            "count",
            "squall_mib_s",
            "raw_mib_s",
            "ratio",
        ],
    );
    let mut rows_json = Vec::new();
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    for t in &transports {
        let args = vec![
            "bench-bandwidth".to_string(),
            "--sizes".into(),
            sizes.join(","),
            "--bytes".into(),
            a.bytes.to_string(),
            "--reps".into(),
            a.reps.to_string(),
        ];
        let results = run_nodes(2, t, None, args, Duration::from_secs(600))?;
        let node0 = results
            .iter()
            .find(|(r, _)| *r == 0)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("{t}: node 0 printed no result"))?;
        let rows = node0
            .get("rows")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for &size in &a.sizes {
            let count = count_for(size, a.bytes);
            let secs: Vec<f64> = rows
                .iter()
                .find(|r| r.get("size").and_then(Value::as_u64) == Some(size as u64))
                .and_then(|r| r.get("secs"))
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_f64).collect())
                .ok_or_else(|| format!("{t}: node 0 reported no row for size {size}"))?;
            let total = (size * count) as f64 / MIB;
            let squall = median(&secs.iter().map(|s| total / s).collect::<Vec<_>>());
            let raw_secs = raw::tcp_bulk(size, count, a.reps)?;
            let rawv = median(&raw_secs.iter().map(|s| total / s).collect::<Vec<_>>());
            let ratio = squall / rawv;
            table.row(vec![
                t.to_string(),
                size.to_string(),
                count.to_string(),
                format!("{squall:.1}"),
                format!("{rawv:.1}"),
                format!("{ratio:.2}"),
            ]);
            let mut row = json!({
                "size": size,
                "count": count,
                "squall_mib_s": round(squall, 2),
                "raw_mib_s": round(rawv, 2),
                "ratio": round(ratio, 3),
            });
            tag_transport(&mut row, &transports, t);
            rows_json.push(row);
        }
    }
    table.print();
    if a.json {
        let mut obj = json!({"bench": "bandwidth", "raw": "tcp", "rows": rows_json});
        set_transports(&mut obj, &transports);
        emit_json(&obj);
    }
    Ok(())
}
