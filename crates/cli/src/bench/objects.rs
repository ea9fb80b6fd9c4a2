//! `squall bench objects`: DSM/IP shared objects (seed 004 §4–5). The seed's
//! microbenchmarks as `Read()`/`Write()` latency per engine, local and remote, beside a raw
//! 8-byte request/reply of the same transport measured in the same run; and its workloads
//! `sea` (most communication) and `xstate` (least) on each engine at 1, 2 and 4 nodes, like
//! its Figures 9 and 11, and `genetic` (moderate communication) like its Figure 10, normalised to the same computation run sequentially (plain arrays,
//! no Squall), as the seed normalises to its uniprocessor binaries. The node program checks
//! the OU and MSI answers against the sequential ones and, from the object statistics, that
//! remote operations happened. `sea` also runs on page-based shared memory (engine column
//! `pages`: the run's page protocol) for the comparison, and so does `genetic` (the algorithm
//! of apps/genetic, in Rust). Owns this driver only.
use super::report::{emit_json, median, round, run_nodes, set_transports, Table};
use super::TransportChoice;
use crate::node::objects::ObjectsWork;
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ObjectsArgs {
    /// tcp, udp or all.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: TransportChoice,
    /// Node counts for the workloads (the micro measurements run at 2).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub nodes: Vec<usize>,
    #[command(flatten)]
    pub w: ObjectsWork,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn us(v: &Value) -> f64 {
    v.get("median_ns")
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
        / 1000.0
}

fn p99us(v: &Value) -> f64 {
    v.get("p99_ns").and_then(Value::as_f64).unwrap_or(f64::NAN) / 1000.0
}

pub fn main(a: ObjectsArgs) -> Result<(), String> {
    if a.w.reps == 0 || a.w.iters == 0 || a.w.grid < 3 || a.w.steps == 0 || a.w.range <= 0 {
        return Err(
            "--reps, --iters, --steps and --range must be positive, --grid at least 3".into(),
        );
    }
    a.w.check_genetic()?;
    if a.nodes.iter().any(|&n| n == 0 || n > 64) {
        return Err("--nodes: counts from 1 to 64".into());
    }
    let transports = a.transport.names();
    let mut micro_t = Table::new(
        format!("shared-object Read()/Write() latency on node 0 (2 nodes), median (p99) us over {} x {}", a.w.reps, a.w.iters),
        &["transport", "engine", "read_local", "read_remote", "write_local", "write_remote", "remote/raw", "remote_ops"],
    );
    let mut work_t = Table::new(
        format!(
            "workloads: sea {}x{} x {} sweeps, xstate range {}; median s of {} reps; x seq = time / sequential",
            a.w.grid, a.w.grid, a.w.steps, a.w.range, a.w.reps
        ),
        &["transport", "nodes", "engine", "sea_s", "sea_x_seq", "sea_ok", "xstate_s", "xstate_x_seq", "xstate_ok", "remote_ops_node0"],
    );
    let mut ga_t = Table::new(
        format!(
            "genetic (Figure 10): population {} x {} generations, bases 2..{}; median s of {} reps; x seq = time / sequential",
            a.w.pop, a.w.gens, a.w.bases, a.w.reps
        ),
        &["transport", "nodes", "engine", "genetic_s", "x_seq", "same_as_seq", "whole"],
    );
    let mut out = json!({"micro": [], "workloads": [], "genetic": []});
    for t in &transports {
        let mut counts = a.nodes.clone();
        if !counts.contains(&2) {
            counts.push(2);
        }
        for &n in &counts {
            let mut args = vec!["bench-objects".to_string()];
            args.extend(a.w.node_args());
            if n != 2 {
                args.push("--no-micro".into());
            }
            let res = run_nodes(n, t, None, args, Duration::from_secs(900))?;
            let Some((_, v)) = res.iter().find(|(r, _)| *r == 0) else {
                return Err(format!("{t}: node 0 printed no result at {n} nodes"));
            };
            if let Some(m) = v.get("micro").filter(|m| !m.is_null()) {
                let raw = us(&m["raw_request_reply_8b"]);
                for e in ["ou", "msi", "nc"] {
                    let x = &m[e];
                    let cell = |k: &str| format!("{:.2} ({:.2})", us(&x[k]), p99us(&x[k]));
                    micro_t.row(vec![
                        t.to_string(),
                        e.into(),
                        cell("read_local"),
                        cell("read_remote"),
                        cell("write_local"),
                        cell("write_remote"),
                        format!("{:.2}", us(&x["read_remote"]) / raw),
                        x["remote_ops"].to_string(),
                    ]);
                }
                micro_t.row(vec![
                    t.to_string(),
                    "raw 8 B req/reply".into(),
                    String::new(),
                    format!("{:.2} ({:.2})", raw, p99us(&m["raw_request_reply_8b"])),
                    String::new(),
                    String::new(),
                    "1.00".into(),
                    String::new(),
                ]);
                let mut mm = m.clone();
                mm["transport"] = json!(t);
                if let Some(arr) = out["micro"].as_array_mut() {
                    arr.push(mm);
                }
            }
            if !a.nodes.contains(&n) {
                continue;
            }
            let seq_sea = v["sea_seq_s"].as_f64().unwrap_or(f64::NAN);
            let pages = median(&f64s(&v["sea_pages_s"]));
            work_t.row(vec![
                t.to_string(),
                n.to_string(),
                "pages".into(),
                format!("{pages:.4}"),
                format!("{:.1}", pages / seq_sea),
                v["sea_pages_ok"].to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            if let Some(arr) = out["workloads"].as_array_mut() {
                arr.push(json!({"transport": t, "nodes": n, "engine": "pages",
                    "sea_s": round(pages, 5), "sea_seq_s": round(seq_sea, 5), "sea_ok": v["sea_pages_ok"]}));
            }
            let seq_ga = v["genetic_seq_s"].as_f64().unwrap_or(f64::NAN);
            let mut ga_row = |engine: &str, s: f64, same: &Value, whole: &Value| {
                ga_t.row(vec![
                    t.to_string(),
                    n.to_string(),
                    engine.into(),
                    format!("{s:.4}"),
                    format!("{:.2}", s / seq_ga),
                    same.to_string(),
                    whole.to_string(),
                ]);
                if let Some(arr) = out["genetic"].as_array_mut() {
                    arr.push(json!({"transport": t, "nodes": n, "engine": engine,
                        "genetic_s": round(s, 5), "genetic_seq_s": round(seq_ga, 5),
                        "same_as_seq": same, "whole": whole}));
                }
            };
            ga_row(
                "pages",
                median(&f64s(&v["genetic_pages_s"])),
                &v["genetic_pages_ok"],
                &v["genetic_pages_ok"],
            );
            for w in v["workloads"].as_array().cloned().unwrap_or_default() {
                ga_row(
                    w["engine"].as_str().unwrap_or("?"),
                    median(&f64s(&w["genetic_s"])),
                    &w["genetic_ok"],
                    &w["genetic_whole"],
                );
            }
            if let Some(arr) = out["genetic"].as_array_mut() {
                if n == 1 {
                    arr.push(json!({"transport": t, "sequential": v["genetic_seq"]}));
                }
            }
            let seq_x = v["xstate_seq_s"].as_f64().unwrap_or(f64::NAN);
            for w in v["workloads"].as_array().cloned().unwrap_or_default() {
                let s = median(&f64s(&w["sea_s"]));
                let x = median(&f64s(&w["xstate_s"]));
                work_t.row(vec![
                    t.to_string(),
                    n.to_string(),
                    w["engine"].as_str().unwrap_or("?").into(),
                    format!("{s:.4}"),
                    format!("{:.1}", s / seq_sea),
                    w["sea_ok"].to_string(),
                    format!("{x:.4}"),
                    format!("{:.2}", x / seq_x),
                    w["xstate_ok"].to_string(),
                    w["remote_ops_node0"].to_string(),
                ]);
                if let Some(arr) = out["workloads"].as_array_mut() {
                    arr.push(json!({"transport": t, "nodes": n, "engine": w["engine"],
                        "sea_s": round(s, 5), "sea_seq_s": round(seq_sea, 5), "sea_ok": w["sea_ok"],
                        "xstate_s": round(x, 5), "xstate_seq_s": round(seq_x, 5), "xstate_ok": w["xstate_ok"],
                        "remote_ops_node0": w["remote_ops_node0"]}));
                }
            }
        }
    }
    micro_t.print();
    println!();
    work_t.print();
    println!();
    ga_t.print();
    println!("(NC answers are reported, not required: NC promises no consistency.)");
    if a.json {
        set_transports(&mut out, &transports);
        emit_json(&out);
    }
    Ok(())
}
