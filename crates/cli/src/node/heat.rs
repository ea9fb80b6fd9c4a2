//! `squall __node heat`: the shared-memory demo behind `squall demo`. Heat diffusion (Jacobi)
//! on a grid in Squall memory: every node updates its band of rows, reading its neighbours'
//! boundary rows through ordinary shared-memory loads; barriers separate the steps, a lock
//! guards the global sum, and rank 0 checks the result against the sequential program run in
//! private memory. Every node prints what the protocol did for it. Owns this program only.
use super::NodeError;
use clap::Args;
use serde_json::Value;
use squall::{LockId, NodeId, Placement, SharedArray};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct HeatArgs {
    /// Grid side (cells).
    #[arg(long, default_value_t = 256)]
    pub n: usize,
    /// Time steps.
    #[arg(long, default_value_t = 40)]
    pub steps: usize,
}

const HOT: f64 = 100.0;

/// One Jacobi step of rows `lo..hi` of `src` into `dst` (side `n`, top row held at HOT).
fn step_rows(
    n: usize,
    lo: usize,
    hi: usize,
    get: impl Fn(usize) -> f64,
    mut set: impl FnMut(usize, f64),
) {
    for i in lo.max(1)..hi.min(n - 1) {
        for j in 1..n - 1 {
            let v = 0.25
                * (get((i - 1) * n + j)
                    + get((i + 1) * n + j)
                    + get(i * n + j - 1)
                    + get(i * n + j + 1));
            set(i * n + j, v);
        }
    }
}

fn init(n: usize, mut set: impl FnMut(usize, f64)) {
    for j in 0..n {
        set(j, HOT);
    }
}

/// The sequential program, in private memory.
fn sequential(n: usize, steps: usize) -> f64 {
    let mut a = vec![0.0; n * n];
    let mut b = vec![0.0; n * n];
    init(n, |k, v| a[k] = v);
    init(n, |k, v| b[k] = v);
    for _ in 0..steps {
        step_rows(n, 0, n, |k| a[k], |k, v| b[k] = v);
        std::mem::swap(&mut a, &mut b);
    }
    a.iter().sum()
}

fn count(stats: &squall::stats::NodeStats, layer: &str, key: &str) -> u64 {
    stats
        .counts
        .get(layer)
        .and_then(|l| l.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

pub fn run(a: HeatArgs) -> Result<(), NodeError> {
    let err = |e: squall::SquallError| NodeError::Check(e.to_string());
    let node = squall::init().map_err(err)?;
    let (me, nodes) = (node.rank().0 as usize, node.size() as usize);
    let n = a.n.max(8);
    let grids: [SharedArray<f64>; 2] = [
        node.alloc_array_collective(n * n, Placement::Blocked)
            .map_err(err)?,
        node.alloc_array_collective(n * n, Placement::Blocked)
            .map_err(err)?,
    ];
    let sum = node
        .alloc_array_collective::<f64>(1, Placement::Node(NodeId(0)))
        .map_err(err)?;
    let (lo, hi) = (me * n / nodes, (me + 1) * n / nodes);
    if me == 0 {
        for g in &grids {
            init(n, |k, v| g.set(k, v));
        }
    }
    node.barrier().map_err(err)?;
    let t = Instant::now();
    for s in 0..a.steps {
        let (src, dst) = (grids[s % 2], grids[(s + 1) % 2]);
        step_rows(n, lo, hi, |k| src.get(k), |k, v| dst.set(k, v));
        node.barrier().map_err(err)?;
    }
    let fin = grids[a.steps % 2];
    let mine: f64 = (lo * n..hi * n).map(|k| fin.get(k)).sum();
    // The global sum under a lock: every node adds its band's part.
    node.lock(LockId(1)).map_err(err)?;
    sum.set(0, sum.get(0) + mine);
    node.unlock(LockId(1)).map_err(err)?;
    node.barrier().map_err(err)?;
    let elapsed = t.elapsed().as_secs_f64();
    let st = node.stats();
    println!(
        "rows {lo}..{hi}: {} read faults, {} write faults, {} page fetches, {} diffs, {} messages sent",
        count(&st, "protocol", "read_faults"),
        count(&st, "protocol", "write_faults"),
        count(&st, "protocol", "page_fetches"),
        count(&st, "protocol", "diffs_created"),
        count(&st, "net", "messages_sent"),
    );
    if me == 0 {
        // Row sums are added in rank order on one node and in one pass sequentially: compare
        // with a tolerance for the different summation order.
        let got = sum.get(0);
        let want = sequential(n, a.steps);
        let ok = (got - want).abs() <= 1e-9 * want.abs().max(1.0);
        println!(
            "heat: {n}x{n} grid, {} steps on {nodes} nodes in {elapsed:.3} s: sum {got:.6}, sequential {want:.6}: {}",
            a.steps,
            if ok { "match" } else { "MISMATCH" }
        );
        if !ok {
            node.finalize().map_err(err)?;
            return Err(NodeError::Check(format!(
                "shared result {got} differs from sequential {want}"
            )));
        }
    }
    node.finalize().map_err(err)
}
