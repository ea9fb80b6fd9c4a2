//! `squall bench kernels` end to end at `tiny`: the C library of this target folder installed
//! into a scratch prefix (crates/capi/install.sh), the four side-by-side kernels of
//! bench/sidebyside built sequentially and against Squall, each run on 2 nodes; checks the JSON
//! shape, that every kernel passed its check against the sequential computation and that
//! Squall's statistics show its shared-memory traffic. The ArgoDSM side is not run (no
//! ArgoDSM here: `ARGO_HOME` is removed). Needs `cargo build --release -p squall-capi` first.
use serde_json::Value;
use std::process::{Command, Stdio};

mod installed;
use installed::{positive, prefix};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

#[test]
fn every_kernel_runs_checked_on_two_nodes() {
    let p = prefix("bench-kernels");
    let out = Command::new(SQUALL)
        .args([
            "bench",
            "kernels",
            "--size",
            "tiny",
            "--reps",
            "1",
            "--nodes",
            "2",
            "--timeout",
            "120",
            "--json",
        ])
        .arg("--prefix")
        .arg(&p)
        .env_remove("ARGO_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("run squall bench kernels");
    let _ = std::fs::remove_dir_all(&p);
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench kernels failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = so.lines().last().expect("no output");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
    assert_eq!(v["bench"], "kernels");
    assert_eq!(v["nodes"], 2);
    assert_eq!(v["argo"], false);
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["kernel"].as_str()).collect();
    assert_eq!(names, ["mm", "cg", "stencil", "ep"]);
    for r in rows {
        assert_eq!(r["runs"], 1, "{r}");
        let sq = positive(r, "squall_s");
        let seq = positive(r, "seq_s");
        let ratio = positive(r, "squall_over_seq");
        assert!((ratio - sq / seq).abs() <= 0.01 * ratio + 1e-3, "{r}");
        assert!(
            r["argo_s"].is_null() && r["squall_over_argo"].is_null(),
            "{r}"
        );
        // Node 0 at least gathers the other node's results: remote pages moved.
        positive(r, "page_fetches");
        positive(r, "messages");
        positive(r, "bytes_sent");
    }
}
