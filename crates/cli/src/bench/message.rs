//! `squall bench message`: the DSM/IP paper's message_test (§4.1). Every node sends M
//! messages to the next rank as fast as it can; each receiver checks that every message from
//! its predecessor arrived exactly once and in order. Prints messages/s per node and in total.
//! Owns this driver only.
use super::report::{emit_json, median, round, run_nodes, set_transports, tag_transport, Table};
use super::{parse_size, TransportChoice};
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct MessageArgs {
    /// Number of nodes.
    #[arg(short = 'n', long = "nodes", default_value_t = 4)]
    pub nodes: usize,
    /// tcp, udp or all.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: TransportChoice,
    /// Messages each node sends per rep.
    #[arg(short = 'm', long, default_value_t = 100_000)]
    pub messages: u64,
    /// Payload bytes per message (at least 8: the sequence number).
    #[arg(long, default_value = "8", value_parser = parse_size)]
    pub size: usize,
    /// Repetitions; the median rate is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Fault injection passed to the nodes (SQUALL_NET_FAULTS), e.g. loss=0.01,seed=3.
    #[arg(long, value_name = "SPEC")]
    pub net_faults: Option<String>,
    /// End the table with one JSON line.
    #[arg(long)]
    pub json: bool,
}

fn f64s(v: &Value, key: &str) -> Vec<f64> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

pub fn main(a: MessageArgs) -> Result<(), String> {
    if a.nodes < 2 {
        return Err(format!(
            "message test needs at least 2 nodes (got {})",
            a.nodes
        ));
    }
    if a.messages == 0 || a.reps == 0 {
        return Err("--messages and --reps must be positive".into());
    }
    let transports = a.transport.names();
    let mut table =
        Table::new(
            format!(
            "message_test: {} nodes, {} messages of {} bytes per node per rep, median of {} reps",
            a.nodes, a.messages, a.size.max(8), a.reps
        ),
            &[
                "transport",
                "node",
                "sent_msgs_s",
                "recv_msgs_s",
                "received",
                "in_order",
            ],
        );
    let mut rows_json = Vec::new();
    for t in &transports {
        let args = vec![
            "bench-message".to_string(),
            "--messages".into(),
            a.messages.to_string(),
            "--size".into(),
            a.size.to_string(),
            "--reps".into(),
            a.reps.to_string(),
        ];
        let results = run_nodes(
            a.nodes,
            t,
            a.net_faults.as_deref(),
            args,
            Duration::from_secs(900),
        )?;
        if results.len() != a.nodes {
            return Err(format!(
                "{t}: {} of {} nodes printed a result",
                results.len(),
                a.nodes
            ));
        }
        let mut total = 0.0;
        let mut all_ok = true;
        for (rank, v) in &results {
            let sent = median(&f64s(v, "send_rate"));
            let recv = median(&f64s(v, "recv_rate"));
            let received = v.get("received").and_then(Value::as_u64).unwrap_or(0);
            let ok = v.get("in_order").and_then(Value::as_bool).unwrap_or(false);
            all_ok &= ok && received == a.messages * a.reps as u64;
            total += recv;
            table.row(vec![
                t.to_string(),
                rank.to_string(),
                format!("{sent:.0}"),
                format!("{recv:.0}"),
                received.to_string(),
                ok.to_string(),
            ]);
            let mut row = json!({
                "node": rank,
                "sent_msgs_s": round(sent, 1),
                "recv_msgs_s": round(recv, 1),
                "received": received,
                "in_order": ok,
            });
            tag_transport(&mut row, &transports, t);
            rows_json.push(row);
        }
        table.row(vec![
            t.to_string(),
            "total".into(),
            String::new(),
            format!("{total:.0}"),
            String::new(),
            all_ok.to_string(),
        ]);
        if !all_ok {
            table.print();
            return Err(format!(
                "{t}: some node did not receive every message exactly once in order"
            ));
        }
        rows_json.push(json!({"node": "total", "recv_msgs_s": round(total, 1), "transport": t}));
    }
    table.print();
    if a.json {
        let mut obj = json!({"bench": "message", "nodes": a.nodes, "messages": a.messages, "rows": rows_json});
        set_transports(&mut obj, &transports);
        emit_json(&obj);
    }
    Ok(())
}
