//! Multi-node tests of DSM/IP shared objects through the Rust API (`squall::objects`,
//! `SharedObject<T>`): every scenario runs as 2 and 4 node processes, over tcp and udp; the
//! `genetic/*` workload (seed 004 §4.2) over tcp and over udp with lost, duplicated and
//! reordered datagrams.
//!
//! Run: `cargo test -p squall --test objects` (add `-- NAME` to run the cases whose label
//! contains NAME).
use squall::objects::{self, Engine, SharedObject};
use squall::{LockId, Node};
use std::time::{Duration, Instant};

mod common;
use common::{
    check, job_spec, launched_as_node, node_exit, run_case, run_transports, Scenario, LOSSY_UDP,
};

fn e(x: squall::SquallError) -> String {
    x.to_string()
}

/// A counter under a global lock, an array each node fills its part of, and a flag hand-off:
/// sequentially consistent answers, and remote operations counted.
fn sc_engine(node: &Node, engine: Engine) -> Result<(), String> {
    let n = node.size() as i64;
    let me = node.rank().0 as i64;
    let iters = 25;
    let counter = SharedObject::<i64>::create(1, 1, engine).map_err(e)?;
    let a = SharedObject::<f64>::create(40 * n as u64, 8, engine).map_err(e)?;
    let flag = SharedObject::<i32>::create(1, 1, engine).map_err(e)?;
    let msg = SharedObject::<i32>::create(16, 4, engine).map_err(e)?;
    for _ in 0..iters {
        node.lock(LockId(21)).map_err(e)?;
        let v = counter.read(0).map_err(e)?;
        counter.write(0, v + 1).map_err(e)?;
        node.unlock(LockId(21)).map_err(e)?;
    }
    for i in (me as u64..a.len()).step_by(n as usize) {
        a.write(i, i as f64 * 0.5).map_err(e)?;
    }
    if me == 0 {
        for i in 0..16 {
            msg.write(i, 7 * i as i32).map_err(e)?;
        }
        flag.write(0, 1).map_err(e)?;
    } else {
        while flag.read(0).map_err(e)? != 1 {}
        for i in 0..16 {
            let v = msg.read(i).map_err(e)?;
            check(v == 7 * i as i32, || {
                format!("msg[{i}] = {v} after the flag")
            })?;
        }
    }
    node.barrier().map_err(e)?;
    let c = counter.read(0).map_err(e)?;
    check(c == iters * n, || {
        format!("counter {c}, expected {}", iters * n)
    })?;
    for i in 0..a.len() {
        let v = a.read(i).map_err(e)?;
        check(v == i as f64 * 0.5, || format!("a[{i}] = {v}"))?;
    }
    let st = objects::stats().map_err(e)?;
    check(st.reads_remote + st.writes_remote > 0, || {
        format!("no remote object operation: {st:?}")
    })?;
    if engine == Engine::Msi {
        check(st.reads_local > st.reads_remote, || {
            format!("MSI reads were not mostly cached: {st:?}")
        })?;
    }
    node.barrier().map_err(e)
}

fn ou(node: &Node) -> Result<(), String> {
    sc_engine(node, Engine::Ou)
}

fn msi(node: &Node) -> Result<(), String> {
    sc_engine(node, Engine::Msi)
}

/// NC: own writes read back at once; the others' writes arrive eventually (Squall's backbone
/// is reliable); named creation and look-up.
fn nc(node: &Node) -> Result<(), String> {
    let n = node.size() as u64;
    let me = node.rank().0 as u64;
    let a = SharedObject::<i32>::create(8 * n, 8, Engine::Nc).map_err(e)?;
    for it in 1..=5 {
        for i in 0..8 {
            let k = 8 * me + i;
            a.write(k, (it * 100 + k) as i32).map_err(e)?;
            let v = a.read(k).map_err(e)?;
            check(v == (it * 100 + k) as i32, || {
                format!("own write of {k}: {v}")
            })?;
        }
    }
    let end = Instant::now() + Duration::from_secs(30);
    for k in 0..8 * n {
        while a.read(k).map_err(e)? != (500 + k) as i32 {
            check(Instant::now() < end, || {
                format!("element {k} never arrived")
            })?;
        }
    }
    let t = if me == 0 {
        let t = SharedObject::<i64>::create_named("nc.table", 4, 0, Engine::Nc).map_err(e)?;
        t.write(3, 99).map_err(e)?;
        t
    } else {
        SharedObject::<i64>::lookup("nc.table").map_err(e)?
    };
    check(t.len() == 4, || format!("looked-up length {}", t.len()))?;
    node.barrier().map_err(e)
}

// ----- genetic: a genetic algorithm over a shared population (seed 004 §4.2) -----------------

const POP: usize = 32;
const GENS: usize = 3;
const BASES: u64 = 10;

fn mix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const TARGET: u64 = 0x0123_4567_89ab_cdef;

/// Matching digits of `x` and the target in bases 2..=BASES.
fn fitness(x: u64) -> i64 {
    let mut f = 0;
    for b in 2..=BASES {
        let (mut u, mut v) = (x, TARGET);
        while v != 0 {
            f += i64::from(u % b == v % b);
            u /= b;
            v /= b;
        }
    }
    f
}

/// Fittest first, then by genome.
fn order(a: &(u64, i64), b: &(u64, i64)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then(a.0.cmp(&b.0))
}

fn first_population() -> Vec<(u64, i64)> {
    let mut r = 42;
    let mut v: Vec<(u64, i64)> = (0..POP)
        .map(|_| {
            let g = mix(&mut r);
            (g, fitness(g))
        })
        .collect();
    v.sort_by(order);
    v
}

/// Child `k` of generation `gen`: two parents picked by rank (the better of two draws each),
/// crossed over and mutated.
fn child(
    gen: usize,
    k: usize,
    parent: impl Fn(usize) -> Result<u64, String>,
) -> Result<(u64, i64), String> {
    let mut r = (gen as u64) << 32 | k as u64;
    let mut pick = || mix(&mut r) as usize % POP;
    let (a, b, c, d) = (pick(), pick(), pick(), pick());
    let (pa, pb) = (parent(a.min(b))?, parent(c.min(d))?);
    let mask = mix(&mut r);
    let g = ((pa & mask) | (pb & !mask)) ^ (1 << (mix(&mut r) % 64));
    Ok((g, fitness(g)))
}

fn sequential_genetic() -> Vec<(u64, i64)> {
    let mut pop = first_population();
    for gen in 0..GENS {
        let kids: Vec<(u64, i64)> = (0..POP / 2)
            .map(|k| child(gen, k, |i| Ok(pop[i].0)))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        pop.truncate(POP / 2);
        pop.extend(kids);
        pop.sort_by(order);
    }
    pop
}

/// An individual is two elements (genome, fitness) of an `i64` object, written genome first.
fn genetic(node: &Node, engine: Engine) -> Result<(), String> {
    let n = node.size() as usize;
    let me = node.rank().0 as usize;
    let mine = |len: usize| (me * len / n)..((me + 1) * len / n);
    let pops = [
        SharedObject::<i64>::create(2 * POP as u64, 8, engine).map_err(e)?,
        SharedObject::<i64>::create(2 * POP as u64, 8, engine).map_err(e)?,
    ];
    let kids = SharedObject::<i64>::create(POP as u64, 8, engine).map_err(e)?;
    let get = |o: &SharedObject<i64>, i: usize| -> Result<(u64, i64), String> {
        Ok((
            o.read(2 * i as u64).map_err(e)? as u64,
            o.read(2 * i as u64 + 1).map_err(e)?,
        ))
    };
    let set = |o: &SharedObject<i64>, i: usize, v: (u64, i64)| -> Result<(), String> {
        o.write(2 * i as u64, v.0 as i64).map_err(e)?;
        o.write(2 * i as u64 + 1, v.1).map_err(e)
    };
    let start = first_population();
    for i in mine(POP) {
        set(&pops[0], i, start[i])?;
    }
    let mut written = start;
    node.barrier().map_err(e)?;
    for gen in 0..GENS {
        let (cur, next) = (&pops[gen % 2], &pops[(gen + 1) % 2]);
        for k in mine(POP / 2) {
            let c = child(gen, k, |i| Ok(cur.read(2 * i as u64).map_err(e)? as u64))?;
            set(&kids, k, c)?;
        }
        node.barrier().map_err(e)?;
        let mut all = Vec::new();
        for i in 0..POP / 2 {
            all.push(get(cur, i)?);
            all.push(get(&kids, i)?);
        }
        all.sort_by(order);
        for i in mine(POP) {
            set(next, i, all[i])?;
        }
        written = all;
        node.barrier().map_err(e)?;
    }
    let fin = &pops[GENS % 2];
    if engine == Engine::Nc {
        // No consistency: what is sure is that this node's own writes read back.
        for i in mine(POP) {
            let v = get(fin, i)?;
            check(v == written[i], || {
                format!("own write of individual {i}: {v:?}, wrote {:?}", written[i])
            })?;
        }
    } else {
        let want = sequential_genetic();
        for (i, w) in want.iter().enumerate() {
            let v = get(fin, i)?;
            check(v == *w, || {
                format!("individual {i}: {v:?}, sequential {w:?}")
            })?;
        }
        let st = objects::stats().map_err(e)?;
        check(st.reads_remote + st.writes_remote > 0, || {
            format!("no remote object operation: {st:?}")
        })?;
    }
    node.barrier().map_err(e)
}

fn genetic_ou(node: &Node) -> Result<(), String> {
    genetic(node, Engine::Ou)
}

fn genetic_msi(node: &Node) -> Result<(), String> {
    genetic(node, Engine::Msi)
}

fn genetic_nc(node: &Node) -> Result<(), String> {
    genetic(node, Engine::Nc)
}

const SCENARIOS: &[(&str, Scenario, &[&str])] =
    &[("ou", ou, &[]), ("msi", msi, &[]), ("nc", nc, &[])];

/// Run over tcp and over lossy udp.
const GENETIC: &[(&str, Scenario, &[&str])] = &[
    ("genetic-ou", genetic_ou, &[]),
    ("genetic-msi", genetic_msi, &[]),
    ("genetic-nc", genetic_nc, &[]),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        let all: Vec<(&str, Scenario, &[&str])> =
            SCENARIOS.iter().chain(GENETIC).copied().collect();
        node_exit(&all, &args);
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let mut failed = 0;
    for (name, _, _) in GENETIC {
        for lossy in [false, true] {
            for nodes in [2usize, 4] {
                let label = format!(
                    "objects/{name}/{}/{nodes} nodes",
                    if lossy { "udp-lossy" } else { "tcp" }
                );
                if filter.is_some_and(|f| !label.contains(f.as_str())) {
                    continue;
                }
                let mut spec = job_spec(nodes, name);
                if lossy {
                    spec.transport = "udp".into();
                    spec.net_faults = Some(format!("{LOSSY_UDP},seed={nodes}"));
                }
                failed += usize::from(!run_case(&label, &spec));
            }
        }
    }
    if failed > 0 {
        println!("{failed} genetic cases failed");
        std::process::exit(1);
    }
    run_transports(SCENARIOS, &args, "objects/")
}
