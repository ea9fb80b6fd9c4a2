//! Multi-node tests of DSM/IP shared objects through the Rust API (`squall::objects`,
//! `SharedObject<T>`): every scenario runs as 2 and 4 node processes, over tcp and udp.
//!
//! Run: `cargo test -p squall --test objects` (add `-- NAME` to run the cases whose label
//! contains NAME).
use squall::objects::{self, Engine, SharedObject};
use squall::{LockId, Node};
use std::time::{Duration, Instant};

mod common;
use common::{check, launched_as_node, node_exit, run_transports, Scenario};

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

const SCENARIOS: &[(&str, Scenario, &[&str])] =
    &[("ou", ou, &[]), ("msi", msi, &[]), ("nc", nc, &[])];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if launched_as_node() {
        node_exit(SCENARIOS, &args);
    }
    run_transports(SCENARIOS, &args, "objects/")
}
