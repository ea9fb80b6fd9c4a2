//! `squall bench pingpong`: round-trip latency between 2 nodes. Squall's number is an
//! active-message ping-pong (node 0's pong handler sends the next ping from the service
//! thread); beside it the blocking `request()` round trip from an application thread, and a
//! raw socket ping-pong of the same kind (for `--transport mpi`: plain MPI_Send/MPI_Recv
//! between 2 ranks of a second mpirun job, measured in the same run). Owns this driver only.
use super::raw;
use super::report::{emit_json, median, round, run_nodes, set_transports, tag_transport, Table};
use super::{parse_size, TransportChoice};
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct PingpongArgs {
    /// tcp, udp, mpi (nodes under mpirun; needs `--features mpi`) or all (tcp and udp).
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: TransportChoice,
    /// Message sizes in bytes (k/m suffixes allowed).
    #[arg(long, value_delimiter = ',', default_value = "8,64,512,4096,65536", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Round trips per rep.
    #[arg(long, default_value_t = 1000)]
    pub iters: usize,
    /// Repetitions; the median of the per-rep medians is reported.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

fn num(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

pub fn main(a: PingpongArgs) -> Result<(), String> {
    if a.iters == 0 || a.reps == 0 || a.sizes.is_empty() {
        return Err("--iters, --reps and --sizes must be non-empty/positive".into());
    }
    let transports = a.transport.names();
    let mut rows_json = Vec::new();
    let mut table = Table::new(
        format!(
            "pingpong: 2 nodes, {} round trips x {} reps, median round-trip time in microseconds",
            a.iters, a.reps
        ),
        &[
            "transport",
            "size",
            "squall_rtt_us",
            "squall_req_rtt_us",
            "raw_rtt_us",
            "ratio",
        ],
    );
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    let warmup = (a.iters / 10).clamp(1, 100);
    for t in &transports {
        let args = vec![
            "bench-pingpong".to_string(),
            "--sizes".into(),
            sizes.join(","),
            "--iters".into(),
            a.iters.to_string(),
            "--reps".into(),
            a.reps.to_string(),
            "--warmup".into(),
            warmup.to_string(),
        ];
        let results = run_nodes(2, t, None, args.clone(), Duration::from_secs(600))?;
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
        // The raw MPI baseline: plain MPI_Send/MPI_Recv between 2 ranks of their own mpirun
        // job (MPI is initialised once per process, so it cannot share the squall nodes).
        let mpi_raw = if *t == "mpi" {
            let mut raw_args = args.clone();
            raw_args[0] = "raw-mpi-pingpong".into();
            run_nodes(2, t, None, raw_args, Duration::from_secs(600))?
                .into_iter()
                .find(|(r, _)| *r == 0)
                .and_then(|(_, v)| v.get("rows").and_then(Value::as_array).cloned())
                .ok_or_else(|| "mpi: the raw ping-pong printed no result".to_string())?
        } else {
            Vec::new()
        };
        for &size in &a.sizes {
            let row = rows
                .iter()
                .find(|r| r.get("size").and_then(Value::as_u64) == Some(size as u64))
                .ok_or_else(|| format!("{t}: node 0 reported no row for size {size}"))?;
            let squall = median(&num(row, "am_rtt_us"));
            let req = median(&num(row, "req_rtt_us"));
            let mut raw_reps = Vec::with_capacity(a.reps);
            if *t == "mpi" {
                raw_reps = mpi_raw
                    .iter()
                    .find(|r| r.get("size").and_then(Value::as_u64) == Some(size as u64))
                    .map(|r| num(r, "raw_rtt_us"))
                    .unwrap_or_default();
            } else {
                for _ in 0..a.reps {
                    let samples = match *t {
                        "udp" => raw::udp_pingpong(size, a.iters, warmup)?,
                        _ => raw::tcp_pingpong(size, a.iters, warmup)?,
                    };
                    raw_reps.push(median(&samples));
                }
            }
            let rawv = median(&raw_reps);
            let ratio = squall / rawv;
            table.row(vec![
                t.to_string(),
                size.to_string(),
                format!("{squall:.1}"),
                format!("{req:.1}"),
                format!("{rawv:.1}"),
                format!("{ratio:.2}"),
            ]);
            let mut row = json!({
                "size": size,
                "squall_rtt_us": round(squall, 2),
                "squall_req_rtt_us": round(req, 2),
                "raw_rtt_us": round(rawv, 2),
                "ratio": round(ratio, 3),
            });
            tag_transport(&mut row, &transports, t);
            rows_json.push(row);
        }
    }
    table.print();
    if a.json {
        let mut obj = json!({"bench": "pingpong", "rows": rows_json});
        set_transports(&mut obj, &transports);
        emit_json(&obj);
    }
    Ok(())
}
