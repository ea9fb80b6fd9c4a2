//! `squall bench apps` end to end: the seed apps sor and clu at `--size tiny --reps 1
//! --nodes 1,2`, running their real sequential, native and Squall builds (the Squall runs are
//! 1- and 2-node jobs of separate processes), then checking every output file and the JSON
//! shape (seed 000 §4: times, speedups, Table 2 statistics, Figure 3–4 breakdowns).
//!
//! The app binaries come from `make -C apps` (run here; it only compiles what is stale). The
//! Squall builds need the C library first (`cargo build --release -p squall-capi`); when they
//! are missing this test runs `make -C apps SQUALL=1` for them and, if that fails, fails with
//! the command to run: it never skips. `SQUALL_APPS_BIN=DIR` uses prebuilt binaries from DIR.
mod common;
use common::{make, make_squall_apps, repo};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");
const APPS: [&str; 2] = ["sor", "clu"];

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("squall-bench-apps-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The app binaries the test needs, built if stale or missing; panics with the fix otherwise.
/// `SQUALL_APPS_BIN` names a folder of prebuilt binaries instead (nothing is built then).
fn app_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SQUALL_APPS_BIN") {
        let dir = PathBuf::from(dir);
        for a in APPS {
            for m in ["seq", "native", "squall"] {
                let p = dir.join(format!("{a}_{m}"));
                assert!(
                    p.is_file(),
                    "SQUALL_APPS_BIN is set but {} is missing",
                    p.display()
                );
            }
        }
        return dir;
    }
    let bin = repo().join("apps/bin");
    let plain: Vec<String> = APPS
        .iter()
        .flat_map(|a| [format!("bin/{a}_seq"), format!("bin/{a}_native")])
        .collect();
    let out = make(&plain);
    assert!(
        out.status.success(),
        "make -C apps {} failed:\n{}{}",
        plain.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let missing: Vec<String> = APPS
        .iter()
        .filter(|a| !bin.join(format!("{a}_squall")).is_file())
        .map(|a| format!("bin/{a}_squall"))
        .collect();
    if !missing.is_empty() {
        make_squall_apps(&missing);
    }
    bin
}

fn squall(args: &[&str]) -> Output {
    Command::new(SQUALL)
        .args(["bench", "apps"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run squall bench apps")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

fn positive(row: &Value, key: &str) -> f64 {
    let v = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"));
    assert!(v > 0.0 && v.is_finite(), "{key} = {v} in {row}");
    v
}

#[test]
fn sor_and_clu_tiny_on_one_and_two_nodes_write_every_report() {
    let bins = app_bin_dir();
    let out_dir = scratch("run");
    let out = squall(&[
        "--apps",
        "sor,clu",
        "--nodes",
        "1,2",
        "--size",
        "tiny",
        "--reps",
        "1",
        "--timeout",
        "60",
        "--json",
        "--out",
        out_dir.to_str().expect("utf-8 path"),
        "--bin-dir",
        bins.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // Progress: seq 1 + native t=1,2 + squall n=1,2 per app.
    assert!(stderr.contains("[1/10] sor seq rep 1/1 ... "), "{stderr}");
    assert!(
        stderr.contains("[10/10] clu squall n=2 t=2 rep 1/1 ... "),
        "{stderr}"
    );

    // The JSON line and apps.json agree and have the documented shape.
    let last = stdout.lines().last().expect("no stdout");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("apps.json")).expect("apps.json"),
    )
    .expect("apps.json parses");
    assert_eq!(v, file);
    assert_eq!(v["bench"], "apps");
    assert_eq!(v["size"], "tiny");
    assert_eq!(v["protocol"], "hlrc");
    let rows = v["rows"].as_array().expect("rows");
    let which: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["app"].as_str().unwrap_or("?").to_string(),
                r["nodes"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        which,
        [
            ("sor".to_string(), 1),
            ("sor".to_string(), 2),
            ("clu".to_string(), 1),
            ("clu".to_string(), 2)
        ]
    );
    for r in rows {
        for k in [
            "app",
            "nodes",
            "threads",
            "squall_time_s",
            "seq_time_s",
            "native_time_s",
            "ratio",
            "speedup",
            "native_ratio",
            "verified",
            "stats",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        assert_eq!(r["threads"], r["nodes"]);
        assert_eq!(r["verified"], true, "{r}");
        let sq = positive(r, "squall_time_s");
        let seq = positive(r, "seq_time_s");
        positive(r, "native_time_s");
        let speedup = positive(r, "speedup");
        assert!((speedup - seq / sq).abs() / speedup < 0.01, "{r}");
        assert!((positive(r, "ratio") * speedup - 1.0).abs() < 0.01, "{r}");
        positive(r, "native_ratio");
        let s = &r["stats"];
        assert_eq!(
            keys(s),
            [
                "barriers",
                "breakdown",
                "bytes",
                "diffs",
                "faults",
                "invalidations",
                "lock_acquires",
                "messages",
                "page_fetches",
                "read_faults",
                "twins",
                "write_faults"
            ],
            "{r}"
        );
        assert_eq!(
            keys(&s["breakdown"]),
            [
                "data_stall_s",
                "messaging_s",
                "protocol_s",
                "sync_s",
                "task_s"
            ]
        );
        assert!(
            s["barriers"].as_u64().unwrap_or(0) > 0,
            "sor and clu use barriers: {s}"
        );
        if r["nodes"] == 2 {
            // Two nodes share data: there are messages and faults to count.
            assert!(s["messages"].as_u64().unwrap_or(0) > 0, "{s}");
            assert!(s["faults"].as_u64().unwrap_or(0) > 0, "{s}");
        }
    }
    let baselines = v["baselines"].as_array().expect("baselines");
    assert_eq!(baselines.len(), 6, "seq + native t=1,2 per app: {v}");

    // apps.csv: header + one line per row, all the same width.
    let csv = std::fs::read_to_string(out_dir.join("apps.csv")).expect("apps.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    assert!(lines[0].starts_with("app,nodes,threads,squall_time_s,seq_time_s,native_time_s,ratio,speedup,native_ratio,verified,faults,"));
    let width = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == width), "{csv}");
    assert!(lines[2].starts_with("sor,2,2,"), "{csv}");

    // apps.md: a line per row, and one baseline line per app.
    let md = std::fs::read_to_string(out_dir.join("apps.md")).expect("apps.md");
    assert!(
        md.contains("| app | nodes | threads | time (s) | speedup vs seq |"),
        "{md}"
    );
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| sor | ")).count(),
        2 + 1,
        "{md}"
    );

    // The plots are PNGs; the statistics files are kept.
    for png in ["speedup.png", "breakdown.png"] {
        let bytes = std::fs::read(out_dir.join(png)).expect(png);
        assert!(
            bytes.len() > 1000 && &bytes[1..4] == b"PNG",
            "{png} is not a PNG"
        );
    }
    let stats: Vec<_> = std::fs::read_dir(out_dir.join("stats"))
        .expect("stats dir")
        .collect();
    assert_eq!(stats.len(), 4);

    // Regenerating from apps.json (no runs) writes the same table and the results document.
    let again = scratch("again");
    let doc = again.join("docs/results.md");
    let out = squall(&[
        "--from-json",
        out_dir.join("apps.json").to_str().expect("utf-8 path"),
        "--out",
        again.to_str().expect("utf-8 path"),
        "--no-plots",
        "--results-md",
        doc.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let md2 = std::fs::read_to_string(again.join("apps.md")).expect("apps.md again");
    assert_eq!(
        md2,
        md.replace(
            "\n## Plots\n\n![speedup](speedup.png)\n\n![breakdown](breakdown.png)\n",
            ""
        )
    );
    let results = std::fs::read_to_string(&doc).expect("results.md");
    assert!(results.starts_with("# Results"), "{results}");
    assert!(results.contains("| CPUs (nproc) |"), "{results}");
    assert!(results.contains("--apps sor,clu --nodes 1,2"), "{results}");
    assert!(results.contains("| clu | 2 | 2 |"), "{results}");
    let _ = std::fs::remove_dir_all(&out_dir);
    let _ = std::fs::remove_dir_all(&again);
}

#[test]
fn missing_binaries_are_named_with_the_make_command() {
    let empty = scratch("empty");
    let out = squall(&[
        "--apps",
        "sor",
        "--out",
        empty.join("out").to_str().expect("utf-8 path"),
        "--bin-dir",
        empty.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sor_seq not found: run `make -C apps`"),
        "{err}"
    );
    let out = squall(&[
        "--apps",
        "all",
        "--bin-dir",
        empty.to_str().expect("utf-8 path"),
        "--out",
        empty.join("out").to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no app binaries"));
    let _ = std::fs::remove_dir_all(&empty);
}

/// Write an executable shell script.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn failed_and_unverified_runs_are_reported_not_hidden() {
    // A stand-in app: native -t 2 prints verified=0; on 2 nodes node 1 exits 3 (after rank 0
    // printed a good line and exited); the 1-node Squall run is fine but writes no statistics.
    let dir = scratch("fake");
    let line = |mode: &str, t: &str, time: &str, ok: &str| {
        format!("echo \"RESULT app=fake mode={mode} threads={t} size=tiny time_s={time} verified={ok} check=1 note=\\\"x\\\"\"")
    };
    script(&dir.join("fake_seq"), &line("seq", "1", "1.0", "1"));
    script(
        &dir.join("fake_native"),
        &format!(
            "if [ \"$2\" = 2 ]; then {}; exit 1; fi\n{}",
            line("native", "$2", "0.6", "0"),
            line("native", "$2", "0.5", "1")
        ),
    );
    script(
        &dir.join("fake_squall"),
        &format!(
            "if [ \"$SQUALL_RANK\" = 0 ]; then {}; fi\nif [ \"$SQUALL_RANK\" = 1 ]; then sleep 0.3; exit 3; fi",
            line("squall", "$2", "2.0", "1")
        ),
    );
    let out_dir = dir.join("out");
    let out = squall(&[
        "--apps",
        "fake",
        "--nodes",
        "1,2",
        "--size",
        "tiny",
        "--reps",
        "2",
        "--no-plots",
        "--json",
        "--out",
        out_dir.to_str().expect("utf-8 path"),
        "--bin-dir",
        dir.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not verified: fake on 2 node(s), fake native -t 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("FAILED: node 1 exited with status 3"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().expect("json line")).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows[0]["verified"], true);
    assert_eq!(rows[0]["squall_time_s"], 2.0);
    assert_eq!(rows[0]["speedup"], 0.5);
    assert_eq!(rows[0]["native_ratio"], 4.0);
    assert!(
        rows[0]["stats"].is_null(),
        "no statistics were written: {}",
        rows[0]
    );
    assert_eq!(rows[1]["verified"], false);
    // Rank 0's time still counts; the failure is kept with the row.
    assert_eq!(rows[1]["squall_time_s"], 2.0);
    let problems = rows[1]["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 2);
    assert_eq!(problems[0], "rep 1: node 1 exited with status 3");
    assert_eq!(rows[1]["native_time_s"], 0.6);
    let native2 = v["baselines"]
        .as_array()
        .expect("baselines")
        .iter()
        .find(|b| b["mode"] == "native" && b["threads"] == 2)
        .expect("native t=2")
        .clone();
    assert_eq!(native2["verified"], false);
    let md = std::fs::read_to_string(out_dir.join("apps.md")).expect("apps.md");
    assert!(
        md.contains("| fake | 2 | 2 | 2.0000 | 0.50 | 3.33 | NO |"),
        "{md}"
    );
    assert!(
        md.contains("| fake | 1.0000 | 0.5000 | 0.6000 NO |"),
        "{md}"
    );
    assert!(
        md.contains("- fake on 2 node(s): rep 2: node 1 exited with status 3"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// mm's binaries in every style (seq, native, squall, crl, splitc), built by make if stale;
/// `SQUALL_APPS_BIN` names a folder of prebuilt ones instead.
fn mm_style_bins() -> PathBuf {
    let names = ["seq", "native", "squall", "crl", "splitc"].map(|m| format!("mm_{m}"));
    if let Some(dir) = std::env::var_os("SQUALL_APPS_BIN") {
        let dir = PathBuf::from(dir);
        for n in &names {
            assert!(
                dir.join(n).is_file(),
                "SQUALL_APPS_BIN is set but {n} is missing"
            );
        }
        return dir;
    }
    make_squall_apps(&names.map(|n| format!("bin/{n}")))
}

#[test]
fn mm_in_every_style_on_two_nodes_reports_time_and_messages_per_style() {
    let bins = mm_style_bins();
    let out_dir = scratch("styles");
    let out = squall(&[
        "--apps",
        "mm",
        "--style",
        "pages,crl,splitc",
        "--nodes",
        "2",
        "--size",
        "tiny",
        "--reps",
        "1",
        "--timeout",
        "60",
        "--json",
        "--no-plots",
        "--out",
        out_dir.to_str().expect("utf-8 path"),
        "--bin-dir",
        bins.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("apps by sharing style: time and messages per style"),
        "{stdout}"
    );
    let last = stdout.lines().last().expect("no stdout");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    let page_time = positive(&v["rows"][0], "squall_time_s");
    let styles = v["styles"].as_array().expect("styles");
    let which: Vec<&str> = styles
        .iter()
        .map(|s| s["style"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(which, ["crl", "splitc"], "{v}");
    for s in styles {
        assert_eq!(s["app"], "mm");
        assert_eq!(s["nodes"], 2);
        assert_eq!(s["verified"], true, "{s}");
        let t = positive(s, "time_s");
        assert_eq!(s["pages_time_s"].as_f64(), Some(page_time), "{s}");
        let r = positive(s, "pages_ratio");
        assert!((r - t / page_time).abs() / r < 0.01, "{s}");
        // Two nodes exchange blocks in every style: the messages are counted.
        assert!(s["stats"]["messages"].as_u64().unwrap_or(0) > 0, "{s}");
        assert!(s["stats"]["bytes"].as_u64().unwrap_or(0) > 0, "{s}");
    }
    let csv = std::fs::read_to_string(out_dir.join("apps_styles.csv")).expect("apps_styles.csv");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let md = std::fs::read_to_string(out_dir.join("apps.md")).expect("apps.md");
    assert!(md.contains("Sharing styles"), "{md}");
}
