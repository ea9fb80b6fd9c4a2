//! Cases for one-sided operations (issue 23 item 3): an OpenSHMEM program built with
//! `pkg-config squall-shmem` (ring put into a global, bulk get, _nbi + quiet, atomics on one
//! counter from every PE, wait_until, broadcast, sum/max reductions, a lock) and a Split-C
//! style program over squall.h (spread array, split-phase get/put + sync, stores with
//! store_sync and all_store_sync, blocking bulk read/write, remote atomics), at 2 and 4 nodes
//! over tcp and udp; and the refusal of a put to an address that is not symmetric.
use super::{job_output_env, job_refused, Cases, Env};

pub fn add(v: &mut Cases) {
    let progs: [(&str, &str, &str, &str); 2] = [
        ("shmem", "shmem/shmem_test.c", "shmem_test", "ok shmem"),
        ("splitc", "shmem/splitc.c", "splitc", "ok splitc"),
    ];
    for (name, file, out, expect) in progs {
        for nodes in [2usize, 4] {
            for transport in ["tcp", "udp"] {
                v.add(
                    format!("gptr/{name}/{nodes} nodes/{transport}"),
                    move |env: &Env| {
                        let exe = env.build_test("cc", file, out, Some("squall-shmem"))?;
                        let vars = [("SQUALL_TRANSPORT", transport)];
                        job_output_env(&exe, &[], nodes, expect, &vars).map(|_| ())
                    },
                );
            }
        }
    }
    // A put to a stack address is refused at the target, naming the node and the address.
    v.add("gptr/shmem/refused/2 nodes", |env: &Env| {
        let exe = env.build_test(
            "cc",
            "shmem/shmem_test.c",
            "shmem_test",
            Some("squall-shmem"),
        )?;
        job_refused(
            &exe,
            &["stray"],
            2,
            &[
                "node 1 refused a put of 4 bytes at 0x",
                "outside node 1's symmetric arena",
            ],
        )
    });
}
