//! Golden message trace: a fixed scenario (remote lock hand-off, a per-node barrier, a flag
//! hand-off, a condition signal) must produce exactly the committed messages, byte for byte.
//! This pins the wire encoding and the message counts. Re-bless with `SYNC_BLESS=1`.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use squall_core::NodeId;
use squall_sync::message::Msg;
use squall_sync::BarrierCount;
use std::fmt::Write as _;

fn scenario() -> String {
    let mut w = World::new(0, 3, 0.0);
    let t: Vec<usize> = (0..3).map(|n| w.spawn(n, idle())).collect();
    let mut out = String::new();
    let mut mark = 0;
    let mut section = |w: &World, name: &str, out: &mut String| {
        writeln!(out, "# {name}").unwrap();
        for (from, to, m) in &w.deliveries[mark..] {
            let kind = Msg::decode(NodeId(*from), m).unwrap().kind_name();
            let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "{from}->{to} {kind} {hex}").unwrap();
        }
        mark = w.deliveries.len();
    };
    // Lock 0 (manager node 0): node 1 takes it (2 messages), then node 2 (3 messages).
    w.issue(t[1], Op::Lock(0));
    w.quiesce();
    w.issue(t[1], Op::Unlock(0));
    w.quiesce();
    w.issue(t[2], Op::Lock(0));
    w.quiesce();
    w.issue(t[2], Op::Unlock(0));
    w.quiesce();
    section(&w, "lock 0: node 1 then node 2", &mut out);
    // Barrier 1 (manager node 1), one thread per node: 2(N-1) = 4 messages.
    for &x in &t {
        w.issue(x, Op::Barrier(1, BarrierCount::PerNode { local: 1 }));
    }
    w.quiesce();
    section(&w, "barrier 1, one thread per node", &mut out);
    // Flag 2 (manager node 2): node 0 waits, node 1 sets.
    w.issue(t[0], Op::FlagWait(2));
    w.quiesce();
    w.issue(t[1], Op::FlagSet(2));
    w.quiesce();
    section(&w, "flag 2: node 0 waits, node 1 sets", &mut out);
    // Condition 4 (manager node 1) with lock 3 (manager node 0): node 2 waits, node 0 signals.
    w.issue(t[2], Op::Lock(3));
    w.quiesce();
    w.issue(t[2], Op::CondWait(4, 3));
    w.quiesce();
    w.issue(t[0], Op::Lock(3));
    w.quiesce();
    w.issue(t[0], Op::Signal(4));
    w.quiesce();
    w.issue(t[0], Op::Unlock(3));
    w.quiesce();
    w.issue(t[2], Op::Unlock(3));
    w.quiesce();
    section(
        &w,
        "condition 4 on lock 3: node 2 waits, node 0 signals",
        &mut out,
    );
    out
}

#[test]
fn golden_message_trace() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/testdata/golden_trace.txt"
    );
    let got = scenario();
    if std::env::var_os("SYNC_BLESS").is_some() {
        std::fs::write(path, &got).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        got, want,
        "message trace changed; if intended, re-bless with SYNC_BLESS=1"
    );
}
