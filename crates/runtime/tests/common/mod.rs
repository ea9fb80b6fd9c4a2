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
