//! The two example user protocols (`squall_example_protocols`: migratory, write-update),
//! registered beside `hlrc` and `sc` in every node's router, run `SQUALL_SIM_SEEDS` seeds
//! (default 10,000) and 1,000 long ones of data-race-free programs whose allocations each
//! name a policy, checked against the sequential reference. On failure the seed and the
//! replay command are printed.

use squall_sim::{replay_user_command, run_user_seed, Shape};

fn run_user_range(shape: Shape, n: u64) {
    let mut failures = Vec::new();
    let (mut migratory, mut update, mut builtin) = (0, 0, 0);
    for seed in 0..n {
        match run_user_seed(shape, seed, false) {
            Ok(r) => {
                let sent = |k: &str| r.stats.sent.get(k).map_or(0, |c| c.messages);
                migratory += sent("migratory");
                update += sent("write-update");
                builtin += r.stats.messages() - sent("migratory") - sent("write-update");
            }
            Err(e) => {
                eprintln!("user {shape:?} seed {seed} FAILED: {e}");
                eprintln!("replay: {}", replay_user_command(shape, seed));
                failures.push(seed);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failed user {shape:?} seeds: {failures:?}"
    );
    // The runs did mix: both user protocols and the built-in ones carried traffic.
    assert!(
        migratory > 0 && update > 0 && builtin > 0,
        "messages: migratory {migratory}, write-update {update}, built-in {builtin}"
    );
}

#[test]
fn user_protocol_seeds() {
    let n = std::env::var("SQUALL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    run_user_range(Shape::Short, n);
}

#[test]
fn user_protocol_long_seeds() {
    let n = std::env::var("SQUALL_SIM_LONG_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000);
    run_user_range(Shape::Long, n);
}
