//! Cases for CRL regions (issue 23 item 1): CRL programs built with
//! `pkg-config --cflags --libs squall-crl`, at 2 and 4 nodes, over tcp and udp. Each program
//! checks its own answer (computed sequentially in the program) and prints `ok crl ...`.
use super::{job_output_env, Cases, Env};

pub fn add(v: &mut Cases) {
    let runs: [(&str, &str, &[&str], &str); 4] = [
        ("counter", "crl/counter.c", &["150"], "ok crl counter"),
        (
            "sharing",
            "crl/sharing.c",
            &["20000", "40"],
            "ok crl sharing",
        ),
        ("mm", "crl/mm.c", &["96", "16"], "ok crl mm 96 16"),
        ("lifecycle", "crl/lifecycle.c", &[], "ok crl lifecycle"),
    ];
    for (name, file, args, expect) in runs {
        for nodes in [2usize, 4] {
            for transport in ["tcp", "udp"] {
                v.add(
                    format!("crl/{name}/{nodes} nodes/{transport}"),
                    move |env: &Env| {
                        let exe =
                            env.build_test("cc", file, &format!("crl_{name}"), Some("squall-crl"))?;
                        job_output_env(
                            &exe,
                            args,
                            nodes,
                            expect,
                            &[("SQUALL_TRANSPORT", transport)],
                        )
                        .map(|_| ())
                    },
                );
            }
        }
    }
}
