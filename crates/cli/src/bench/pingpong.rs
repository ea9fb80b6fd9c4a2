//! `squall bench pingpong`: round-trip latency between 2 nodes. Squall's number is an
//! active-message ping-pong (node 0's pong handler sends the next ping from the service
//! thread); beside it the blocking `request()` round trip from an application thread, and a
//! raw socket ping-pong of the same kind: blocking sockets (`raw_rtt_us`, `ratio`) and
//! non-blocking ones both ends busy-poll (`raw_spin_rtt_us`, `ratio_spin`: no thread wake-up,
//! the machine's floor). For `--transport mpi` the raw baseline is plain
//! MPI_Send/MPI_Recv between 2 ranks of their own mpirun jobs, alternating rep by rep with
//! Squall's, and `ratio` the median of the per-rep ratios. Beside it, measured inside Squall's
//! processes right after each rep (see `crate::node::rawmpi`): the same raw ping-pong over MPI
//! lent by the endpoint (`ratio_lent`, pairs no change of the machine's speed can split) and
//! the *floor*, a minimal active-message loop over MPI. Owns this driver only.
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
    /// Measure the cost of packet authentication instead: each rep runs a job without and a
    /// job with it (tcp, udp), and the table gives both and the cost in percent.
    #[arg(long)]
    pub auth: bool,
    /// With --auth: the authenticated jobs encrypt payloads too (ChaCha20-Poly1305).
    #[arg(long, requires = "auth")]
    pub encrypt: bool,
}

fn num(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Runs one 2-node job over `t` and returns node 0's rows.
fn node0_rows(t: &str, args: Vec<String>) -> Result<Vec<Value>, String> {
    run_nodes(2, t, None, args, Duration::from_secs(600))?
        .into_iter()
        .find(|(r, _)| *r == 0)
        .map(|(_, v)| {
            v.get("rows")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .ok_or_else(|| format!("{t}: node 0 printed no result"))
}

/// The 99th percentile (nearest rank) of `v`; NaN if empty.
fn p99(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n => v[((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

fn size_row(rows: &[Value], size: usize) -> Option<&Value> {
    rows.iter()
        .find(|r| r.get("size").and_then(Value::as_u64) == Some(size as u64))
}

pub fn main(a: PingpongArgs) -> Result<(), String> {
    if a.iters == 0 || a.reps == 0 || a.sizes.is_empty() {
        return Err("--iters, --reps and --sizes must be non-empty/positive".into());
    }
    if a.auth {
        return super::auth::pingpong(&a);
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
            "squall_p99_us",
            "squall_req_rtt_us",
            "squall_req_p99_us",
            "raw_rtt_us",
            "raw_p99_us",
            "ratio",
            "raw_spin_rtt_us",
            "ratio_spin",
            "raw_lent_rtt_us",
            "ratio_lent",
            "floor_rtt_us",
        ],
    );
    let sizes: Vec<String> = a.sizes.iter().map(|s| s.to_string()).collect();
    let warmup = (a.iters / 10).clamp(1, 100);
    for t in &transports {
        let args = |program: &str, reps: usize| {
            vec![
                program.to_string(),
                "--sizes".into(),
                sizes.join(","),
                "--iters".into(),
                a.iters.to_string(),
                "--reps".into(),
                reps.to_string(),
                "--warmup".into(),
                warmup.to_string(),
            ]
        };
        // Per size: the per-rep medians of the active-message, request and raw round trips.
        let mut am: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        // Per size: the per-rep 99th percentiles, Squall's and (tcp, udp) the raw ones.
        let mut am99: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        let mut raw99: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        let mut req: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        let mut req99: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        // tcp, udp: the per-rep medians of the busy-polling raw ping-pong.
        let mut spin_reps: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        let mut raw_reps: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        // mpi only: the per-rep medians of the raw ping-pong over lent MPI and of the floor.
        let mut lent_reps: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        let mut floor_reps: Vec<Vec<f64>> = vec![Vec::new(); a.sizes.len()];
        if *t == "mpi" {
            // Squall (with its lent baselines) and the raw MPI job (MPI is initialised once per
            // process, so it needs a job of its own) alternate, one rep each: on a shared
            // machine the speed of the cores' shared-memory path changes over seconds.
            for _ in 0..a.reps {
                let mut squall_args = args("bench-pingpong", 1);
                squall_args.push("--mpi-baselines".into());
                let rows = node0_rows(t, squall_args)?;
                let raw_rows = node0_rows(t, args("raw-mpi-pingpong", 1))
                    .map_err(|e| format!("the raw mpi ping-pong: {e}"))?;
                for (i, &size) in a.sizes.iter().enumerate() {
                    let row = size_row(&rows, size)
                        .ok_or_else(|| format!("{t}: node 0 reported no row for size {size}"))?;
                    am[i].extend(num(row, "am_rtt_us"));
                    am99[i].extend(num(row, "am_p99_us"));
                    req[i].extend(num(row, "req_rtt_us"));
                    req99[i].extend(num(row, "req_p99_us"));
                    lent_reps[i].extend(num(row, "raw_rtt_us"));
                    floor_reps[i].extend(num(row, "floor_rtt_us"));
                    let raw = size_row(&raw_rows, size).ok_or_else(|| {
                        format!("mpi: the raw ping-pong reported no row for size {size}")
                    })?;
                    raw_reps[i].extend(num(raw, "raw_rtt_us"));
                }
            }
        } else {
            let rows = node0_rows(t, args("bench-pingpong", a.reps))?;
            for (i, &size) in a.sizes.iter().enumerate() {
                let row = size_row(&rows, size)
                    .ok_or_else(|| format!("{t}: node 0 reported no row for size {size}"))?;
                am[i] = num(row, "am_rtt_us");
                am99[i] = num(row, "am_p99_us");
                req[i] = num(row, "req_rtt_us");
                req99[i] = num(row, "req_p99_us");
                for _ in 0..a.reps {
                    let samples = match *t {
                        "udp" => raw::udp_pingpong(size, a.iters, warmup)?,
                        _ => raw::tcp_pingpong(size, a.iters, warmup)?,
                    };
                    raw_reps[i].push(median(&samples));
                    raw99[i].push(p99(&samples));
                    let spun = match *t {
                        "udp" => raw::udp_pingpong_spin(size, a.iters, warmup)?,
                        _ => Some(raw::tcp_pingpong_spin(size, a.iters, warmup)?),
                    };
                    if let Some(samples) = spun {
                        spin_reps[i].push(median(&samples));
                    }
                }
            }
        }
        for (i, &size) in a.sizes.iter().enumerate() {
            let squall = median(&am[i]);
            let squall99 = median(&am99[i]);
            let raw99v = (!raw99[i].is_empty()).then(|| median(&raw99[i]));
            let reqv = median(&req[i]);
            let req99v = (!req99[i].is_empty()).then(|| median(&req99[i]));
            let rawv = median(&raw_reps[i]);
            let spinv = (!spin_reps[i].is_empty()).then(|| median(&spin_reps[i]));
            let ratio_spin = spinv.filter(|v| *v > 0.0).map(|v| squall / v);
            // mpi: the median of the per-rep ratios (each squall rep over the raw rep measured
            // beside it); otherwise, or if the reps do not pair up, the medians' ratio.
            let paired = |base: &[f64]| -> Option<f64> {
                let r: Vec<f64> = am[i]
                    .iter()
                    .zip(base)
                    .filter(|(_, r)| **r > 0.0)
                    .map(|(s, r)| s / r)
                    .collect();
                (r.len() == am[i].len() && !r.is_empty()).then(|| median(&r))
            };
            let ratio = match *t {
                "mpi" => paired(&raw_reps[i]),
                _ => None,
            }
            .unwrap_or(squall / rawv);
            let lent = (!lent_reps[i].is_empty()).then(|| median(&lent_reps[i]));
            let ratio_lent = paired(&lent_reps[i]);
            let floor = (!floor_reps[i].is_empty()).then(|| median(&floor_reps[i]));
            let cell = |v: Option<f64>, digits: usize| {
                v.map_or_else(|| "-".to_string(), |f| format!("{f:.digits$}"))
            };
            table.row(vec![
                t.to_string(),
                size.to_string(),
                format!("{squall:.1}"),
                format!("{squall99:.1}"),
                format!("{reqv:.1}"),
                cell(req99v, 1),
                format!("{rawv:.1}"),
                cell(raw99v, 1),
                format!("{ratio:.2}"),
                cell(spinv, 1),
                cell(ratio_spin, 2),
                cell(lent, 1),
                cell(ratio_lent, 2),
                cell(floor, 1),
            ]);
            let mut row = json!({
                "size": size,
                "squall_rtt_us": round(squall, 2),
                "squall_p99_us": round(squall99, 2),
                "squall_req_rtt_us": round(reqv, 2),
                "raw_rtt_us": round(rawv, 2),
                "ratio": round(ratio, 3),
            });
            for (key, v, digits) in [
                ("squall_req_p99_us", req99v, 2),
                ("raw_p99_us", raw99v, 2),
                ("raw_spin_rtt_us", spinv, 2),
                ("ratio_spin", ratio_spin, 3),
                ("raw_lent_rtt_us", lent, 2),
                ("ratio_lent", ratio_lent, 3),
                ("floor_rtt_us", floor, 2),
            ] {
                if let Some(v) = v {
                    row[key] = json!(round(v, digits));
                }
            }
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
