//! Cases for one program using every sharing model at once (issue 23 item 5):
//! `models/every_model.c` (page-based shared heap, CRL regions, OU and MSI shared objects,
//! OpenSHMEM puts/gets/atomics and Split-C stores, Squall locks and barriers), built with
//! `pkg-config squall-crl squall-shmem`, at 2 and 4 nodes over tcp and udp. It checks every
//! ordering rule docs/memory-model.md states for the models together ("Every model in one
//! program") and prints `ok every model N nodes` when all held.
use super::{job_output_env, Cases, Env};

pub fn add(v: &mut Cases) {
    for nodes in [2usize, 4] {
        for transport in ["tcp", "udp"] {
            v.add(
                format!("models/every_model/{nodes} nodes/{transport}"),
                move |env: &Env| {
                    let exe = env.build_test(
                        "cc",
                        "models/every_model.c",
                        "every_model",
                        Some("squall-crl squall-shmem"),
                    )?;
                    let want = format!("ok every model {nodes} nodes 6 rounds");
                    job_output_env(
                        &exe,
                        &["6"],
                        nodes,
                        &want,
                        &[("SQUALL_TRANSPORT", transport)],
                    )
                    .map(|_| ())
                },
            );
        }
    }
}
