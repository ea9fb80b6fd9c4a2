//! Runs `SQUALL_SIM_GPTR_SEEDS` seeds (default 10,000) of the one-sided engine (Split-C global
//! pointers, OpenSHMEM) over the lossy network against the sequential reference
//! (`squall_sim::gptr`). On failure the seed and the replay command are printed.
use squall_sim::gptr::{replay_command, run_gptr_seed};

#[test]
fn gptr_seeds() {
    let n: u64 = std::env::var("SQUALL_SIM_GPTR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut failures = Vec::new();
    let (mut refused, mut resent) = (0, 0);
    for seed in 0..n {
        match run_gptr_seed(seed, false) {
            Ok(r) => {
                refused += r.refused;
                resent += r.retransmissions;
            }
            Err(e) => {
                eprintln!("gptr seed {seed} FAILED: {e}");
                eprintln!("replay: {}", replay_command(seed));
                failures.push(seed);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "failed gptr seeds: {failures:?}");
    // The seeds did exercise refusals and the lossy network's retransmissions.
    assert!(
        refused > 0 && resent > 0,
        "refused {refused}, retransmitted {resent}"
    );
}
