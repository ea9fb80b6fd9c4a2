//! Driver of `squall bench lock --contended`: one lock taken in a loop by one thread on every
//! node (`--nodes`, default 2,4), a counter under it; per acquire: time (p50/p99 over the
//! repetitions of each node's loop; hand-off: the job's time over its remote acquires, also in
//! request/reply round trips measured in the same job), per hand-off between nodes the lock
//! messages, page fetches and diffs from every node's statistics (the round trips a hand-off
//! costs beyond the lock's own), and fairness: the slowest other node's loop time over the
//! home's (node 0 manages the lock and is the counter's home; every node does the same number
//! of operations); with 3 nodes or more, the acquire of a lock last held by a third node
//! (time, messages), and the pages pushed with grants and taken per hand-off (reported, not
//! checked: an acquirer takes a push only into a clean copy it holds). Checks from the
//! statistics that the lock reached every other node from another node. Node sides are in `node::lockbench`. Owns this driver only.
use super::dsm::{p50_p99, DsmBenchArgs};
use super::report::{emit_json, median, round, run_nodes, Table};
use serde_json::{json, Value};
use std::time::Duration;

fn nums(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn total(results: &[(u16, Value)], key: &str) -> u64 {
    results
        .iter()
        .filter_map(|(_, v)| v.get(key).and_then(Value::as_u64))
        .sum()
}

pub fn contended(a: DsmBenchArgs) -> Result<(), String> {
    let mut table = Table::new(
        format!(
            "contended lock over {}, {} thread(s) per node, {} us outside the lock between acquires, {} reps (per acquire: job time / all acquires)",
            a.transport, a.threads.max(1), a.think_us, a.reps
        ),
        &[
            "nodes",
            "acquire_us_p50",
            "acquire_us_p99",
            "handoff_us",
            "rtt_us",
            "handoff_rtts",
            "lock_msgs_per_handoff",
            "fetches_per_handoff",
            "diffs_per_handoff",
            "pushed_per_handoff",
            "taken_per_handoff",
            "remote_share",
            "remote_over_home",
            "third_node_us",
            "third_node_msgs",
        ],
    );
    let mut rows = Vec::new();
    for &n in &a.nodes {
        if n < 2 {
            return Err("the contended lock bench needs at least 2 nodes per row".into());
        }
        let args = vec![
            "bench-lock-contended".to_string(),
            "--iters".into(),
            a.iters.unwrap_or(300).to_string(),
            "--reps".into(),
            a.reps.to_string(),
            "--threads".into(),
            a.threads.max(1).to_string(),
            "--think-us".into(),
            a.think_us.to_string(),
        ];
        let results = run_nodes(n, &a.transport, None, args, Duration::from_secs(600))?;
        if results.len() != n {
            return Err(format!("{} of {n} nodes reported", results.len()));
        }
        let per: Vec<f64> = results
            .iter()
            .flat_map(|(_, v)| nums(v, "per_acquire_us"))
            .collect();
        let acquires = total(&results, "acquires");
        let remote = total(&results, "remote_acquires");
        if acquires == 0 || remote == 0 {
            return Err(format!(
                "{n} nodes: {acquires} acquires, {remote} remote: the lock never moved"
            ));
        }
        // Every node but the lock's manager (node 0, where the token starts) must have had
        // the token handed to it by another node to do its increments.
        if let Some((r, _)) = results
            .iter()
            .find(|(r, v)| *r != 0 && v.get("remote_acquires").and_then(Value::as_u64) == Some(0))
        {
            return Err(format!(
                "{n} nodes: node {r} counted no acquire of a token from another node"
            ));
        }
        let diffs = total(&results, "diffs") as f64 / remote as f64;
        // The counter's page is written under the lock at every acquire: with hlrc the
        // granter may push it with the grant (pushed) and an acquirer holding a clean copy
        // updates it in place (taken) instead of fetching it again.
        let (pushed, taken) = (
            total(&results, "grant_pages_pushed"),
            total(&results, "grant_pushes_taken"),
        );
        let rtt = median(
            &results
                .iter()
                .flat_map(|(_, v)| nums(v, "rtt_us"))
                .collect::<Vec<_>>(),
        );
        // Fairness: every node does the same operations; the slowest other node's loop
        // (median over reps) over the home's.
        let loop_median = |rank: u16| {
            results
                .iter()
                .find(|(r, _)| *r == rank)
                .map_or(0.0, |(_, v)| median(&nums(v, "loop_us")))
        };
        let home = loop_median(0);
        let others = (1..n as u16).map(loop_median).fold(0.0, f64::max);
        let fairness = if home > 0.0 { others / home } else { 0.0 };
        let msgs = total(&results, "lock_msgs") as f64 / remote as f64;
        let fetches = total(&results, "page_fetches") as f64 / remote as f64;
        let (p50, p99) = p50_p99(&per);
        // Hand-off: the job's time (each rep's slowest loop) over its remote acquires.
        let loops: Vec<Vec<f64>> = results.iter().map(|(_, v)| nums(v, "loop_us")).collect();
        let job_us: f64 = (0..a.reps)
            .map(|r| {
                loops
                    .iter()
                    .filter_map(|l| l.get(r).copied())
                    .fold(0.0, f64::max)
            })
            .sum();
        let handoff = job_us / remote as f64;
        let handoff_rtts = if rtt > 0.0 { handoff / rtt } else { 0.0 };
        let third: Vec<f64> = results
            .iter()
            .flat_map(|(_, v)| nums(v, "third_us"))
            .collect();
        let third_acq = results
            .first()
            .and_then(|(_, v)| v.get("third_acquires").and_then(Value::as_u64))
            .unwrap_or(0);
        let third_msgs = total(&results, "third_msgs") as f64 / third_acq.max(1) as f64;
        let (t50, tmsgs) = if third_acq > 0 {
            (format!("{:.1}", median(&third)), format!("{third_msgs:.2}"))
        } else {
            ("-".into(), "-".into())
        };
        table.row(vec![
            n.to_string(),
            format!("{p50:.1}"),
            format!("{p99:.1}"),
            format!("{handoff:.1}"),
            format!("{rtt:.1}"),
            format!("{handoff_rtts:.2}"),
            format!("{msgs:.2}"),
            format!("{fetches:.2}"),
            format!("{diffs:.2}"),
            format!("{:.2}", pushed as f64 / remote as f64),
            format!("{:.2}", taken as f64 / remote as f64),
            format!("{:.2}", remote as f64 / acquires as f64),
            format!("{fairness:.2}"),
            t50,
            tmsgs,
        ]);
        rows.push(json!({"nodes": n, "acquire_us_p50": round(p50, 2), "acquire_us_p99": round(p99, 2), "handoff_us": round(handoff, 2),
            "lock_messages_per_remote_acquire": round(msgs, 3), "acquires": acquires,
            "remote_acquires": remote, "rtt_us": round(rtt, 2),
            "handoff_round_trips": round(handoff_rtts, 3),
            "page_fetches_per_handoff": round(fetches, 3), "diffs_per_handoff": round(diffs, 3),
            "grant_pages_pushed_per_handoff": round(pushed as f64 / remote as f64, 3),
            "grant_pushes_taken_per_handoff": round(taken as f64 / remote as f64, 3),
            "remote_over_home_time": round(fairness, 3),
            "third_node_acquire_us": if third_acq > 0 { json!(round(median(&third), 2)) } else { Value::Null },
            "third_node_messages": if third_acq > 0 { json!(round(third_msgs, 3)) } else { Value::Null }}));
    }
    table.print();
    if a.json {
        emit_json(
            &json!({"bench": "lock_contended", "transport": a.transport, "think_us": a.think_us, "rows": rows}),
        );
    }
    Ok(())
}
