//! `squall bench gptr`: one-sided operations (Split-C global pointers, OpenSHMEM) between 2
//! nodes against raw messages measured in the same run (node side: `node::gptr`): 8-byte get
//! latency (p50, p99) against the small request/reply, put and get bandwidth at 1 MiB against
//! raw 1 MiB requests, and the rate of one-way 8-byte stores beside raw 8-byte sends. Checks
//! from both nodes' statistics that the operations it names happened. Owns this driver.
use super::dsm::DsmBenchArgs;
use super::report::{emit_json, median, round, run_nodes, Table};
use serde_json::{json, Value};
use std::time::Duration;

fn col(reps: &[Value], key: &str) -> Vec<f64> {
    reps.iter()
        .filter_map(|r| r.get(key).and_then(Value::as_f64))
        .collect()
}

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

pub fn main(a: DsmBenchArgs) -> Result<(), String> {
    let iters = a.iters.unwrap_or(1000);
    let args = vec![
        "bench-gptr".to_string(),
        "--iters".into(),
        iters.to_string(),
        "--reps".into(),
        a.reps.to_string(),
    ];
    let res = run_nodes(2, &a.transport, None, args, Duration::from_secs(900))?;
    let n0 = res
        .iter()
        .find(|(r, _)| *r == 0)
        .map(|(_, v)| v.clone())
        .ok_or("node 0 printed no result")?;
    let n1 = res
        .iter()
        .find(|(r, _)| *r == 1)
        .map(|(_, v)| v.clone())
        .ok_or("node 1 printed no result")?;
    let reps = n0
        .get("reps")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if reps.is_empty() {
        return Err("node 0 reported no repetitions".into());
    }
    // The operations happened: counted where issued and where served.
    let checks = [
        ("gets", num(&n0, "gets"), num(&n0, "want_gets")),
        ("puts", num(&n0, "puts"), num(&n0, "want_puts")),
        ("stores", num(&n0, "stored"), num(&n0, "want_stores")),
        (
            "served gets",
            num(&n1, "served_gets"),
            num(&n0, "want_gets"),
        ),
        (
            "served puts",
            num(&n1, "served_puts"),
            num(&n0, "want_puts"),
        ),
        (
            "served stores",
            num(&n1, "served_stores"),
            num(&n0, "want_stores"),
        ),
        ("raw sends", num(&n1, "raw_flood"), num(&n0, "want_stores")),
    ];
    for (what, got, want) in checks {
        if got < want {
            return Err(format!(
                "statistics count {got} {what}, the bench made {want}"
            ));
        }
    }
    let m = |k: &str| median(&col(&reps, k));
    let (g50, g99, r50, r99) = (
        m("get8_p50_us"),
        m("get8_p99_us"),
        m("raw_p50_us"),
        m("raw_p99_us"),
    );
    let (put, rput, get, rget) = (
        m("put_mib_s"),
        m("raw_put_mib_s"),
        m("get_mib_s"),
        m("raw_get_mib_s"),
    );
    let (st, raw) = (m("store_per_s"), m("raw_per_s"));
    let mut t = Table::new(
        format!(
            "gptr: 2 nodes over {}, medians of {} reps ({iters} gets, {} stores per rep)",
            a.transport,
            a.reps,
            num(&n0, "stores")
        ),
        &["operation", "gptr", "raw", "ratio", "goal"],
    );
    t.row(vec![
        "8 B get p50 (us)".into(),
        format!("{g50:.1}"),
        format!("{r50:.1}"),
        format!("{:.2}", g50 / r50),
        "<= 1.10".into(),
    ]);
    t.row(vec![
        "8 B get p99 (us)".into(),
        format!("{g99:.1}"),
        format!("{r99:.1}"),
        format!("{:.2}", g99 / r99),
        "-".into(),
    ]);
    t.row(vec![
        "1 MiB put (MiB/s)".into(),
        format!("{put:.0}"),
        format!("{rput:.0}"),
        format!("{:.2}", put / rput),
        ">= 0.90".into(),
    ]);
    t.row(vec![
        "1 MiB get (MiB/s)".into(),
        format!("{get:.0}"),
        format!("{rget:.0}"),
        format!("{:.2}", get / rget),
        ">= 0.90".into(),
    ]);
    t.row(vec![
        "8 B one-way store (per s)".into(),
        format!("{st:.0}"),
        format!("{raw:.0}"),
        format!("{:.2}", st / raw),
        "-".into(),
    ]);
    t.print();
    if a.json {
        emit_json(&json!({
            "bench": "gptr", "transport": a.transport, "reps": a.reps,
            "rows": [
                {"op": "get_8B", "p50_us": round(g50, 2), "p99_us": round(g99, 2), "raw_p50_us": round(r50, 2), "raw_p99_us": round(r99, 2), "ratio": round(g50 / r50, 3)},
                {"op": "put_1MiB", "mib_s": round(put, 1), "raw_mib_s": round(rput, 1), "ratio": round(put / rput, 3)},
                {"op": "get_1MiB", "mib_s": round(get, 1), "raw_mib_s": round(rget, 1), "ratio": round(get / rget, 3)},
                {"op": "store_8B", "per_s": round(st, 0), "raw_per_s": round(raw, 0), "ratio": round(st / raw, 3)},
            ],
            "counts": {"gets": num(&n0, "gets"), "puts": num(&n0, "puts"), "stores": num(&n0, "stored"),
                       "served_gets": num(&n1, "served_gets"), "served_puts": num(&n1, "served_puts"),
                       "served_stores": num(&n1, "served_stores")},
        }));
    }
    Ok(())
}
