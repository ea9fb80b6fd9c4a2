//! `squall __node demo`: the backbone demo behind `squall demo`. A token travels the ring
//! LAPS times, every node adding its rank; then a short message_test (each node floods the
//! next with numbered messages, checked exactly-once and in order). Every node prints what it
//! saw. Owns this program only.
use super::{channel, finish, join, notify, read_u64, ring_neighbours, ty, Barrier, NodeError};
use bytes::Bytes;
use clap::Args;
use squall_core::NodeId;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct DemoNodeArgs {
    /// Laps the token makes around the ring.
    #[arg(long, default_value_t = 3)]
    pub laps: u64,
    /// Messages each node sends to the next in the flood phase.
    #[arg(long, default_value_t = 20_000)]
    pub messages: u64,
}

pub fn run(a: DemoNodeArgs) -> Result<(), NodeError> {
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    let (prev, next) = ring_neighbours(&ep);
    let rank = ep.rank();
    let n = u64::from(ep.size());
    let laps = a.laps.max(1);

    // Token: (hops so far, running sum of ranks). Rank 0 starts it and ends it.
    let (tok_tx, tok_rx) = channel::<(u64, u64)>();
    ep.register(ty::TOKEN, move |ep, inc| {
        let hops = read_u64(&inc.payload).unwrap_or(0);
        let sum = inc.payload.get(8..16).and_then(read_u64).unwrap_or(0) + u64::from(rank.0);
        let hops = hops + 1;
        if rank == NodeId(0) && hops >= laps * n {
            notify(&tok_tx, (hops, sum));
            return;
        }
        let mut p = Vec::with_capacity(16);
        p.extend_from_slice(&hops.to_le_bytes());
        p.extend_from_slice(&sum.to_le_bytes());
        if let Err(e) = ep.send(next, ty::TOKEN, Bytes::from(p)) {
            eprintln!("token to {next} failed: {e}");
        }
    });
    let (fl_tx, fl_rx) = channel::<(u64, bool)>();
    let m = a.messages.max(1);
    let mut got = 0u64;
    let mut ok = true;
    ep.register(ty::FLOOD, move |_, inc| {
        ok &= inc.src == prev && read_u64(&inc.payload) == Some(got);
        got += 1;
        if got == m {
            notify(&fl_tx, (got, ok));
        }
    });
    barrier.wait()?;
    let t0 = Instant::now();
    if rank == NodeId(0) {
        let mut p = vec![0u8; 16];
        p[..8].copy_from_slice(&0u64.to_le_bytes());
        ep.send(next, ty::TOKEN, Bytes::from(p))?;
        let (hops, sum) = tok_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| NodeError::Check("the token never came back to node 0".into()))?;
        let want = laps * n * (n - 1) / 2;
        if sum != want {
            return Err(NodeError::Check(format!(
                "token sum {sum} after {hops} hops, expected {want}"
            )));
        }
        println!(
            "token: {laps} laps around {n} nodes, {hops} hops in {:.2} ms ({:.1} us per hop), rank sum {sum} correct",
            t0.elapsed().as_secs_f64() * 1e3,
            t0.elapsed().as_secs_f64() * 1e6 / hops as f64
        );
    }
    barrier.wait()?;
    let t1 = Instant::now();
    for i in 0..m {
        ep.send(next, ty::FLOOD, Bytes::copy_from_slice(&i.to_le_bytes()))?;
    }
    let (got, ok) = fl_rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| NodeError::Check(format!("{rank}: the flood from {prev} did not complete")))?;
    let secs = t1.elapsed().as_secs_f64();
    if !ok {
        return Err(NodeError::Check(format!(
            "{rank}: messages from {prev} arrived out of order or duplicated"
        )));
    }
    println!(
        "{rank}: received {got} messages from {prev} exactly once, in order ({:.0} msgs/s)",
        got as f64 / secs
    );
    finish(&ep, &barrier)?;
    if rank == NodeId(0) {
        println!("demo ok: {n} nodes, {}", ep.job_id());
    }
    Ok(())
}
