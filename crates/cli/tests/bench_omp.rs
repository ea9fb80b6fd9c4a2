//! `squall bench omp` end to end at tiny sizes: the C library of this target folder installed
//! into a scratch prefix (crates/capi/install.sh), the bench program built with plain `gcc
//! -fopenmp` and with squall-openmp, run at 2 and 4 nodes beside libgomp with the same thread
//! count; checks the JSON shape, that every operation was counted, and the ratios. Needs
//! `cargo build --release -p squall-capi` first (fails with that command otherwise).
use serde_json::Value;
use std::process::{Command, Stdio};

mod installed;
use installed::{positive, prefix};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

#[test]
fn omp_json_has_the_documented_shape() {
    let p = prefix("bench-omp");
    let ops = 20;
    let out = Command::new(SQUALL)
        .args(["bench", "omp", "--nodes", "2,4", "--reps", "1", "--ops"])
        .arg(ops.to_string())
        .args([
            "--stencil-n",
            "64",
            "--stencil-iters",
            "4",
            "--matmul-n",
            "64",
            "--json",
        ])
        .arg("--prefix")
        .arg(&p)
        .stdin(Stdio::null())
        .output()
        .expect("run squall bench omp");
    let _ = std::fs::remove_dir_all(&p);
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench omp failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = so.lines().last().expect("no output");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "bench",
            "native_wait_policy",
            "reps",
            "rows",
            "threads_per_node",
            "transport"
        ]
    );
    assert_eq!(v["bench"], "omp");
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["nodes"].as_u64().unwrap_or(0),
                r["op"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let mut want = Vec::new();
    for n in [2, 4] {
        for op in ["region", "barrier", "chunk", "stencil", "matmul"] {
            want.push((n, op));
        }
    }
    assert_eq!(names, want);
    for r in rows {
        assert_eq!(r["threads"], r["nodes"], "one thread per node: {r}");
        let s = positive(r, "squall_p50");
        let nat = positive(r, "native_p50");
        assert!(
            positive(r, "squall_p99") >= s && positive(r, "native_p99") >= nat,
            "{r}"
        );
        let ratio = positive(r, "ratio");
        assert!(
            (ratio - s / nat).abs() / ratio < 0.05,
            "ratio {ratio} vs {s}/{nat}"
        );
        let count = r["count"].as_u64().expect("count");
        match r["op"].as_str() {
            Some("region" | "barrier" | "chunk") => {
                assert_eq!(r["unit"], "us");
                // every thread counted every timed operation (one run)
                assert_eq!(count, ops * r["threads"].as_u64().unwrap_or(0), "{r}");
                let episodes = r["squall_barrier_episodes"].as_f64().expect("episodes");
                assert!(episodes >= ops as f64, "{r}");
                positive(r, "squall_atomics");
                positive(r, "squall_messages");
            }
            _ => {
                assert_eq!(r["unit"], "s");
                assert!(count > 0, "{r}");
                positive(r, "n");
            }
        }
    }
}
