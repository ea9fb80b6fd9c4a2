//! `squall chaos` end to end: 4-node jobs of the seed app sor (`-s tiny`), a few trials of
//! each fault kind (a node SIGKILLed, a node SIGSTOPped past a 0.5 s peer timeout, two nodes
//! cut off from each other by `--net-faults partition=...`), run through the CLI as a user
//! would; every job must end with a non-zero exit and a line naming the node, none may hang.
//!
//! The app binary comes from `make -C apps SQUALL=1 bin/sor_squall` (run here, against this
//! test's own libsquall when it is built; it only compiles what is stale).
//! `SQUALL_APPS_BIN=DIR` uses a prebuilt sor_squall from DIR instead.
mod common;
use common::make_squall_apps;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

/// The folder holding sor_squall, built if stale or missing.
fn app_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SQUALL_APPS_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("sor_squall").is_file(),
            "SQUALL_APPS_BIN is set but {} has no sor_squall",
            dir.display()
        );
        return dir;
    }
    make_squall_apps(&["bin/sor_squall".to_string()])
}

#[test]
fn kill_stop_and_partition_end_every_4_node_job() {
    let bins = app_bin_dir();
    let trials = 3;
    let out = Command::new(SQUALL)
        .args([
            "chaos",
            "--nodes",
            "4",
            "--kinds",
            "kill,stop,partition",
            "--trials",
            &trials.to_string(),
            "--apps",
            "sor",
            "--size",
            "tiny",
            "--seed",
            "7",
            "--peer-timeout-ms",
            "500",
            "--bound",
            "60",
            "--json",
        ])
        .arg("--bin-dir")
        .arg(&bins)
        .stdin(Stdio::null())
        .output()
        .expect("run squall chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!(
        "status {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(out.status.success(), "{all}");
    assert!(stdout.contains("ended-correctly"), "no table: {all}");
    let last = stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {all}"));
    assert_eq!(v["bench"], "chaos", "{all}");
    let kinds = v["kinds"].as_array().expect("kinds");
    assert_eq!(kinds.len(), 3, "{all}");
    let mut correct = 0;
    for k in kinds {
        let n = |f: &str| k[f].as_u64().unwrap_or_else(|| panic!("{f} missing: {k}"));
        assert_eq!(n("trials"), trials, "{k}");
        assert_eq!(n("hangs"), 0, "{all}");
        assert_eq!(n("ended_otherwise"), 0, "{all}");
        assert_eq!(n("ended_correctly") + n("finished_first"), trials, "{k}");
        correct += n("ended_correctly");
    }
    // A fault lands before the app's end in nearly every trial (its moment is drawn over a
    // clean run's time); all nine landing after it would mean the faults were never tried.
    assert!(correct >= 1, "{all}");
    let records = v["trials"].as_array().expect("trials");
    assert_eq!(records.len(), 3 * trials as usize);
    for r in records.iter().filter(|r| r["outcome"] == "correct") {
        let exit = r["exit"].as_i64().expect("exit");
        assert_ne!(exit, 0, "{r}");
        let victim = r["victim"].as_u64().expect("victim");
        let note = r["note"].as_str().unwrap_or_default();
        let named = note.contains(&format!("node {victim}"))
            || r["other"]
                .as_u64()
                .is_some_and(|o| note.contains(&format!("node {o}")));
        assert!(named, "{r}");
    }
}

#[test]
fn chaos_help_lists_the_options() {
    let out = Command::new(SQUALL)
        .args(["chaos", "--help"])
        .output()
        .expect("run squall chaos --help");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for opt in [
        "--nodes", "--kinds", "--trials", "--apps", "--size", "--seed", "--json",
    ] {
        assert!(text.contains(opt), "{opt} missing from:\n{text}");
    }
}
