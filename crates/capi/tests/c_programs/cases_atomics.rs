//! Cases for atomics across nodes (issue 20 item 3): C11, builtins, `_Atomic` operators and
//! C++ `std::atomic` in plain pthreads programs, what is refused, and what an atomic costs.
use super::{job_output, job_refused, native_then_squall, print_lines, Cases, Env, Twin};

pub fn add(v: &mut Cases) {
    // C11 <stdatomic.h> functions, __atomic / __sync builtins, _Atomic operator forms and C++
    // std::atomic in a plain pthreads program, under both protocols; each answer is checked
    // against the same program built natively.
    let c = Twin {
        compiler: "cc",
        file: "atomics.c",
        native: "atomics_native",
        squall: "atomics",
    };
    let cxx = Twin {
        compiler: "c++",
        file: "cxx_atomic.cpp",
        native: "cxx_atomic_native",
        squall: "cxx_atomic",
    };
    let runs: [(&str, Twin, &[&str], &str); 4] = [
        ("counter", c, &["counter", "4", "40"], "ok counter"),
        ("operators", c, &["operators", "4", "40"], "ok operators"),
        ("message", c, &["message", "8"], "ok message"),
        ("c++", cxx, &["4", "30"], "ok cxx atomic"),
    ];
    for (scenario, twin, args, prefix) in runs {
        for nodes in [2usize, 4] {
            for proto in ["hlrc", "sc"] {
                v.add(
                    format!("pthreads/atomics/{scenario}/{nodes} nodes/{proto}"),
                    move |env: &Env| {
                        let vars = [("SQUALL_PROTOCOL", proto)];
                        native_then_squall(env, &twin, args, prefix, nodes, &vars).map(|_| ())
                    },
                );
            }
        }
    }
    // What cannot be made correct is refused with a message naming the operation and address.
    v.add("pthreads/atomics/refused/2 nodes", |env: &Env| {
        let exe = env.build_test("cc", "atomics.c", "atomics", Some("squall-pthread"))?;
        job_refused(
            &exe,
            &["wide"],
            2,
            &[
                "atomic load on the 16-byte object at 0x",
                "1, 2, 4 or 8 bytes",
            ],
        )
    });
    // The cost of an atomic from its home node and from the others (printed).
    v.add("pthreads/atomics/cost/2 nodes", |env: &Env| {
        let exe = env.build_test("cc", "atomics.c", "atomics", Some("squall-pthread"))?;
        let out = job_output(&exe, &["cost", "300"], 2, "ok cost")?;
        print_lines(&out, "cost ");
        Ok(())
    });
}
