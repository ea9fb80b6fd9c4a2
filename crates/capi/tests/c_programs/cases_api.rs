//! Cases for the C API (SPMD style, api_test.c and the basic-cost table) and the C++ wrappers.
use super::{job, job_output, plain_expect, print_lines, Cases, Env};

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
