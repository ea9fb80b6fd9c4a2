//! Cases for allocation policies (`squall_malloc_with`, `squall_alloc_collective_with`):
//! hlrc, updates and sc allocations in one SPMD program under one set of locks and barriers,
//! an sc allocation larger than half of a node's share, updates beside invalidation, coherence
//! units of 8 pages beside one-page ones. Run
//! under each default protocol (the program's choices hold whatever the default).
use super::{job_output_env, Cases, Env};

pub fn add(v: &mut Cases) {
    for (label, vars) in [
        ("hlrc", &[("SQUALL_PROTOCOL", "hlrc")][..]),
        ("sc", &[("SQUALL_PROTOCOL", "sc")][..]),
        (
            "hlrc+push",
            &[("SQUALL_PROTOCOL", "hlrc"), ("SQUALL_PUSH_UPDATES", "1")][..],
        ),
    ] {
        v.at_2_and_4(&format!("c_api/policy/{label}"), move |env: &Env, nodes| {
            let exe = env.build_test("cc", "policy.c", "policy", Some("squall"))?;
            job_output_env(&exe, &["4"], nodes, "ok policy", vars).map(|_| ())
        });
    }
}
