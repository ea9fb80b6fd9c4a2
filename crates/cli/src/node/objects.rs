//! Node side of `squall bench objects`: the DSM/IP paper's shared-object measurements (seed
//! 004 §4–5) on each engine. Micro: `Read()`/`Write()` latency, local and remote, per engine,
//! beside a raw 8-byte request/reply on the same transport. Workloads: `sea` (an integer
//! OCEAN-like stencil over a shared grid, a `DSM_Barrier` per iteration: the most
//! communication) and `xstate` (an exhaustive integer root solver, solutions appended to a
//! shared array under one `DSM_Lock`, one barrier at the end: the least), each verified
//! against the same computation run sequentially on node 0 (NC results are reported, not
//! required to match: NC promises no consistency); `sea` also on page-based shared memory
//! (`SharedArray`, the run's page protocol) for comparison; `genetic` (module `genetic`: a
//! genetic algorithm over a shared population, two barriers per generation: moderate
//! communication) on each engine and on pages, verified the same way. Node 0 prints one
//! result line.
//! Owns these measurements; must not touch the object core (public API and statistics only).
use super::NodeError;
use crate::bench::report::emit_result;
use clap::Args;
use serde_json::{json, Value};
use squall::objects::{self, Engine, SharedObject};
use squall::{LockId, Node, NodeId};
use squall_wire::MsgType;
use std::time::Instant;

mod genetic;

/// Raw 8-byte request/reply (the baseline).
const PING8: MsgType = MsgType(0xF011);

/// The measurement and workload sizes, the same flags on `squall bench objects` (the driver
/// passes them on with [`ObjectsWork::node_args`]) and on its node program.
#[derive(Args, Debug, Clone)]
pub struct ObjectsWork {
    /// Timed operations per micro measurement and repetition.
    #[arg(long, default_value_t = 200)]
    pub iters: usize,
    /// Repetitions of each measurement (medians over them; p99 over every micro sample).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// sea grid side (cells).
    #[arg(long, default_value_t = 64)]
    pub grid: usize,
    /// sea iterations (sweeps).
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// xstate search range (candidates per dimension, from -range to range).
    #[arg(long, default_value_t = 120)]
    pub range: i64,
    /// genetic population (even).
    #[arg(long, default_value_t = 256)]
    pub pop: usize,
    /// genetic generations.
    #[arg(long, default_value_t = 20)]
    pub gens: usize,
    /// genetic fitness bases 2..=B (the think time).
    #[arg(long, default_value_t = 40)]
    pub bases: u64,
}

impl ObjectsWork {
    /// The flags that give the node program these sizes.
    pub fn node_args(&self) -> Vec<String> {
        [
            ("--iters", self.iters.to_string()),
            ("--reps", self.reps.to_string()),
            ("--grid", self.grid.to_string()),
            ("--steps", self.steps.to_string()),
            ("--range", self.range.to_string()),
            ("--pop", self.pop.to_string()),
            ("--gens", self.gens.to_string()),
            ("--bases", self.bases.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, v)| [flag.to_string(), v])
        .collect()
    }

    /// genetic's sizes are usable.
    pub fn check_genetic(&self) -> Result<(), String> {
        if self.pop < 2 || !self.pop.is_multiple_of(2) || self.gens == 0 || self.bases < 2 {
            return Err(
                "--pop must be even and at least 2, --gens positive, --bases at least 2".into(),
            );
        }
        Ok(())
    }
}

#[derive(Args, Debug)]
pub struct ObjectsNodeArgs {
    #[command(flatten)]
    pub w: ObjectsWork,
    /// genetic individuals per coherence segment.
    #[arg(long, default_value_t = 8)]
    pub ga_seg: u32,
    /// Skip the micro measurements.
    #[arg(long)]
    pub no_micro: bool,
}

fn dsm(e: squall::SquallError) -> NodeError {
    NodeError::Check(e.to_string())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ns(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

const ENGINES: [Engine; 3] = [Engine::Ou, Engine::Msi, Engine::Nc];

/// One latency measurement of node 0: (median ns, p99 ns) over every sample.
fn summary(mut v: Vec<f64>) -> Value {
    let med = pct(&mut v, 0.5);
    let p99 = pct(&mut v, 0.99);
    json!({"median_ns": med.round(), "p99_ns": p99.round(), "samples": v.len()})
}

/// Micro: per engine, local and remote `Read()`/`Write()` on node 0 (node 1 is the other
/// party). Remote read: node 1 writes the element first (OU: it lives on node 1; MSI: node 1
/// takes it in M, node 0's copy is invalid); remote write: node 1 reads it first (MSI: both
/// in S, so node 0's write must invalidate node 1). NC has no remote operations.
fn micro(node: &Node, a: &ObjectsNodeArgs) -> Result<Value, NodeError> {
    let me = node.rank().0;
    let mut out = serde_json::Map::new();
    for engine in ENGINES {
        // Two segments of one element: segment 0's OU owner / MSI manager is node (id+0)%n.
        let obj = SharedObject::<i64>::create(64, 1, engine).map_err(dsm)?;
        // An element owned by node 0 (local) and one owned by node 1 (remote), under OU.
        let n = u64::from(node.size());
        let id = u64::from(obj.id().0);
        let local_i = (0..64).find(|s| (id + s) % n == 0).unwrap_or(0);
        let remote_i = (0..64).find(|s| (id + s) % n == 1).unwrap_or(1);
        let (mut rl, mut rr, mut wl, mut wr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let before = objects::stats().map_err(dsm)?;
        for _ in 0..a.w.reps {
            for k in 0..a.w.iters {
                // Remote read.
                if me == 1 {
                    obj.write(remote_i, k as i64).map_err(dsm)?;
                }
                node.barrier().map_err(dsm)?;
                if me == 0 {
                    let t = Instant::now();
                    let v = obj.read(remote_i).map_err(dsm)?;
                    rr.push(ns(t));
                    if engine != Engine::Nc && v != k as i64 {
                        return Err(NodeError::Check(format!(
                            "{}: remote read {v}, node 1 wrote {k}",
                            engine.name()
                        )));
                    }
                }
                // Remote write.
                if me == 1 {
                    obj.read(remote_i).map_err(dsm)?;
                }
                node.barrier().map_err(dsm)?;
                if me == 0 {
                    let t = Instant::now();
                    obj.write(remote_i, -(k as i64)).map_err(dsm)?;
                    wr.push(ns(t));
                }
                // Node 0's write is done before node 1 writes again.
                node.barrier().map_err(dsm)?;
            }
            if me == 0 {
                // Local: (MSI) the element is now M here; (OU) node 0 owns local_i.
                let li = if engine == Engine::Msi {
                    remote_i
                } else {
                    local_i
                };
                obj.write(li, 1).map_err(dsm)?;
                for k in 0..a.w.iters {
                    let t = Instant::now();
                    let _ = obj.read(li).map_err(dsm)?;
                    rl.push(ns(t));
                    let t = Instant::now();
                    obj.write(li, k as i64).map_err(dsm)?;
                    wl.push(ns(t));
                }
            }
            node.barrier().map_err(dsm)?;
        }
        if me == 0 {
            let after = objects::stats().map_err(dsm)?;
            let remote_ops = after.reads_remote + after.writes_remote
                - before.reads_remote
                - before.writes_remote;
            let nc_sent = after.nc_updates_sent - before.nc_updates_sent;
            if engine != Engine::Nc && remote_ops == 0 {
                return Err(NodeError::Check(format!(
                    "{}: no remote operation counted",
                    engine.name()
                )));
            }
            out.insert(
                engine.name().into(),
                json!({"read_local": summary(rl), "read_remote": summary(rr),
                       "write_local": summary(wl), "write_remote": summary(wr),
                       "remote_ops": remote_ops, "nc_notices_sent": nc_sent}),
            );
        }
    }
    if me == 0 {
        let mut raw = Vec::new();
        for _ in 0..a.w.reps * a.w.iters {
            let t = Instant::now();
            node.endpoint().request(NodeId(1), PING8, vec![0u8; 8])?;
            raw.push(ns(t));
        }
        out.insert("raw_request_reply_8b".into(), summary(raw));
    }
    Ok(Value::Object(out))
}

/// sea: `steps` Jacobi-style integer averaging sweeps over a `g`×`g` grid (fixed border),
/// rows dealt in blocks; two shared grids alternate; a barrier per sweep.
fn sea_init(g: usize) -> Vec<i32> {
    (0..g * g)
        .map(|k| {
            let (r, c) = (k / g, k % g);
            if r == 0 || c == 0 || r == g - 1 || c == g - 1 {
                1000 + (r * 7 + c * 3) as i32 % 500
            } else {
                ((r * 31 + c * 17) % 97) as i32
            }
        })
        .collect()
}

fn sea_cell<E>(get: impl Fn(usize) -> Result<i32, E>, g: usize, k: usize) -> Result<i32, E> {
    let (r, c) = (k / g, k % g);
    if r == 0 || c == 0 || r == g - 1 || c == g - 1 {
        return get(k);
    }
    Ok((get(k)? * 4 + get(k - 1)? + get(k + 1)? + get(k - g)? + get(k + g)?) / 8)
}

fn sea_seq(g: usize, steps: usize) -> i64 {
    let mut a = sea_init(g);
    let mut b = a.clone();
    for _ in 0..steps {
        for (k, cell) in b.iter_mut().enumerate() {
            *cell = sea_cell(|i| Ok::<i32, ()>(a[i]), g, k).unwrap_or_default();
        }
        std::mem::swap(&mut a, &mut b);
    }
    a.iter().map(|&x| i64::from(x)).sum()
}

fn sea(node: &Node, engine: Engine, g: usize, steps: usize) -> Result<(f64, i64), NodeError> {
    let n = usize::from(node.size());
    let me = usize::from(node.rank().0);
    let grids = [
        SharedObject::<i32>::create((g * g) as u64, g as u32, engine).map_err(dsm)?,
        SharedObject::<i32>::create((g * g) as u64, g as u32, engine).map_err(dsm)?,
    ];
    let rows = g.div_ceil(n);
    let (lo, hi) = ((me * rows).min(g), ((me + 1) * rows).min(g));
    let init = sea_init(g);
    for (k, &v) in init.iter().enumerate().take(hi * g).skip(lo * g) {
        grids[0].write(k as u64, v).map_err(dsm)?;
        grids[1].write(k as u64, v).map_err(dsm)?;
    }
    node.barrier().map_err(dsm)?;
    let t = Instant::now();
    for s in 0..steps {
        let (src, dst) = (&grids[s % 2], &grids[(s + 1) % 2]);
        for k in lo * g..hi * g {
            let v = sea_cell(|i| src.read(i as u64), g, k).map_err(dsm)?;
            dst.write(k as u64, v).map_err(dsm)?;
        }
        node.barrier().map_err(dsm)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let fin = &grids[steps % 2];
    let mut sum = 0i64;
    if me == 0 {
        for k in 0..g * g {
            sum += i64::from(fin.read(k as u64).map_err(dsm)?);
        }
    }
    node.barrier().map_err(dsm)?;
    Ok((secs, sum))
}

/// sea on page-based shared memory (`SharedArray`, the run's page protocol, blocked placement):
/// the same computation, for the comparison the seed's §5 invites.
fn sea_pages(node: &Node, g: usize, steps: usize) -> Result<(f64, i64), NodeError> {
    let n = usize::from(node.size());
    let me = usize::from(node.rank().0);
    let grids = [
        node.alloc_array_collective::<i32>(g * g, squall::Placement::Blocked)
            .map_err(dsm)?,
        node.alloc_array_collective::<i32>(g * g, squall::Placement::Blocked)
            .map_err(dsm)?,
    ];
    let rows = g.div_ceil(n);
    let (lo, hi) = ((me * rows).min(g), ((me + 1) * rows).min(g));
    let init = sea_init(g);
    for (k, &v) in init.iter().enumerate().take(hi * g).skip(lo * g) {
        grids[0].set(k, v);
        grids[1].set(k, v);
    }
    node.barrier().map_err(dsm)?;
    let t = Instant::now();
    for s in 0..steps {
        let (src, dst) = (&grids[s % 2], &grids[(s + 1) % 2]);
        for k in lo * g..hi * g {
            let v = sea_cell(|i| Ok::<i32, ()>(src.get(i)), g, k).unwrap_or_default();
            dst.set(k, v);
        }
        node.barrier().map_err(dsm)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let fin = &grids[steps % 2];
    let sum = if me == 0 {
        (0..g * g).map(|k| i64::from(fin.get(k))).sum()
    } else {
        0
    };
    node.barrier().map_err(dsm)?;
    Ok((secs, sum))
}

/// xstate: zeros of f(x, y, z) = x² + y² − z² − 7xyz/30 + x − 3 over the cube
/// [−range, range)³, the x range dealt round-robin; solutions appended to a shared array
/// under one lock; the count is the answer.
fn xstate_f(x: i64, y: i64, z: i64) -> i64 {
    30 * (x * x + y * y - z * z + x - 3) - 7 * x * y * z
}

fn xstate_seq(range: i64) -> i64 {
    let mut c = 0;
    for x in -range..range {
        for y in -range..range {
            for z in -range..range {
                c += i64::from(xstate_f(x, y, z) == 0);
            }
        }
    }
    c
}

fn xstate(node: &Node, engine: Engine, range: i64) -> Result<(f64, i64), NodeError> {
    let n = i64::from(node.size());
    let me = i64::from(node.rank().0);
    let count = SharedObject::<i64>::create(1, 1, engine).map_err(dsm)?;
    let sols = SharedObject::<i64>::create(4096, 16, engine).map_err(dsm)?;
    let lock = LockId(0x0b7e);
    node.barrier().map_err(dsm)?;
    let t = Instant::now();
    for x in (-range..range).filter(|x| (x + range) % n == me) {
        for y in -range..range {
            for z in -range..range {
                if xstate_f(x, y, z) == 0 {
                    node.lock(lock).map_err(dsm)?;
                    let c = count.read(0).map_err(dsm)?;
                    if (c as u64) < sols.len() {
                        sols.write(
                            c as u64,
                            (x + range) * 1_000_000 + (y + range) * 1000 + z + range,
                        )
                        .map_err(dsm)?;
                    }
                    count.write(0, c + 1).map_err(dsm)?;
                    node.unlock(lock).map_err(dsm)?;
                }
            }
        }
    }
    node.barrier().map_err(dsm)?;
    let secs = t.elapsed().as_secs_f64();
    let c = count.read(0).map_err(dsm)?;
    node.barrier().map_err(dsm)?;
    Ok((secs, c))
}

pub fn run(a: ObjectsNodeArgs) -> Result<(), NodeError> {
    let node = squall::init().map_err(dsm)?;
    node.endpoint().register(PING8, |ep, m| {
        if let Err(e) = ep.reply(&m, vec![0u8; 8]) {
            eprintln!("ping reply failed: {e}");
        }
    });
    node.barrier().map_err(dsm)?;
    let me = node.rank().0;
    let micro = if node.size() >= 2 && !a.no_micro {
        Some(micro(&node, &a)?)
    } else {
        None
    };
    let mut work = Vec::new();
    let seq_sea = if me == 0 {
        let t = Instant::now();
        let s = sea_seq(a.w.grid, a.w.steps);
        Some((t.elapsed().as_secs_f64(), s))
    } else {
        None
    };
    let seq_x = if me == 0 {
        let t = Instant::now();
        let s = xstate_seq(a.w.range);
        Some((t.elapsed().as_secs_f64(), s))
    } else {
        None
    };
    a.w.check_genetic().map_err(NodeError::Check)?;
    let ga = genetic::GaSize {
        pop: a.w.pop,
        gens: a.w.gens,
        bases: a.w.bases,
        seed: 0x05ee_d004,
    };
    // The sequential run is short: its median over the repetitions.
    let seq_ga = if me == 0 {
        let mut ts = Vec::new();
        let mut r = genetic::sequential(&ga);
        for _ in 0..a.w.reps {
            let t = Instant::now();
            r = genetic::sequential(&ga);
            ts.push(t.elapsed().as_secs_f64());
        }
        Some((pct(&mut ts, 0.5), r))
    } else {
        None
    };
    let mut ga_page_times = Vec::new();
    let mut ga_page_ok = true;
    for _ in 0..a.w.reps {
        let r = genetic::on_pages(&node, &ga)?;
        ga_page_times.push(r.secs);
        if let Some((_, want)) = seq_ga {
            ga_page_ok &= r.whole && r.result == want;
        }
    }
    if me == 0 && !ga_page_ok {
        return Err(NodeError::Check(
            "genetic on page-based memory: wrong population".into(),
        ));
    }
    let mut page_times = Vec::new();
    let mut page_ok = true;
    for _ in 0..a.w.reps {
        let (t, sum) = sea_pages(&node, a.w.grid, a.w.steps)?;
        page_times.push(t);
        if let Some((_, want)) = seq_sea {
            page_ok &= sum == want;
        }
    }
    if me == 0 && !page_ok {
        return Err(NodeError::Check(
            "sea on page-based memory: wrong answer".into(),
        ));
    }
    for engine in ENGINES {
        let mut times = Vec::new();
        let mut xtimes = Vec::new();
        let mut gtimes = Vec::new();
        let (mut sea_ok, mut x_ok, mut ga_ok, mut ga_whole) = (true, true, true, true);
        let before = objects::stats().map_err(dsm)?;
        for _ in 0..a.w.reps {
            let (t, sum) = sea(&node, engine, a.w.grid, a.w.steps)?;
            times.push(t);
            if let Some((_, want)) = seq_sea {
                sea_ok &= sum == want;
            }
            let (t, c) = xstate(&node, engine, a.w.range)?;
            xtimes.push(t);
            if let Some((_, want)) = seq_x {
                x_ok &= c == want;
            }
            let r = genetic::on_objects(&node, engine, &ga, a.ga_seg)?;
            gtimes.push(r.secs);
            if let Some((_, want)) = seq_ga {
                ga_ok &= r.result == want;
                ga_whole &= r.whole;
            }
        }
        let after = objects::stats().map_err(dsm)?;
        let remote = after.reads_remote + after.writes_remote + after.nc_updates_applied
            - before.reads_remote
            - before.writes_remote
            - before.nc_updates_applied;
        if me == 0 {
            if engine != Engine::Nc && !(sea_ok && x_ok && ga_ok) {
                return Err(NodeError::Check(format!(
                    "{}: wrong answer (sea {sea_ok}, xstate {x_ok}, genetic {ga_ok})",
                    engine.name()
                )));
            }
            // Every engine, NC included, promises that an element is written whole.
            if !ga_whole {
                return Err(NodeError::Check(format!(
                    "{}: genetic read a torn individual",
                    engine.name()
                )));
            }
            if node.size() > 1 && remote == 0 {
                return Err(NodeError::Check(format!(
                    "{}: no remote operation counted",
                    engine.name()
                )));
            }
            work.push(
                json!({"engine": engine.name(), "sea_s": times, "sea_ok": sea_ok,
                             "xstate_s": xtimes, "xstate_ok": x_ok, "genetic_s": gtimes,
                             "genetic_ok": ga_ok, "genetic_whole": ga_whole,
                             "remote_ops_node0": remote}),
            );
        }
    }
    if me == 0 {
        let (ss, _) = seq_sea.unwrap_or((f64::NAN, 0));
        let (xs, _) = seq_x.unwrap_or((f64::NAN, 0));
        let (gs, gr) = match seq_ga {
            Some((t, r)) => (
                t,
                json!({"best_fitness": r.best.fitness,
                "best_genome": r.best.genome, "checksum": format!("{:016x}", r.checksum)}),
            ),
            None => (f64::NAN, Value::Null),
        };
        emit_result(
            &json!({"micro": micro, "workloads": work, "sea_seq_s": ss, "xstate_seq_s": xs,
                    "sea_pages_s": page_times, "sea_pages_ok": page_ok,
                    "genetic_seq_s": gs, "genetic_seq": gr,
                    "genetic_pages_s": ga_page_times, "genetic_pages_ok": ga_page_ok}),
        );
    }
    node.finalize().map_err(dsm)
}
