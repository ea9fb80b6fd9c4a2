//! What the multi-process runtime tests share: a scenario is a function every node of a job
//! runs; a node process started by the launcher runs the scenario named on its command line.

use squall::Node;

/// One scenario: run on every node; `Err` fails the node (and the job).
pub type Scenario = fn(&Node) -> Result<(), String>;

/// A node process: start the node, run scenario `name` of `scenarios` (a table of name,
/// function and the protocols it runs under), finalize. Exit code: 0 ok, 1 the scenario
/// failed, 2 no node or no such scenario, 3 finalize failed.
pub fn node_main(scenarios: &[(&str, Scenario, &[&str])], name: &str) -> i32 {
    let node = match squall::init() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("init failed: {e}");
            return 2;
        }
    };
    let Some((_, f, _)) = scenarios.iter().find(|(n, _, _)| *n == name) else {
        eprintln!("no scenario {name}");
        return 2;
    };
    let r = f(&node);
    if let Err(e) = &r {
        eprintln!("{}: scenario {name} failed: {e}", node.rank());
    }
    if let Err(e) = node.finalize() {
        eprintln!("finalize: {e}");
        return 3;
    }
    i32::from(r.is_err())
}

// Not every test binary runs its jobs this way (`failures` reads what the nodes print).
#[allow(dead_code)]
/// Run one job of a scenario and print its test line (`test LABEL ... ok|FAILED (secs)`);
/// `true` if every node succeeded.
pub fn run_case(label: &str, spec: &squall_launch::JobSpec) -> bool {
    let t = std::time::Instant::now();
    let sink = std::sync::Arc::new(squall_launch::ForwardSink { prefix: true });
    let ok = match squall_launch::run_job(spec, sink) {
        Ok(r) => r.success(),
        Err(e) => {
            eprintln!("launch failed: {e}");
            false
        }
    };
    println!(
        "test {label} ... {} ({:.2}s)",
        if ok { "ok" } else { "FAILED" },
        t.elapsed().as_secs_f64()
    );
    ok
}
