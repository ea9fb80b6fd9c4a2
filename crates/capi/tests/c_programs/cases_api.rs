//! Cases for the C API (SPMD style, api_test.c and the basic-cost table) and the C++ wrappers.
use super::{
    job, job_fails_everywhere, job_output, job_output_env, plain_expect, print_lines, Cases, Env,
};
use std::time::Duration;

pub fn add(v: &mut Cases) {
    // The C API, SPMD style, several native threads per node.
    for scenario in [
        "locks", "barrier", "condvar", "flags", "atomics", "threads", "misuse",
    ] {
        v.at_2_and_4(&format!("c_api/{scenario}"), move |env: &Env, nodes| {
            let exe = env.build_test("cc", "api_test.c", "api_test", Some("squall"))?;
            job(&exe, &[scenario, "3"], nodes, &format!("ok {scenario}"))
        });
    }
    // A collective allocation larger than the default space (100 GiB of 64): rank 0's
    // allocation fails and every node gets that failure (not a wait) from
    // squall_alloc_collective, within a second of the barrier before it.
    v.at_2_and_4("c_api/collective_fail", |env: &Env, nodes| {
        let exe = env.build_test("cc", "collective_fail.c", "collective_fail", Some("squall"))?;
        job_fails_everywhere(
            &exe,
            &["100"],
            nodes,
            &["refused in", "collective allocation failed on node 0"],
            Duration::from_secs(10),
        )
    });
    // A 1 TiB global range: allocations larger than the range divided by the nodes (a
    // collective one, an ordinary one on the last rank, one under the other protocol) with
    // pages in scattered states on every node, under each protocol as the default; then
    // refusals that say what was asked, what is left, the fix.
    for protocol in ["hlrc", "sc"] {
        v.at_2_and_4(
            &format!("c_api/big_memory/{protocol}"),
            move |env: &Env, nodes| {
                let exe = env.build_test("cc", "big_memory.c", "big_memory", Some("squall"))?;
                let gib = if nodes == 2 { "700" } else { "600" };
                job_output_env(
                    &exe,
                    &[gib, "300"],
                    nodes,
                    "ok big memory",
                    &[("SQUALL_HEAP_SIZE", "1T"), ("SQUALL_PROTOCOL", protocol)],
                )
                .map(|_| ())
            },
        );
    }
    v.add("c_api/before-init", |env: &Env| {
        let exe = env.build_test("cc", "api_test.c", "api_test", Some("squall"))?;
        plain_expect(&exe, &["before-init"], "ok before-init", "before-init")
    });
    // The C++ wrappers, single system image: threads on every node.
    v.at_2_and_4("cxx", |env: &Env, nodes| {
        let exe = env.build_test("c++", "cxx_test.cpp", "cxx_test", Some("squall"))?;
        job(&exe, &["3"], nodes, "ok cxx")
    });
    // The basic-cost table (CableS section 3.2) through the C API; the numbers are printed.
    v.add("basic_costs/2 nodes", |env: &Env| {
        let exe = env.build_test("cc", "basic_costs.c", "basic_costs", Some("squall"))?;
        let out = job_output(&exe, &["20"], 2, "ok basic costs")?;
        print_lines(&out, "cost ");
        Ok(())
    });
}
