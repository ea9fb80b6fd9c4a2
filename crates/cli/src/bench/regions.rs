//! Driver of `squall bench regions`: a CRL region read miss (`start_read` on a copy the
//! home's write invalidated, S bytes coming back) beside a raw request/reply of the same size
//! on the same transport, measured alternately in the same run (node side:
//! `node::regions`). Reports p50 and p99 of each and the ratio of the medians; the node side
//! checks from its statistics that every timed read was a miss. Owns this driver only.
use super::parse_size;
use super::report::{emit_json, round, run_nodes, Table};
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct RegionsArgs {
    /// tcp or udp.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// Region sizes in bytes (k/m suffixes allowed).
    #[arg(long, value_delimiter = ',', default_value = "64,4096,65536", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Timed misses per size and repetition.
    #[arg(long, default_value_t = 200)]
    pub iters: usize,
    /// Repetitions (all samples are pooled for p50 and p99).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// The `q` quantile (nearest rank) of `v`; NaN if empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn nums(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

pub fn main(a: RegionsArgs) -> Result<(), String> {
    let sizes: Vec<String> = a.sizes.iter().map(usize::to_string).collect();
    let args = vec![
        "bench-regions".to_string(),
        "--sizes".into(),
        sizes.join(","),
        "--iters".into(),
        a.iters.to_string(),
        "--reps".into(),
        a.reps.to_string(),
    ];
    let results = run_nodes(2, &a.transport, None, args, Duration::from_secs(600))?;
    let v = results
        .iter()
        .find(|(r, _)| *r == 0)
        .map(|(_, v)| v.clone())
        .ok_or("node 0 printed no result")?;
    let mut table = Table::new(
        format!(
            "regions: read miss on an invalidated region (home: node 1) vs raw request/reply, \
             2 nodes over {}, {} x {} samples (microseconds)",
            a.transport, a.reps, a.iters
        ),
        &[
            "size",
            "miss_p50",
            "miss_p99",
            "raw_p50",
            "raw_p99",
            "ratio_p50",
        ],
    );
    let mut rows = Vec::new();
    for row in v
        .get("rows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let size = row.get("size").and_then(Value::as_u64).unwrap_or(0);
        let (miss, raw) = (nums(row, "miss_us"), nums(row, "raw_us"));
        if miss.is_empty() || raw.is_empty() {
            return Err(format!("no samples for {size} bytes"));
        }
        let (m50, m99) = (quantile(&miss, 0.5), quantile(&miss, 0.99));
        let (r50, r99) = (quantile(&raw, 0.5), quantile(&raw, 0.99));
        table.row(vec![
            size.to_string(),
            format!("{m50:.1}"),
            format!("{m99:.1}"),
            format!("{r50:.1}"),
            format!("{r99:.1}"),
            format!("{:.2}", m50 / r50),
        ]);
        rows.push(json!({
            "size": size, "misses": row.get("misses"),
            "miss_p50_us": round(m50, 2), "miss_p99_us": round(m99, 2),
            "raw_p50_us": round(r50, 2), "raw_p99_us": round(r99, 2),
            "ratio_p50": round(m50 / r50, 3),
        }));
    }
    table.print();
    if a.json {
        emit_json(&json!({"bench": "regions", "transport": a.transport, "rows": rows}));
    }
    Ok(())
}
