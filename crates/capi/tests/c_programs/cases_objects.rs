//! Cases for DSM/IP shared objects (issue 23 item 2): the C API (`objects/objects.c`) and the
//! C++ classes with the seed's names (`objects/dsmip.cpp`), on each engine, at 2 and 4 nodes,
//! over tcp and udp. Every program checks its own answers and that remote object operations
//! happened (from the object statistics).
use super::{job_output_env, print_lines, Cases, Env};

pub fn add(v: &mut Cases) {
    // (scenario, engines, N): OU and MSI must give sequentially consistent answers; NC is
    // tested only for what it promises (own writes, eventual arrival on a reliable backbone).
    let runs: [(&str, &[&str], &str); 6] = [
        ("counter", &["ou", "msi"], "30"),
        ("message", &["ou", "msi"], "40"),
        ("race", &["ou", "msi"], "30"),
        ("types", &["ou", "msi"], "12"),
        ("named", &["ou", "msi", "nc"], "10"),
        ("nc", &["nc"], "16"),
    ];
    for (scenario, engines, n) in runs {
        for &engine in engines {
            for nodes in [2usize, 4] {
                for transport in ["tcp", "udp"] {
                    v.add(
                        format!("objects/c/{scenario}/{engine}/{nodes} nodes/{transport}"),
                        move |env: &Env| {
                            let exe = env.build_test(
                                "cc",
                                "objects/objects.c",
                                "objects",
                                Some("squall"),
                            )?;
                            let vars = [("SQUALL_TRANSPORT", transport)];
                            let out = job_output_env(
                                &exe,
                                &[scenario, engine, n],
                                nodes,
                                &format!("ok {scenario} {engine} {nodes} nodes"),
                                &vars,
                            )?;
                            print_lines(&out, "stats ");
                            Ok(())
                        },
                    );
                }
            }
        }
    }
    for engine in ["ou", "msi", "nc"] {
        for nodes in [2usize, 4] {
            for transport in ["tcp", "udp"] {
                v.add(
                    format!("objects/c++/{engine}/{nodes} nodes/{transport}"),
                    move |env: &Env| {
                        let exe =
                            env.build_test("c++", "objects/dsmip.cpp", "dsmip", Some("squall"))?;
                        let vars = [("SQUALL_TRANSPORT", transport)];
                        let out = job_output_env(
                            &exe,
                            &[engine, "20"],
                            nodes,
                            &format!("ok dsmip {engine} {nodes} nodes"),
                            &vars,
                        )?;
                        print_lines(&out, "stats ");
                        Ok(())
                    },
                );
            }
        }
    }
}
